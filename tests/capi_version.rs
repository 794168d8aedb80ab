//! The CAPI version is found in the management cluster, not configured: stackhook
//! reads the Cluster CRD the API server serves and follows it when CAPI is upgraded,
//! without a restart. The CRDs are the ones each release of `shared/capi` installs.

use crate::kube_server;
use crate::server::{client, post_json, Proto, Server, API, PREFIX};

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The Cluster CRD of each CAPI generation `shared/capi` runs, oldest first, with the
/// minor it must be read as.
fn cluster_crds(kube_dir: &std::path::Path) -> Vec<(u16, PathBuf)> {
    let capi_dir = kube_dir.join("../capi");
    vec![
        (
            10,
            capi_dir.join("v1.10/crds/cluster.x-k8s.io_clusters.yaml"),
        ),
        (
            11,
            capi_dir.join("v1.11/crds/cluster.x-k8s.io_clusters.yaml"),
        ),
        (
            12,
            capi_dir.join("v1.12/crds/cluster.x-k8s.io_clusters.yaml"),
        ),
        (
            13,
            kube_dir.join("crds/cluster-api-v1.13.5/cluster.x-k8s.io_clusters.yaml"),
        ),
    ]
}

async fn discovered_hooks(c: &reqwest::Client, srv: &Server) -> BTreeSet<String> {
    let (status, _, resp) = post_json(
        c,
        &srv.url(&format!("{PREFIX}/discovery")),
        &json!({"apiVersion": API, "kind": "DiscoveryRequest"}),
    )
    .await;
    assert_eq!(status, 200, "{resp}");
    resp["handlers"]
        .as_array()
        .expect("handlers")
        .iter()
        .map(|h| h["requestHook"]["hook"].as_str().expect("hook").to_string())
        .collect()
}

async fn served_minor(srv: &Server) -> Option<u16> {
    let text = reqwest::get(format!("{}/metrics", srv.admin))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("stackhook_capi_minor_served "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn the_served_capi_follows_the_management_clusters_crds_without_a_restart() {
    let api = match kube_server::api_server_alone() {
        Ok(a) => a,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    let crds = cluster_crds(&api.kube_dir);
    if let Some((_, missing)) = crds.iter().find(|(_, p)| !p.is_file()) {
        println!("skipping: {} is missing", missing.display());
        return;
    }
    let kube = api.client().await;
    let read = |p: &PathBuf| -> Vec<Value> {
        kube_server::yaml_documents(&std::fs::read_to_string(p).expect("CRD file"))
    };
    kube_server::apply_crds(&kube, &read(&crds[0].1)).await;

    let kubeconfig = api.kubeconfig.display().to_string();
    let srv = Server::start(&["--kubeconfig", &kubeconfig]);
    let c = client(srv.ca_pem.as_ref().expect("ca"), Proto::H2);

    // Found at start: CAPI 1.10's catalogue, without the hooks it does not know.
    assert_eq!(served_minor(&srv).await, Some(10));
    let hooks = discovered_hooks(&c, &srv).await;
    assert!(hooks.contains("BeforeClusterUpgrade"), "{hooks:?}");
    for newer in [
        "GenerateUpgradePlan",
        "BeforeControlPlaneUpgrade",
        "AfterWorkersUpgrade",
    ] {
        assert!(
            !hooks.contains(newer),
            "CAPI 1.10 does not know {newer}: {hooks:?}"
        );
    }

    // CAPI upgraded one release at a time, as clusterctl does: CRDs first.
    for (minor, path) in &crds[1..] {
        kube_server::apply_crds(&kube, &read(path)).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while served_minor(&srv).await != Some(*minor) {
            assert!(
                Instant::now() < deadline,
                "still serving CAPI 1.{:?} after the 1.{minor} CRD was applied",
                served_minor(&srv).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let hooks = discovered_hooks(&c, &srv).await;
        assert_eq!(
            hooks.contains("GenerateUpgradePlan"),
            *minor >= 12,
            "CAPI 1.{minor}: {hooks:?}"
        );
    }
    let logs = srv.drain_logs();
    assert!(
        logs.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("CAPI changed"))
            && l["to"] == "1.13"),
        "no log line says the served CAPI became 1.13"
    );
}

#[tokio::test]
async fn a_pinned_version_is_kept_and_no_kubernetes_access_serves_the_newest() {
    let srv = Server::start(&[]);
    assert_eq!(served_minor(&srv).await, Some(14));
    let c = client(srv.ca_pem.as_ref().expect("ca"), Proto::H1);
    assert!(discovered_hooks(&c, &srv)
        .await
        .contains("GenerateUpgradePlan"));
    drop(srv);

    let pinned = Server::start(&["--capi-version", "1.11"]);
    assert_eq!(served_minor(&pinned).await, Some(11));
    let c = client(pinned.ca_pem.as_ref().expect("ca"), Proto::H1);
    assert!(!discovered_hooks(&c, &pinned)
        .await
        .contains("GenerateUpgradePlan"));
}

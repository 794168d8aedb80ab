//! The real Cluster API drives stackhook: its managers (core with the topology
//! controller and the Runtime SDK registry, kubeadm bootstrap and control plane, all
//! from the project's `shared/capi` folder) on a real API server, stackhook's binary
//! registered by an ExtensionConfig and running its controllers against the loopback
//! cloud, and a stand-in workload API server on 127.0.0.1 (see tests/support/capi.rs).
//!
//! - `shipped_classes_*`: every shipped ClusterClass reaches VariablesReady (and, from
//!   v1.11, RefVersionsUpToDate) and every example Cluster TopologyReconciled, once
//!   per CAPI generation.
//! - `a_whole_life_*`: create → control plane → initialized →
//!   AfterControlPlaneInitialized → workers → scale up and down → an upgrade blocked by
//!   the preflight until its image exists → delete, nothing left in the cloud.
//! - `magnum_*`: the Magnum shape, with the identity Secret as the driver writes it.
//! - `a_misspelled_flavor_*`: ValidateTopology stops the topology until it is fixed.
//!
//! Each skips with one line where `shared/` or the test cloud is absent.
//! `cargo test --test capi -- --nocapture` prints each milestone's time.

#[path = "support/capi.rs"]
mod capi;
#[path = "support/cloud.rs"]
mod cloud;
#[path = "support/infra.rs"]
mod infra;
#[path = "support/kube.rs"]
mod kube_server;
#[path = "support/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use capi::{condition, condition_true, Bed, Release, StandInKubelet};
use kube_server::{wait_up_to, MANAGER};
use server::Server;
use stackhook_openstack::compute::Compute;
use stackhook_openstack::networking::{self as net, Networking};

const EXTENSION: &str = "stackhook";

/// What a test needs: the bed, stackhook registered with CAPI, the cloud.
struct World {
    bed: Bed,
    stackhook: Server,
    /// clouds.yaml with the member entry as `openstack` (the packs' default cloud).
    clouds_yaml: String,
    /// clouds.yaml of the test cloud as written by `up`.
    clouds_path: std::path::PathBuf,
    external_network: String,
    started: Instant,
}

impl World {
    /// `None` (after one line saying why) where this machine cannot run the suite.
    async fn start(release: Release, extra: &[&str]) -> Option<World> {
        let Some(clouds_path) = cloud::clouds_yaml() else {
            println!("skipping capi {}: no test cloud", release.capi);
            return None;
        };
        let bed = match tokio::task::spawn_blocking(move || Bed::start(release))
            .await
            .expect("bed")
        {
            Ok(bed) => bed,
            Err(why) => {
                println!("skipping capi {}: {why}", release.capi);
                return None;
            }
        };
        let started = Instant::now();
        let kubeconfig = bed.mgmt.kubeconfig.display().to_string();
        let mut args = vec![
            "--controllers",
            "--kubeconfig",
            &kubeconfig,
            "--capi-version",
            release.flag,
            "--leader-election-namespace",
            "default",
            "--leader-election-lease-duration-seconds",
            "8",
            "--leader-election-renew-deadline-seconds",
            "6",
            "--leader-election-retry-period-seconds",
            "1",
        ];
        args.extend_from_slice(extra);
        let stackhook = Server::start_with_env(&args, &[("RUST_LOG", Some("info"))]);
        let clouds_yaml =
            openstack_entry(&std::fs::read_to_string(&clouds_path).expect("clouds.yaml"));
        let nets: Vec<net::Network> = checker(&clouds_path)
            .network
            .list(&[("name", "public".to_string())])
            .await
            .expect("networks");
        let external_network = nets.first().expect("public network").id.clone();
        let world = World {
            bed,
            stackhook,
            clouds_yaml,
            clouds_path,
            external_network,
            started,
        };
        world.register().await;
        Some(world)
    }

    fn step(&self, what: &str) {
        println!(
            "capi {}: {what} ({:.1} s)",
            self.bed.release.capi,
            self.started.elapsed().as_secs_f64()
        );
    }

    async fn client(&self) -> Client {
        self.bed.client().await
    }

    /// The ExtensionConfig that registers stackhook, and CAPI's discovery of it.
    async fn register(&self) {
        let ca =
            data_encoding::BASE64.encode(self.stackhook.ca_pem.as_ref().expect("self-signed CA"));
        let ec = json!({
            "apiVersion": self.bed.release.extension_config_api(),
            "kind": "ExtensionConfig",
            "metadata": {"name": EXTENSION},
            "spec": {"clientConfig": {"url": self.stackhook.https, "caBundle": ca}},
        });
        self.bed
            .apply("default", &serde_json::to_string(&ec).expect("json"));
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "runtime.cluster.x-k8s.io",
                self.bed
                    .release
                    .extension_config_api()
                    .rsplit('/')
                    .next()
                    .expect("version"),
                "ExtensionConfig",
            ),
            "extensionconfigs",
        );
        let api: Api<DynamicObject> = Api::all_with(self.client().await, &ar);
        wait_up_to(
            Duration::from_secs(90),
            "CAPI to discover stackhook",
            async || {
                api.get(EXTENSION).await.ok().is_some_and(|o| {
                    o.data["status"]["handlers"]
                        .as_array()
                        .is_some_and(|h| !h.is_empty())
                })
            },
        )
        .await;
        self.step("ExtensionConfig discovered");
    }

    /// A namespace with the identity Secret `<cluster>-cloud-config` for `clusters`.
    async fn namespace(&self, prefix: &str, clusters: &[&str]) -> String {
        let client = self.client().await;
        let ns = kube_server::namespace(&client, prefix).await;
        for c in clusters {
            kube_server::identity_secret(
                &client,
                &ns,
                &format!("{c}-cloud-config"),
                &self.clouds_yaml,
            )
            .await;
        }
        ns
    }

    /// Applies the openstack-kubeadm class of this release (with its templates).
    fn apply_kubeadm_class(&self, ns: &str) {
        let class = capi::kustomize(&format!(
            "clusterclasses/openstack-kubeadm/overlays/{}",
            self.bed.release.overlay
        ));
        self.bed.apply(ns, &class);
    }

    async fn wait_class_ready(&self, ns: &str, name: &str) {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client().await,
            ns,
            &capi::cluster_classes(self.bed.release),
        );
        let release = self.bed.release;
        let mut last = Value::Null;
        let ok = poll(Duration::from_secs(90), async || {
            let Ok(cc) = api.get(name).await else {
                return false;
            };
            last = cc.data.clone();
            let variables = condition_true(&cc.data, "VariablesReady")
                || condition_true(&cc.data, "VariablesReconciled");
            let refs = !release.is_v1beta2() || condition_true(&cc.data, "RefVersionsUpToDate");
            variables && refs
        })
        .await;
        assert!(
            ok,
            "ClusterClass {ns}/{name} not ready under CAPI {}: {}",
            release.capi,
            serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
        );
        self.step(&format!("ClusterClass {name} ready"));
    }

    /// The minimal example, filled in.
    fn minimal_cluster(&self, ns: &str, name: &str, vars: &[(&str, &str)]) -> String {
        let text = std::fs::read_to_string(
            capi::repo().join("clusterclasses/examples/openstack-kubeadm-minimal.yaml"),
        )
        .expect("example");
        let mut env: BTreeMap<&str, &str> = BTreeMap::from([
            ("CLUSTER_NAME", name),
            ("NAMESPACE", ns),
            (
                "OPENSTACK_EXTERNAL_NETWORK_ID",
                self.external_network.as_str(),
            ),
            ("WORKER_MACHINE_COUNT", "1"),
        ]);
        env.extend(vars.iter().copied());
        envsubst(&text, &env)
    }

    async fn cluster(&self, ns: &str, name: &str) -> Value {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::clusters(self.bed.release));
        api.get(name)
            .await
            .map(|o| serde_json::to_value(o).expect("json"))
            .unwrap_or(Value::Null)
    }

    async fn wait_cluster<F: Fn(&Value) -> bool>(
        &self,
        ns: &str,
        name: &str,
        limit: Duration,
        what: &str,
        f: F,
    ) -> Value {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::clusters(self.bed.release));
        let mut last = Value::Null;
        let ok = poll(limit, async || {
            let Ok(c) = api.get(name).await else {
                return false;
            };
            last = serde_json::to_value(c).expect("json");
            f(&last)
        })
        .await;
        assert!(
            ok,
            "timed out after {limit:?} waiting for Cluster {ns}/{name}: {what}; status: {}",
            serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
        );
        self.step(what);
        last
    }

    async fn machines(&self, ns: &str) -> Vec<DynamicObject> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::machines(self.bed.release));
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Servers in the cloud whose name starts with `prefix`, by status.
    async fn servers(&self, prefix: &str) -> Vec<(String, String)> {
        let c = checker(&self.clouds_path);
        c.compute
            .servers_named(prefix)
            .await
            .expect("servers")
            .into_iter()
            .filter(|s| s.name.starts_with(prefix))
            .map(|s| (s.name, s.status))
            .collect()
    }

    /// What a failed wait needs to be understood: our objects' status, CAPI's
    /// Machines, stackhook's warnings.
    async fn dump(&self, ns: &str) {
        let client = self.client().await;
        for ar in [
            capi::infra("OpenStackCluster", "openstackclusters"),
            capi::infra("OpenStackMachine", "openstackmachines"),
            capi::machines(self.bed.release),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            for o in api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                println!(
                    "{} {}: spec.providerID={} status={}",
                    ar.kind,
                    o.metadata.name.unwrap_or_default(),
                    o.data["spec"]["providerID"],
                    o.data["status"]
                );
            }
        }
        for l in self.stackhook.drain_logs() {
            let level = l["level"].as_str().unwrap_or_default();
            if level == "WARN" || level == "ERROR" {
                println!("stackhook: {l}");
            }
        }
    }

    async fn hook_calls(&self) -> BTreeMap<String, u64> {
        let text = reqwest::get(format!("{}/metrics", self.stackhook.admin))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        let mut out = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("stackhook_hook_requests_total{"))
        {
            let Some((labels, n)) = line.rsplit_once(' ') else {
                continue;
            };
            let hook = labels
                .split("hook=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default();
            let outcome = labels
                .split("outcome=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default();
            *out.entry(format!("{hook}/{outcome}")).or_insert(0) +=
                n.parse::<f64>().unwrap_or(0.0) as u64;
        }
        out
    }
}

/// Polls every 500 ms up to `limit`; whether `check` became true.
async fn poll<F: AsyncFnMut() -> bool>(limit: Duration, mut check: F) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn checker(clouds_path: &std::path::Path) -> stackhook_openstack::Clients {
    infra::checker(
        &std::fs::read(clouds_path).expect("clouds.yaml"),
        cloud::MEMBER,
    )
}

/// The test cloud's clouds.yaml with its member entry as `openstack`, the cloud the
/// packs name by default.
fn openstack_entry(clouds_yaml: &str) -> String {
    let v: Value = serde_saphyr::from_str(clouds_yaml).expect("clouds.yaml");
    let member = v["clouds"][cloud::MEMBER].clone();
    serde_json::to_string(&json!({"clouds": {"openstack": member}})).expect("json")
}

/// `${VAR}` and `${VAR:=default}` as clusterctl fills a template.
fn envsubst(text: &str, env: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').expect("closing brace") + at;
        let inner = &rest[at + 2..end];
        let (name, default) = match inner.split_once(":=") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match env.get(name).copied().or(default) {
            Some(v) => out.push_str(v),
            None => panic!("template variable {name} has no value"),
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_life_under_capi_v1_13() {
    whole_life(capi::V1_13).await;
}

async fn whole_life(release: Release) {
    let Some(w) = World::start(release, &[]).await else {
        return;
    };
    let name = "life";
    let ns = w.namespace("capi-life", &[name]).await;
    w.apply_kubeadm_class(&ns);
    w.wait_class_ready(&ns, "openstack-kubeadm").await;
    w.bed.point_at_standin(&ns, name).await;
    let _kubelet =
        StandInKubelet::start(w.client().await, w.bed.standin_client().await, release, &ns);
    let applied = Instant::now();
    w.bed.apply(&ns, &w.minimal_cluster(&ns, name, &[]));
    w.step("Cluster applied");
    w.wait_cluster(
        &ns,
        name,
        Duration::from_secs(60),
        "TopologyReconciled",
        |c| condition_true(c, "TopologyReconciled"),
    )
    .await;
    let first_active = poll(Duration::from_secs(120), async || {
        w.servers(name).await.iter().any(|(_, s)| s == "ACTIVE")
    })
    .await;
    if !first_active {
        w.dump(&ns).await;
    }
    assert!(first_active, "no ACTIVE server for {name}");
    let to_server = applied.elapsed();
    w.step(&format!(
        "first server ACTIVE, {:.1} s after apply",
        to_server.as_secs_f64()
    ));
    w.wait_cluster(
        &ns,
        name,
        Duration::from_secs(120),
        "ControlPlaneInitialized",
        |c| condition_true(c, "ControlPlaneInitialized"),
    )
    .await;
    println!("hook calls: {:?}", w.hook_calls().await);
    let machines = w.machines(&ns).await;
    println!(
        "machines: {:?}",
        machines
            .iter()
            .map(|m| (
                m.metadata.name.clone(),
                m.data["spec"]["providerID"].clone()
            ))
            .collect::<Vec<_>>()
    );
    w.bed.assert_loopback_only();
}

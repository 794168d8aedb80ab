//! ValidateTopology with the cloud: the real binary over HTTPS, the identity Secret
//! in a real API server (tests/support/kube.rs), the resources in the loopback cloud
//! (tests/support/cloud.rs); skipped with one line when either is missing.
//!
//! - openstack-v1: flavors, images by name and ID, the external network and an
//!   existing network and subnet by name (created here, `vt-` names) that exist give
//!   Success; a misspelled flavor and an unknown image ID in a MachineDeployment's
//!   override give Failure naming both; the same answer comes from the lookup cache.
//! - magnum-v1: the driver's variables with the Secret it names and cloud `default`
//!   (an application credential); an unknown image UUID is refused.
//! - A cluster whose identity Secret does not exist is let through, counted as
//!   `unknown`; a value the schema refuses is reported as before, without the cloud.
//! - `--validate-cloud warn` with no wait: the first call is answered before the
//!   lookups finish, later ones from their answer, and none is refused.

use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::replica;

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::Client;
use replica::Replica;
use serde_json::{json, Value};
use stackhook_openstack::image::Images;
use stackhook_openstack::networking::{Network, Networking, Subnet};
use stackhook_openstack::Clients;

const UNKNOWN_IMAGE: &str = "0b1c2d3e-4f50-4617-8899-aabbccddeeff";

/// clouds.yaml with entry `from` renamed `to` (written as JSON, which is YAML).
fn clouds_with(clouds_yaml: &[u8], from: &str, to: &str) -> String {
    let text = std::str::from_utf8(clouds_yaml).expect("UTF-8 clouds.yaml");
    let all: Value = serde_saphyr::from_str(text).expect("clouds.yaml");
    let entry = all["clouds"][from].clone();
    assert!(entry.is_object(), "no cloud {from:?} in clouds.yaml");
    json!({"clouds": {to: entry}}).to_string()
}

fn builtin(ns: &str, cluster: &str) -> Value {
    json!({"name": "builtin", "value": {"cluster": {"name": cluster, "namespace": ns,
        "topology": {"version": "v1.33.1", "class": "openstack"}}}})
}

/// One MachineDeployment's two templates, each with `overrides` as its variables.
fn md_items(ns: &str, overrides: Value) -> Value {
    let holder = |field: &str| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
            "namespace": ns, "name": "vt-md-0", "fieldPath": field})
    };
    json!([
        {"holderReference": holder("spec.template.spec.infrastructureRef"),
         "object": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                    "kind": "OpenStackMachineTemplate", "spec": {"template": {"spec": {}}}},
         "variables": overrides},
        {"holderReference": holder("spec.template.spec.bootstrap.configRef"),
         "object": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                    "kind": "KubeadmConfigTemplate", "spec": {"template": {"spec": {}}}},
         "variables": overrides},
    ])
}

fn request(variables: Vec<Value>, items: Value) -> Value {
    json!({"variables": variables, "items": items})
}

async fn metric(r: &Replica, result: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", r.srv.admin))
        .await
        .expect("/metrics")
        .text()
        .await
        .expect("metrics text");
    let want = format!("stackhook_validate_topology_cloud_checks_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&want))
        .map(|n| n.trim().parse().expect("a count"))
        .unwrap_or(0)
}

/// What the test creates in the cloud, removed at the end whatever happened.
struct Made {
    network: Option<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_topology_looks_up_what_the_variables_name() {
    let Some(clouds) = cloud::clouds_yaml() else {
        return;
    };
    let api = match kube_server::api_server() {
        Ok(a) => a,
        Err(why) => {
            eprintln!("skipping: no API server: {why}");
            return;
        }
    };
    let clouds_yaml = std::fs::read(clouds).expect("clouds.yaml");
    let client = api.client().await;
    let ns = kube_server::namespace(&client, "vt").await;
    let member = infra::checker(&clouds_yaml, cloud::MEMBER);
    let mut made = Made { network: None };
    let outcome = AssertUnwindSafe(scenarios(
        &client,
        &api.kubeconfig,
        &ns,
        &clouds_yaml,
        &member,
        &mut made,
    ))
    .catch_unwind()
    .await;
    if let Some(id) = made.network.take() {
        for s in member
            .network
            .list::<Subnet>(&[("network_id", id.clone())])
            .await
            .unwrap_or_default()
        {
            let _ = member.network.delete::<Subnet>(&s.id).await;
        }
        if let Err(e) = member.network.delete::<Network>(&id).await {
            eprintln!("deleting network {id}: {e}");
        }
    }
    kube_server::delete_namespace(&client, &ns).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn scenarios(
    client: &Client,
    kubeconfig: &std::path::Path,
    ns: &str,
    clouds_yaml: &[u8],
    member: &Clients,
    made: &mut Made,
) {
    // What exists: an image (by name and ID), the external network, and a network
    // and subnet of our own, found by name.
    let image = member
        .image
        .list(&[("name", "ubuntu-2404-kube-v1.33.1".to_string())])
        .await
        .expect("images")
        .pop()
        .expect("the cloud's ubuntu-2404-kube-v1.33.1 image");
    let public = member
        .network
        .list::<Network>(&[("name", "public".to_string())])
        .await
        .expect("networks")
        .pop()
        .expect("the cloud's external network");
    let net_name = infra::unique("vt-net");
    let net: Network = member
        .network
        .create(json!({"name": net_name}))
        .await
        .expect("network");
    made.network = Some(net.id.clone());
    let subnet_name = infra::unique("vt-subnet");
    let _: Subnet = member
        .network
        .create(json!({"name": subnet_name, "network_id": net.id,
            "cidr": "10.77.0.0/24", "ip_version": 4}))
        .await
        .expect("subnet");

    kube_server::identity_secret(
        client,
        ns,
        "vt-a-cloud-config",
        &clouds_with(clouds_yaml, cloud::MEMBER, "openstack"),
    )
    .await;
    kube_server::identity_secret(
        client,
        ns,
        "vt-m-creds",
        &clouds_with(clouds_yaml, cloud::MEMBER_APPCRED, "default"),
    )
    .await;

    // The answers below are what the lookups find, so they get all the time a busy
    // cloud needs; the default wait (5 s) lets a topology through unchecked.
    let r = Replica::start(
        kubeconfig,
        ns,
        "vt-lease",
        &["--validate-cloud-wait-milliseconds", "60000"],
    );
    let handler = "openstack-v1-validate-topology";
    let cluster_vars = |cp_flavor: &str| {
        vec![
            builtin(ns, "vt-a"),
            json!({"name": "openstackCluster", "value": {
                "externalNetworkID": public.id,
                "network": {"name": net_name}, "subnet": {"name": subnet_name},
                "apiServerFloatingIP": {"mode": "none"}}}),
            json!({"name": "openstackControlPlane", "value": {
                "flavor": cp_flavor, "image": {"name": image.name}}}),
            json!({"name": "openstackWorker", "value": {
                "flavor": "m1.small", "image": {"id": image.id}}}),
        ]
    };

    // Everything exists: Success.
    let good = request(
        cluster_vars("m1.medium"),
        md_items(
            ns,
            json!([{"name": "openstackWorker", "value": {"flavor": "m1.large",
                "image": {"name": "ubuntu-2404-kube-v1.34.1"}}}]),
        ),
    );
    let t = Instant::now();
    let (resp, _) = r.call("ValidateTopology", handler, good.clone()).await;
    let first = t.elapsed();
    assert_eq!(resp["status"], "Success", "{resp}");
    assert_eq!(metric(&r, "valid").await, 1);
    assert_eq!(metric(&r, "unknown").await, 0);

    // A misspelled control-plane flavor and an unknown image ID on the
    // MachineDeployment: Failure naming both, with the cloud and its region.
    let bad = request(
        cluster_vars("m1.mediumm"),
        md_items(
            ns,
            json!([{"name": "openstackWorker", "value": {"flavor": "m1.large",
                "image": {"id": UNKNOWN_IMAGE}}}]),
        ),
    );
    let t = Instant::now();
    let (resp, _) = r.call("ValidateTopology", handler, bad.clone()).await;
    let second = t.elapsed();
    assert_eq!(resp["status"], "Failure", "{resp}");
    let msg = resp["message"].as_str().unwrap();
    assert_eq!(
        msg,
        format!(
            "pack \"openstack-v1\": 2 problem(s) with the OpenStack resources the variables name: \
             variable openstackControlPlane.flavor: flavor \"m1.mediumm\" not found in cloud \"openstack\" (region RegionOne); \
             MachineDeployment vt-md-0: variable openstackWorker.image.id: image ID \"{UNKNOWN_IMAGE}\" not found in cloud \"openstack\" (region RegionOne)"
        )
    );
    // Asked again: the same answer, from the lookup cache.
    let t = Instant::now();
    let (again, _) = r.call("ValidateTopology", handler, bad).await;
    let cached = t.elapsed();
    assert_eq!(again, resp);
    assert_eq!(metric(&r, "invalid").await, 2);
    println!(
        "BENCH validate-topology cloud: first {first:?}, new lookups {second:?}, cached {cached:?}"
    );

    // Magnum's variables: its Secret, cloud `default` (an application credential).
    let magnum = |image_uuid: &str| {
        let mut vars = vec![builtin(ns, "vt-m")];
        for (k, v) in [
            ("clusterIdentityRefName", json!("vt-m-creds")),
            ("controlPlaneFlavor", json!("m1.small")),
            ("flavor", json!("m1.tiny")),
            ("imageUUID", json!(image_uuid)),
            ("externalNetworkId", json!(public.id)),
            ("fixedNetworkId", json!(net.id)),
            ("fixedSubnetId", json!("")),
        ] {
            vars.push(json!({"name": k, "value": v}));
        }
        request(vars, json!([]))
    };
    let (resp, _) = r
        .call(
            "ValidateTopology",
            "magnum-v1-validate-topology",
            magnum(&image.id),
        )
        .await;
    assert_eq!(resp["status"], "Success", "{resp}");
    let (resp, _) = r
        .call(
            "ValidateTopology",
            "magnum-v1-validate-topology",
            magnum(UNKNOWN_IMAGE),
        )
        .await;
    assert_eq!(resp["status"], "Failure", "{resp}");
    assert_eq!(
        resp["message"],
        format!(
            "pack \"magnum-v1\": 1 problem(s) with the OpenStack resources the variables name: \
             variable imageUUID: image ID \"{UNKNOWN_IMAGE}\" not found in cloud \"default\" (region RegionOne)"
        )
    );

    // No identity Secret (`vt-b-cloud-config`): not held up, counted as unknown.
    let mut orphan = request(cluster_vars("m1.mediumm"), json!([]));
    orphan["variables"][0] = builtin(ns, "vt-b");
    let (resp, took) = r.call("ValidateTopology", handler, orphan).await;
    assert_eq!(resp["status"], "Success", "{resp}");
    // Not the 60 s wait: nothing to look up with.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(metric(&r, "unknown").await, 1);

    // A value the schema refuses is reported as before; the cloud is not asked.
    let mut refused = request(cluster_vars("m1.mediumm"), json!([]));
    refused["variables"][1]["value"]["externalNetworkID"] = json!("not-a-uuid");
    let (resp, _) = r.call("ValidateTopology", handler, refused).await;
    assert_eq!(resp["status"], "Failure", "{resp}");
    let msg = resp["message"].as_str().unwrap();
    assert!(
        msg.starts_with("pack \"openstack-v1\": 1 invalid variable value(s): ")
            && msg.contains("externalNetworkID")
            && !msg.contains("m1.mediumm"),
        "{msg}"
    );
    assert_eq!(metric(&r, "invalid").await, 3);

    // `--validate-cloud warn`, and no wait: the first call is answered before the
    // lookups finish (let through, unknown); the job's answer then serves the next
    // calls, which `warn` logs without refusing.
    let w = Replica::start(
        kubeconfig,
        ns,
        "vt-lease",
        &[
            "--validate-cloud",
            "warn",
            "--validate-cloud-wait-milliseconds",
            "0",
        ],
    );
    let bad = request(cluster_vars("m1.mediumm"), json!([]));
    let (resp, _) = w.call("ValidateTopology", handler, bad.clone()).await;
    assert_eq!(resp["status"], "Success", "{resp}");
    // Counted unknown: answered before the lookups did.
    assert_eq!(metric(&w, "unknown").await, 1);
    kube_server::wait_for("the background lookups to answer", async || {
        let (resp, _) = w.call("ValidateTopology", handler, bad.clone()).await;
        assert_eq!(resp["status"], "Success", "{resp}");
        metric(&w, "invalid").await > 0
    })
    .await;
}

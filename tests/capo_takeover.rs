//! Taking over from CAPO: the real `capo-manager` (v0.14, from the project's
//! `shared/capi` folder) creates a cluster in the loopback cloud under the real CAPI
//! core manager; CAPO is stopped (its PID and its webhooks only), stackhook's CRDs
//! replace CAPO's as the README says, and `stackhook serve --controllers` takes
//! over. The takeover must make **no OpenStack write** (counted from the cloud's own
//! access logs, by stackhook's `--openstack-user-agent`) and keep the IDs in status,
//! `Ready` and the providerIDs; deleting the Cluster afterwards must leave nothing
//! CAPO or stackhook made in the cloud (checked by name and by the cluster's tag).
//!
//! The cluster has a managed subnet and managed security groups, one control-plane
//! Machine and one worker (plain CAPI Machines with a bootstrap data Secret, so no
//! control-plane provider or workload cluster is needed). It has **no API floating
//! IP** (`disableAPIServerFloatingIP: true`): the test cloud's Octavia (no-op
//! drivers) makes no VIP port in Neutron, so CAPO could not attach one and would
//! never get the cluster Ready. It has **no API load balancer** either, the
//! endpoint being given in `spec.controlPlaneEndpoint`: with one, CAPO's member
//! creation sometimes failed for good on the test cloud (`error create lbmember:
//! Missing input for argument [Address]`).
//!
//! Skips in one line where `shared/` or the test cloud is absent.
//! `cargo test --test capo_takeover -- --nocapture` prints each phase and its
//! request counts.

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

use kube::api::{Api, DeleteParams, DynamicObject};
use kube::Client;
use serde_json::{json, Value};

use capi::{condition_true, Bed, V1_13};
use server::Server;
use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook_openstack::compute::Compute;
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};

const CLUSTER: &str = "capo";
const MACHINES: [&str; 2] = ["capo-cp-0", "capo-worker-0"];

/// CAPO's requests: gophercloud's User-Agent, with CAPO's name when it sets one.
fn is_capo(ua: &str) -> bool {
    ua.contains("gophercloud") || ua.contains("cluster-api-provider-openstack")
}

fn step(started: Instant, what: &str) {
    println!(
        "capo takeover: {what} ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

/// The test cloud's clouds.yaml with its member entry as `openstack`.
fn openstack_entry(clouds_yaml: &str) -> String {
    let v: Value = serde_saphyr::from_str(clouds_yaml).expect("clouds.yaml");
    let member = v["clouds"][cloud::MEMBER].clone();
    serde_json::to_string(&json!({"clouds": {"openstack": member}})).expect("json")
}

/// The cluster as a CAPO user writes it: CAPI's Cluster (v1beta2) and CAPO's own
/// v1beta1 objects, with plain Machines and their bootstrap data Secrets.
fn cluster_yaml(ns: &str, tag: &str) -> String {
    let mut docs = vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": CLUSTER},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackCluster", "name": CLUSTER}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
        "metadata": {"name": CLUSTER, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {
            "identityRef": {"type": "Secret", "name": "capo-cloud", "cloudName": "openstack"},
            "managedSubnets": [{"cidr": "10.77.0.0/24"}],
            "managedSecurityGroups": {"allowAllInClusterTraffic": true},
            "disableAPIServerFloatingIP": true,
            "controlPlaneEndpoint": {"host": "10.77.0.250", "port": 6443},
            "tags": [tag],
        }}),
    ];
    for (i, m) in MACHINES.iter().enumerate() {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        if i == 0 {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        docs.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{m}-bootstrap"), "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": "#cloud-config\n", "format": "cloud-config"}}));
        docs.push(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": m, "labels": labels},
            "spec": {"flavor": "m1.tiny",
                     "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}}}));
        docs.push(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": m, "labels": labels},
            "spec": {"clusterName": CLUSTER, "version": "v1.33.1",
                     "bootstrap": {"dataSecretName": format!("{m}-bootstrap")},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                         "kind": "OpenStackMachine", "name": m}}}),
        );
    }
    let _ = ns;
    docs.iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// What the takeover must not change: IDs in status, Ready, providerIDs.
#[derive(Debug, PartialEq)]
struct Snapshot {
    cluster_ids: Vec<String>,
    cluster_ready: bool,
    machines: BTreeMap<String, (String, String, bool)>,
    servers: Vec<String>,
}

async fn snapshot(client: &Client, ns: &str, os: &stackhook_openstack::Clients) -> Snapshot {
    let osc: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &capi::infra("OpenStackCluster", "openstackclusters"),
    );
    let osm: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &capi::infra("OpenStackMachine", "openstackmachines"),
    );
    let c = osc.get(CLUSTER).await.expect("OpenStackCluster");
    let s = &c.data["status"];
    let mut cluster_ids: Vec<String> = [
        &s["network"]["id"],
        &s["network"]["subnets"][0]["id"],
        &s["router"]["id"],
        &s["controlPlaneSecurityGroup"]["id"],
        &s["workerSecurityGroup"]["id"],
    ]
    .iter()
    .map(|v| v.as_str().unwrap_or("<none>").to_string())
    .collect();
    cluster_ids.push(c.data["spec"]["controlPlaneEndpoint"].to_string());
    let mut machines = BTreeMap::new();
    for m in MACHINES {
        let o = osm.get(m).await.expect("OpenStackMachine");
        machines.insert(
            m.to_string(),
            (
                o.data["status"]["instanceID"]
                    .as_str()
                    .unwrap_or("<none>")
                    .to_string(),
                o.data["spec"]["providerID"]
                    .as_str()
                    .unwrap_or("<none>")
                    .to_string(),
                condition_true(&o.data, "Ready"),
            ),
        );
    }
    let mut servers: Vec<String> = os
        .compute
        .servers_named("^capo-")
        .await
        .expect("servers")
        .into_iter()
        .filter(|s| MACHINES.contains(&s.name.as_str()))
        .map(|s| format!("{} {}", s.name, s.id))
        .collect();
    servers.sort();
    Snapshot {
        cluster_ids,
        cluster_ready: condition_true(&c.data, "Ready") || s["ready"] == true,
        machines,
        servers,
    }
}

/// What is left in the cloud of the cluster: by its tag and by the names CAPO and
/// stackhook give.
async fn leftovers(
    os: &stackhook_openstack::Clients,
    ns: &str,
    tag: &str,
) -> BTreeMap<String, usize> {
    let names = ClusterNames::new(ns.to_string(), CLUSTER.to_string());
    let n = &os.network;
    let by_tag = [("tags", tag.to_string())];
    let mut m = BTreeMap::new();
    m.insert(
        "networks (tag)".into(),
        n.list::<net::Network>(&by_tag)
            .await
            .expect("networks")
            .len(),
    );
    m.insert(
        "subnets (tag)".into(),
        n.list::<net::Subnet>(&by_tag).await.expect("subnets").len(),
    );
    m.insert(
        "routers (tag)".into(),
        n.list::<net::Router>(&by_tag).await.expect("routers").len(),
    );
    m.insert(
        "ports (tag)".into(),
        n.list::<net::Port>(&by_tag).await.expect("ports").len(),
    );
    m.insert(
        "security groups (tag)".into(),
        n.list::<net::SecurityGroup>(&by_tag)
            .await
            .expect("sgs")
            .len(),
    );
    m.insert(
        "networks (name)".into(),
        n.list::<net::Network>(&[("name", names.network_name())])
            .await
            .expect("networks")
            .len(),
    );
    let mut sgs = 0;
    for role in [SecurityGroupRole::ControlPlane, SecurityGroupRole::Worker] {
        sgs += n
            .list::<net::SecurityGroup>(&[("name", names.security_group_name(role))])
            .await
            .expect("sgs")
            .len();
    }
    m.insert("security groups (name)".into(), sgs);
    let lbs: Vec<lb::LoadBalancer> = os
        .load_balancer
        .list(&[("name", names.load_balancer_name())])
        .await
        .expect("lbs");
    m.insert("load balancers (name)".into(), lbs.len());
    let mut ports = 0;
    for machine in MACHINES {
        ports += n
            .list::<net::Port>(&[("name", format!("{machine}-0"))])
            .await
            .expect("ports")
            .len();
    }
    m.insert("machine ports (name)".into(), ports);
    let servers = os
        .compute
        .servers_named("^capo-")
        .await
        .expect("servers")
        .into_iter()
        .filter(|s| MACHINES.contains(&s.name.as_str()))
        .count();
    m.insert("servers (name)".into(), servers);
    m
}

async fn poll<F: AsyncFnMut() -> bool>(limit: Duration, mut check: F) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stackhook_takes_over_a_cluster_capo_made_changing_nothing_but_tags() {
    let Some(clouds_path) = cloud::clouds_yaml() else {
        println!("skipping capo takeover: no test cloud");
        return;
    };
    let bed = match tokio::task::spawn_blocking(|| {
        Bed::start_managers(V1_13, &|_| Ok(()), &["capi", "capo"])
    })
    .await
    .expect("bed")
    {
        Ok(b) => b,
        Err(why) => {
            println!("skipping capo takeover: {why}");
            return;
        }
    };
    let started = Instant::now();
    step(started, "CAPI core and CAPO running");
    let client = bed.client().await;
    let ns = kube_server::namespace(&client, "takeover").await;
    let clouds_yaml = std::fs::read_to_string(&clouds_path).expect("clouds.yaml");
    kube_server::identity_secret(&client, &ns, "capo-cloud", &openstack_entry(&clouds_yaml)).await;
    let os = infra::checker(clouds_yaml.as_bytes(), cloud::MEMBER);
    let tag = format!("takeover-{ns}");

    // CAPO creates the cluster.
    let capo_mark = cloud::access_mark();
    bed.apply(&ns, &cluster_yaml(&ns, &tag));
    let osm_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &capi::infra("OpenStackMachine", "openstackmachines"),
    );
    let ready = poll(Duration::from_secs(420), async || {
        let mut all = true;
        for m in MACHINES {
            let ok = osm_api.get_opt(m).await.ok().flatten().is_some_and(|o| {
                o.data["spec"]["providerID"].is_string() && condition_true(&o.data, "Ready")
            });
            all &= ok;
        }
        all
    })
    .await;
    if !ready {
        for m in MACHINES {
            println!(
                "{m}: {:?}",
                osm_api
                    .get_opt(m)
                    .await
                    .ok()
                    .flatten()
                    .map(|o| o.data["status"].clone())
            );
        }
        bed.keep_logs("capo-takeover");
        panic!("CAPO did not get both machines Ready");
    }
    let capo_create = cloud::requests_since_by(&capo_mark, &is_capo);
    step(
        started,
        &format!(
            "CAPO: cluster and 2 machines Ready, {} OpenStack requests ({} writes): {capo_create:?}",
            capo_create.values().sum::<u64>(),
            cloud::writes(&capo_create)
        ),
    );
    let before = snapshot(&client, &ns, &os).await;
    println!("capo takeover: before {before:?}");
    assert!(
        before.cluster_ready,
        "CAPO's cluster is not Ready: {before:?}"
    );
    assert_eq!(before.servers.len(), 2, "servers: {:?}", before.servers);
    let oss_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "infrastructure.cluster.x-k8s.io",
                "v1alpha1",
                "OpenStackServer",
            ),
            "openstackservers",
        ),
    );
    for m in MACHINES {
        let s = oss_api.get(m).await.expect("CAPO's OpenStackServer");
        assert!(
            s.metadata
                .finalizers
                .clone()
                .unwrap_or_default()
                .iter()
                .any(|f| f.starts_with("openstackserver")),
            "CAPO's OpenStackServer {m} has no finalizer"
        );
    }

    // CAPO stops; stackhook's CRDs replace CAPO's (README, "Taking over from CAPO").
    let kubeconfig = bed.mgmt.kubeconfig.clone();
    bed.stop_manager("capo-manager");
    let crds = std::process::Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .expect("stackhook crds");
    let text = String::from_utf8(crds.stdout).expect("UTF-8");
    capi::kubectl(&kubeconfig, &["replace", "-f", "-"], Some(&text));
    step(started, "CAPO stopped, stackhook's CRDs in place");

    // stackhook takes over.
    let agent = format!("stackhook-capo-takeover-{}", std::process::id());
    let kc = kubeconfig.display().to_string();
    let take_mark = cloud::access_mark();
    let stackhook = Server::start_with_env(
        &[
            "--openstack-user-agent",
            &agent,
            "--controllers",
            "--kubeconfig",
            &kc,
            "--capi-version",
            V1_13.flag,
        ],
        &[("RUST_LOG", Some("info"))],
    );
    let adopted =
        poll(Duration::from_secs(120), async || {
            let mut all = true;
            for m in MACHINES {
                let machine_has_ports = osm_api.get_opt(m).await.ok().flatten().is_some_and(|o| {
                    o.data["status"]["resources"]["ports"]
                        .as_array()
                        .is_some_and(|p| !p.is_empty())
                });
                let released =
                    oss_api.get_opt(m).await.ok().flatten().is_some_and(|s| {
                        s.metadata.finalizers.clone().unwrap_or_default().is_empty()
                    });
                all &= machine_has_ports && released;
            }
            all
        })
        .await;
    assert!(adopted, "stackhook did not adopt CAPO's OpenStackServers");
    step(started, "stackhook adopted both OpenStackServers (ports in the machines' status, CAPO's finalizer released)");
    // Some resync passes of every object.
    tokio::time::sleep(Duration::from_secs(45)).await;
    let takeover = cloud::requests_since(&take_mark, Some(&agent));
    let after = snapshot(&client, &ns, &os).await;
    step(
        started,
        &format!(
            "takeover: {} OpenStack requests by stackhook, {} writes: {takeover:?}",
            takeover.values().sum::<u64>(),
            cloud::writes(&takeover)
        ),
    );
    assert!(
        !takeover.is_empty(),
        "stackhook made no OpenStack request at all: did it run?"
    );
    // stackhook's owner tag on the network, subnet, router and both security groups it
    // adopted by name: one Neutron PUT each (`…/tags/<tag>`), the only PUT a pass makes
    // on a found resource whose spec did not change. The access logs are summed by
    // service and method, so that is what is asserted: at most those 5 PUTs, and no
    // other write anywhere.
    let neutron_puts = takeover.get("neutron PUT").copied().unwrap_or(0);
    let other: BTreeMap<String, u64> = takeover
        .iter()
        .filter(|(k, _)| k.as_str() != "neutron PUT")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(
        cloud::writes(&other),
        0,
        "the takeover wrote to OpenStack beyond tags: {takeover:?}"
    );
    assert!(
        neutron_puts <= 5,
        "more Neutron PUTs than one tag per adopted network, subnet, router and security group: {takeover:?}"
    );
    assert_eq!(
        before, after,
        "the takeover changed status, Ready, providerIDs or servers"
    );

    // Deleting the Cluster: nothing of it is left in the cloud.
    let delete_mark = cloud::access_mark();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi::clusters(V1_13));
    clusters
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .expect("delete Cluster");
    let gone = poll(Duration::from_secs(300), async || {
        clusters
            .get_opt(CLUSTER)
            .await
            .ok()
            .is_some_and(|c| c.is_none())
    })
    .await;
    let deleted = cloud::requests_since(&delete_mark, Some(&agent));
    if !gone {
        for l in stackhook.drain_logs() {
            if l["level"] == "WARN" || l["level"] == "ERROR" {
                println!("stackhook: {l}");
            }
        }
    }
    assert!(gone, "the Cluster was not deleted");
    step(
        started,
        &format!(
            "cluster deleted: {} OpenStack requests by stackhook ({} writes)",
            deleted.values().sum::<u64>(),
            cloud::writes(&deleted)
        ),
    );
    let left = leftovers(&os, &ns, &tag).await;
    println!("capo takeover: left in the cloud {left:?}");
    assert!(
        left.values().all(|n| *n == 0),
        "left in the cloud: {left:?}"
    );
    bed.keep_logs("capo-takeover");
    drop(stackhook);
}

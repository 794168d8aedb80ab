//! Taking over from CAPO: the real `capo-manager` (v0.14, from the project's
//! `shared/capi` folder) creates a cluster in the loopback cloud under the real CAPI
//! core manager; CAPO is stopped (its PID and its webhooks only), stackhook's CRDs
//! replace CAPO's as the README says, and `stackhook serve --controllers` takes
//! over. The takeover must make **no OpenStack write** (counted from the cloud's own
//! access logs, by stackhook's `--openstack-user-agent`) and keep the IDs in status,
//! `Ready` and the providerIDs; deleting the Cluster afterwards must leave nothing
//! CAPO or stackhook made in the cloud (checked by name and by the cluster's tag).
//!
//! The cluster is in the shape users run: an API load balancer with its floating IP
//! (the test cloud's Octavia makes the VIP a Neutron port, so the address attaches),
//! a managed subnet and managed security groups, a control-plane Machine in a server
//! group the user made, a worker booting from a root volume and a worker with an
//! additional volume (plain CAPI Machines with a bootstrap data Secret, so no
//! control-plane provider or workload cluster is needed), and a bastion.
//!
//! Beside it, stackhook makes the same shape in a namespace of its own, and what it
//! made in the cloud is compared with what CAPO made, field by field
//! (`support/capo.rs`, `fingerprint`): networks, subnets, the router's gateway and
//! interfaces, every security-group rule, each server's flavor, metadata, tags, ports
//! (network, subnets, groups, tags, description, floating IPs) and volumes, the load
//! balancer's VIP, listeners, pools, members and monitors.
//!
//! Skips in one line where `shared/` or the test cloud is absent.
//! `cargo test --test with_capi capo_takeover:: -- --nocapture` prints each phase and its
//! request counts.

use crate::capi;
use crate::capo;
use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::server;

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::json;

use capi::{Bed, V1_13};
use capo::{is_capo, leftovers, openstack_entry, poll, snapshot, Shape};
use server::Server;
use stackhook_openstack::networking::{self as net, Networking};

const SHAPE: Shape = Shape {
    cluster: "capo",
    machines: &["capo-cp-0", "capo-worker-0", "capo-worker-1"],
    cidr: "10.77.0.0/24",
    fixed_ip: None,
    server_group_policy: None,
    load_balancer: true,
    volumes: true,
    bastion: true,
};

/// The same shape, made by stackhook beside CAPO's to be compared with it.
const TWIN: Shape = Shape {
    cluster: "capo-twin",
    machines: &["capo-twin-cp-0", "capo-twin-worker-0", "capo-twin-worker-1"],
    ..SHAPE
};

/// stackhook's mark on the servers it makes (CAPO's have none).
const OWNER_KEY: &str = stackhook::infra::cluster::OWNER_METADATA_KEY;

fn step(started: Instant, what: &str) {
    println!(
        "capo takeover: {what} ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stackhook_takes_over_a_cluster_capo_made_changing_nothing_but_tags() {
    let _one = capi::ONE_BED.lock().await;
    let _capo = capo::one_capo_at_a_time().await;
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
    capo::clear_leftovers(&os, &SHAPE).await;
    {
        use stackhook_openstack::compute::Compute;
        for s in os
            .compute
            .servers_named("^capo-worker-2$")
            .await
            .unwrap_or_default()
        {
            let _ = os.compute.delete_server(&s.id).await;
        }
    }

    // CAPO creates the cluster.
    let capo_mark = cloud::access_mark();
    let create_started = Instant::now();
    // The control plane's server group, made beforehand as CAPO users do.
    let group = capo::create_server_group(&os, &format!("{ns}-cp")).await;
    bed.apply(&ns, &capo::cluster_yaml(&SHAPE, &tag, Some(&group)));
    let osm_api = capo::openstack_machines(&client, &ns);
    let osc_api = capo::openstack_clusters(&client, &ns);
    let ready = poll(Duration::from_secs(420), async || {
        let bastion = osc_api
            .get_opt(SHAPE.cluster)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                // With its floating IP: CAPO attaches it in a pass after ACTIVE.
                c.data["status"]["bastion"]["state"] == "ACTIVE"
                    && c.data["status"]["bastion"]["floatingIP"]
                        .as_str()
                        .is_some_and(|ip| !ip.is_empty())
            });
        bastion && capo::machines_ready(&client, &ns, &SHAPE).await
    })
    .await;
    if !ready {
        for m in SHAPE.machines.iter().copied() {
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
        panic!("CAPO did not get every machine Ready");
    }
    let capo_create = cloud::requests_since_by(&capo_mark, &is_capo);
    step(
        started,
        &format!(
            "CAPO: cluster and 3 machines Ready, {} OpenStack requests ({} writes): {capo_create:?}",
            capo_create.values().sum::<u64>(),
            cloud::writes(&capo_create)
        ),
    );
    let capo_pid = capo::manager_pid(&bed.env, "CAPO");
    capo::measured(
        "CAPO",
        "cluster + 3 machines: create to Ready",
        create_started.elapsed().as_secs_f64(),
        &capo_create,
        capo_pid.and_then(capo::proc_usage),
    );
    let capo_made = capo::fingerprint(&os, &ns, &SHAPE, OWNER_KEY).await;
    let before = snapshot(&client, &ns, &SHAPE, &os).await;
    println!("capo takeover: before {before:?}");
    assert!(
        before.cluster_ready,
        "CAPO's cluster is not Ready: {before:?}"
    );
    assert_eq!(
        before.servers.len(),
        SHAPE.machines.len(),
        "servers: {:?}",
        before.servers
    );
    let oss_api = capo::openstack_servers(&client, &ns);
    for m in SHAPE.machines.iter().copied() {
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
    let bastion_server = format!("{}-bastion", SHAPE.cluster);
    let b = oss_api
        .get(&bastion_server)
        .await
        .expect("CAPO's bastion OpenStackServer");
    assert!(
        !b.metadata.finalizers.clone().unwrap_or_default().is_empty(),
        "CAPO's bastion OpenStackServer has no finalizer"
    );

    // CAPO stops; stackhook's CRDs replace CAPO's (README, "Taking over from CAPO").
    let kubeconfig = bed.mgmt.kubeconfig.clone();
    bed.stop_manager("capo-manager");
    capi::replace_with_stackhook_crds(&kubeconfig);
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
            for m in SHAPE.machines.iter().copied() {
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
            let bastion_released = oss_api
                .get_opt(&bastion_server)
                .await
                .ok()
                .flatten()
                .is_some_and(|s| s.metadata.finalizers.clone().unwrap_or_default().is_empty());
            all && bastion_released
        })
        .await;
    assert!(adopted, "stackhook did not adopt CAPO's OpenStackServers");
    step(started, "stackhook adopted every OpenStackServer (ports in the machines' status, CAPO's finalizers released, the bastion's too)");
    // Until stackhook's passes over every object are over: 10 s without a request.
    let settled = kube_server::settle(Duration::from_secs(120), Duration::from_secs(10), || {
        cloud::requests_since(&take_mark, Some(&agent))
            .values()
            .sum()
    })
    .await;
    assert!(settled, "stackhook's requests did not stop within 120 s");
    let takeover = cloud::requests_since(&take_mark, Some(&agent));
    let after = snapshot(&client, &ns, &SHAPE, &os).await;
    step(
        started,
        &format!(
            "takeover: {} OpenStack requests by stackhook, {} writes: {takeover:?}",
            takeover.values().sum::<u64>(),
            cloud::writes(&takeover)
        ),
    );
    capo::measured(
        "stackhook",
        "takeover: start until 10 s without a request",
        0.0,
        &takeover,
        capo::proc_usage(stackhook.child.id()),
    );
    assert!(
        !takeover.is_empty(),
        "stackhook made no OpenStack request at all: did it run?"
    );
    // The bastion's ports, which CAPO v0.14 records in its OpenStackServer, are
    // recorded in the OpenStackCluster's status too.
    if SHAPE.bastion {
        let osc = capo::openstack_clusters(&client, &ns)
            .get(SHAPE.cluster)
            .await
            .expect("OpenStackCluster");
        let ports = &osc.data["status"]["bastion"]["resources"]["ports"];
        let named: Vec<net::Port> = os
            .network
            .list(&[("name", format!("{}-0", SHAPE.names(&ns).bastion_name()))])
            .await
            .unwrap_or_default();
        for l in stackhook.drain_logs() {
            if l["level"] == "WARN" || l["level"] == "ERROR" {
                println!("stackhook: {l}");
            }
        }
        assert!(
            ports.as_array().is_some_and(|p| p
                .iter()
                .any(|p| named.iter().any(|n| p["id"] == n.id.as_str()))),
            "the bastion's port {named:?} is not in status.bastion.resources: {ports}"
        );
    }
    // Everything CAPO made is adopted as it is: CAPO recorded it (in the
    // OpenStackCluster's status, the bastion's ports in its OpenStackServer), so no
    // owner tag is added and nothing else is written, anywhere.
    assert_eq!(
        cloud::writes(&takeover),
        0,
        "the takeover wrote to OpenStack: {takeover:?}"
    );
    // …while the cluster's passes did look: its network and load balancer were read.
    assert!(
        takeover.get("neutron GET").is_some_and(|n| *n > 0)
            && takeover.get("octavia-api GET").is_some_and(|n| *n > 0),
        "no OpenStackCluster pass read the cloud: {takeover:?}"
    );
    assert_eq!(
        before, after,
        "the takeover changed status, Ready, providerIDs or servers"
    );
    assert_eq!(
        capo::fingerprint(&os, &ns, &SHAPE, OWNER_KEY).await,
        capo_made,
        "the takeover changed what CAPO made"
    );

    // The same shape made by stackhook, in a namespace of its own: what it makes in the
    // cloud, field by field, is what CAPO made (IDs as the names of what they name).
    let twin_ns = kube_server::namespace(&client, "twin").await;
    kube_server::identity_secret(
        &client,
        &twin_ns,
        "capo-cloud",
        &openstack_entry(&clouds_yaml),
    )
    .await;
    let twin_tag = format!("takeover-{twin_ns}");
    capo::clear_leftovers(&os, &TWIN).await;
    let twin_group = capo::create_server_group(&os, &format!("{twin_ns}-cp")).await;
    bed.apply(
        &twin_ns,
        &capo::cluster_yaml(&TWIN, &twin_tag, Some(&twin_group)),
    );
    let twin_osc = capo::openstack_clusters(&client, &twin_ns);
    let twin_ready = poll(Duration::from_secs(300), async || {
        let bastion = twin_osc
            .get_opt(TWIN.cluster)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| c.data["status"]["bastion"]["state"] == "ACTIVE");
        bastion && capo::machines_ready(&client, &twin_ns, &TWIN).await
    })
    .await;
    assert!(
        twin_ready,
        "stackhook's twin of CAPO's cluster did not get Ready"
    );
    let stackhook_made = capo::fingerprint(&os, &twin_ns, &TWIN, OWNER_KEY).await;
    let mut found = Vec::new();
    capo::differences(&capo_made, &stackhook_made, "", &mut found);
    // Documented: stackhook describes the API's and the bastion's floating IPs apart
    // (" kubeapi", " bastion" after CAPO's text), so that one whose create answer was
    // lost is found again by its description and never taken for the other.
    let documented = |(at, capo, ours): &(String, serde_json::Value, serde_json::Value)| {
        at.ends_with("/floating IPs/0")
            && [" kubeapi", " bastion"].iter().any(|suffix| {
                capo.as_str()
                    .is_some_and(|c| ours.as_str() == Some(&format!("{c}{suffix}")))
            })
    };
    let differ: Vec<String> = found
        .iter()
        .filter(|d| !documented(d))
        .map(|(at, capo, ours)| format!("{at}: {capo} vs {ours}"))
        .collect();
    step(
        started,
        &format!(
            "the same shape made by stackhook: {} differences from CAPO's, {} of them documented",
            found.len(),
            found.len() - differ.len()
        ),
    );
    assert!(
        differ.is_empty(),
        "stackhook made the shape unlike CAPO (CAPO's value first):\n{}\nCAPO: {capo_made:#}\nstackhook: {stackhook_made:#}",
        differ.join("\n")
    );
    let twin_clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &twin_ns, &capi::clusters(V1_13));
    twin_clusters
        .delete(TWIN.cluster, &DeleteParams::default())
        .await
        .expect("delete the twin Cluster");

    // After the takeover, a worker CAPO made goes (its server, port and additional
    // volume with it) and a new one comes, both under stackhook.
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi::machines(V1_13));
    let gone_worker = SHAPE.machines[2];
    machines
        .delete(gone_worker, &DeleteParams::default())
        .await
        .expect("delete a worker Machine");
    let worker_gone = poll(Duration::from_secs(180), async || {
        matches!(osm_api.get_opt(gone_worker).await, Ok(None))
    })
    .await;
    assert!(
        worker_gone,
        "{gone_worker}'s OpenStackMachine was not deleted"
    );
    {
        use stackhook_openstack::blockstorage::{BlockStorage, VolumeFilter};
        let port: Vec<net::Port> = os
            .network
            .list(&[("name", format!("{gone_worker}-0"))])
            .await
            .expect("ports");
        let data = os
            .block_storage
            .volumes(&VolumeFilter::named(&format!("{gone_worker}-data")))
            .await
            .expect("volumes");
        let servers = capo::servers(&os, &SHAPE).await;
        assert!(
            port.is_empty() && !servers.iter().any(|s| s.starts_with(gone_worker)),
            "{gone_worker}: port {port:?} or server in {servers:?} left"
        );
        // Nova deletes a volume it attached with delete_on_termination; allow it time.
        let mut data = data;
        for _ in 0..30 {
            if data.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            data = os
                .block_storage
                .volumes(&VolumeFilter::named(&format!("{gone_worker}-data")))
                .await
                .expect("volumes");
        }
        assert!(
            data.is_empty(),
            "{gone_worker}'s data volume left: {data:?}"
        );
    }
    let new_worker = "capo-worker-2";
    let labels = json!({"cluster.x-k8s.io/cluster-name": SHAPE.cluster});
    let docs = [
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{new_worker}-bootstrap"), "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": "#cloud-config\n", "format": "cloud-config"}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": new_worker, "labels": labels},
            "spec": {"flavor": "m1.tiny", "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": new_worker, "labels": labels},
            "spec": {"clusterName": SHAPE.cluster, "version": "v1.33.1",
                     "bootstrap": {"dataSecretName": format!("{new_worker}-bootstrap")},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                         "kind": "OpenStackMachine", "name": new_worker}}}),
    ];
    let yaml = docs
        .iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    bed.apply(&ns, &yaml);
    let new_ready = poll(Duration::from_secs(180), async || {
        osm_api
            .get_opt(new_worker)
            .await
            .ok()
            .flatten()
            .is_some_and(|o| {
                o.data["spec"]["providerID"].is_string() && capi::condition_true(&o.data, "Ready")
            })
    })
    .await;
    assert!(new_ready, "{new_worker} got no server under stackhook");
    step(
        started,
        &format!("{gone_worker} deleted (server, port, volume gone); {new_worker} ACTIVE"),
    );

    // Deleting the Cluster: nothing of it is left in the cloud.
    let delete_mark = cloud::access_mark();
    let delete_started = Instant::now();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi::clusters(V1_13));
    clusters
        .delete(SHAPE.cluster, &DeleteParams::default())
        .await
        .expect("delete Cluster");
    let gone = poll(Duration::from_secs(300), async || {
        clusters
            .get_opt(SHAPE.cluster)
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
    capo::measured(
        "stackhook",
        "cluster + 3 machines: delete",
        delete_started.elapsed().as_secs_f64(),
        &deleted,
        capo::proc_usage(stackhook.child.id()),
    );
    step(
        started,
        &format!(
            "cluster deleted: {} OpenStack requests by stackhook ({} writes)",
            deleted.values().sum::<u64>(),
            cloud::writes(&deleted)
        ),
    );
    let twin_gone = poll(Duration::from_secs(120), async || {
        twin_clusters
            .get_opt(TWIN.cluster)
            .await
            .ok()
            .is_some_and(|c| c.is_none())
    })
    .await;
    assert!(twin_gone, "the twin Cluster was not deleted");
    // Nova deletes the volumes it attached with delete_on_termination after the
    // servers: allow it time.
    let mut twin_left = leftovers(&os, &twin_ns, &TWIN, &twin_tag).await;
    for _ in 0..60 {
        if twin_left.values().all(|n| *n == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        twin_left = leftovers(&os, &twin_ns, &TWIN, &twin_tag).await;
    }
    assert!(
        twin_left.values().all(|n| *n == 0),
        "the twin left in the cloud: {twin_left:?}"
    );
    {
        use stackhook_openstack::compute::Compute;
        let _ = os.compute.delete_server_group(&twin_group).await;
    }
    let left = leftovers(&os, &ns, &SHAPE, &tag).await;
    {
        use stackhook_openstack::compute::Compute;
        let extra = os
            .compute
            .servers_named("^capo-worker-2$")
            .await
            .expect("servers");
        assert!(extra.is_empty(), "capo-worker-2's server left: {extra:?}");
    }
    println!("capo takeover: left in the cloud {left:?}");
    assert!(
        left.values().all(|n| *n == 0),
        "left in the cloud: {left:?}"
    );
    {
        use stackhook_openstack::compute::Compute;
        os.compute
            .delete_server_group(&group)
            .await
            .expect("deleting the user's server group");
    }
    bed.keep_logs("capo-takeover");
    drop(stackhook);
}

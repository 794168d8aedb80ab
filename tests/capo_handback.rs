//! Handing a cluster back to CAPO: `stackhook serve --controllers` creates a cluster
//! and its machines in the loopback cloud under the real CAPI core manager; stackhook
//! stops, CAPO's CRDs go back in and the real `capo-manager` (v0.14, from the
//! project's `shared/capi` folder) starts, as `deploy/README.md` ("Back to CAPO")
//! says. CAPO must take the cluster as it is: no second server, port or network,
//! the same IDs and providerIDs, `Ready` kept; then delete it.
//!
//! The cluster carries what CAPO cannot know: the port stackhook reserves the API
//! address with (`apiServerFixedIP`, no load balancer) and the control plane's server
//! group (`spec.extensions.serverGroupPolicy`), plus the `<cluster>-bootstrap-vars`
//! Secret. The test asserts exactly what of them stays behind once CAPO has deleted
//! the cluster, which is what the runbook tells an operator to remove.
//!
//! Skips in one line where `shared/` or the test cloud is absent.
//! `cargo test --test with_capi capo_handback:: -- --nocapture` prints each phase and its
//! request counts.

use crate::capi;
use crate::capo;
use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::server;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject};

use capi::{condition_true, Bed, V1_13};
use capo::{is_capo, leftovers, openstack_entry, poll, snapshot, Shape};
use server::Server;
use stackhook_openstack::networking::{self as net, Networking};

const SHAPE: Shape = Shape {
    cluster: "back",
    machines: &["back-cp-0", "back-worker-0"],
    cidr: "10.78.0.0/24",
    fixed_ip: Some("10.78.0.250"),
    server_group_policy: Some("soft-anti-affinity"),
    load_balancer: false,
    volumes: false,
    bastion: false,
};

fn step(started: Instant, what: &str) {
    println!(
        "capo handback: {what} ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capo_takes_back_a_cluster_stackhook_made_without_duplicates() {
    let _one = capi::ONE_BED.lock().await;
    let _capo = capo::one_capo_at_a_time().await;
    let Some(clouds_path) = cloud::clouds_yaml() else {
        println!("skipping capo handback: no test cloud");
        return;
    };
    let mut bed = match tokio::task::spawn_blocking(|| {
        Bed::start_managers(V1_13, &capi::install_stackhook_crds, &["capi"])
    })
    .await
    .expect("bed")
    {
        Ok(b) => b,
        Err(why) => {
            println!("skipping capo handback: {why}");
            return;
        }
    };
    let started = Instant::now();
    step(started, "CAPI core running, stackhook's CRDs installed");
    let client = bed.client().await;
    let ns = kube_server::namespace(&client, "handback").await;
    let clouds_yaml = std::fs::read_to_string(&clouds_path).expect("clouds.yaml");
    kube_server::identity_secret(&client, &ns, "capo-cloud", &openstack_entry(&clouds_yaml)).await;
    let os = infra::checker(clouds_yaml.as_bytes(), cloud::MEMBER);
    let tag = format!("handback-{ns}");
    capo::clear_leftovers(&os, &SHAPE).await;
    let names = SHAPE.names(&ns);

    // stackhook creates the cluster.
    let kubeconfig = bed.mgmt.kubeconfig.clone();
    let kc = kubeconfig.display().to_string();
    let agent = format!("stackhook-capo-handback-{}", std::process::id());
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
    let create_mark = cloud::access_mark();
    let create_started = Instant::now();
    bed.apply(&ns, &capo::cluster_yaml(&SHAPE, &tag, None));
    let ready = poll(Duration::from_secs(240), async || {
        capo::machines_ready(&client, &ns, &SHAPE).await
    })
    .await;
    if !ready {
        for l in stackhook.drain_logs() {
            if l["level"] == "WARN" || l["level"] == "ERROR" {
                println!("stackhook: {l}");
            }
        }
        panic!("stackhook did not get both machines Ready");
    }
    capo::measured(
        "stackhook",
        "cluster + 2 machines: create to Ready",
        create_started.elapsed().as_secs_f64(),
        &cloud::requests_since(&create_mark, Some(&agent)),
        capo::proc_usage(stackhook.child.id()),
    );
    let before = snapshot(&client, &ns, &SHAPE, &os).await;
    println!("capo handback: before {before:?}");
    assert!(before.cluster_ready, "not Ready: {before:?}");
    assert_eq!(before.servers.len(), 2, "servers: {:?}", before.servers);
    // What CAPO does not know of, present before the switch.
    let vip_ports: Vec<net::Port> = os
        .network
        .list(&[("name", names.api_vip_port_name())])
        .await
        .expect("ports");
    assert_eq!(
        vip_ports.len(),
        1,
        "stackhook's API VIP port: {vip_ports:?}"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let vars_name = stackhook::infra::bootstrap::secret_name(SHAPE.cluster);
    let vars = secrets
        .get(&vars_name)
        .await
        .expect("bootstrap-vars Secret");
    let owners = vars.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "OpenStackCluster" && o.name == SHAPE.cluster),
        "the bootstrap-vars Secret is owned by the OpenStackCluster (GC removes it): {owners:?}"
    );
    let left = leftovers(&os, &ns, &SHAPE, &tag).await;
    assert_eq!(
        left["server groups (name)"], 1,
        "the control plane's server group: {left:?}"
    );
    step(started, "stackhook: cluster and 2 machines Ready");

    // stackhook stops; CAPO's CRDs and CAPO start (deploy/README.md, "Back to CAPO").
    drop(stackhook);
    let capo_mark = cloud::access_mark();
    tokio::task::block_in_place(|| bed.start_manager("capo"));
    step(
        started,
        "stackhook stopped; CAPO's CRDs in place, CAPO running",
    );

    // CAPO makes an OpenStackServer per machine and finds the servers stackhook made.
    let oss_api = capo::openstack_servers(&client, &ns);
    let osm_api = capo::openstack_machines(&client, &ns);
    let adopted = poll(Duration::from_secs(180), async || {
        let mut all = true;
        for m in SHAPE.machines.iter().copied() {
            all &= oss_api.get_opt(m).await.ok().flatten().is_some_and(|s| {
                s.data["status"]["instanceID"].is_string() && s.data["status"]["ready"] == true
            });
        }
        all
    })
    .await;
    if !adopted {
        for m in SHAPE.machines.iter().copied() {
            let s = oss_api
                .get_opt(m)
                .await
                .ok()
                .flatten()
                .map(|o| o.data["status"].clone());
            let o = osm_api
                .get_opt(m)
                .await
                .ok()
                .flatten()
                .map(|o| o.data["status"].clone());
            println!("{m}: OpenStackServer {s:?}\n{m}: OpenStackMachine {o:?}");
        }
        bed.keep_logs("capo-handback");
        panic!("CAPO did not take both machines' servers");
    }
    step(started, "CAPO: an OpenStackServer per machine, ready");
    // Until CAPO's passes over every object are over: 10 s without a request.
    let settled = kube_server::settle(Duration::from_secs(120), Duration::from_secs(10), || {
        cloud::requests_since_by(&capo_mark, &is_capo)
            .values()
            .sum()
    })
    .await;
    assert!(settled, "CAPO's requests did not stop within 120 s");
    let taken = cloud::requests_since_by(&capo_mark, &is_capo);
    let after = snapshot(&client, &ns, &SHAPE, &os).await;
    step(
        started,
        &format!(
            "CAPO took the cluster: {} OpenStack requests ({} writes): {taken:?}",
            taken.values().sum::<u64>(),
            cloud::writes(&taken)
        ),
    );
    let capo_pid = capo::manager_pid(&bed.env, "CAPO");
    capo::measured(
        "CAPO",
        "hand-back: start until 10 s without a request",
        0.0,
        &taken,
        capo_pid.and_then(capo::proc_usage),
    );
    assert!(
        !taken.is_empty(),
        "CAPO made no OpenStack request: did it run?"
    );
    assert_eq!(
        before, after,
        "CAPO changed status IDs, Ready, providerIDs or servers"
    );
    for m in SHAPE.machines.iter().copied() {
        let s = oss_api.get(m).await.expect("OpenStackServer");
        assert_eq!(
            s.data["status"]["instanceID"].as_str(),
            Some(before.machines[m].0.as_str()),
            "CAPO's OpenStackServer {m} names another server"
        );
        let ports: Vec<net::Port> = os
            .network
            .list(&[("name", format!("{m}-0")), ("tags", tag.clone())])
            .await
            .expect("ports");
        assert_eq!(ports.len(), 1, "{m}'s port, once: {ports:?}");
    }
    let nets: Vec<net::Network> = os
        .network
        .list(&[("name", names.network_name())])
        .await
        .expect("networks");
    assert_eq!(nets.len(), 1, "one cluster network: {nets:?}");
    // Neither a server nor a port nor a network created: Nova and Neutron POSTs are
    // creates (Nova's server actions are POSTs too, and CAPO sends none here).
    for create in ["nova POST", "neutron POST"] {
        assert_eq!(
            taken.get(create).copied().unwrap_or(0),
            0,
            "CAPO created something: {taken:?}"
        );
    }
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi::clusters(V1_13));
    let osc = capo::openstack_clusters(&client, &ns)
        .get(SHAPE.cluster)
        .await
        .expect("OpenStackCluster");
    assert!(
        condition_true(&osc.data, "Ready") || osc.data["status"]["ready"] == true,
        "CAPO's OpenStackCluster is not Ready: {}",
        osc.data["status"]
    );

    // The operator's step before deleting under CAPO (runbook): the API VIP port is
    // stackhook's, and Neutron refuses to delete a network with a port on it.
    for p in &vip_ports {
        os.network
            .delete::<net::Port>(&p.id)
            .await
            .expect("deleting the API VIP port");
    }
    let delete_mark = cloud::access_mark();
    let delete_started = Instant::now();
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
    let deleted = cloud::requests_since_by(&delete_mark, &is_capo);
    if !gone {
        bed.keep_logs("capo-handback");
        let osc = capo::openstack_clusters(&client, &ns)
            .get_opt(SHAPE.cluster)
            .await
            .ok()
            .flatten()
            .map(|o| o.data["status"].clone());
        println!("OpenStackCluster: {osc:?}");
    }
    assert!(gone, "CAPO did not delete the Cluster");
    capo::measured(
        "CAPO",
        "cluster + 2 machines: delete",
        delete_started.elapsed().as_secs_f64(),
        &deleted,
        capo_pid.and_then(capo::proc_usage),
    );
    step(
        started,
        &format!(
            "CAPO deleted the cluster: {} OpenStack requests ({} writes)",
            deleted.values().sum::<u64>(),
            cloud::writes(&deleted)
        ),
    );
    // Exactly what the runbook says stays: the control plane's server group.
    let left = leftovers(&os, &ns, &SHAPE, &tag).await;
    println!("capo handback: left in the cloud {left:?}");
    let expected: BTreeMap<String, usize> = left
        .keys()
        .map(|k| {
            let n = usize::from(k == "server groups (name)");
            (k.clone(), n)
        })
        .collect();
    assert_eq!(left, expected, "left in the cloud");
    for g in os_groups(&os).await {
        stackhook_openstack::compute::Compute::delete_server_group(&os.compute, &g)
            .await
            .expect("deleting the server group");
    }
    bed.keep_logs("capo-handback");
}

/// IDs of the hand-back cluster's control-plane server groups.
async fn os_groups(os: &stackhook_openstack::Clients) -> Vec<String> {
    use stackhook_openstack::compute::Compute;
    let name = format!("{}-control-plane", SHAPE.cluster);
    os.compute
        .server_groups()
        .await
        .expect("server groups")
        .into_iter()
        .filter(|g| g.name == name)
        .map(|g| g.id)
        .collect()
}

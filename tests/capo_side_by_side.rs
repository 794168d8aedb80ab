//! Memory and CPU of CAPO's controller manager and of `stackhook serve --controllers`
//! side by side, for BENCHMARKS.md: both run at once against one real API server
//! (with CAPI's and CAPO's CRDs), first with nothing to watch, then with 100 paused
//! Clusters of one OpenStackCluster and 3 OpenStackMachines each. Paused, so that
//! neither controller acts on them or on the cloud, and both only list, watch and
//! cache them: what an idle management cluster costs each.
//!
//! A second benchmark has each controller build, keep and delete the same cluster in
//! the loopback cloud, one after the other, and counts their OpenStack requests per
//! phase from the cloud's access logs.
//!
//! Benchmarks, not run by `cargo test`:
//! `cargo test --release --test with_capi capo_side_by_side:: -- --ignored --nocapture --test-threads=1`.

use crate::capi;
use crate::capo;
use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::server;

use std::time::Duration;

use serde_json::json;

use capi::{Bed, V1_13};
use server::Server;

const CLUSTERS: usize = 100;
const MACHINES: usize = 3;
const SETTLE: Duration = Duration::from_secs(60);

fn objects(ns: &str) -> String {
    let _ = ns;
    let mut docs = Vec::new();
    for c in 0..CLUSTERS {
        let cluster = format!("idle-{c:03}");
        let paused = json!({"cluster.x-k8s.io/paused": ""});
        let labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        docs.push(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster},
            "spec": {"paused": true,
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                         "kind": "OpenStackCluster", "name": cluster}}}),
        );
        docs.push(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": cluster, "labels": labels, "annotations": paused},
            "spec": {"identityRef": {"type": "Secret", "name": "cloud", "cloudName": "openstack"},
                     "managedSubnets": [{"cidr": "10.6.0.0/24"}],
                     "managedSecurityGroups": {"allowAllInClusterTraffic": true},
                     "apiServerLoadBalancer": {"enabled": true},
                     "externalNetwork": {"id": "00000000-0000-0000-0000-000000000000"}}}));
        for m in 0..MACHINES {
            docs.push(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
                "metadata": {"name": format!("{cluster}-m{m}"), "labels": labels, "annotations": paused},
                "spec": {"flavor": "m1.small",
                         "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}},
                         "sshKeyName": "ops"}}));
        }
    }
    docs.iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn usage_line(who: &str, what: &str, now: Option<(u64, f64)>, before: Option<(u64, f64)>) {
    let (Some((rss, cpu)), Some((_, cpu0))) = (now, before) else {
        println!("side-by-side: {who} | {what} | no /proc figures");
        return;
    };
    println!(
        "side-by-side: {who} | {what} | RSS {:.1} MiB | CPU {:.2} s in the last {} s | {cpu:.2} s since start",
        rss as f64 / 1024.0,
        cpu - cpu0,
        SETTLE.as_secs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored"]
async fn memory_and_cpu_of_capo_and_stackhook_watching_the_same_objects() {
    let _one = capi::ONE_BED.lock().await;
    let _capo = capo::one_capo_at_a_time().await;
    let bed =
        match tokio::task::spawn_blocking(|| Bed::start_managers(V1_13, &|_| Ok(()), &["capo"]))
            .await
            .expect("bed")
        {
            Ok(b) => b,
            Err(why) => {
                println!("skipping: {why}");
                return;
            }
        };
    let kc = bed.mgmt.kubeconfig.display().to_string();
    let stackhook = Server::start_with_env(
        &[
            "--controllers",
            "--kubeconfig",
            &kc,
            "--capi-version",
            V1_13.flag,
        ],
        &[("RUST_LOG", Some("info"))],
    );
    let capo_pid = capo::manager_pid(&bed.env, "CAPO").expect("CAPO's PID");
    let ours = stackhook.child.id();

    let (c0, s0) = (capo::proc_usage(capo_pid), capo::proc_usage(ours));
    tokio::time::sleep(SETTLE).await;
    let (c1, s1) = (capo::proc_usage(capo_pid), capo::proc_usage(ours));
    usage_line("CAPO", "idle, nothing to watch", c1, c0);
    usage_line("stackhook", "idle, nothing to watch", s1, s0);

    let client = bed.client().await;
    let ns = kube_server::namespace(&client, "idle").await;
    bed.apply(&ns, &objects(&ns));
    // Both list and watch; give each time to take every object into its cache.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (c2, s2) = (capo::proc_usage(capo_pid), capo::proc_usage(ours));
    tokio::time::sleep(SETTLE).await;
    let (c3, s3) = (capo::proc_usage(capo_pid), capo::proc_usage(ours));
    let what =
        format!("{CLUSTERS} paused clusters x (1 OpenStackCluster + {MACHINES} OpenStackMachines)");
    usage_line("CAPO", &what, c3, c2);
    usage_line("stackhook", &what, s3, s2);
    assert!(
        c3.is_some() && s3.is_some(),
        "a controller exited: CAPO {c3:?}, stackhook {s3:?}"
    );
    drop(stackhook);
}

/// The cluster both controllers build, one after the other: the takeover test's shape
/// (API load balancer with a floating IP, managed subnet and security groups, a
/// control-plane machine in a server group, a worker on a root volume, a worker with
/// an additional volume).
const SAME: capo::Shape = capo::Shape {
    cluster: "sbs",
    machines: &["sbs-cp-0", "sbs-worker-0", "sbs-worker-1"],
    cidr: "10.79.0.0/24",
    fixed_ip: None,
    server_group_policy: None,
    load_balancer: true,
    volumes: true,
    bastion: false,
};

/// One controller's life of [`SAME`] in a new namespace: create → every machine
/// Ready, a minute of steady state, delete → gone. Prints a `side-by-side:` line per
/// phase with the cloud's request counts for `agent`.
async fn one_life(bed: &Bed, who: &str, agent: &dyn Fn(&str) -> bool, pid: u32, group: &str) {
    use kube::api::{Api, DeleteParams, DynamicObject};
    let client = bed.client().await;
    let ns = kube_server::namespace(&client, &format!("sbs-{}", who.to_lowercase())).await;
    let clouds_path = cloud::clouds_yaml().expect("test cloud");
    let clouds_yaml = std::fs::read_to_string(&clouds_path).expect("clouds.yaml");
    kube_server::identity_secret(
        &client,
        &ns,
        "capo-cloud",
        &capo::openstack_entry(&clouds_yaml),
    )
    .await;
    let tag = format!("sbs-{ns}");

    let mark = cloud::access_mark();
    let (t, cpu0) = (std::time::Instant::now(), capo::proc_usage(pid));
    bed.apply(&ns, &capo::cluster_yaml(&SAME, &tag, Some(group)));
    let ready = capo::poll(Duration::from_secs(420), async || {
        capo::machines_ready(&client, &ns, &SAME).await
    })
    .await;
    if !ready {
        for ar in [
            capi::infra("OpenStackCluster", "openstackclusters"),
            capi::infra("OpenStackMachine", "openstackmachines"),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            for o in api
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                println!(
                    "{} {}: {}",
                    ar.kind,
                    o.metadata.name.unwrap_or_default(),
                    o.data["status"]
                );
            }
        }
    }
    assert!(ready, "{who}: the machines did not get Ready");
    let now = capo::proc_usage(pid);
    capo::measured(
        who,
        "create → 3 machines Ready",
        t.elapsed().as_secs_f64(),
        &cloud::requests_since_by(&mark, agent),
        now,
    );
    usage_line(who, "create", now, cpu0);

    let mark = cloud::access_mark();
    let cpu0 = capo::proc_usage(pid);
    tokio::time::sleep(SETTLE).await;
    let now = capo::proc_usage(pid);
    capo::measured(
        who,
        "steady state, 60 s",
        SETTLE.as_secs_f64(),
        &cloud::requests_since_by(&mark, agent),
        now,
    );
    usage_line(who, "steady state", now, cpu0);

    let mark = cloud::access_mark();
    let (t, cpu0) = (std::time::Instant::now(), capo::proc_usage(pid));
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi::clusters(V1_13));
    clusters
        .delete(SAME.cluster, &DeleteParams::default())
        .await
        .expect("delete Cluster");
    let gone = capo::poll(Duration::from_secs(300), async || {
        clusters
            .get_opt(SAME.cluster)
            .await
            .ok()
            .is_some_and(|c| c.is_none())
    })
    .await;
    assert!(gone, "{who}: the Cluster was not deleted");
    let now = capo::proc_usage(pid);
    capo::measured(
        who,
        "delete → gone",
        t.elapsed().as_secs_f64(),
        &cloud::requests_since_by(&mark, agent),
        now,
    );
    usage_line(who, "delete", now, cpu0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored"]
async fn calls_and_time_of_capo_and_stackhook_on_the_same_cluster() {
    let _one = capi::ONE_BED.lock().await;
    let _capo = capo::one_capo_at_a_time().await;
    if cloud::clouds_yaml().is_none() {
        println!("skipping: no test cloud");
        return;
    }
    let bed = match tokio::task::spawn_blocking(|| {
        Bed::start_managers(V1_13, &|_| Ok(()), &["capi", "capo"])
    })
    .await
    .expect("bed")
    {
        Ok(b) => b,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    let clouds_path = cloud::clouds_yaml().expect("test cloud");
    let clouds_yaml = std::fs::read_to_string(&clouds_path).expect("clouds.yaml");
    let os = infra::checker(clouds_yaml.as_bytes(), cloud::MEMBER);
    capo::clear_leftovers(&os, &SAME).await;
    let group = capo::create_server_group(&os, "sbs-cp").await;

    let capo_pid = capo::manager_pid(&bed.env, "CAPO").expect("CAPO's PID");
    one_life(&bed, "CAPO", &capo::is_capo, capo_pid, &group).await;

    // CAPO out, stackhook in, as in the takeover runbook.
    bed.stop_manager("capo-manager");
    capi::replace_with_stackhook_crds(&bed.mgmt.kubeconfig);
    let agent = format!("stackhook-sbs-{}", std::process::id());
    let kc = bed.mgmt.kubeconfig.display().to_string();
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
    let ours = stackhook.child.id();
    one_life(&bed, "stackhook", &|ua: &str| ua == agent, ours, &group).await;
    drop(stackhook);
    {
        use stackhook_openstack::compute::Compute;
        let _ = os.compute.delete_server_group(&group).await;
    }
}

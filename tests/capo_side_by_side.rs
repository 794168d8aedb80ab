//! Memory and CPU of CAPO's controller manager and of `stackhook serve --controllers`
//! side by side, for BENCHMARKS.md: both run at once against one real API server
//! (with CAPI's and CAPO's CRDs), first with nothing to watch, then with 100 paused
//! Clusters of one OpenStackCluster and 3 OpenStackMachines each. Paused, so that
//! neither controller acts on them or on the cloud, and both only list, watch and
//! cache them: what an idle management cluster costs each.
//!
//! A benchmark, not run by `cargo test`:
//! `cargo test --release --test capo_side_by_side -- --ignored --nocapture`.

#[path = "support/capi.rs"]
mod capi;
#[path = "support/capo.rs"]
mod capo;
#[path = "support/cloud.rs"]
mod cloud;
#[path = "support/kube.rs"]
mod kube_server;
#[path = "support/server.rs"]
mod server;

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
        &[("RUST_LOG", Some("warn"))],
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

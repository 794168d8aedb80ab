//! The lifecycle hooks that act on the cloud, through the real binary over HTTPS,
//! with a real API server (tests/support/kube.rs) and the loopback cloud
//! (tests/support/cloud.rs); skipped with one line when either is missing.
//!
//! - Upgrade preflight, answered by the replica that does not lead (it reads its
//!   own watch): passes for a version Glance has an image for, blocks for one it
//!   has not; with the project's Nova and Neutron quotas lowered (a project of the
//!   test's own, so other tests sharing the cloud are not affected) it blocks with
//!   the numbers, and passes again once they are restored.
//! - BeforeClusterCreate, on the same replica and project, for a Cluster of a
//!   ClusterClass the openstack-v1 pack validates: held while its variables name an
//!   image Glance has not (the variable and image in the message), then let go once
//!   fixed; held with the numbers while the lowered quotas cannot hold its first
//!   machines; let through with a note when its class cannot be read.
//! - BeforeClusterDelete: a Magnum-shaped cluster A in `magnum-system` (application
//!   credential, cloud `default`, `cluster-uuid` label) and a cluster B in the same
//!   project each have a cloud-provider load balancer and a CSI volume; the hook for
//!   A blocks while it deletes A's, then answers Success; B's are untouched.
//!
//! `cargo test --test with_cloud cloud_hooks:: -- --nocapture` prints `BENCH` lines with the
//! hook latencies and how long the cloud work took.

use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::replica;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::Client;
use replica::{capi_cluster, ms, Replica};
use reqwest::Method;
use serde_json::{json, Value};
use stackhook::hooks::openstack::cleanup::{self, Pace};
use stackhook::hooks::openstack::jobs::Progress;
use stackhook::hooks::openstack::preflight;
use stackhook::infra::api::{OpenStackCluster, OpenStackMachine};
use stackhook::infra::bootstrap::MachineFacts;
use stackhook::sdk::lifecycle::{LifecycleEvent, UpgradeVersions};
use stackhook::sdk::Hook;
use stackhook_openstack::blockstorage::{BlockStorage, Volume, VolumeCreate};
use stackhook_openstack::compute::Compute;
use stackhook_openstack::image::Images;
use stackhook_openstack::loadbalancing::{LoadBalancer, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::Clients;

/// The API server and the cloud's clouds.yaml, or `None` after one line saying why.
fn environment() -> Option<(kube_server::ApiServer, Vec<u8>)> {
    let clouds = cloud::clouds_yaml()?;
    match kube_server::api_server() {
        Ok(api) => Some((api, std::fs::read(clouds).expect("clouds.yaml"))),
        Err(why) => {
            eprintln!("skipping: no API server: {why}");
            None
        }
    }
}

/// Our CRDs (CAPI's are not needed: the hooks read the Cluster from the request).
pub(crate) async fn crds(client: &Client) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .expect("stackhook crds");
    assert!(out.status.success());
    let docs = kube_server::yaml_documents(&String::from_utf8(out.stdout).unwrap());
    kube_server::apply_crds(client, &docs).await;
}

/// An OpenStackCluster the controllers leave alone (CAPI has not set an owner),
/// which is all the hooks need.
async fn osc(client: &Client, ns: &str, name: &str, secret: &str, cloud: &str) {
    let api: Api<OpenStackCluster> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"identityRef": {"type": "Secret", "name": secret, "cloudName": cloud}}
        }))
        .unwrap(),
    )
    .await
    .expect("OpenStackCluster");
}

async fn osm(client: &Client, ns: &str, name: &str, labels: Value, flavor: &str) {
    let api: Api<OpenStackMachine> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"flavor": flavor, "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}}
        }))
        .unwrap(),
    )
    .await
    .expect("OpenStackMachine");
}

/// One admin request; panics on failure.
async fn admin_call(
    admin: &Clients,
    method: Method,
    service: &str,
    path: &str,
    body: Option<Value>,
) -> Option<Value> {
    admin
        .session
        .request(
            method.clone(),
            &[service],
            path,
            &[],
            body.as_ref(),
            &vec![],
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {service} {path}: {e}"))
}

/// A project with one member user, for a test that changes quotas.
struct Project {
    id: String,
    user_id: String,
    clouds_yaml: String,
}

async fn project(admin: &Clients, auth_url: &str, name: &str) -> Project {
    let p = admin_call(
        admin,
        Method::POST,
        "identity",
        "/v3/projects",
        Some(json!({"project": {"name": name, "domain_id": "default"}})),
    )
    .await
    .unwrap();
    let id = p["project"]["id"].as_str().unwrap().to_string();
    let password = format!("pw-{}", std::process::id());
    let u = admin_call(
        admin,
        Method::POST,
        "identity",
        "/v3/users",
        Some(
            json!({"user": {"name": name, "domain_id": "default", "password": password,
                             "default_project_id": id}}),
        ),
    )
    .await
    .unwrap();
    let user_id = u["user"]["id"].as_str().unwrap().to_string();
    let roles = admin_call(
        admin,
        Method::GET,
        "identity",
        "/v3/roles?name=member",
        None,
    )
    .await
    .unwrap();
    let role = roles["roles"][0]["id"]
        .as_str()
        .expect("member role")
        .to_string();
    admin_call(
        admin,
        Method::PUT,
        "identity",
        &format!("/v3/projects/{id}/users/{user_id}/roles/{role}"),
        None,
    )
    .await;
    let clouds_yaml = format!(
        "clouds:\n  openstack:\n    region_name: RegionOne\n    interface: public\n    \
         identity_api_version: 3\n    auth:\n      auth_url: {auth_url}\n      username: {name}\n      \
         password: {password}\n      project_name: {name}\n      user_domain_name: Default\n      \
         project_domain_name: Default\n"
    );
    Project {
        id,
        user_id,
        clouds_yaml,
    }
}

async fn drop_project(admin: &Clients, p: &Project) {
    for path in [
        format!("/v3/users/{}", p.user_id),
        format!("/v3/projects/{}", p.id),
    ] {
        if let Err(e) = admin
            .session
            .request(Method::DELETE, &["identity"], &path, &[], None, &vec![])
            .await
        {
            eprintln!("DELETE {path}: {e}");
        }
    }
}

fn upgrade(cluster: &Value, to: &str) -> Value {
    json!({"cluster": cluster, "fromKubernetesVersion": "v1.33.1", "toKubernetesVersion": to})
}

const RUNNING: &[&str] = &["checking OpenStack", "first list of OpenStackClusters"];

/// A ClusterClass validated by the openstack-v1 pack, as the shipped classes are.
async fn cluster_class(client: &Client, ns: &str, name: &str) {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "ClusterClass");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterclasses");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let template = |kind: &str, group: &str| json!({"templateRef": {"apiVersion": group, "kind": kind, "name": format!("{name}-x")}});
    let class: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "infrastructure": template("OpenStackClusterTemplate", "infrastructure.cluster.x-k8s.io/v1beta1"),
            "controlPlane": template("KubeadmControlPlaneTemplate", "controlplane.cluster.x-k8s.io/v1beta2"),
            "patches": [{"name": "openstack", "external": {
                "generatePatchesExtension": "openstack-v1-generate-patches.stackhook",
                "validateTopologyExtension": "openstack-v1-validate-topology.stackhook",
                "discoverVariablesExtension": "openstack-v1-discover-variables.stackhook"}}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &class)
        .await
        .expect("ClusterClass");
}

/// A new Cluster of `class` as BeforeClusterCreate carries it: 3 control-plane
/// machines of m1.small booting `cp_image`, 2 workers of m1.medium.
fn new_cluster(ns: &str, class: &str, cp_image: &str) -> Value {
    let image = |name: &str| json!({"name": name});
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "fresh", "namespace": ns, "uid": "uid-fresh"},
        "spec": {"topology": {"classRef": {"name": class}, "version": "v1.33.1",
            "variables": [
                {"name": "openstackCluster", "value": {"identity": {"secretName": "creds", "cloudName": "openstack"}}},
                {"name": "openstackControlPlane", "value": {"flavor": "m1.small", "image": image(cp_image)}},
                {"name": "openstackWorker", "value": {"flavor": "m1.medium", "image": image("ubuntu-2404-kube-v1.33.1")}}],
            "controlPlane": {"replicas": 3},
            "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 2}]}}}
    })
}

/// BeforeClusterCreate for `cluster`, asked until it is no longer running.
async fn create_answer(r: &Replica, cluster: &Value) -> Value {
    let seen = r
        .settle(
            "BeforeClusterCreate",
            "before-cluster-create",
            &json!({"cluster": cluster}),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    seen.last().unwrap().0.clone()
}

#[test]
fn upgrade_preflight_checks_images_and_quota_from_a_replica_that_does_not_lead() {
    let Some((api, clouds_yaml)) = environment() else {
        return;
    };
    infra::runtime().block_on(async {
        let client = api.client().await;
        crds(&client).await;
        // BeforeClusterCreate reads the Cluster's ClusterClass.
        kube_server::apply_crds(&client, &api.capi_crds("cluster-api-v1.13.5")).await;
        let admin = infra::checker(&clouds_yaml, cloud::ADMIN);
        let auth_url = cloud::entry(cloud::ADMIN).unwrap().auth_url;
        let name = infra::unique("shpre");
        let p = project(&admin, &auth_url, &name).await;
        let ns = kube_server::namespace(&client, "hooks-pre").await;
        let outcome = AssertUnwindSafe(preflight_cases(&client, &api.kubeconfig, &ns, &admin, &p))
            .catch_unwind()
            .await;
        // Quotas back to the defaults, project gone, whatever happened.
        let _ = admin
            .session
            .request(
                Method::DELETE,
                &["compute"],
                &format!("/os-quota-sets/{}", p.id),
                &[],
                None,
                &vec![],
            )
            .await;
        let _ = admin
            .session
            .request(
                Method::DELETE,
                &["network"],
                &format!("/v2.0/quotas/{}", p.id),
                &[],
                None,
                &vec![],
            )
            .await;
        drop_project(&admin, &p).await;
        kube_server::delete_namespace(&client, &ns).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

async fn preflight_cases(
    client: &Client,
    kubeconfig: &Path,
    ns: &str,
    admin: &Clients,
    p: &Project,
) {
    kube_server::identity_secret(client, ns, "creds", &p.clouds_yaml).await;
    osc(client, ns, "prod-x7k2p", "creds", "openstack").await;
    let cp = json!({"cluster.x-k8s.io/cluster-name": "prod", "cluster.x-k8s.io/control-plane": ""});
    let md = json!({"cluster.x-k8s.io/cluster-name": "prod",
        "cluster.x-k8s.io/deployment-name": "prod-md-0-b8k2d",
        "topology.cluster.x-k8s.io/deployment-name": "md-0"});
    osm(client, ns, "prod-cp-a", cp, "m1.small").await;
    osm(client, ns, "prod-md-0-a", md.clone(), "m1.medium").await;
    osm(client, ns, "prod-md-0-b", md, "m1.medium").await;

    // Two replicas on one Lease; the hooks go to the one that does not lead. A
    // check that is not done at once is answered "running" (no wait).
    let flags = [
        "--cloud-check-wait-milliseconds",
        "0",
        "--cloud-check-ttl-seconds",
        "1",
    ];
    let a = Replica::start(kubeconfig, ns, "hooks-pre", &flags);
    let b = Replica::start(kubeconfig, ns, "hooks-pre", &flags);
    let mut follower = None;
    kube_server::wait_for("a leader", async || {
        let (la, lb) = (a.leading().await, b.leading().await);
        if la != lb {
            follower = Some(if la { &b } else { &a });
        }
        follower.is_some()
    })
    .await;
    let r = follower.unwrap();
    assert!(!r.leading().await);

    let cluster = capi_cluster(ns, "prod", "prod-x7k2p", json!({}), json!({}));
    // An image for v1.34.1 exists: Success once the check ran.
    let t = Instant::now();
    let seen = r
        .settle(
            "BeforeClusterUpgrade",
            "before-cluster-upgrade",
            &upgrade(&cluster, "v1.34.1"),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    let check_took = t.elapsed();
    let (last, _) = seen.last().unwrap();
    assert_eq!(last["status"], "Success", "{last}");
    assert_eq!(last["retryAfterSeconds"], 0, "{last}");
    assert!(last.get("message").is_none(), "{last}");
    let running: Vec<&Value> = seen[..seen.len() - 1].iter().map(|(v, _)| v).collect();
    assert!(
        !running.is_empty(),
        "the first call started the check and did not wait for it"
    );
    // With no wait, the call that starts the check answers "running" at once.
    let checking = running
        .iter()
        .find(|v| {
            v["message"]
                .as_str()
                .unwrap_or("")
                .contains("checking OpenStack")
        })
        .expect("an answer while the check ran");
    assert_eq!(checking["status"], "Success", "{checking}");
    assert_eq!(checking["retryAfterSeconds"], 5, "{checking}");
    assert_eq!(
        checking["message"],
        "openstack-preflight: checking OpenStack images and quota for Kubernetes v1.34.1"
    );
    let latencies: Vec<Duration> = seen[..seen.len() - 1].iter().map(|(_, d)| *d).collect();
    println!(
        "BENCH preflight: {} calls while the check ran (p50 {:.1} ms, max {:.1} ms), answered after {:.2} s",
        latencies.len(),
        ms(latencies.clone(), 50),
        ms(latencies.clone(), 100),
        check_took.as_secs_f64()
    );
    assert!(ms(latencies, 100) < 1000.0, "a call waited for the cloud");

    // No image for v1.35.0.
    let seen = r
        .settle(
            "BeforeClusterUpgrade",
            "before-cluster-upgrade",
            &upgrade(&cluster, "v1.35.0"),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    let (last, _) = seen.last().unwrap();
    assert_eq!(last["status"], "Success", "{last}");
    assert_eq!(last["retryAfterSeconds"], 30, "{last}");
    assert_eq!(
        last["message"],
        "openstack-preflight: no active Glance image for Kubernetes v1.35.0 (property kube_version=v1.35.0)"
    );
    // Chained upgrade steps are checked too.
    let mut chained = upgrade(&cluster, "v1.34.1");
    chained["controlPlaneUpgrades"] = json!([{"version": "v1.33.9"}, {"version": "v1.34.1"}]);
    let seen = r
        .settle(
            "BeforeClusterUpgrade",
            "before-cluster-upgrade",
            &chained,
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        seen.last().unwrap().0["message"],
        "openstack-preflight: no active Glance image for Kubernetes v1.33.9 (property kube_version=v1.33.9)"
    );
    // A worker step between control-plane steps: the steps still to come are checked
    // while the cluster rests at the version it reached.
    let after_workers = json!({"cluster": cluster, "kubernetesVersion": "v1.34.1",
        "controlPlaneUpgrades": [{"version": "v1.35.0"}],
        "workersUpgrades": [{"version": "v1.35.0"}]});
    let seen = r
        .settle(
            "AfterWorkersUpgrade",
            "after-workers-upgrade",
            &after_workers,
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    let (last, _) = seen.last().unwrap();
    assert_eq!(last["retryAfterSeconds"], 30, "{last}");
    assert_eq!(
        last["message"],
        "openstack-preflight: no active Glance image for Kubernetes v1.35.0 (property kube_version=v1.35.0)"
    );
    // The last worker step: nothing is left to boot, so nothing holds it.
    let last_step = json!({"cluster": cluster, "kubernetesVersion": "v1.34.1"});
    let (resp, _) = r
        .call("AfterWorkersUpgrade", "after-workers-upgrade", last_step)
        .await;
    assert_eq!(resp["status"], "Success", "{resp}");
    assert_eq!(resp["retryAfterSeconds"], 0, "{resp}");

    // A new Cluster whose control plane names an image Glance has not: its
    // creation is held with the variable and the image named; fixed, it may go.
    cluster_class(client, ns, "openstack-kubeadm").await;
    let held = create_answer(
        r,
        &new_cluster(ns, "openstack-kubeadm", "ubuntu-2404-kube-v1.33.9"),
    )
    .await;
    assert_eq!(held["retryAfterSeconds"], 30, "{held}");
    assert_eq!(
        held["message"],
        "openstack-create-check: variable openstackControlPlane.image.name: \
         image \"ubuntu-2404-kube-v1.33.9\" not found in cloud \"openstack\" (region RegionOne)"
    );
    let t = Instant::now();
    let fixed = create_answer(
        r,
        &new_cluster(ns, "openstack-kubeadm", "ubuntu-2404-kube-v1.33.1"),
    )
    .await;
    println!(
        "BENCH create check: a new topology answered after {:.2} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        (
            fixed["status"].as_str(),
            fixed["retryAfterSeconds"].as_i64()
        ),
        (Some("Success"), Some(0)),
        "{fixed}"
    );
    // A class this replica cannot read: not held, and the answer says why.
    let unread = create_answer(
        r,
        &new_cluster(ns, "no-such-class", "ubuntu-2404-kube-v1.33.1"),
    )
    .await;
    assert_eq!(unread["retryAfterSeconds"], 0, "{unread}");
    let note = unread["message"].as_str().unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "openstack-create-check: not checked: reading ClusterClass {ns}/no-such-class:"
        )),
        "{unread}"
    );

    // One core in the project: the control plane's surge machine (m1.small, one
    // core) fits, a worker's (m1.medium, two cores) does not.
    admin_call(
        admin,
        Method::PUT,
        "compute",
        &format!("/os-quota-sets/{}", p.id),
        Some(json!({"quota_set": {"cores": 1}})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let workers = r
        .settle(
            "BeforeWorkersUpgrade",
            "before-workers-upgrade",
            &upgrade(&cluster, "v1.34.1"),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    let (last, _) = workers.last().unwrap();
    assert_eq!(last["retryAfterSeconds"], 30, "{last}");
    assert_eq!(
        last["message"],
        "openstack-preflight: project quota too small for the worker rollout \
         (1 × m1.medium for the md-0): 2 cores needed, 1 free (quota 1, 0 in use)"
    );
    let cp = r
        .settle(
            "BeforeControlPlaneUpgrade",
            "before-control-plane-upgrade",
            &upgrade(&cluster, "v1.34.1"),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        cp.last().unwrap().0["retryAfterSeconds"],
        0,
        "{:?}",
        cp.last()
    );

    // No ports left either: both rollouts are short of one.
    admin_call(
        admin,
        Method::PUT,
        "network",
        &format!("/v2.0/quotas/{}", p.id),
        Some(json!({"quota": {"port": 0}})),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let cp = r
        .settle(
            "BeforeControlPlaneUpgrade",
            "before-control-plane-upgrade",
            &upgrade(&cluster, "v1.34.1"),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        cp.last().unwrap().0["message"],
        "openstack-preflight: project quota too small for the control-plane rollout \
         (1 × m1.small for the control plane): 1 port needed, 0 free (quota 0, 0 in use)"
    );

    // The new Cluster's first machines (3 m1.small, 2 m1.medium, a port each) do
    // not fit either: its creation is held with what is short.
    let short = create_answer(
        r,
        &new_cluster(ns, "openstack-kubeadm", "ubuntu-2404-kube-v1.33.1"),
    )
    .await;
    assert_eq!(short["retryAfterSeconds"], 30, "{short}");
    assert_eq!(
        short["message"],
        "openstack-create-check: project quota too small for the cluster's first machines \
         (3 × m1.small for the control plane, 2 × m1.medium for the MachineDeployment md-0): \
         7 cores needed, 1 free (quota 1, 0 in use); 5 ports needed, 0 free (quota 0, 0 in use)"
    );

    // Quotas restored: the upgrade may go.
    admin_call(
        admin,
        Method::DELETE,
        "compute",
        &format!("/os-quota-sets/{}", p.id),
        None,
    )
    .await;
    admin_call(
        admin,
        Method::DELETE,
        "network",
        &format!("/v2.0/quotas/{}", p.id),
        None,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let all = r
        .settle(
            "BeforeClusterUpgrade",
            "before-cluster-upgrade",
            &upgrade(&cluster, "v1.34.1"),
            RUNNING,
            Duration::from_secs(60),
        )
        .await;
    let (last, _) = all.last().unwrap();
    assert_eq!(
        (last["status"].as_str(), last["retryAfterSeconds"].as_i64()),
        (Some("Success"), Some(0)),
        "{last}"
    );

    // And so may the creation.
    let room = create_answer(
        r,
        &new_cluster(ns, "openstack-kubeadm", "ubuntu-2404-kube-v1.33.1"),
    )
    .await;
    assert_eq!(
        (room["status"].as_str(), room["retryAfterSeconds"].as_i64()),
        (Some("Success"), Some(0)),
        "{room}"
    );

    // The check's own cost, run directly with the project's credentials: OpenStack
    // calls of one BeforeClusterUpgrade check (both phases, one version).
    let clients = infra::checker(p.clouds_yaml.as_bytes(), "openstack");
    let event = LifecycleEvent {
        hook: Hook::BeforeClusterUpgrade,
        settings: Default::default(),
        cluster: stackhook::sdk::cluster::Cluster::from_value(cluster.clone()).unwrap(),
        versions: UpgradeVersions::FromTo {
            from: "v1.33.1".into(),
            to: "v1.34.1".into(),
        },
        control_plane_upgrades: vec![],
        workers_upgrades: vec![],
    };
    let osms: Api<OpenStackMachine> = Api::namespaced(client.clone(), ns);
    let machines: Vec<MachineFacts> = osms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(MachineFacts::from_machine)
        .collect();
    let plan = preflight::plan(&event, &machines);
    assert_eq!(plan.phases.len(), 2, "{plan:?}");
    let images = preflight::ImageMatch {
        property: "kube_version".into(),
        name_pattern: None,
    };
    let before = clients.session.stats().snapshot();
    let t = Instant::now();
    let report = preflight::run(&clients, &plan, &images).await.unwrap();
    let calls = clients.session.stats().snapshot() - before;
    assert!(report.problems.is_empty(), "{report:?}");
    println!(
        "BENCH preflight check: {} reads, {} writes, {} auths in {:.0} ms",
        calls.reads,
        calls.writes,
        calls.auths,
        t.elapsed().as_secs_f64() * 1000.0
    );
    // With a name pattern instead of (beside) the property: one more list.
    let by_name = preflight::ImageMatch {
        property: "no_such_property".into(),
        name_pattern: Some("^ubuntu-2404-kube-{version}$".into()),
    };
    let report = preflight::run(&clients, &plan, &by_name).await.unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    let mut v135 = plan.clone();
    v135.versions = vec!["v1.35.0".into()];
    let report = preflight::run(&clients, &v135, &by_name).await.unwrap();
    assert_eq!(
        report.problems,
        [
            "no active Glance image for Kubernetes v1.35.0 (property no_such_property=v1.35.0, \
          or a name matching ^ubuntu-2404-kube-v1.35.0$)"
        ]
    );

    // An annotation lets an upgrade through without asking the cloud.
    let skipped = capi_cluster(
        ns,
        "prod",
        "prod-x7k2p",
        json!({}),
        json!({"hooks.stackhook.io/skip-upgrade-preflight": "image mirrored later"}),
    );
    let (resp, _) = r
        .call(
            "BeforeClusterUpgrade",
            "before-cluster-upgrade",
            upgrade(&skipped, "v1.35.0"),
        )
        .await;
    assert_eq!(resp["retryAfterSeconds"], 0, "{resp}");
}

/// A Neutron network and subnet for load balancer VIPs.
async fn vip_subnet(c: &Clients, name: &str) -> (String, String) {
    let n: net::Network = c
        .network
        .create(json!({"name": name}))
        .await
        .expect("network");
    let s: net::Subnet = c
        .network
        .create(json!({"name": name, "network_id": n.id, "cidr": "10.211.0.0/24", "ip_version": 4}))
        .await
        .expect("subnet");
    (n.id, s.id)
}

async fn load_balancer(c: &Clients, name: &str, subnet: &str) -> String {
    let lb: LoadBalancer = c
        .load_balancer
        .create(json!({"name": name, "vip_subnet_id": subnet,
            "description": "Kubernetes external service default/web from cluster test"}))
        .await
        .expect("load balancer");
    lb.id
}

async fn volume(c: &Clients, name: &str, cluster: &str) -> String {
    let v = c
        .block_storage
        .create_volume(&VolumeCreate {
            name: name.into(),
            size_gib: 1,
            metadata: [(
                "cinder.csi.openstack.org/cluster".to_string(),
                cluster.to_string(),
            )]
            .into(),
            ..Default::default()
        })
        .await
        .expect("volume");
    v.id
}

async fn wait_ready(c: &Clients, lbs: &[&str], volumes: &[&str]) {
    kube_server::wait_up_to(
        Duration::from_secs(120),
        "load balancers ACTIVE and volumes available",
        async || {
            for id in lbs {
                let lb: LoadBalancer = c.load_balancer.get(id).await.expect("lb");
                if !lb.is_active() {
                    return false;
                }
            }
            for id in volumes {
                let v: Volume = c.block_storage.volume(id).await.expect("volume");
                if !v.is_available() {
                    return false;
                }
            }
            true
        },
    )
    .await;
}

/// An ACTIVE server on `network`, standing for a node of the cluster.
async fn node(c: &Clients, name: &str, network: &str) -> String {
    let images = c
        .image
        .list(&[("name", "ubuntu-2404-kube-v1.33.1".to_string())])
        .await
        .expect("images");
    let flavors = c.compute.flavors().await.expect("flavors");
    let flavor = flavors
        .iter()
        .find(|f| f.name == "m1.tiny")
        .expect("m1.tiny");
    let id = c
        .compute
        .create_server(
            json!({"name": name, "imageRef": images[0].id, "flavorRef": flavor.id,
                   "networks": [{"uuid": network}]}),
            "2.38",
        )
        .await
        .expect("server");
    kube_server::wait_up_to(Duration::from_secs(120), "the node ACTIVE", async || {
        c.compute.server(&id).await.is_ok_and(|s| s.is_active())
    })
    .await;
    id
}

async fn gone_lb(c: &Clients, id: &str) -> bool {
    matches!(c.load_balancer.get::<LoadBalancer>(id).await, Err(e) if e.is_not_found())
}

async fn gone_volume(c: &Clients, id: &str) -> bool {
    matches!(c.block_storage.volume(id).await, Err(e) if e.is_not_found())
}

#[test]
fn before_cluster_delete_removes_only_this_cluster_s_load_balancers_and_volumes() {
    let Some((api, clouds_yaml)) = environment() else {
        return;
    };
    infra::runtime().block_on(async {
        let client = api.client().await;
        crds(&client).await;
        let member = infra::checker(&clouds_yaml, cloud::MEMBER);
        let tag = infra::unique("shdel");
        let (net_id, subnet) = vip_subnet(&member, &tag).await;
        let ns = kube_server::namespace(&client, "hooks-del").await;
        let mut made: Vec<(&'static str, String)> = Vec::new();
        let outcome = AssertUnwindSafe(delete_cases(
            &client,
            &api.kubeconfig,
            &ns,
            &clouds_yaml,
            &member,
            (&net_id, &subnet),
            &tag,
            &mut made,
        ))
        .catch_unwind()
        .await;
        // Servers first, so that their volumes come free.
        made.sort_by_key(|(kind, _)| *kind != "server");
        for (kind, id) in &made {
            let _ = match *kind {
                "server" => member.compute.delete_server(id).await,
                "lb" => member.load_balancer.delete_load_balancer_cascade(id).await,
                _ => Ok(()),
            };
        }
        kube_server::wait_up_to(
            Duration::from_secs(180),
            "test resources to go",
            async || {
                for (kind, id) in &made {
                    let gone = match *kind {
                        "server" => {
                            matches!(member.compute.server(id).await, Err(e) if e.is_not_found())
                        }
                        "lb" => gone_lb(&member, id).await,
                        _ => {
                            if let Ok(v) = member.block_storage.volume(id).await {
                                if v.is_available() || v.is_failed() {
                                    let _ = member.block_storage.delete_volume(id).await;
                                }
                            }
                            gone_volume(&member, id).await
                        }
                    };
                    if !gone {
                        return false;
                    }
                }
                true
            },
        )
        .await;
        let _ = member.network.delete::<net::Network>(&net_id).await;
        kube_server::delete_namespace(&client, &ns).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

#[allow(clippy::too_many_arguments)]
async fn delete_cases(
    client: &Client,
    kubeconfig: &Path,
    ns: &str,
    clouds_yaml: &[u8],
    member: &Clients,
    (net_id, subnet): (&str, &str),
    tag: &str,
    made: &mut Vec<(&'static str, String)>,
) {
    // Cluster A as the Magnum driver creates it: `magnum-system`, a `kube-xxxxx`
    // name, the `cluster-uuid` label, an application-credential clouds.yaml with
    // the cloud `default` in `<name>-cloud-config`. Its cloud provider and CSI
    // driver know it by the UUID.
    let magnum = "magnum-system";
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(magnum)
        .await
        .expect("namespaces")
        .is_none()
    {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": magnum}})).unwrap(),
            )
            .await
            .expect("magnum-system");
    }
    let a = format!(
        "kube-{:05x}",
        (u64::from(std::process::id()) * 7919) & 0xfffff
    );
    let uuid = format!("5d12f6fd-a196-4bf0-ae4c-{:012x}", std::process::id());
    let appcred = cloud::entry(cloud::MEMBER_APPCRED).unwrap();
    let a_yaml = format!(
        "clouds:\n  default:\n    region_name: RegionOne\n    interface: public\n    \
         identity_api_version: 3\n    auth_type: v3applicationcredential\n    auth:\n      \
         auth_url: {}\n      application_credential_id: {}\n      application_credential_secret: {}\n",
        appcred.auth_url, appcred.application_credential_id, appcred.application_credential_secret
    );
    kube_server::identity_secret(client, magnum, &format!("{a}-cloud-config"), &a_yaml).await;
    osc(client, magnum, &a, &format!("{a}-cloud-config"), "default").await;
    // Cluster B, an ordinary one in the same project.
    let b = format!("b-{tag}");
    let member_yaml = String::from_utf8(clouds_yaml.to_vec()).unwrap();
    kube_server::identity_secret(client, ns, "creds", &member_yaml).await;
    osc(client, ns, &format!("{b}-x1"), "creds", cloud::MEMBER).await;

    let a_lb = load_balancer(member, &format!("kube_service_{uuid}_default_web"), subnet).await;
    made.push(("lb", a_lb.clone()));
    let b_lb = load_balancer(member, &format!("kube_service_{b}_default_web"), subnet).await;
    made.push(("lb", b_lb.clone()));
    let a_vol = volume(member, &format!("pvc-{tag}-a"), &uuid).await;
    made.push(("volume", a_vol.clone()));
    let b_vol = volume(member, &format!("pvc-{tag}-b"), &b).await;
    made.push(("volume", b_vol.clone()));
    wait_ready(member, &[&a_lb, &b_lb], &[&a_vol, &b_vol]).await;
    // A's volume is attached to one of A's nodes, as a PersistentVolume in use is.
    let server = node(member, &format!("{tag}-node"), net_id).await;
    made.push(("server", server.clone()));
    let attach = json!({"volumeAttachment": {"volumeId": a_vol}});
    member
        .session
        .request(
            Method::POST,
            &["compute"],
            &format!("/servers/{server}/os-volume_attachments"),
            &[],
            Some(&attach),
            &vec![],
        )
        .await
        .expect("attaching A's volume");
    kube_server::wait_up_to(Duration::from_secs(120), "A's volume in use", async || {
        member
            .block_storage
            .volume(&a_vol)
            .await
            .is_ok_and(|v| v.is_in_use())
    })
    .await;

    let r = Replica::start(
        kubeconfig,
        ns,
        "hooks-del",
        &[
            "--cloud-check-ttl-seconds",
            "2",
            // Cluster A lives where the Magnum driver puts it.
            "--watch-namespace",
            magnum,
        ],
    );
    let cluster_a = capi_cluster(magnum, &a, &a, json!({"cluster-uuid": uuid}), json!({}));
    let t = Instant::now();
    let seen = r
        .settle(
            "BeforeClusterDelete",
            "before-cluster-delete",
            &json!({"cluster": cluster_a}),
            &["deleting", "looking for", "first list of OpenStackClusters"],
            Duration::from_secs(180),
        )
        .await;
    let took = t.elapsed();
    let messages: Vec<String> = seen
        .iter()
        .map(|(v, _)| v["message"].as_str().unwrap_or("").to_string())
        .collect();
    println!("cleanup answers: {messages:?}");
    let deleting = format!(
        "openstack-cleanup: deleting 1 load balancer and 1 volume that the cloud provider created for cluster {uuid}"
    );
    let blocked: Vec<&(Value, Duration)> = seen
        .iter()
        .filter(|(v, _)| v["message"] == deleting.as_str())
        .collect();
    assert!(
        !blocked.is_empty(),
        "never blocked while deleting: {messages:?}"
    );
    for (v, _) in &blocked {
        assert_eq!(
            (v["status"].as_str(), v["retryAfterSeconds"].as_i64()),
            (Some("Success"), Some(5)),
            "{v}"
        );
    }
    let (last, _) = seen.last().unwrap();
    assert_eq!(
        (last["status"].as_str(), last["retryAfterSeconds"].as_i64()),
        (Some("Success"), Some(0)),
        "{last}"
    );
    assert_eq!(
        last["message"].as_str().unwrap(),
        format!("openstack-cleanup: removed 1 load balancer and 1 volume that the cloud provider created for cluster {uuid}")
    );
    // Only the call that started the cleanup waited for it (up to 2 s); the
    // others answered from its progress at once.
    let later: Vec<Duration> = seen.iter().skip(2).map(|(_, d)| *d).collect();
    assert!(ms(later, 100) < 1000.0, "{seen:?}");
    let latencies: Vec<Duration> = seen.iter().map(|(_, d)| *d).collect();
    println!(
        "BENCH cleanup: {} calls over {:.1} s (p50 {:.1} ms, max {:.1} ms)",
        seen.len(),
        took.as_secs_f64(),
        ms(latencies.clone(), 50),
        ms(latencies, 100)
    );

    assert!(gone_lb(member, &a_lb).await, "A's load balancer is gone");
    assert!(gone_volume(member, &a_vol).await, "A's volume is gone");
    let still = member
        .compute
        .server(&server)
        .await
        .expect("the node is left to CAPI");
    assert!(still.volumes_attached.is_empty(), "{still:?}");
    let lb: LoadBalancer = member
        .load_balancer
        .get(&b_lb)
        .await
        .expect("B's load balancer is still there");
    assert!(lb.is_active(), "{lb:?}");
    let v = member
        .block_storage
        .volume(&b_vol)
        .await
        .expect("B's volume is still there");
    assert!(v.is_available(), "{v:?}");

    // A second call finds nothing left: Success without a message.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (again, _) = r.call("BeforeClusterDelete", "before-cluster-delete", json!({"cluster": capi_cluster(magnum, &a, &a, json!({"cluster-uuid": uuid}), json!({}))})).await;
    assert_eq!(again["retryAfterSeconds"], 0, "{again}");

    // B's own cleanup, run directly: its OpenStack calls for one load balancer and
    // one volume.
    let before = member.session.stats().snapshot();
    let t = Instant::now();
    let report = cleanup::run(member, &b, &Progress::default(), Pace::default())
        .await
        .expect("B's cleanup");
    let calls = member.session.stats().snapshot() - before;
    assert_eq!(
        report,
        cleanup::Report {
            load_balancers: 1,
            volumes: 1
        }
    );
    assert!(gone_lb(member, &b_lb).await && gone_volume(member, &b_vol).await);
    println!(
        "BENCH cleanup run: 1 load balancer and 1 volume in {:.1} s, {} reads, {} writes",
        t.elapsed().as_secs_f64(),
        calls.reads,
        calls.writes
    );
    let before = member.session.stats().snapshot();
    let report = cleanup::run(member, &b, &Progress::default(), Pace::default())
        .await
        .unwrap();
    let calls = member.session.stats().snapshot() - before;
    assert_eq!(report, cleanup::Report::default());
    println!(
        "BENCH cleanup run with nothing to do: {} reads, {} writes",
        calls.reads, calls.writes
    );

    let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), magnum);
    let _ = oscs.delete(&a, &DeleteParams::default()).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), magnum);
    let _ = secrets
        .delete(&format!("{a}-cloud-config"), &DeleteParams::default())
        .await;
}

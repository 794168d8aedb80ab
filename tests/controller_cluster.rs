//! The OpenStackCluster reconciler against a scripted apiserver: which
//! requests it makes, in which order, with which bodies.

use crate::apiserver;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver::{pair, status_error, ApiServer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use secrecy::ExposeSecret;
use serde_json::{json, Value};

use stackhook::controller::cluster::{reconcile, ClusterContext, Timing};
use stackhook::hooks::ClusterResults;
use stackhook::infra::api::cluster::NetworkStatusWithSubnets;
use stackhook::infra::api::extensions::{ClusterStatusExtensions, LoadBalancersStatus, VirtualIp};
use stackhook::infra::api::types::OpenStackIdentityReference;
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterSpec, OpenStackClusterStatus};
use stackhook::infra::seam::{
    ClusterInfra, ClusterOutcome, ClusterScope, DeleteProgress, IdentitySecret, InfraError,
    StatusSink,
};
use stackhook::kubernetes::capi::CapiResources;
use stackhook::metrics::ControllerMetrics;

const NS: &str = "ns";
const OSC_PATH: &str =
    "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/ns/openstackclusters/c1";
const CLUSTER_PATH: &str = "/apis/cluster.x-k8s.io/v1beta1/namespaces/ns/clusters/prod";
const SECRET_PATH: &str = "/api/v1/namespaces/ns/secrets/creds";
const MACHINES_PATH: &str = "/apis/cluster.x-k8s.io/v1beta1/namespaces/ns/machines";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";
const OSMS_PATH: &str =
    "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/ns/openstackmachines";
const VARS_PATH: &str = "/api/v1/namespaces/ns/secrets/prod-bootstrap-vars";
const SECRETS_PATH: &str = "/api/v1/namespaces/ns/secrets";
const FINALIZER: &str = "openstackcluster.infrastructure.cluster.x-k8s.io";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    Converge,
    User,
    Transient,
    DeleteDone,
    Panic,
}

/// Records what it was called with; converges in one pass, saving the
/// network through the sink first as a real backend must.
struct FakeInfra {
    behaviour: Behaviour,
    calls: Arc<Mutex<Vec<(String, ClusterScope, IdentitySecret)>>>,
}

fn network() -> NetworkStatusWithSubnets {
    serde_json::from_value(json!({"id": "net-1", "name": "k8s-clusterapi-cluster-ns-prod"}))
        .unwrap()
}

impl ClusterInfra for FakeInfra {
    async fn reconcile(
        &self,
        scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        sink: &impl StatusSink,
    ) -> Result<ClusterOutcome, InfraError> {
        self.calls
            .lock()
            .unwrap()
            .push(("reconcile".into(), scope.clone(), identity.clone()));
        match self.behaviour {
            Behaviour::Panic => panic!("backend bug"),
            Behaviour::User => {
                return Err(InfraError::User {
                    reason: "InvalidFlavor".into(),
                    message: "flavor m1.huge does not exist".into(),
                })
            }
            Behaviour::Transient => {
                return Err(InfraError::Transient {
                    reason: "OpenStackError".into(),
                    message: "503 from Neutron".into(),
                    retry_after: None,
                    unavailable: false,
                })
            }
            _ => {}
        }
        let mut status = OpenStackClusterStatus {
            network: Some(Box::new(network())),
            ..Default::default()
        };
        sink.save(&status).await?;
        status.ready = true;
        status.extensions = Some(Box::new(ClusterStatusExtensions {
            load_balancers: Some(LoadBalancersStatus {
                control_plane: Some(VirtualIp {
                    vip: Some("10.6.0.10".into()),
                }),
                ingress: None,
            }),
            ..Default::default()
        }));
        Ok(ClusterOutcome {
            status,
            control_plane_endpoint: Some(("203.0.113.10".into(), 6443)),
            requeue_after: None,
        })
    }

    async fn delete(
        &self,
        scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        _sink: &impl StatusSink,
    ) -> Result<DeleteProgress, InfraError> {
        self.calls
            .lock()
            .unwrap()
            .push(("delete".into(), scope.clone(), identity.clone()));
        Ok(DeleteProgress::Done)
    }
}

struct Fixture {
    ctx: Arc<ClusterContext<FakeInfra>>,
    server: ApiServer,
    calls: Arc<Mutex<Vec<(String, ClusterScope, IdentitySecret)>>>,
    results: ClusterResults,
    metrics: ControllerMetrics,
}

fn fixture(behaviour: Behaviour) -> Fixture {
    let (client, server) = pair();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let results = ClusterResults::new();
    let metrics = ControllerMetrics::default();
    let ctx = Arc::new(ClusterContext::new(
        client,
        FakeInfra {
            behaviour,
            calls: calls.clone(),
        },
        CapiResources::at("v1beta1"),
        results.clone(),
        metrics.clone(),
        Timing::default(),
    ));
    Fixture {
        ctx,
        server,
        calls,
        results,
        metrics,
    }
}

fn osc(owned: bool, finalized: bool) -> OpenStackCluster {
    let mut o = OpenStackCluster::new(
        "c1",
        OpenStackClusterSpec {
            identity_ref: OpenStackIdentityReference {
                name: "creds".into(),
                cloud_name: "openstack".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    o.metadata.namespace = Some(NS.into());
    o.metadata.uid = Some("osc-uid".into());
    o.metadata.resource_version = Some("7".into());
    o.metadata.generation = Some(2);
    o.metadata.labels = Some(
        [(
            "cluster.x-k8s.io/cluster-name".to_string(),
            "prod".to_string(),
        )]
        .into(),
    );
    if owned {
        o.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta1".into(),
            kind: "Cluster".into(),
            name: "prod".into(),
            uid: "cluster-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
    }
    if finalized {
        o.metadata.finalizers = Some(vec!["example.com/keep".into(), FINALIZER.into()]);
    }
    o
}

fn deleting(mut o: OpenStackCluster) -> OpenStackCluster {
    o.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    o
}

fn capi_cluster(paused: bool) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "prod", "namespace": NS, "uid": "cluster-uid"},
        "spec": {
            "paused": paused,
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "OpenStackCluster", "name": "c1", "namespace": NS}
        }
    })
}

fn secret() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": NS, "resourceVersion": "31"},
        // base64 of "clouds: {}\n"
        "data": {"clouds.yaml": "Y2xvdWRzOiB7fQo="}
    })
}

fn machine_list(names: &[&str]) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {},
        "items": names.iter().map(|n| json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": n, "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": "prod"}}
        })).collect::<Vec<_>>()
    })
}

/// The cluster's OpenStackMachines: one with its reservation in status.
fn osm_list() -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineList",
        "metadata": {"resourceVersion": "40"},
        "items": [{
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": "prod-cp-a", "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": "prod",
                           "cluster.x-k8s.io/control-plane": ""}},
            "spec": {"flavor": "m1.small", "image": {"id": "img"}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.6.0.5"}],
                "extensions": {"nodeResources": {"prod-cp-a": {"reserved": {"cpu": "60m", "memory": "612Mi"}}}}
            }
        }]
    })
}

impl Fixture {
    /// The machine list before the final status write.
    async fn machines(&mut self) {
        let seen = self.server.expect("GET", OSMS_PATH, 200, osm_list()).await;
        assert_eq!(
            seen.query(),
            "&labelSelector=cluster.x-k8s.io%2Fcluster-name%3Dprod"
        );
    }

    /// The bootstrap-vars Secret is read, found missing and created; its body.
    async fn vars_created(&mut self) -> Value {
        self.server
            .expect("GET", VARS_PATH, 404, status_error(404, "NotFound"))
            .await;
        let created = self
            .server
            .expect("POST", SECRETS_PATH, 201, json!({}))
            .await;
        created.body
    }
}

fn event_reply() -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "c1.1", "namespace": NS},
        "eventTime": "2026-01-01T00:00:00.000000Z"
    })
}

fn osc_json(o: &OpenStackCluster) -> Value {
    serde_json::to_value(o).unwrap()
}

type ReconcileTask =
    tokio::task::JoinHandle<Result<Action, stackhook::controller::cluster::ReconcileError>>;

impl Fixture {
    /// A reconcile of `o` started and past its read of the (unpaused) CAPI Cluster.
    async fn start(&mut self, o: &OpenStackCluster) -> ReconcileTask {
        let task = tokio::spawn(reconcile(Arc::new(o.clone()), self.ctx.clone()));
        self.server
            .expect("GET", CLUSTER_PATH, 200, capi_cluster(false))
            .await;
        task
    }

    /// [`Fixture::start`], then past the read of the identity Secret.
    async fn start_with_identity(&mut self, o: &OpenStackCluster) -> ReconcileTask {
        let task = self.start(o).await;
        self.server.expect("GET", SECRET_PATH, 200, secret()).await;
        task
    }
}

async fn finish(
    task: ReconcileTask,
) -> Result<Action, stackhook::controller::cluster::ReconcileError> {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("reconcile finished")
        .expect("reconcile did not panic")
}

fn outcome_count(m: &ControllerMetrics, outcome: stackhook::metrics::ReconcileOutcome) -> u64 {
    m.reconciles
        .get_or_create(&stackhook::metrics::ReconcileLabels {
            controller: "openstackcluster".into(),
            outcome,
        })
        .get()
}

#[tokio::test]
async fn without_owner_reference_nothing_is_requested() {
    let f = fixture(Behaviour::Converge);
    let action = reconcile(Arc::new(osc(false, false)), f.ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    assert!(f.calls.lock().unwrap().is_empty());
    drop(f.ctx);
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn paused_cluster_or_annotation_means_only_the_cluster_read() {
    for (cluster_paused, annotated) in [(true, false), (false, true)] {
        let mut f = fixture(Behaviour::Converge);
        let mut o = osc(true, true);
        if annotated {
            o.metadata.annotations =
                Some([("cluster.x-k8s.io/paused".to_string(), "".to_string())].into());
        }
        let task = tokio::spawn(reconcile(Arc::new(o), f.ctx.clone()));
        f.server
            .expect("GET", CLUSTER_PATH, 200, capi_cluster(cluster_paused))
            .await;
        assert_eq!(finish(task).await.unwrap(), Action::await_change());
        assert!(f.calls.lock().unwrap().is_empty());
        drop(f.ctx);
        f.server.expect_no_more().await;
    }
}

#[tokio::test]
async fn finalizer_is_added_before_any_cloud_work() {
    let mut f = fixture(Behaviour::Converge);
    let mut o = osc(true, false);
    o.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let task = tokio::spawn(reconcile(Arc::new(o), f.ctx.clone()));
    f.server
        .expect("GET", CLUSTER_PATH, 200, capi_cluster(false))
        .await;
    let mut patched = osc(true, true);
    patched.metadata.resource_version = Some("8".into());
    let seen = f
        .server
        .expect("PATCH", OSC_PATH, 200, osc_json(&patched))
        .await;
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        seen.body,
        json!({"metadata": {
            "finalizers": ["example.com/keep", FINALIZER],
            "resourceVersion": "7"
        }})
    );
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
    assert!(
        f.calls.lock().unwrap().is_empty(),
        "no cloud call before the finalizer is stored"
    );
    drop(f.ctx);
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn converging_pass_writes_status_endpoint_and_results() {
    let mut f = fixture(Behaviour::Converge);
    let o = osc(true, true);
    let task = f.start_with_identity(&o).await;

    // The sink's write, while the cloud half is still running.
    let saved = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    assert_eq!(
        saved.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        saved.body,
        json!({"status": {"ready": false, "network": {"id": "net-1", "name": "k8s-clusterapi-cluster-ns-prod"}}})
    );

    // The endpoint before the final status, so CAPI never sees ready without it.
    let spec = f.server.expect("PATCH", OSC_PATH, 200, osc_json(&o)).await;
    assert_eq!(
        spec.body,
        json!({"spec": {"controlPlaneEndpoint": {"host": "203.0.113.10", "port": 6443}}})
    );

    f.machines().await;
    let fin = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    let status = &fin.body["status"];
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["initialization"], json!({"provisioned": true}));
    assert_eq!(
        status["extensions"],
        json!({"loadBalancers": {"controlPlane": {"vip": "10.6.0.10"}},
               "nodeResources": {"prod-cp-a": {"reserved": {"cpu": "60m", "memory": "612Mi"}}}})
    );
    let conds = status["conditions"].as_array().expect("conditions");
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0]["type"], "Ready");
    assert_eq!(conds[0]["status"], "True");
    assert!(conds[0]["lastTransitionTime"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert!(
        status.get("network").is_none(),
        "unchanged fields are not resent: {status}"
    );

    // Then the Secret the bootstrap reads, owned by the OpenStackCluster.
    let secret = f.vars_created().await;
    assert_eq!(secret["metadata"]["name"], "prod-bootstrap-vars");
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"], "osc-uid",
        "{secret}"
    );
    assert_eq!(
        secret["metadata"]["labels"]["stackhook.io/bootstrap-vars"],
        "true"
    );
    let text = |key: &str| {
        let b64 = secret["data"][key].as_str().expect(key);
        String::from_utf8(data_encoding::BASE64.decode(b64.as_bytes()).unwrap()).unwrap()
    };
    let yaml = |key: &str| -> Value { serde_saphyr::from_str(&text(key)).unwrap() };
    assert_eq!(yaml("vars.yaml")["master_virtual_vip"], "10.6.0.10");
    assert_eq!(
        yaml("vars.yaml")["node_resources"]["prod-cp-a"],
        json!({"cpu": "60m", "memory": "612Mi"})
    );
    assert_eq!(
        yaml("inventory.yaml")["all"]["children"]["control_plane"]["hosts"]["prod-cp-a"],
        json!({"ansible_host": "10.6.0.5", "role": "control_plane"})
    );
    assert_eq!(yaml("cilium-values.yaml")["k8sServiceHost"], "203.0.113.10");

    let action = finish(task).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(600)));

    let calls = f.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let (what, scope, identity) = &calls[0];
    assert_eq!(what, "reconcile");
    assert_eq!(
        (scope.namespace.as_str(), scope.cluster_name.as_str()),
        (NS, "prod")
    );
    assert_eq!(identity.clouds_yaml.expose_secret(), b"clouds: {}\n");
    assert_eq!(identity.cloud_name, "openstack");
    assert_eq!(identity.resource_version, "31");

    let r = f.results.get(NS, "c1").expect("result stored");
    assert!(r.ready);
    assert_eq!(r.generation, Some(2));
    assert_eq!(r.control_plane_vip.as_deref(), Some("10.6.0.10"));
    assert_eq!(
        r.control_plane_endpoint,
        Some(("203.0.113.10".to_string(), 6443))
    );
    assert_eq!(
        outcome_count(&f.metrics, stackhook::metrics::ReconcileOutcome::success),
        1
    );
    // The two status PATCHes above; the spec PATCH is not a status write.
    assert_eq!(f.metrics.status_writes("openstackcluster").get(), 2);
    drop(f.ctx);
    f.server.expect_no_more().await;
}

/// An owned, finalized object whose endpoint the user set.
fn osc_with_endpoint() -> OpenStackCluster {
    let mut o = osc(true, true);
    o.spec.control_plane_endpoint = Some(Box::new(stackhook::infra::api::types::ApiEndpoint {
        host: "api.example.com".into(),
        port: 443,
    }));
    o
}

#[tokio::test]
async fn endpoint_already_set_is_not_rewritten() {
    let mut f = fixture(Behaviour::Converge);
    let o = osc_with_endpoint();
    let task = f.start_with_identity(&o).await;
    f.server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    f.machines().await;
    let fin = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    assert_eq!(fin.body["status"]["ready"], true);
    // The Secret is there already with this content: no write.
    let mut have = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "prod-bootstrap-vars", "namespace": NS, "resourceVersion": "50"}});
    let mut updated = o.clone();
    updated.status = Some(serde_json::from_value(fin.body["status"].clone()).unwrap());
    let machines = vec![stackhook::infra::bootstrap::MachineFacts::from_machine(
        &serde_json::from_value(osm_list()["items"][0].clone()).unwrap(),
    )
    .unwrap()];
    let want = stackhook::kubernetes::bootstrap_vars::desired(&updated, "prod", &machines).unwrap();
    have["metadata"]["labels"] = json!(want.metadata.labels);
    have["metadata"]["ownerReferences"] = json!(want.metadata.owner_references);
    have["data"] = json!(want.data);
    f.server.expect("GET", VARS_PATH, 200, have).await;
    finish(task).await.unwrap();
    assert_eq!(
        f.results.get(NS, "c1").unwrap().control_plane_endpoint,
        Some(("api.example.com".to_string(), 443))
    );
    drop(f.ctx);
    f.server.expect_no_more().await;
}

/// The object as the API server holds it after `patches` (merge patches of its
/// status, in order).
fn with_status_patches(o: &OpenStackCluster, patches: &[&Value]) -> OpenStackCluster {
    let mut doc = osc_json(o);
    for p in patches {
        json_patch::merge(&mut doc, p);
    }
    serde_json::from_value(doc).unwrap()
}

#[tokio::test]
async fn a_converged_cluster_republishes_machines_without_asking_the_cloud_until_it_changes() {
    let mut f = fixture(Behaviour::Converge);
    let o = osc_with_endpoint();
    let task = f.start_with_identity(&o).await;
    let first = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    f.machines().await;
    let fin = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    f.vars_created().await;
    assert_eq!(
        finish(task).await.unwrap(),
        Action::requeue(Duration::from_secs(600))
    );
    assert_eq!(f.calls.lock().unwrap().len(), 1);

    // The same object, its status as written: a pass a machine started. The machines
    // are listed and the Secret checked; the cloud is not asked, and the next look at
    // it is when the resync was due anyway.
    let written = with_status_patches(&o, &[&first.body, &fin.body]);
    let task = f.start_with_identity(&written).await;
    f.machines().await;
    let secret = f.vars_created().await;
    assert_eq!(secret["metadata"]["name"], "prod-bootstrap-vars");
    match finish(task).await.unwrap() {
        a if a == Action::requeue(Duration::from_secs(600)) => {
            panic!("a republishing pass postpones the resync: {a:?}")
        }
        _ => {}
    }
    assert_eq!(
        f.calls.lock().unwrap().len(),
        1,
        "the cloud was asked again"
    );
    assert_eq!(
        outcome_count(&f.metrics, stackhook::metrics::ReconcileOutcome::success),
        2
    );

    // A changed spec is read by the cloud pass: asked again.
    let mut edited = written.clone();
    edited.spec.disable_api_server_floating_ip = Some(true);
    let task = f.start_with_identity(&edited).await;
    // The backend saves its first findings, then the pass its last.
    f.server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    f.machines().await;
    f.server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    f.vars_created().await;
    finish(task).await.unwrap();
    assert_eq!(
        f.calls.lock().unwrap().len(),
        2,
        "a spec change skipped the cloud"
    );
    drop(f.ctx);
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn user_error_sets_condition_and_posts_a_warning_event() {
    let mut f = fixture(Behaviour::User);
    let o = osc(true, true);
    let task = f.start_with_identity(&o).await;
    let st = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    let conds = st.body["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0]["type"], "Ready");
    assert_eq!(conds[0]["status"], "False");
    assert_eq!(conds[0]["reason"], "InvalidFlavor");
    assert_eq!(conds[0]["severity"], "Error");
    assert_eq!(conds[0]["message"], "flavor m1.huge does not exist");

    let ev = f.server.answer(201, event_reply()).await;
    assert_eq!((ev.method.as_str(), ev.path()), ("POST", EVENTS_PATH));
    assert_eq!(ev.body["type"], "Warning");
    assert_eq!(ev.body["reason"], "InvalidFlavor");
    assert_eq!(ev.body["note"], "flavor m1.huge does not exist");
    assert_eq!(ev.body["action"], "Reconcile");
    assert_eq!(ev.body["reportingController"], "stackhook-openstackcluster");
    assert_eq!(ev.body["regarding"]["kind"], "OpenStackCluster");
    assert_eq!(ev.body["regarding"]["name"], "c1");
    assert_eq!(ev.body["regarding"]["namespace"], NS);
    assert_eq!(ev.body["regarding"]["uid"], "osc-uid");

    let action = finish(task).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    assert_eq!(
        outcome_count(&f.metrics, stackhook::metrics::ReconcileOutcome::user_error),
        1
    );
    drop(f.ctx);
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn missing_identity_secret_is_a_user_error_without_cloud_call() {
    let mut f = fixture(Behaviour::Converge);
    let o = osc(true, true);
    let task = f.start(&o).await;
    f.server
        .expect("GET", SECRET_PATH, 404, status_error(404, "NotFound"))
        .await;
    let st = f
        .server
        .expect("PATCH", &format!("{OSC_PATH}/status"), 200, osc_json(&o))
        .await;
    assert_eq!(
        st.body["status"]["conditions"][0]["reason"],
        "IdentityNotFound"
    );
    let ev = f
        .server
        .expect("POST", EVENTS_PATH, 201, event_reply())
        .await;
    assert_eq!(ev.body["reason"], "IdentityNotFound");
    finish(task).await.unwrap();
    assert!(f.calls.lock().unwrap().is_empty());
    drop(f.ctx);
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn panicking_backend_is_a_transient_error_not_a_dead_controller() {
    let mut f = fixture(Behaviour::Panic);
    let o = Arc::new(osc(true, true));
    let task = tokio::spawn(reconcile(o.clone(), f.ctx.clone()));
    f.server
        .expect("GET", CLUSTER_PATH, 200, capi_cluster(false))
        .await;
    f.server.expect("GET", SECRET_PATH, 200, secret()).await;
    let err = finish(task).await.unwrap_err();
    assert!(
        matches!(
            &err,
            stackhook::controller::cluster::ReconcileError::Panicked
        ),
        "{err}"
    );
    assert_eq!(
        outcome_count(
            &f.metrics,
            stackhook::metrics::ReconcileOutcome::transient_error
        ),
        1
    );
}

#[tokio::test]
async fn transient_error_backs_off_per_object_without_events() {
    use kube::runtime::controller::Action;
    use stackhook::controller::cluster::error_policy;
    let mut f = fixture(Behaviour::Transient);
    let o = Arc::new(osc(true, true));
    let mut delays = Vec::new();
    for _ in 0..3 {
        let task = tokio::spawn(reconcile(o.clone(), f.ctx.clone()));
        f.server
            .expect("GET", CLUSTER_PATH, 200, capi_cluster(false))
            .await;
        f.server.expect("GET", SECRET_PATH, 200, secret()).await;
        let err = finish(task).await.unwrap_err();
        assert!(err.to_string().contains("503 from Neutron"), "{err}");
        delays.push(error_policy(o.clone(), &err, f.ctx.clone()));
    }
    assert_eq!(
        delays,
        vec![
            Action::requeue(Duration::from_secs(5)),
            Action::requeue(Duration::from_secs(10)),
            Action::requeue(Duration::from_secs(20)),
        ]
    );
    assert_eq!(
        outcome_count(
            &f.metrics,
            stackhook::metrics::ReconcileOutcome::transient_error
        ),
        3
    );
    drop(f.ctx);
    // No status write, no Event.
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn deletion_waits_for_machines_then_removes_the_finalizer() {
    let mut f = fixture(Behaviour::DeleteDone);
    let o = deleting(osc(true, true));
    f.results.set(NS, "c1", Default::default());

    // Machines remain: no credentials read, no cloud call, no finalizer change.
    let task = f.start(&o).await;
    let list = f
        .server
        .expect("GET", MACHINES_PATH, 200, machine_list(&["prod-md-0-a"]))
        .await;
    assert!(
        list.query()
            .contains("labelSelector=cluster.x-k8s.io%2Fcluster-name%3Dprod"),
        "{}",
        list.uri
    );
    assert!(
        list.accept
            .as_deref()
            .unwrap_or_default()
            .contains("as=PartialObjectMetadataList"),
        "{:?}",
        list.accept
    );
    assert_eq!(
        finish(task).await.unwrap(),
        Action::requeue(Duration::from_secs(5))
    );
    assert!(f.calls.lock().unwrap().is_empty());

    // Machines gone: delete, then drop only our finalizer.
    let task = f.start(&o).await;
    f.server
        .expect("GET", MACHINES_PATH, 200, machine_list(&[]))
        .await;
    f.server.expect("GET", SECRET_PATH, 200, secret()).await;
    let fin = f.server.expect("PATCH", OSC_PATH, 200, osc_json(&o)).await;
    assert_eq!(
        fin.body,
        json!({"metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "7"}})
    );
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
    let calls = f.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "delete");
    assert_eq!(calls[0].1.machines_remaining, 0);
    assert!(
        f.results.get(NS, "c1").is_none(),
        "result dropped on delete"
    );
    drop(f.ctx);
    f.server.expect_no_more().await;
}

#[tokio::test]
async fn deleted_object_without_our_finalizer_is_left_alone() {
    let f = fixture(Behaviour::DeleteDone);
    let mut o = deleting(osc(true, false));
    o.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let action = reconcile(Arc::new(o), f.ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    drop(f.ctx);
    f.server.expect_no_more().await;
}

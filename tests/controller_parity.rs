//! CAPO features a CAPO user's manifests rely on, served by the OpenStackMachine
//! controller against a real Kubernetes API server (see tests/support/kube.rs), with a
//! recording stand-in for the cloud half:
//!
//! - `identityRef.type: ClusterIdentity`: the cluster-scoped OpenStackClusterIdentity's
//!   Secret is used from a namespace its `namespaceSelector` admits, and a namespace it
//!   does not admit is refused with `Ready=False IdentityNamespaceNotAllowed`;
//! - `image.imageRef`: the machine waits (`Ready=False WaitingForImage`) until the ORC
//!   Image is Available with a `status.id`, then boots that image; the bastion's too,
//!   through the cluster controller;
//! - `--watch-filter`: only objects with the filter's label value are reconciled, and
//!   each filter value has a Lease of its own.

use crate::kube_server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use stackhook::controller::cluster::{self, ClusterContext, Timing};
use stackhook::controller::machine::{self, MachineContext};
use stackhook::hooks::results::ClusterResults;
use stackhook::infra::api::{
    OpenStackCluster, OpenStackClusterStatus, OpenStackMachine, OpenStackMachineStatus,
};
use stackhook::infra::seam::{
    ClusterInfra, ClusterOutcome, ClusterScope, DeleteProgress, IdentitySecret, InfraError,
    MachineInfra, MachineOutcome, MachineScope, StatusSink,
};
use stackhook::kubernetes::capi::CapiResources;
use stackhook::kubernetes::leader::{lease_name, Attempt, LeaderElector, LeaseSettings};
use stackhook::metrics::ControllerMetrics;

const CAPI_RELEASE: &str = "cluster-api-v1.13.5";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const IMAGE_ID: &str = "7f5d3c0e-9d2a-4d8b-8a47-1e0f5b6c2a11";

/// What the cloud half was given for one machine.
#[derive(Clone, Debug, Default)]
struct Seen {
    reconciles: usize,
    /// `<namespace>/<name>` of the credentials Secret.
    identity: String,
    image_id: Option<String>,
}

/// A cloud half that boots nothing: every machine is ready at once.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
}

impl Recorder {
    fn get(&self, name: &str) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

impl MachineInfra for Recorder {
    async fn reconcile(
        &self,
        _scope: &MachineScope,
        machine: &OpenStackMachine,
        identity: &IdentitySecret,
        sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> Result<MachineOutcome, InfraError> {
        let name = machine.name_any();
        {
            let mut seen = self.seen.lock().unwrap();
            let entry = seen.entry(name.clone()).or_default();
            entry.reconciles += 1;
            entry.identity = format!("{}/{}", identity.namespace, identity.name);
            entry.image_id = machine.spec.image.id.clone();
        }
        let status = OpenStackMachineStatus {
            ready: Some(true),
            instance_id: Some(format!("server-{name}")),
            instance_state: Some("ACTIVE".into()),
            ..Default::default()
        };
        sink.save(&status).await?;
        Ok(MachineOutcome {
            status,
            provider_id: Some(format!("openstack:///server-{name}")),
            requeue_after: None,
        })
    }

    async fn delete(
        &self,
        _scope: &MachineScope,
        _machine: &OpenStackMachine,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> Result<DeleteProgress, InfraError> {
        Ok(DeleteProgress::Done)
    }
}

/// A cluster half that creates nothing: records the bastion image it was given.
#[derive(Clone, Default)]
struct ClusterRecorder {
    bastion_images: Arc<Mutex<Vec<Option<String>>>>,
}

impl ClusterInfra for ClusterRecorder {
    async fn reconcile(
        &self,
        _scope: &ClusterScope,
        cluster: &OpenStackCluster,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink,
    ) -> Result<ClusterOutcome, InfraError> {
        let image = cluster
            .spec
            .bastion
            .as_ref()
            .and_then(|b| b.spec.as_ref())
            .and_then(|s| s.image.id.clone());
        self.bastion_images.lock().unwrap().push(image);
        Ok(ClusterOutcome {
            status: OpenStackClusterStatus {
                ready: true,
                ..Default::default()
            },
            control_plane_endpoint: Some(("10.0.0.10".into(), 6443)),
            requeue_after: None,
        })
    }

    async fn delete(
        &self,
        _scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink,
    ) -> Result<DeleteProgress, InfraError> {
        Ok(DeleteProgress::Done)
    }
}

fn dynamic(
    client: &Client,
    ns: Option<&str>,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn create(api: &Api<DynamicObject>, object: Value) -> DynamicObject {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("create: {e}"))
}

/// `<repo>/../shared/capi`, where ORC's Image CRD is; `None` when absent.
fn orc_image_crd() -> Option<PathBuf> {
    let dir = match std::env::var_os("STACKHOOK_CAPI_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/capi"),
    };
    let path = dir.join("crds/orc/openstack.k-orc.cloud_images.yaml");
    path.is_file().then_some(path)
}

/// CAPI's CRDs and ours, applied.
async fn crds(api: &kube_server::ApiServer, client: &Client) {
    kube_server::apply_crds(client, &api.capi_crds(CAPI_RELEASE)).await;
    let ours: Vec<Value> = stackhook::infra::api::crds()
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    kube_server::apply_crds(client, &ours).await;
    kube_server::wait_for_preferred_version(client, "cluster.x-k8s.io", "v1beta2").await;
}

/// A provisioned CAPI Cluster `prod` and its OpenStackCluster with `identity_ref`.
async fn cluster(client: &Client, ns: &str, identity_ref: Value) {
    let clusters = dynamic(
        client,
        Some(ns),
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
    );
    create(
        &clusters,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": ns},
            "spec": {"infrastructureRef": {"apiGroup": GROUP, "kind": "OpenStackCluster", "name": "prod"}}
        }),
    )
    .await;
    clusters
        .patch_status(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
            ),
        )
        .await
        .expect("Cluster status");
    let oscs = dynamic(
        client,
        Some(ns),
        &format!("{GROUP}/v1beta1"),
        "OpenStackCluster",
        "openstackclusters",
    );
    create(
        &oscs,
        json!({
            "apiVersion": format!("{GROUP}/v1beta1"), "kind": "OpenStackCluster",
            "metadata": {"name": "prod", "namespace": ns,
                         "labels": {"cluster.x-k8s.io/cluster-name": "prod"}},
            "spec": {"identityRef": identity_ref}
        }),
    )
    .await;
}

/// A CAPI Machine, its bootstrap Secret and its OpenStackMachine (owned by it), with
/// `labels` on both and `image` as the OpenStackMachine's image.
async fn machine_pair(client: &Client, ns: &str, name: &str, labels: Value, image: Value) {
    let mut labels = labels;
    labels["cluster.x-k8s.io/cluster-name"] = json!("prod");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-boot")},
                "stringData": {"value": "#cloud-config\n"}
            }))
            .unwrap(),
        )
        .await
        .expect("bootstrap Secret");
    let machines = dynamic(
        client,
        Some(ns),
        "cluster.x-k8s.io/v1beta2",
        "Machine",
        "machines",
    );
    let m = create(
        &machines,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"clusterName": "prod",
                     "bootstrap": {"dataSecretName": format!("{name}-boot")},
                     "infrastructureRef": {"apiGroup": GROUP, "kind": "OpenStackMachine", "name": name}}
        }),
    )
    .await;
    let osms: Api<OpenStackMachine> = Api::namespaced(client.clone(), ns);
    let osm: OpenStackMachine = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1beta1"), "kind": "OpenStackMachine",
        "metadata": {"name": name, "namespace": ns, "labels": labels,
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "name": name, "uid": m.uid().unwrap(), "controller": true}]},
        "spec": {"flavor": "m1.tiny", "image": image}
    }))
    .unwrap();
    osms.create(&PostParams::default(), &osm)
        .await
        .expect("OpenStackMachine");
}

/// Runs a machine controller on `ns` until the returned sender is dropped or sent.
fn run_controller(
    client: &Client,
    ns: &str,
    recorder: &Recorder,
    filter: Option<&str>,
) -> tokio::sync::oneshot::Sender<()> {
    let ctx = Arc::new(
        MachineContext::new(
            client.clone(),
            recorder.clone(),
            CapiResources::at("v1beta2"),
            ControllerMetrics::default(),
            Timing::default(),
        )
        .with_watch_filter(filter.map(str::to_string)),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let ns = ns.to_string();
    tokio::spawn(async move {
        machine::run(ctx, Some(&ns), 4, async move {
            let _ = stopped.await;
        })
        .await
    });
    stop
}

/// The Ready condition's `(status, reason, message)`.
async fn ready(osms: &Api<OpenStackMachine>, name: &str) -> Option<(String, String, String)> {
    let osm = osms.get(name).await.ok()?;
    let value = serde_json::to_value(osm.status?).ok()?;
    value["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn cluster_identity_is_refused_outside_its_namespace_selector_and_image_ref_waits_for_orc() {
    let api = match kube_server::api_server() {
        Ok(api) => api,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    let Some(orc_crd) = orc_image_crd() else {
        println!(
            "skipping: ORC's Image CRD is not in ../shared/capi/crds/orc (set STACKHOOK_CAPI_DIR)"
        );
        return;
    };
    runtime().block_on(async {
        let client = api.client().await;
        crds(&api, &client).await;
        let orc = kube_server::yaml_documents(&std::fs::read_to_string(&orc_crd).unwrap());
        kube_server::apply_crds(&client, &orc).await;

        // The credentials live in a namespace of their own; one cluster namespace is
        // the tenant the identity admits, the other is not.
        let creds_ns = kube_server::namespace(&client, "osci-creds").await;
        kube_server::identity_secret(
            &client,
            &creds_ns,
            "cloud-creds",
            "clouds: {c: {auth: {auth_url: http://127.0.0.1:9/v3}}}",
        )
        .await;
        let allowed = kube_server::namespace(&client, "osci-blue").await;
        let refused = kube_server::namespace(&client, "osci-red").await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for (ns, tenant) in [(&allowed, "blue"), (&refused, "red")] {
            namespaces
                .patch(
                    ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"tenant": tenant}}})),
                )
                .await
                .expect("namespace labels");
        }
        // Cluster-scoped: named after this run's namespace so runs never share one.
        let identity_name = format!("shared-{creds_ns}");
        let identities = dynamic(
            &client,
            None,
            &format!("{GROUP}/v1alpha1"),
            "OpenStackClusterIdentity",
            "openstackclusteridentities",
        );
        create(
            &identities,
            json!({
                "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "OpenStackClusterIdentity",
                "metadata": {"name": identity_name},
                "spec": {"secretRef": {"name": "cloud-creds", "namespace": creds_ns},
                         "namespaceSelector": {"matchLabels": {"tenant": "blue"}}}
            }),
        )
        .await;
        let identity_ref = json!({"type": "ClusterIdentity", "name": identity_name, "cloudName": "c"});
        let recorder = Recorder::default();
        let mut stops = Vec::new();
        for ns in [&allowed, &refused] {
            cluster(&client, ns, identity_ref.clone()).await;
            stops.push(run_controller(&client, ns, &recorder, None));
        }
        let by_id = json!({"id": IMAGE_ID});
        machine_pair(&client, &allowed, "blue-0", json!({}), by_id.clone()).await;
        machine_pair(&client, &refused, "red-0", json!({}), by_id).await;

        let blue: Api<OpenStackMachine> = Api::namespaced(client.clone(), &allowed);
        let red: Api<OpenStackMachine> = Api::namespaced(client.clone(), &refused);
        kube_server::wait_up_to(Duration::from_secs(60), "blue-0 ready", async || {
            ready(&blue, "blue-0").await.is_some_and(|r| r.0 == "True")
        })
        .await;
        assert_eq!(
            recorder.get("blue-0").identity,
            format!("{creds_ns}/cloud-creds"),
            "the identity's Secret, from its own namespace"
        );
        kube_server::wait_up_to(Duration::from_secs(60), "red-0 refused", async || {
            ready(&red, "red-0")
                .await
                .is_some_and(|r| r.1 == "IdentityNamespaceNotAllowed")
        })
        .await;
        let (status, _, message) = ready(&red, "red-0").await.unwrap();
        assert_eq!(status, "False");
        assert!(
            message.contains(&refused) && message.contains(&identity_name),
            "{message}"
        );
        assert_eq!(recorder.get("red-0").reconciles, 0, "a refused machine reached the cloud half");

        // imageRef: an ORC Image as ORC writes it, first still uploading.
        let images = dynamic(&client, Some(&allowed), "openstack.k-orc.cloud/v1alpha1", "Image", "images");
        create(
            &images,
            json!({
                "apiVersion": "openstack.k-orc.cloud/v1alpha1", "kind": "Image",
                "metadata": {"name": "ubuntu-2404", "namespace": allowed},
                "spec": {"cloudCredentialsRef": {"secretName": "cloud-creds", "cloudName": "c"},
                         "managementPolicy": "managed",
                         "resource": {"content": {"diskFormat": "qcow2", "download": {"url": "http://127.0.0.1:9/ubuntu.qcow2"}}}}
            }),
        )
        .await;
        let progressing = |status: &str, reason: &str, message: &str| {
            json!({"type": "Available", "status": status, "reason": reason, "message": message,
                   "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
        };
        images
            .patch_status(
                "ubuntu-2404",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"id": IMAGE_ID, "downloadAttempts": 1, "conditions": [
                    progressing("False", "Progressing", "Image upload in progress"),
                    {"type": "Progressing", "status": "True", "reason": "Progressing",
                     "message": "Image upload in progress", "lastTransitionTime": "2026-01-01T00:00:00Z",
                     "observedGeneration": 1}]}})),
            )
            .await
            .expect("Image status");
        machine_pair(&client, &allowed, "blue-img", json!({}), json!({"imageRef": {"name": "ubuntu-2404"}})).await;
        kube_server::wait_up_to(Duration::from_secs(30), "blue-img waiting for its image", async || {
            ready(&blue, "blue-img")
                .await
                .is_some_and(|r| r.1 == "WaitingForImage" && r.2.contains("Image upload in progress"))
        })
        .await;
        assert_eq!(recorder.get("blue-img").reconciles, 0, "booted before the image was available");

        images
            .patch_status(
                "ubuntu-2404",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [
                    progressing("True", "Success", "OpenStack resource is available"),
                    {"type": "Progressing", "status": "False", "reason": "Success",
                     "message": "OpenStack resource is up to date", "lastTransitionTime": "2026-01-01T00:00:00Z",
                     "observedGeneration": 1}]}})),
            )
            .await
            .expect("Image status");
        // The wait is a requeue (10 s), not a watch of ORC's objects.
        kube_server::wait_up_to(Duration::from_secs(40), "blue-img ready", async || {
            ready(&blue, "blue-img").await.is_some_and(|r| r.0 == "True")
        })
        .await;
        assert_eq!(recorder.get("blue-img").image_id.as_deref(), Some(IMAGE_ID));

        drop(stops);
        for ns in [&allowed, &refused, &creds_ns] {
            kube_server::delete_namespace(&client, ns).await;
        }
        let _ = identities.delete(&identity_name, &Default::default()).await;
    });
}

#[test]
fn watch_filter_reconciles_its_shard_only_with_a_lease_per_shard() {
    let api = match kube_server::api_server() {
        Ok(api) => api,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    runtime().block_on(async {
        let client = api.client().await;
        crds(&api, &client).await;
        let ns = kube_server::namespace(&client, "watch-filter").await;
        kube_server::identity_secret(
            &client,
            &ns,
            "cloud-creds",
            "clouds: {c: {auth: {auth_url: http://127.0.0.1:9/v3}}}",
        )
        .await;
        cluster(
            &client,
            &ns,
            json!({"name": "cloud-creds", "cloudName": "c"}),
        )
        .await;
        let recorder = Recorder::default();
        let stop = run_controller(&client, &ns, &recorder, Some("shard-a"));
        let image = json!({"id": IMAGE_ID});
        let label = |v: &str| json!({"cluster.x-k8s.io/watch-filter": v});
        machine_pair(&client, &ns, "in-a", label("shard-a"), image.clone()).await;
        machine_pair(&client, &ns, "in-b", label("shard-b"), image.clone()).await;
        machine_pair(&client, &ns, "unlabelled", json!({}), image).await;

        let osms: Api<OpenStackMachine> = Api::namespaced(client.clone(), &ns);
        kube_server::wait_up_to(Duration::from_secs(60), "in-a ready", async || {
            ready(&osms, "in-a").await.is_some_and(|r| r.0 == "True")
        })
        .await;
        // A Machine change would wake its OpenStackMachine: not outside the shard.
        let machines = dynamic(
            &client,
            Some(&ns),
            "cluster.x-k8s.io/v1beta2",
            "Machine",
            "machines",
        );
        for name in ["in-b", "unlabelled"] {
            machines
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"failureDomain": "az2"}})),
                )
                .await
                .expect("Machine patch");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        for name in ["in-b", "unlabelled"] {
            assert_eq!(recorder.get(name).reconciles, 0, "{name} was reconciled");
            let osm = osms.get(name).await.expect("get");
            assert!(osm.finalizers().is_empty(), "{name} got a finalizer");
            assert!(osm.status.is_none(), "{name} got a status");
        }

        // Moving an object into the shard hands it to this manager.
        osms.patch(
            "in-b",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"cluster.x-k8s.io/watch-filter": "shard-a"}}}),
            ),
        )
        .await
        .expect("relabel");
        kube_server::wait_up_to(
            Duration::from_secs(60),
            "in-b ready once in the shard",
            async || ready(&osms, "in-b").await.is_some_and(|r| r.0 == "True"),
        )
        .await;
        drop(stop);

        // Leader election per shard: managers of two shards both lead at once; a
        // second manager of the same shard does not.
        let settings = |filter: &str, who: &str| LeaseSettings {
            namespace: ns.clone(),
            name: lease_name("stackhook-controllers", Some(filter)),
            identity: who.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        let mut a1 = LeaderElector::new(client.clone(), settings("shard-a", "pod-a1"));
        let mut b1 = LeaderElector::new(client.clone(), settings("shard-b", "pod-b1"));
        let mut a2 = LeaderElector::new(client.clone(), settings("shard-a", "pod-a2"));
        let now = Instant::now();
        assert_eq!(
            a1.try_acquire_or_renew(now).await.expect("a1"),
            Attempt::Leading
        );
        assert_eq!(
            b1.try_acquire_or_renew(now).await.expect("b1"),
            Attempt::Leading
        );
        assert_eq!(
            a2.try_acquire_or_renew(now).await.expect("a2"),
            Attempt::HeldBy("pod-a1".into())
        );
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &ns);
        let mut names: Vec<String> = leases
            .list(&Default::default())
            .await
            .expect("leases")
            .items
            .iter()
            .map(|l| l.name_any())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "stackhook-controllers-shard-a",
                "stackhook-controllers-shard-b"
            ]
        );
        kube_server::delete_namespace(&client, &ns).await;
    });
}

#[test]
fn the_bastion_waits_for_its_orc_image() {
    let api = match kube_server::api_server() {
        Ok(api) => api,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    let Some(orc_crd) = orc_image_crd() else {
        println!(
            "skipping: ORC's Image CRD is not in ../shared/capi/crds/orc (set STACKHOOK_CAPI_DIR)"
        );
        return;
    };
    runtime().block_on(async {
        let client = api.client().await;
        crds(&api, &client).await;
        let orc = kube_server::yaml_documents(&std::fs::read_to_string(&orc_crd).unwrap());
        kube_server::apply_crds(&client, &orc).await;
        let ns = kube_server::namespace(&client, "bastion-image").await;
        kube_server::identity_secret(
            &client,
            &ns,
            "cloud-creds",
            "clouds: {c: {auth: {auth_url: http://127.0.0.1:9/v3}}}",
        )
        .await;
        let images = dynamic(&client, Some(&ns), "openstack.k-orc.cloud/v1alpha1", "Image", "images");
        create(
            &images,
            json!({
                "apiVersion": "openstack.k-orc.cloud/v1alpha1", "kind": "Image",
                "metadata": {"name": "bastion-img", "namespace": ns},
                "spec": {"cloudCredentialsRef": {"secretName": "cloud-creds", "cloudName": "c"},
                         "managementPolicy": "managed",
                         "resource": {"content": {"diskFormat": "qcow2", "download": {"url": "http://127.0.0.1:9/b.qcow2"}}}}
            }),
        )
        .await;
        // The CAPI Cluster owns the OpenStackCluster, as CAPI sets it.
        let clusters = dynamic(&client, Some(&ns), "cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
        let capi_cluster = create(
            &clusters,
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "prod", "namespace": ns},
                "spec": {"infrastructureRef": {"apiGroup": GROUP, "kind": "OpenStackCluster", "name": "prod"}}
            }),
        )
        .await;
        let oscs = dynamic(&client, Some(&ns), &format!("{GROUP}/v1beta1"), "OpenStackCluster", "openstackclusters");
        create(
            &oscs,
            json!({
                "apiVersion": format!("{GROUP}/v1beta1"), "kind": "OpenStackCluster",
                "metadata": {"name": "prod", "namespace": ns,
                    "labels": {"cluster.x-k8s.io/cluster-name": "prod"},
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                        "name": "prod", "uid": capi_cluster.uid().unwrap(), "controller": true}]},
                "spec": {"identityRef": {"name": "cloud-creds", "cloudName": "c"},
                         "bastion": {"spec": {"flavor": "m1.small", "image": {"imageRef": {"name": "bastion-img"}}}}}
            }),
        )
        .await;
        let infra = ClusterRecorder::default();
        let ctx = Arc::new(ClusterContext::new(
            client.clone(),
            infra.clone(),
            CapiResources::at("v1beta2"),
            ClusterResults::new(),
            ControllerMetrics::default(),
            Timing::default(),
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let ns_run = ns.clone();
        tokio::spawn(async move {
            cluster::run(ctx, Some(&ns_run), 2, async move {
                let _ = stopped.await;
            })
            .await
        });
        let typed: Api<OpenStackCluster> = Api::namespaced(client.clone(), &ns);
        let condition = async || -> Option<(String, String, String)> {
            let value = serde_json::to_value(typed.get("prod").await.ok()?.status?).ok()?;
            value["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready").map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (s("status"), s("reason"), s("message"))
            })
        };
        kube_server::wait_up_to(Duration::from_secs(30), "the cluster waiting for the bastion image", async || {
            condition().await.is_some_and(|c| c.1 == "WaitingForImage" && c.2.starts_with("bastion:"))
        })
        .await;
        assert!(infra.bastion_images.lock().unwrap().is_empty(), "the cloud half ran before the image was there");

        images
            .patch_status(
                "bastion-img",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"id": IMAGE_ID, "conditions": [
                    {"type": "Available", "status": "True", "reason": "Success",
                     "message": "OpenStack resource is available", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
            )
            .await
            .expect("Image status");
        kube_server::wait_up_to(Duration::from_secs(40), "the cloud half run with the image", async || {
            !infra.bastion_images.lock().unwrap().is_empty()
        })
        .await;
        assert_eq!(
            infra.bastion_images.lock().unwrap()[0].as_deref(),
            Some(IMAGE_ID)
        );
        drop(stop);
        kube_server::delete_namespace(&client, &ns).await;
    });
}

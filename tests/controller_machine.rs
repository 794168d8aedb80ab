//! The OpenStackMachine controller's watches against a real Kubernetes API server
//! (see tests/support/kube.rs), with a recording stand-in for the cloud half: the
//! objects CAPI makes (Cluster v1beta2, Machines, bootstrap Secrets) reach the
//! reconcile through metadata-only watches; the controller's own status writes start
//! no reconcile; and a control-plane machine that has gone wakes the other
//! control-plane machines of its cluster at once, not at the next resync.

use crate::kube_server;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use stackhook::controller::cluster::Timing;
use stackhook::controller::machine::{self, MachineContext};
use stackhook::infra::api::{OpenStackMachine, OpenStackMachineStatus};
use stackhook::infra::seam::{
    DeleteProgress, IdentitySecret, InfraError, MachineInfra, MachineOutcome, MachineScope,
    StatusSink,
};
use stackhook::kubernetes::capi::CapiResources;
use stackhook::metrics::ControllerMetrics;

const CAPI_RELEASE: &str = "cluster-api-v1.13.5";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// A cloud half that boots nothing: every machine is ready at once (status written
/// through the sink, as the real one does), deletion is done at once; every call is
/// recorded by machine name.
#[derive(Clone, Default)]
struct Recorder {
    reconciles: Arc<Mutex<BTreeMap<String, usize>>>,
    deletes: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Recorder {
    fn reconciles(&self, name: &str) -> usize {
        self.reconciles
            .lock()
            .unwrap()
            .get(name)
            .copied()
            .unwrap_or(0)
    }
    fn deletes(&self, name: &str) -> usize {
        self.deletes.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl MachineInfra for Recorder {
    async fn reconcile(
        &self,
        _scope: &MachineScope,
        machine: &OpenStackMachine,
        _identity: &IdentitySecret,
        sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> Result<MachineOutcome, InfraError> {
        let name = machine.name_any();
        *self
            .reconciles
            .lock()
            .unwrap()
            .entry(name.clone())
            .or_default() += 1;
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
        machine: &OpenStackMachine,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> Result<DeleteProgress, InfraError> {
        *self
            .deletes
            .lock()
            .unwrap()
            .entry(machine.name_any())
            .or_default() += 1;
        Ok(DeleteProgress::Done)
    }
}

fn dynamic(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &kube::api::ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn create(api: &Api<DynamicObject>, object: Value) -> DynamicObject {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("create: {e}"))
}

/// A CAPI Machine, its bootstrap Secret and its OpenStackMachine (owned by it).
async fn machine_pair(client: &Client, ns: &str, name: &str, control_plane: bool) {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": "prod"});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
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
        ns,
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
        "spec": {"flavor": "m1.tiny", "image": {"id": "7f5d3c0e-9d2a-4d8b-8a47-1e0f5b6c2a11"}}
    }))
    .unwrap();
    osms.create(&PostParams::default(), &osm)
        .await
        .expect("OpenStackMachine");
}

#[test]
fn machines_are_woken_by_capi_objects_and_siblings_not_by_their_status() {
    let api = match kube_server::api_server() {
        Ok(api) => api,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = api.client().await;
        kube_server::apply_crds(&client, &api.capi_crds(CAPI_RELEASE)).await;
        let ours: Vec<Value> = stackhook::infra::api::crds()
            .into_iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        kube_server::apply_crds(&client, &ours).await;
        kube_server::wait_for_preferred_version(&client, "cluster.x-k8s.io", "v1beta2").await;
        let ns = kube_server::namespace(&client, "machine-watch").await;

        // The cluster side, as CAPI and the cluster controller leave it.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "cloud-creds"},
                    "stringData": {"clouds.yaml": "clouds: {c: {auth: {auth_url: http://127.0.0.1:9/v3}}}"}
                }))
                .unwrap(),
            )
            .await
            .expect("identity Secret");
        let clusters = dynamic(&client, &ns, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
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
                &Patch::Merge(json!({"status": {"initialization": {"infrastructureProvisioned": true}}})),
            )
            .await
            .expect("Cluster status");
        let oscs = dynamic(&client, &ns, &format!("{GROUP}/v1beta1"), "OpenStackCluster", "openstackclusters");
        create(
            &oscs,
            json!({
                "apiVersion": format!("{GROUP}/v1beta1"), "kind": "OpenStackCluster",
                "metadata": {"name": "prod", "namespace": ns,
                             "labels": {"cluster.x-k8s.io/cluster-name": "prod"}},
                "spec": {"identityRef": {"name": "cloud-creds", "cloudName": "c"}}
            }),
        )
        .await;

        let recorder = Recorder::default();
        let ctx = Arc::new(MachineContext::new(
            client.clone(),
            recorder.clone(),
            CapiResources::at("v1beta2"),
            ControllerMetrics::default(),
            Timing::default(),
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let ns_run = ns.clone();
        let controller = tokio::spawn(async move {
            machine::run(ctx, Some(&ns_run), 4, async move {
                let _ = stopped.await;
            })
            .await
        });

        for (name, cp) in [("cp-a", true), ("cp-b", true), ("md-a", false)] {
            machine_pair(&client, &ns, name, cp).await;
        }
        let osms: Api<OpenStackMachine> = Api::namespaced(client.clone(), &ns);
        kube_server::wait_up_to(Duration::from_secs(60), "three ready machines", async || {
            let mut ready = 0;
            for name in ["cp-a", "cp-b", "md-a"] {
                if let Ok(o) = osms.get(name).await {
                    ready += usize::from(
                        o.status.as_ref().and_then(|s| s.ready) == Some(true)
                            && o.spec.provider_id.is_some(),
                    );
                }
            }
            ready == 3
        })
        .await;
        // The providerID write comes back once; after that, only the resync (10 min).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let settled: Vec<usize> = ["cp-a", "cp-b", "md-a"]
            .iter()
            .map(|n| recorder.reconciles(n))
            .collect();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let later: Vec<usize> = ["cp-a", "cp-b", "md-a"]
            .iter()
            .map(|n| recorder.reconciles(n))
            .collect();
        assert_eq!(later, settled, "reconciles without a change");

        // A status write by someone else (or a stale retry of ours) starts nothing.
        osms.patch_status(
            "md-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"instanceState": "ACTIVE", "addresses": [
                {"type": "InternalIP", "address": "10.0.0.9"}]}})),
        )
        .await
        .expect("status patch");
        // A spec change of the Machine (its failure domain) does, through the
        // Machine's metadata watch and its owner reference.
        let machines = dynamic(&client, &ns, "cluster.x-k8s.io/v1beta2", "Machine", "machines");
        machines
            .patch(
                "cp-a",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"failureDomain": "az2"}})),
            )
            .await
            .expect("Machine patch");
        kube_server::wait_up_to(Duration::from_secs(20), "cp-a reconciled after its Machine changed", async || {
            recorder.reconciles("cp-a") > settled[0]
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(recorder.reconciles("md-a"), settled[2], "a status-only change started a reconcile");

        // cp-a goes: cp-b, its control-plane sibling, is reconciled at once; the worker
        // is not.
        let before_b = recorder.reconciles("cp-b");
        let before_md = recorder.reconciles("md-a");
        osms.delete("cp-a", &DeleteParams::default())
            .await
            .expect("delete cp-a");
        kube_server::wait_up_to(Duration::from_secs(30), "cp-a gone", async || {
            matches!(osms.get_opt("cp-a").await, Ok(None))
        })
        .await;
        assert_eq!(recorder.deletes("cp-a"), 1);
        kube_server::wait_up_to(Duration::from_secs(15), "cp-b woken by its sibling's end", async || {
            recorder.reconciles("cp-b") > before_b
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(recorder.reconciles("md-a"), before_md, "the worker was woken");

        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), controller).await;
        kube_server::delete_namespace(&client, &ns).await;
    });
}

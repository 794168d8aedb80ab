//! The OpenStackMachine controller: the Kubernetes half of CAPO's machine reconcile
//! (owner Machine, pause, finalizer, the Cluster's infrastructure, bootstrap data,
//! credentials, status, `spec.providerID`, Events), driving any [`MachineInfra`] for
//! the cloud half.
//!
//! Order follows CAPO v0.14: nothing happens until CAPI has set the Machine owner
//! reference; a paused Cluster (or paused object) is left alone; the finalizer is
//! persisted before any cloud call; no server is created before the Cluster's
//! infrastructure is provisioned and the Machine's bootstrap data exists.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerRunConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::backoff::Backoff;
use super::capo_server;
use super::cluster::Timing;
use super::driver::{self, set_finalizers};
use super::image::{self, ImageRefPass};
use super::status::PatchStatusSink;
use crate::infra::api::machine::MachineInitialization;
use crate::infra::api::names::{
    conditions, CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, MACHINE_FINALIZER,
};
use crate::infra::api::{OpenStackCluster, OpenStackMachine, OpenStackMachineStatus};
use crate::infra::conditions::{self as cond, Severity};
use crate::infra::seam::{DeleteProgress, InfraError, MachineInfra, MachineScope, SinkError};
use crate::kubernetes::capi::{self, CapiResources};
use crate::kubernetes::identity::{read_identity, IdentityError};
use crate::kubernetes::watch;
use crate::metrics::{ControllerMetrics, ReconcileOutcome};

/// Name of this controller in metrics and logs.
pub const CONTROLLER: &str = "openstackmachine";
/// `reportingController` of the Events it publishes.
pub const REPORTER: &str = "stackhook-openstackmachine";
/// Label CAPI puts on the Machines of a MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Key of the bootstrap data in the Machine's bootstrap Secret.
pub const BOOTSTRAP_DATA_KEY: &str = "value";
/// While the Cluster's infrastructure or the bootstrap data is not there yet. The
/// Machine watch wakes the reconcile earlier when the data Secret is named.
const WAITING: Duration = Duration::from_secs(10);

type Sink = PatchStatusSink<OpenStackMachine, OpenStackMachineStatus>;

/// Everything a reconcile needs; shared by all reconciles of the controller.
pub struct MachineContext<I> {
    pub client: Client,
    pub infra: I,
    pub capi: CapiResources,
    pub recorder: Recorder,
    pub metrics: ControllerMetrics,
    pub timing: Timing,
    /// `--watch-filter`: reconcile only objects with this watch-filter label value.
    pub watch_filter: Option<String>,
    backoff: Backoff,
}

impl<I: MachineInfra> MachineContext<I> {
    pub fn new(
        client: Client,
        infra: I,
        capi: CapiResources,
        metrics: ControllerMetrics,
        timing: Timing,
    ) -> MachineContext<I> {
        let reporter = Reporter {
            controller: REPORTER.to_string(),
            instance: crate::kubernetes::leader::default_identity_host(),
        };
        MachineContext {
            recorder: Recorder::new(client.clone(), reporter),
            backoff: Backoff::new(timing.backoff_base, timing.backoff_cap),
            client,
            infra,
            capi,
            metrics,
            timing,
            watch_filter: None,
        }
    }

    /// Reconciles only the objects whose `cluster.x-k8s.io/watch-filter` label is
    /// `filter` (CAPI's `--watch-filter`); `None` or empty reconciles all.
    pub fn with_watch_filter(mut self, filter: Option<String>) -> Self {
        self.watch_filter = filter.filter(|f| !f.is_empty());
        self
    }
}

pub use super::driver::ReconcileError;

/// One reconcile, counted and timed, in a span naming the object.
#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        namespace = %osm.namespace().unwrap_or_default(),
        name = %osm.name_any(),
    )
)]
pub async fn reconcile<I: MachineInfra>(
    osm: Arc<OpenStackMachine>,
    ctx: Arc<MachineContext<I>>,
) -> Result<Action, ReconcileError> {
    let work = reconcile_inner(&osm, &ctx);
    driver::counted(CONTROLLER, &ctx.metrics, &ctx.backoff, &*osm, work).await
}

/// Transient failures: exponential backoff per object, logged but no Event.
pub fn error_policy<I: MachineInfra>(
    osm: Arc<OpenStackMachine>,
    err: &ReconcileError,
    ctx: Arc<MachineContext<I>>,
) -> Action {
    driver::retry(&ctx.backoff, &*osm, err)
}

fn has_finalizer(osm: &OpenStackMachine) -> bool {
    driver::has_finalizer(osm, MACHINE_FINALIZER)
}

fn text<'a>(obj: &'a DynamicObject, pointer: &str) -> Option<&'a str> {
    obj.data
        .pointer(pointer)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
}

/// What was read around the OpenStackMachine before the cloud half runs.
struct Around {
    machine: Option<DynamicObject>,
    cluster: Option<DynamicObject>,
    openstack_cluster: Option<OpenStackCluster>,
    cluster_name: String,
    machine_name: String,
}

async fn read_around<I: MachineInfra>(
    osm: &OpenStackMachine,
    ctx: &MachineContext<I>,
    ns: &str,
) -> Result<Option<Around>, ReconcileError> {
    let deleting = osm.metadata.deletion_timestamp.is_some();
    let owner = capi::owner_machine_name(osm);
    let machine = match &owner {
        Some(name) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), ns, &ctx.capi.machine);
            api.get_opt(name).await?
        }
        None => None,
    };
    if machine.is_none() && !deleting {
        tracing::debug!("waiting for CAPI to set the Machine owner reference");
        return Ok(None);
    }
    let cluster_name = osm.labels().get(CLUSTER_NAME_LABEL).cloned().or_else(|| {
        machine
            .as_ref()
            .and_then(|m| text(m, "/spec/clusterName"))
            .map(str::to_string)
    });
    let Some(cluster_name) = cluster_name else {
        if deleting {
            // Nothing names the cluster: the cloud half still finds the machine's
            // resources through what its status recorded.
            return Ok(Some(Around {
                machine,
                cluster: None,
                openstack_cluster: None,
                cluster_name: String::new(),
                machine_name: owner.unwrap_or_else(|| osm.name_any()),
            }));
        }
        tracing::debug!("waiting for the cluster-name label");
        return Ok(None);
    };
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &ctx.capi.cluster);
    let cluster = clusters.get_opt(&cluster_name).await?;
    let osc_name = cluster
        .as_ref()
        .and_then(|c| text(c, "/spec/infrastructureRef/name"))
        .map(str::to_string);
    let openstack_cluster = match osc_name {
        Some(n) => {
            Api::<OpenStackCluster>::namespaced(ctx.client.clone(), ns)
                .get_opt(&n)
                .await?
        }
        None => None,
    };
    Ok(Some(Around {
        machine,
        cluster,
        openstack_cluster,
        cluster_name,
        machine_name: owner.unwrap_or_else(|| osm.name_any()),
    }))
}

async fn reconcile_inner<I: MachineInfra>(
    osm: &OpenStackMachine,
    ctx: &MachineContext<I>,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    let ns = osm.namespace().ok_or(ReconcileError::NoNamespace)?;
    let deleting = osm.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer(osm) {
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    let Some(around) = read_around(osm, ctx, &ns).await? else {
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    };
    if capi::is_paused(around.cluster.as_ref(), osm) {
        tracing::debug!("paused");
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    // A machine CAPO v0.14 made: its ports are in CAPO's OpenStackServer.
    let adopted;
    // The lookup is best effort: a cluster that never ran CAPO may not serve the kind
    // the way the lookup expects, and a machine must not wait on CAPO's leftovers;
    // without the adoption its resources are still found by name.
    let osm = if capo_server::may_need_adoption(osm) {
        match capo_server::adopt(&ctx.client, &ns, osm).await {
            Ok(Some(a)) => {
                adopted = a;
                &adopted
            }
            Ok(None) => osm,
            Err(e) => {
                tracing::warn!(error = %e, "CAPO's OpenStackServer not read; not adopted");
                osm
            }
        }
    } else {
        osm
    };
    let api: Api<OpenStackMachine> = Api::namespaced(ctx.client.clone(), &ns);
    if deleting {
        return cleanup(osm, ctx, &api, around, &ns).await;
    }
    if !has_finalizer(osm) {
        set_finalizers(&api, osm, |f| f.push(MACHINE_FINALIZER.to_string())).await?;
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    apply(osm, ctx, &api, around, &ns).await
}

/// The scope of the cloud half; `bootstrap_data` is filled by the caller.
fn scope(around: &Around, ns: &str, openstack_cluster: OpenStackCluster) -> MachineScope {
    let machine = around.machine.as_ref();
    let label = |k: &str| machine.and_then(|m| m.labels().get(k).cloned());
    MachineScope {
        namespace: ns.to_string(),
        cluster_name: around.cluster_name.clone(),
        machine_name: around.machine_name.clone(),
        control_plane: label(CONTROL_PLANE_LABEL).is_some(),
        deployment: label(DEPLOYMENT_LABEL),
        failure_domain: machine
            .and_then(|m| text(m, "/spec/failureDomain"))
            .map(str::to_string),
        bootstrap_data: None,
        cluster: openstack_cluster,
    }
}

/// The Secret the machine's credentials come from: its own `identityRef`, else the
/// cluster's.
async fn identity_for(
    client: &Client,
    osm: &OpenStackMachine,
    osc: &OpenStackCluster,
) -> Result<crate::infra::seam::IdentitySecret, IdentityError> {
    match &osm.spec.identity_ref {
        Some(own) => {
            let mut with_own = osc.clone();
            with_own.spec.identity_ref = (**own).clone();
            read_identity(client, &with_own).await
        }
        None => read_identity(client, osc).await,
    }
}

async fn apply<I: MachineInfra>(
    osm: &OpenStackMachine,
    ctx: &MachineContext<I>,
    api: &Api<OpenStackMachine>,
    around: Around,
    ns: &str,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    let name = osm.name_any();
    let sink: Sink = PatchStatusSink::new(api.clone(), &name, osm.status.as_ref())
        .counting(ctx.metrics.status_writes(CONTROLLER));
    let ready_infra = around
        .cluster
        .as_ref()
        .is_some_and(capi::infrastructure_ready);
    let Some(osc) = around.openstack_cluster.clone().filter(|_| ready_infra) else {
        tracing::debug!("waiting for the Cluster's infrastructure");
        waiting(
            &sink,
            "WaitingForClusterInfrastructure",
            "the Cluster's infrastructure is not provisioned yet",
        )
        .await?;
        return Ok((Action::requeue(WAITING), ReconcileOutcome::waiting));
    };
    let data_secret = around
        .machine
        .as_ref()
        .and_then(|m| text(m, "/spec/bootstrap/dataSecretName"))
        .map(str::to_string);
    let Some(data_secret) = data_secret else {
        tracing::debug!("waiting for the bootstrap data");
        waiting(
            &sink,
            "WaitingForBootstrapData",
            "the Machine's bootstrap data Secret is not set yet",
        )
        .await?;
        return Ok((Action::requeue(WAITING), ReconcileOutcome::waiting));
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let data = secrets
        .get_opt(&data_secret)
        .await?
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove(BOOTSTRAP_DATA_KEY))
        .map(|b| b.0);
    let Some(data) = data else {
        waiting(
            &sink,
            "WaitingForBootstrapData",
            &format!("bootstrap Secret {ns}/{data_secret} has no {BOOTSTRAP_DATA_KEY:?} key yet"),
        )
        .await?;
        return Ok((Action::requeue(WAITING), ReconcileOutcome::waiting));
    };
    let identity = match identity_for(&ctx.client, osm, &osc).await {
        Ok(i) => i,
        Err(IdentityError::User { reason, message }) => {
            return user_error(osm, ctx, &sink, "Reconcile", reason, &message).await;
        }
        Err(IdentityError::Api(e)) => return Err(e.into()),
    };
    let resolved_ref;
    let already = osm
        .status
        .as_ref()
        .and_then(|s| s.resolved.as_ref())
        .is_some_and(|r| r.image_id.is_some());
    let osm = match image::image_ref_pass(&ctx.client, ns, &osm.spec.image, already).await? {
        ImageRefPass::Unchanged => osm,
        ImageRefPass::Id(id) => {
            let mut with_id = osm.clone();
            with_id.spec.image = image::with_id(id);
            resolved_ref = with_id;
            &resolved_ref
        }
        ImageRefPass::Waiting(message) => {
            tracing::debug!(%message, "waiting for the ORC Image");
            waiting(&sink, image::WAITING_FOR_IMAGE, &message).await?;
            return Ok((Action::requeue(WAITING), ReconcileOutcome::waiting));
        }
    };
    let mut scope = scope(&around, ns, osc);
    scope.bootstrap_data = Some(data.into());
    let outcome = match ctx.infra.reconcile(&scope, osm, &identity, &sink).await {
        Ok(o) => o,
        Err(InfraError::User { reason, message }) => {
            return user_error(osm, ctx, &sink, "Reconcile", &reason, &message).await;
        }
        Err(e) => return Err(e.into()),
    };
    if let (None, Some(id)) = (&osm.spec.provider_id, &outcome.provider_id) {
        let patch = json!({"spec": {"providerID": id}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let mut status = outcome.status;
    let ready = status.ready == Some(true);
    if cond::find(&status.conditions, conditions::READY).is_none() || ready {
        if ready {
            cond::mark_true(&mut status.conditions, conditions::READY);
        } else {
            cond::mark_false(
                &mut status.conditions,
                conditions::READY,
                "Provisioning",
                Severity::Info,
                "the server is being created",
            );
        }
    }
    if ready {
        status
            .initialization
            .get_or_insert_with(MachineInitialization::default)
            .provisioned = Some(true);
    }
    sink.write(&status).await?;
    let action = Action::requeue(outcome.requeue_after.unwrap_or(ctx.timing.resync));
    Ok((action, ReconcileOutcome::success))
}

/// Ready=False with why the machine waits, written only when it changes.
async fn waiting(sink: &Sink, reason: &str, message: &str) -> Result<(), SinkError> {
    let mut status = sink.last();
    if status.ready == Some(true) {
        return Ok(());
    }
    cond::mark_false(
        &mut status.conditions,
        conditions::READY,
        reason,
        Severity::Info,
        message,
    );
    sink.write(&status).await
}

async fn cleanup<I: MachineInfra>(
    osm: &OpenStackMachine,
    ctx: &MachineContext<I>,
    api: &Api<OpenStackMachine>,
    around: Around,
    ns: &str,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    let name = osm.name_any();
    let sink: Sink = PatchStatusSink::new(api.clone(), &name, osm.status.as_ref())
        .counting(ctx.metrics.status_writes(CONTROLLER));
    let created_nothing = osm
        .status
        .as_ref()
        .is_none_or(|s| s.instance_id.is_none() && s.resources.is_none());
    let Some(osc) = around.openstack_cluster.clone() else {
        if created_nothing {
            set_finalizers(api, osm, |f| f.retain(|x| x != MACHINE_FINALIZER)).await?;
            return Ok((Action::await_change(), ReconcileOutcome::success));
        }
        // The credentials live with the cluster; without it nothing can be deleted.
        return user_error(
            osm,
            ctx,
            &sink,
            "Delete",
            "ClusterNotFound",
            "the OpenStackCluster is gone, so the server's credentials are unknown",
        )
        .await;
    };
    let identity = match identity_for(&ctx.client, osm, &osc).await {
        Ok(i) => i,
        Err(IdentityError::User { reason, message }) => {
            return user_error(osm, ctx, &sink, "Delete", reason, &message).await;
        }
        Err(IdentityError::Api(e)) => return Err(e.into()),
    };
    let scope = scope(&around, ns, osc);
    match ctx.infra.delete(&scope, osm, &identity, &sink).await {
        Ok(DeleteProgress::Done) => {
            set_finalizers(api, osm, |f| f.retain(|x| x != MACHINE_FINALIZER)).await?;
            tracing::info!("server and its resources deleted; finalizer removed");
            Ok((Action::await_change(), ReconcileOutcome::success))
        }
        Ok(DeleteProgress::Requeue { after, reason }) => {
            tracing::info!(%reason, "deletion in progress");
            Ok((Action::requeue(after), ReconcileOutcome::waiting))
        }
        Err(InfraError::User { reason, message }) => {
            user_error(osm, ctx, &sink, "Delete", &reason, &message).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Ready=False with the reason, a Warning Event, and a slow retry.
async fn user_error<I: MachineInfra>(
    osm: &OpenStackMachine,
    ctx: &MachineContext<I>,
    sink: &Sink,
    action: &str,
    reason: &str,
    message: &str,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    driver::user_error(
        &ctx.recorder,
        &ctx.timing,
        osm,
        sink,
        action,
        reason,
        message,
    )
    .await
}

/// Runs the controller until `shutdown` resolves (then lets running reconciles
/// finish).
pub async fn run<I: MachineInfra>(
    ctx: Arc<MachineContext<I>>,
    namespace: Option<&str>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let osm_api: Api<OpenStackMachine> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    tracing::info!(
        namespace = namespace.unwrap_or("<all>"),
        watch_filter = ctx.watch_filter.as_deref().unwrap_or("<none>"),
        concurrency,
        "OpenStackMachine controller starting"
    );
    let gone_api: Api<PartialObjectMeta<OpenStackMachine>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (cache, osms) = watch::cached(osm_api, ctx.watch_filter.as_deref());
    let machines = watch::metadata(client.clone(), namespace, &ctx.capi.machine);
    let clusters = watch::metadata(client, namespace, &ctx.capi.cluster);
    let gone = watch::deleted(gone_api);
    let (by_machine, by_cluster, siblings) = (cache.clone(), cache.clone(), cache.clone());
    let results = Controller::for_stream(osms, cache)
        .with_config(ControllerRunConfig::default().concurrency(concurrency))
        .watches_stream_with(
            machines,
            move |machine| watch::owned_by(&by_machine, "Machine", None, &machine),
            ctx.capi.machine.clone(),
        )
        // CAPO wakes a cluster's machines when the Cluster is unpaused.
        .watches_stream_with(
            clusters,
            move |cluster| {
                watch::owned_by(&by_cluster, "Cluster", Some(CLUSTER_NAME_LABEL), &cluster)
            },
            ctx.capi.cluster.clone(),
        )
        // Without a load balancer the API floating IP sits on one control-plane
        // machine; when that one has gone, the others take it over at once.
        .watches_stream(gone, move |osm| {
            watch::control_plane_siblings(&siblings, &osm)
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx);
    driver::drain(results).await;
    tracing::info!("OpenStackMachine controller stopped");
}

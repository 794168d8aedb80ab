//! The OpenStackCluster controller: the Kubernetes half of CAPO's cluster
//! reconcile (owner, pause, finalizer, credentials, status, endpoint, Events),
//! driving any [`ClusterInfra`] for the cloud half.
//!
//! Order follows CAPO v0.14: nothing happens until CAPI has set the owner
//! reference; a paused Cluster (or paused object) is left alone; the finalizer
//! is persisted before any cloud call; deletion waits until the cluster's
//! Machines are gone.
//!
//! Beyond CAPO, each pass publishes the machines' reservations in
//! `status.extensions.nodeResources` and keeps the Secret `<cluster>-bootstrap-vars`
//! current; a machine change that matters to either, or an edit or deletion of
//! that Secret, starts a pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerRunConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::backoff::Backoff;
use super::converged::{self, Converged};
use super::driver::{self, set_finalizers};
use super::image::{self, ImageRefPass};
use super::status::PatchStatusSink;
use crate::addons::install::{self, ClusterFacts, InstallError};
use crate::hooks::results::{ClusterResult, ClusterResults};
use crate::infra::api::names::{conditions, CLUSTER_FINALIZER, CLUSTER_NAME_LABEL};
use crate::infra::api::types::ApiEndpoint;
use crate::infra::api::{cluster::ClusterInitialization, OpenStackCluster, OpenStackMachine};
use crate::infra::bootstrap::{self, MachineFacts};
use crate::infra::conditions::{self as cond, Severity};
use crate::infra::seam::IdentitySecret;
use crate::infra::seam::{ClusterInfra, ClusterOutcome, ClusterScope, DeleteProgress, InfraError};
use crate::kubernetes::bootstrap_vars::{self, SecretChange};
use crate::kubernetes::capi::{self, CapiResources};
use crate::kubernetes::identity::{read_identity, IdentityError};
use crate::kubernetes::resource_set::{self, ResourceSetApi};
use crate::kubernetes::watch;
use crate::metrics::{ControllerMetrics, ReconcileOutcome};

/// Name of this controller in metrics and logs.
pub const CONTROLLER: &str = "openstackcluster";
/// `reportingController` of the Events it publishes.
pub const REPORTER: &str = "stackhook-openstackcluster";

/// Requeue periods; tests shorten them.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Re-check a converged cluster this often (CAPO's sync period).
    pub resync: Duration,
    /// Retry after a user error; a spec or Secret change is the real fix.
    pub user_error: Duration,
    /// Poll while the cluster's Machines are being deleted (CAPO: 5 s).
    pub machines: Duration,
    /// Retry while the owning Cluster object cannot be found.
    pub missing_cluster: Duration,
    /// First delay of the per-object exponential backoff on transient errors.
    pub backoff_base: Duration,
    /// Largest backoff delay.
    pub backoff_cap: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            resync: Duration::from_secs(600),
            user_error: Duration::from_secs(300),
            machines: Duration::from_secs(5),
            missing_cluster: Duration::from_secs(60),
            backoff_base: Duration::from_secs(5),
            backoff_cap: Duration::from_secs(300),
        }
    }
}

/// Everything a reconcile needs; shared by all reconciles of the controller.
pub struct ClusterContext<I> {
    pub client: Client,
    pub infra: I,
    pub capi: CapiResources,
    pub recorder: Recorder,
    pub results: ClusterResults,
    pub metrics: ControllerMetrics,
    pub timing: Timing,
    /// `--watch-filter`: reconcile only objects with this watch-filter label value.
    pub watch_filter: Option<String>,
    backoff: Backoff,
    converged: Converged,
    /// CAPI's addons kinds, discovered at the first cluster with addons.
    resource_sets: tokio::sync::OnceCell<Option<ResourceSetApi>>,
}

impl<I: ClusterInfra> ClusterContext<I> {
    pub fn new(
        client: Client,
        infra: I,
        capi: CapiResources,
        results: ClusterResults,
        metrics: ControllerMetrics,
        timing: Timing,
    ) -> ClusterContext<I> {
        let reporter = Reporter {
            controller: REPORTER.to_string(),
            instance: crate::kubernetes::leader::default_identity_host(),
        };
        ClusterContext {
            recorder: Recorder::new(client.clone(), reporter),
            backoff: Backoff::new(timing.backoff_base, timing.backoff_cap),
            converged: Converged::default(),
            resource_sets: tokio::sync::OnceCell::new(),
            client,
            infra,
            capi,
            results,
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

/// One reconcile, with its outcome counted and timed. Its span names the object, so
/// every line the cloud half logs meanwhile carries the namespace and name.
#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        namespace = %osc.namespace().unwrap_or_default(),
        name = %osc.name_any(),
    )
)]
pub async fn reconcile<I: ClusterInfra>(
    osc: Arc<OpenStackCluster>,
    ctx: Arc<ClusterContext<I>>,
) -> Result<Action, ReconcileError> {
    let work = reconcile_inner(&osc, &ctx);
    driver::counted(CONTROLLER, &ctx.metrics, &ctx.backoff, &*osc, work).await
}

/// Transient failures: exponential backoff per object, logged but no Event.
pub fn error_policy<I: ClusterInfra>(
    osc: Arc<OpenStackCluster>,
    err: &ReconcileError,
    ctx: Arc<ClusterContext<I>>,
) -> Action {
    driver::retry(&ctx.backoff, &*osc, err)
}

fn has_finalizer(osc: &OpenStackCluster) -> bool {
    driver::has_finalizer(osc, CLUSTER_FINALIZER)
}

async fn reconcile_inner<I: ClusterInfra>(
    osc: &OpenStackCluster,
    ctx: &ClusterContext<I>,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    let ns = osc.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = osc.name_any();
    let deleting = osc.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer(osc) {
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    let owner = capi::owner_cluster_name(osc);
    let cluster_name = match owner.clone() {
        Some(n) => n,
        // Deleting after the owner reference went away: the finalizer is ours,
        // so clean up under the name CAPI labelled the object with.
        None if deleting => osc
            .labels()
            .get(CLUSTER_NAME_LABEL)
            .cloned()
            .unwrap_or_else(|| name.clone()),
        None => {
            tracing::debug!("waiting for CAPI to set the Cluster owner reference");
            return Ok((Action::await_change(), ReconcileOutcome::skipped));
        }
    };
    let cluster = match owner {
        Some(_) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &ns, &ctx.capi.cluster);
            api.get_opt(&cluster_name).await?
        }
        None => None,
    };
    if cluster.is_none() && !deleting {
        tracing::info!(cluster = %cluster_name, "owner Cluster not found");
        return Ok((
            Action::requeue(ctx.timing.missing_cluster),
            ReconcileOutcome::skipped,
        ));
    }
    if capi::is_paused(cluster.as_ref(), osc) {
        tracing::debug!("paused");
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    // A bastion CAPO v0.14 made has an OpenStackServer with CAPO's finalizer that no
    // controller here runs; released best effort, as for machines (one read per pass,
    // only for clusters whose status records a bastion).
    let adopted;
    let osc = match osc.status.as_ref().and_then(|s| s.bastion.as_ref()) {
        Some(bastion) => match super::capo_server::release_bastion(&ctx.client, &ns, &name).await {
            // CAPO keeps the bastion's ports in its OpenStackServer: recorded in our
            // status too (written now, and the pass goes on with them), they are
            // adopted as they are.
            Ok(Some(resources)) if bastion.resources.is_none() => {
                let api: Api<OpenStackCluster> = Api::namespaced(ctx.client.clone(), &ns);
                let patch = json!({"status": {"bastion": {"resources": &resources}}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                tracing::info!("adopted the ports of CAPO's bastion OpenStackServer");
                let mut o = osc.clone();
                match serde_json::from_value(resources) {
                    Ok(r) => {
                        if let Some(b) = o.status.as_mut().and_then(|s| s.bastion.as_mut()) {
                            b.resources = Some(r);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "CAPO's bastion status.resources not read")
                    }
                }
                adopted = o;
                &adopted
            }
            Ok(_) => osc,
            Err(e) => {
                tracing::warn!(error = %e, "CAPO's bastion OpenStackServer not read");
                osc
            }
        },
        None => osc,
    };
    let api: Api<OpenStackCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let scope = ClusterScope {
        namespace: ns.clone(),
        cluster_name,
        machines_remaining: 0,
    };
    if deleting {
        ctx.converged.forget(&ns, &name);
        return cleanup(osc, ctx, &api, scope).await;
    }
    if !has_finalizer(osc) {
        set_finalizers(&api, osc, |f| f.push(CLUSTER_FINALIZER.to_string())).await?;
        // The write comes back as a watch event, which starts the real work.
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    apply(osc, ctx, &api, scope, cluster.as_ref()).await
}

async fn apply<I: ClusterInfra>(
    osc: &OpenStackCluster,
    ctx: &ClusterContext<I>,
    api: &Api<OpenStackCluster>,
    scope: ClusterScope,
    cluster: Option<&DynamicObject>,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    let name = osc.name_any();
    let sink = PatchStatusSink::new(api.clone(), &name, osc.status.as_ref())
        .counting(ctx.metrics.status_writes(CONTROLLER));
    let identity = match read_identity(&ctx.client, osc).await {
        Ok(i) => i,
        Err(IdentityError::User { reason, message }) => {
            return user_error(osc, ctx, &sink, "Reconcile", reason, &message).await;
        }
        Err(IdentityError::Api(e)) => return Err(e.into()),
    };
    let with_bastion_image;
    let osc = match bastion_image(osc, ctx, &scope.namespace).await? {
        ImageRefPass::Unchanged => osc,
        ImageRefPass::Id(id) => {
            let mut resolved = osc.clone();
            if let Some(spec) = resolved.spec.bastion.as_mut().and_then(|b| b.spec.as_mut()) {
                spec.image = image::with_id(id);
            }
            with_bastion_image = resolved;
            &with_bastion_image
        }
        ImageRefPass::Waiting(message) => {
            tracing::debug!(%message, "waiting for the bastion's ORC Image");
            let mut status = sink.last();
            if !status.ready {
                cond::mark_false(
                    &mut status.conditions,
                    conditions::READY,
                    image::WAITING_FOR_IMAGE,
                    Severity::Info,
                    &format!("bastion: {message}"),
                );
                sink.write(&status).await?;
            }
            return Ok((Action::requeue(IMAGE_WAIT), ReconcileOutcome::waiting));
        }
    };
    let until_resync = ctx.converged.until_resync(
        &scope.namespace,
        &name,
        converged::inputs(osc, &identity),
        ctx.timing.resync,
    );
    let cloud_pass = Instant::now();
    let outcome = match until_resync {
        // Nothing the cloud pass reads has changed since it found everything in
        // place: this pass publishes the machines, the cloud waits for the resync.
        Some(left) => {
            tracing::debug!(?left, "converged; republishing without a cloud pass");
            ClusterOutcome {
                status: osc.status.clone().unwrap_or_default(),
                control_plane_endpoint: None,
                requeue_after: Some(left),
            }
        }
        None => match ctx.infra.reconcile(&scope, osc, &identity, &sink).await {
            Ok(o) => o,
            Err(InfraError::User { reason, message }) => {
                ctx.converged.forget(&scope.namespace, &name);
                return user_error(osc, ctx, &sink, "Reconcile", &reason, &message).await;
            }
            Err(e) => {
                ctx.converged.forget(&scope.namespace, &name);
                return Err(e.into());
            }
        },
    };

    // The endpoint goes first: CAPI copies it once the object reports ready.
    let mut updated = osc.clone();
    let endpoint_unset = osc
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_none_or(|e| e.host.is_empty());
    let endpoint_patch = endpoint_unset && outcome.control_plane_endpoint.is_some();
    if let (true, Some((host, port))) = (endpoint_unset, &outcome.control_plane_endpoint) {
        let patch = json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": port}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        updated.spec.control_plane_endpoint = Some(Box::new(ApiEndpoint {
            host: host.clone(),
            port: *port,
        }));
    }

    let mut status = outcome.status;
    // Listed live, not from a cache: the event that started this pass may be
    // the machine change the Secret has to show.
    let machines =
        bootstrap_vars::machines_of(&ctx.client, &scope.namespace, &scope.cluster_name).await?;
    let node_resources = bootstrap::node_resources(&machines);
    if !node_resources.is_empty() || status.extensions.is_some() {
        status
            .extensions
            .get_or_insert_with(Default::default)
            .node_resources = node_resources;
    }
    if cond::find(&status.conditions, conditions::READY).is_none() {
        if status.ready {
            cond::mark_true(&mut status.conditions, conditions::READY);
        } else {
            cond::mark_false(
                &mut status.conditions,
                conditions::READY,
                "Provisioning",
                Severity::Info,
                "cloud resources are being created",
            );
        }
    }
    if status.ready {
        status
            .initialization
            .get_or_insert_with(ClusterInitialization::default)
            .provisioned = Some(true);
    }
    if let (Some(_), Some(cluster)) = (
        updated
            .spec
            .extensions
            .as_ref()
            .and_then(|e| e.addons.as_ref()),
        cluster,
    ) {
        let mut with_status = updated.clone();
        with_status.status = Some(status.clone());
        let result = addons_pass(ctx, &with_status, cluster, &scope, &identity).await;
        match result {
            Ok(message) => {
                cond::mark_true(&mut status.conditions, ADDONS_READY);
                tracing::debug!(%message, "addons current");
            }
            Err(AddonsPass::Waiting(message)) => cond::mark_false(
                &mut status.conditions,
                ADDONS_READY,
                "Waiting",
                Severity::Info,
                &message,
            ),
            Err(AddonsPass::Failed(message)) => {
                tracing::warn!(%message, "addons not rendered");
                cond::mark_false(
                    &mut status.conditions,
                    ADDONS_READY,
                    "AddonsFailed",
                    Severity::Warning,
                    &message,
                )
            }
            Err(AddonsPass::Kube(e)) => return Err(e.into()),
        }
    } else {
        status.conditions.retain(|c| c.type_ != ADDONS_READY);
    }
    sink.write(&status).await?;
    updated.status = Some(status);
    let left = converged::inputs(&updated, &identity);
    match until_resync {
        Some(_) => ctx.converged.republished(&scope.namespace, &name, left),
        // The endpoint patch changes the object again: the pass it starts asks the
        // cloud once more, and converges then.
        None if outcome.requeue_after.is_none() && !endpoint_patch => {
            ctx.converged
                .converged(&scope.namespace, &name, left, cloud_pass)
        }
        None => ctx.converged.forget(&scope.namespace, &name),
    }
    ctx.results.set(
        &scope.namespace,
        &name,
        ClusterResult::from_cluster(&updated),
    );
    match bootstrap_vars::ensure(&ctx.client, &updated, &scope.cluster_name, &machines).await? {
        SecretChange::Unchanged => {}
        change => tracing::info!(
            secret = %bootstrap::secret_name(&scope.cluster_name),
            ?change,
            "bootstrap vars written"
        ),
    }
    let action = Action::requeue(outcome.requeue_after.unwrap_or(ctx.timing.resync));
    Ok((action, ReconcileOutcome::success))
}

/// The OpenStackCluster's condition about its addons' resource set.
pub const ADDONS_READY: &str = "AddonsReady";

enum AddonsPass {
    Waiting(String),
    Failed(String),
    Kube(kube::Error),
}

/// Keeps the addons' ClusterResourceSet current with the cloud's facts. The
/// Kubernetes version stays the recorded one: for a topology Cluster only the
/// AfterControlPlaneUpgrade hook moves it.
async fn addons_pass<I: ClusterInfra>(
    ctx: &ClusterContext<I>,
    osc: &OpenStackCluster,
    cluster: &DynamicObject,
    scope: &ClusterScope,
    identity: &IdentitySecret,
) -> Result<String, AddonsPass> {
    if osc.status.as_ref().is_none_or(|s| !s.ready) {
        return Err(AddonsPass::Waiting(
            "waiting for the cluster's network and endpoint".into(),
        ));
    }
    let api = ctx
        .resource_sets
        .get_or_try_init(|| ResourceSetApi::discover(&ctx.client))
        .await
        .map_err(AddonsPass::Kube)?;
    let Some(api) = api else {
        return Err(AddonsPass::Failed(format!(
            "the API server does not serve {}: CAPI's ClusterResourceSet CRDs are missing",
            resource_set::GROUP
        )));
    };
    let addons = osc
        .spec
        .extensions
        .as_ref()
        .and_then(|e| e.addons.clone())
        .unwrap_or_default();
    let facts = ctx
        .infra
        .addon_facts(identity, addons.cinder_csi())
        .await
        .map_err(|e| AddonsPass::Failed(e.to_string()))?;
    // DynamicObject keeps metadata apart; the Magnum label is read from it.
    let mut cluster_json = cluster.data.clone();
    cluster_json["metadata"] = serde_json::to_value(&cluster.metadata).unwrap_or_default();
    let provider = capi::cloud_provider_cluster_name(osc, &cluster_json, &scope.cluster_name);
    let facts_of_cluster = ClusterFacts::of(&cluster_json, &scope.cluster_name, provider);
    match install::ensure(&ctx.client, api, osc, &facts_of_cluster, &facts, None).await {
        Ok(done) => {
            if !done.changes.is_empty() {
                tracing::info!(
                    written = ?done.changes.written,
                    removed = ?done.changes.removed,
                    kubernetes = %done.kubernetes_version,
                    "addons resource set written"
                );
            }
            Ok(format!(
                "addons for Kubernetes {} in ClusterResourceSet {}",
                done.kubernetes_version,
                crate::addons::resource_set_name(&scope.cluster_name)
            ))
        }
        Err(InstallError::Kube(e)) => Err(AddonsPass::Kube(e)),
        Err(e @ InstallError::NoVersion) => Err(AddonsPass::Waiting(e.to_string())),
        Err(e) => Err(AddonsPass::Failed(e.to_string())),
    }
}

/// While the bastion's ORC Image is not available (the machines' wait, too).
const IMAGE_WAIT: Duration = Duration::from_secs(10);

/// The bastion's `image.imageRef`, resolved until the bastion's status records the
/// image it booted. Only an enabled bastion's image is looked at.
async fn bastion_image<I: ClusterInfra>(
    osc: &OpenStackCluster,
    ctx: &ClusterContext<I>,
    namespace: &str,
) -> Result<ImageRefPass, ReconcileError> {
    let Some(spec) = osc
        .spec
        .bastion
        .as_ref()
        .filter(|b| b.enabled != Some(false))
        .and_then(|b| b.spec.as_ref())
    else {
        return Ok(ImageRefPass::Unchanged);
    };
    let already = osc
        .status
        .as_ref()
        .and_then(|s| s.bastion.as_ref())
        .and_then(|b| b.resolved.as_ref())
        .is_some_and(|r| r.image_id.is_some());
    Ok(image::image_ref_pass(&ctx.client, namespace, &spec.image, already).await?)
}

async fn cleanup<I: ClusterInfra>(
    osc: &OpenStackCluster,
    ctx: &ClusterContext<I>,
    api: &Api<OpenStackCluster>,
    mut scope: ClusterScope,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    let name = osc.name_any();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &scope.namespace, &ctx.capi.machine);
    let selector = format!("{CLUSTER_NAME_LABEL}={}", scope.cluster_name);
    let remaining = machines
        .list_metadata(&ListParams::default().labels(&selector))
        .await?
        .items
        .len();
    if remaining > 0 {
        tracing::info!(
            machines = remaining,
            "deletion waits for the cluster's Machines"
        );
        return Ok((
            Action::requeue(ctx.timing.machines),
            ReconcileOutcome::waiting,
        ));
    }
    scope.machines_remaining = remaining;
    let sink = PatchStatusSink::new(api.clone(), &name, osc.status.as_ref())
        .counting(ctx.metrics.status_writes(CONTROLLER));
    let identity = match read_identity(&ctx.client, osc).await {
        Ok(i) => i,
        Err(IdentityError::User { reason, message }) => {
            return user_error(osc, ctx, &sink, "Delete", reason, &message).await;
        }
        Err(IdentityError::Api(e)) => return Err(e.into()),
    };
    match ctx.infra.delete(&scope, osc, &identity, &sink).await {
        Ok(DeleteProgress::Done) => {
            if osc
                .spec
                .extensions
                .as_ref()
                .and_then(|e| e.addons.as_ref())
                .is_some()
            {
                let rs = ctx
                    .resource_sets
                    .get_or_try_init(|| ResourceSetApi::discover(&ctx.client))
                    .await?;
                let n = resource_set::remove(
                    &ctx.client,
                    rs.as_ref(),
                    &scope.namespace,
                    &scope.cluster_name,
                )
                .await?;
                if n > 0 {
                    tracing::info!(objects = n, "addons resource set removed");
                }
            }
            set_finalizers(api, osc, |f| f.retain(|x| x != CLUSTER_FINALIZER)).await?;
            ctx.results.remove(&scope.namespace, &name);
            tracing::info!("cloud resources deleted; finalizer removed");
            Ok((Action::await_change(), ReconcileOutcome::success))
        }
        Ok(DeleteProgress::Requeue { after, reason }) => {
            tracing::info!(%reason, "deletion in progress");
            Ok((Action::requeue(after), ReconcileOutcome::waiting))
        }
        Err(InfraError::User { reason, message }) => {
            user_error(osc, ctx, &sink, "Delete", &reason, &message).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Ready=False with the reason, a Warning Event, and a slow retry.
async fn user_error<I: ClusterInfra>(
    osc: &OpenStackCluster,
    ctx: &ClusterContext<I>,
    sink: &PatchStatusSink,
    action: &str,
    reason: &str,
    message: &str,
) -> Result<(Action, ReconcileOutcome), ReconcileError> {
    driver::user_error(
        &ctx.recorder,
        &ctx.timing,
        osc,
        sink,
        action,
        reason,
        message,
    )
    .await
}

/// Runs the controller until `shutdown` resolves (then lets running reconciles
/// finish).
pub async fn run<I: ClusterInfra>(
    ctx: Arc<ClusterContext<I>>,
    namespace: Option<&str>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let osc_api: Api<OpenStackCluster> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    tracing::info!(
        namespace = namespace.unwrap_or("<all>"),
        watch_filter = ctx.watch_filter.as_deref().unwrap_or("<none>"),
        concurrency,
        "OpenStackCluster controller starting"
    );
    let (secret_api, osm_api): (Api<PartialObjectMeta<Secret>>, Api<OpenStackMachine>) =
        match namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
    // Only the Secrets this controller writes, and only their metadata: an edit or a
    // deletion is what starts a pass, and their data stays out of this process.
    let secrets = watch::labelled_metadata(secret_api.clone(), bootstrap::SECRET_LABEL);
    let addon_secrets = watch::labelled_metadata(secret_api, resource_set::SECRET_LABEL);
    let (cache, oscs) = watch::cached(osc_api, ctx.watch_filter.as_deref());
    let clusters = watch::metadata(client, namespace, &ctx.capi.cluster);
    let owned = cache.clone();
    let triggers = MachineTriggers::new(cache.clone());
    // Machines of other shards are not watched either: with a filter, a cluster's
    // objects all carry its label, as CAPI expects of them.
    let machine_selector = match ctx.watch_filter.as_deref() {
        Some(f) => format!("{CLUSTER_NAME_LABEL},{}", watch::filter_selector(f)),
        None => CLUSTER_NAME_LABEL.to_string(),
    };
    let results = Controller::for_stream(oscs, cache)
        .with_config(ControllerRunConfig::default().concurrency(concurrency))
        .watches_stream_with(
            clusters,
            move |cluster| watch::owned_by(&owned, "Cluster", Some(CLUSTER_NAME_LABEL), &cluster),
            ctx.capi.cluster.clone(),
        )
        .owns_stream(secrets)
        .owns_stream(addon_secrets)
        .watches_with(
            osm_api,
            (),
            watch::config().labels(&machine_selector),
            move |osm| triggers.changed(&osm),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx);
    driver::drain(results).await;
    tracing::info!("OpenStackCluster controller stopped");
}

/// Decides which OpenStackMachine events start a pass of their cluster: only
/// changes to what the cluster publishes about its machines (name, role,
/// address, reservations, keepalived interface, deletion), so the status writes
/// of a machine being built do not each cost a pass over the cloud.
pub struct MachineTriggers {
    clusters: Store<OpenStackCluster>,
    seen: Mutex<HashMap<(String, String), Published>>,
}

/// The part of [`MachineFacts`] that reaches the cluster's status and Secret.
#[derive(Clone, Debug, PartialEq)]
struct Published {
    cluster: String,
    control_plane: bool,
    address: Option<String>,
    node_resources: Option<crate::infra::api::extensions::NodeResources>,
    keepalived_interface: Option<String>,
    deleting: bool,
}

impl MachineTriggers {
    pub fn new(clusters: Store<OpenStackCluster>) -> MachineTriggers {
        MachineTriggers {
            clusters,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The cluster to reconcile for this machine event, if any.
    pub fn changed(&self, osm: &OpenStackMachine) -> Option<ObjectRef<OpenStackCluster>> {
        let facts = MachineFacts::from_machine(osm)?;
        let namespace = osm.namespace()?;
        let now = Published {
            cluster: facts.cluster_name.clone(),
            control_plane: facts.control_plane,
            address: facts.address,
            node_resources: facts.node_resources,
            keepalived_interface: facts.keepalived_interface,
            deleting: facts.deleting,
        };
        let key = (namespace.clone(), facts.name);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let before = seen.get(&key);
            if before == Some(&now) {
                // The final event of a deleted machine repeats the last one:
                // forget it, so the map does not grow with every machine ever seen.
                if now.deleting {
                    seen.remove(&key);
                }
                return None;
            }
            seen.insert(key, now);
        }
        self.cluster_of(&namespace, &facts.cluster_name)
    }

    /// The OpenStackCluster whose owner is the CAPI Cluster `cluster`.
    fn cluster_of(&self, namespace: &str, cluster: &str) -> Option<ObjectRef<OpenStackCluster>> {
        self.clusters
            .state()
            .iter()
            .find(|o| {
                o.namespace().as_deref() == Some(namespace)
                    && capi::owner_cluster_name(o).as_deref() == Some(cluster)
            })
            .map(|o| ObjectRef::from_obj(o.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::types::NodeAddress;
    use crate::infra::api::{OpenStackClusterSpec, OpenStackMachineStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    fn store() -> Store<OpenStackCluster> {
        let mut writer: Writer<OpenStackCluster> = Writer::default();
        let mut osc = OpenStackCluster::new("prod-x1", OpenStackClusterSpec::default());
        osc.metadata.namespace = Some("ns".into());
        osc.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Cluster".into(),
            name: "prod".into(),
            uid: "u".into(),
            ..Default::default()
        }]);
        writer.apply_watcher_event(&Event::Apply(osc));
        writer.as_reader()
    }

    fn machine(status: Option<&str>) -> OpenStackMachine {
        let mut m: OpenStackMachine = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": "prod-md-0-a", "namespace": "ns",
                "labels": {"cluster.x-k8s.io/cluster-name": "prod"}},
            "spec": {"flavor": "m1.small", "image": {"id": "img"}}
        }))
        .unwrap();
        m.status = status.map(|ip| OpenStackMachineStatus {
            addresses: vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            }],
            ..Default::default()
        });
        m
    }

    #[test]
    fn only_published_machine_changes_start_a_pass() {
        let t = MachineTriggers::new(store());
        let want = Some(ObjectRef::new("prod-x1").within("ns"));
        assert_eq!(t.changed(&machine(None)), want, "first sight");
        assert_eq!(t.changed(&machine(None)), None, "nothing published changed");
        let mut building = machine(None);
        building.status = Some(OpenStackMachineStatus {
            instance_id: Some("srv-1".into()),
            ..Default::default()
        });
        assert_eq!(
            t.changed(&building),
            None,
            "an instance ID is not published"
        );
        assert_eq!(t.changed(&machine(Some("10.6.0.7"))), want, "an address is");

        let mut other = machine(None);
        other.metadata.labels = Some(
            [(
                "cluster.x-k8s.io/cluster-name".to_string(),
                "other".to_string(),
            )]
            .into(),
        );
        assert_eq!(
            t.changed(&other),
            None,
            "no OpenStackCluster for that Cluster"
        );

        let mut gone = machine(Some("10.6.0.7"));
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert_eq!(t.changed(&gone), want, "deletion leaves the inventory");
        assert_eq!(t.changed(&gone), None);
        assert!(
            t.seen.lock().unwrap().is_empty(),
            "deleted machines are forgotten"
        );
    }
}

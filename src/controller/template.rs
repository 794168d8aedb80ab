//! The OpenStackMachineTemplate controller: keeps each template's `status.capacity`
//! and `status.nodeInfo` ([`crate::infra::template`]) current from its flavor and
//! image, so the cluster-autoscaler can scale its MachineDeployment up from zero.
//!
//! As CAPO's: a template belongs to the cluster its `cluster.x-k8s.io/cluster-name`
//! label names (CAPI's topology sets it), and is read with that cluster's
//! credentials, or its own `identityRef`. A template that names no cluster and has
//! no identity of its own is left alone. Flavors and images are looked at again
//! every `resync`, so a changed image property or a flavor recreated under the same
//! name reaches the status; the status is written only when it changes.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerRunConfig, Controller};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Map, Value};
use stackhook_openstack::compute::Compute;
use stackhook_openstack::ClientCache;

use super::backoff::Backoff;
use super::cluster::Timing;
use super::driver::{self, ReconcileError};
use super::image::{resolve_image_ref, ImageRefState};
use crate::infra::api::names::CLUSTER_NAME_LABEL;
use crate::infra::api::{
    OpenStackCluster, OpenStackMachineTemplate, OpenStackMachineTemplateStatus,
};
use crate::infra::cluster::CloudSource;
use crate::infra::machine::resolve_image;
use crate::infra::seam::InfraError;
use crate::kubernetes::capi::CapiResources;
use crate::kubernetes::identity::{read_identity, IdentityError};
use crate::kubernetes::watch;
use crate::metrics::{ControllerMetrics, ReconcileOutcome};

/// Name of this controller in metrics and logs.
pub const CONTROLLER: &str = "openstackmachinetemplate";
/// Annotation CAPI sets to pause reconciliation of an object.
const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// Everything a reconcile needs.
pub struct TemplateContext {
    pub client: Client,
    pub clouds: Arc<ClientCache>,
    pub capi: CapiResources,
    pub metrics: ControllerMetrics,
    /// How often flavors and images are looked at again.
    pub resync: Duration,
    /// Retry after a problem only a change fixes (no such flavor, no credentials).
    pub user_error: Duration,
    pub watch_filter: Option<String>,
    backoff: Backoff,
}

impl TemplateContext {
    pub fn new(
        client: Client,
        clouds: Arc<ClientCache>,
        capi: CapiResources,
        metrics: ControllerMetrics,
        timing: &Timing,
    ) -> TemplateContext {
        TemplateContext {
            client,
            clouds,
            capi,
            metrics,
            resync: timing.resync,
            user_error: timing.user_error,
            watch_filter: None,
            backoff: Backoff::new(timing.backoff_base, timing.backoff_cap),
        }
    }

    pub fn with_watch_filter(mut self, filter: Option<String>) -> Self {
        self.watch_filter = filter;
        self
    }
}

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(
        controller = CONTROLLER,
        namespace = %t.namespace().unwrap_or_default(),
        name = %t.name_any(),
    )
)]
pub async fn reconcile(
    t: Arc<OpenStackMachineTemplate>,
    ctx: Arc<TemplateContext>,
) -> Result<Action, ReconcileError> {
    let work = reconcile_inner(&t, &ctx);
    driver::counted(CONTROLLER, &ctx.metrics, &ctx.backoff, &*t, work).await
}

pub fn error_policy(
    t: Arc<OpenStackMachineTemplate>,
    err: &ReconcileError,
    ctx: Arc<TemplateContext>,
) -> Action {
    driver::retry(&ctx.backoff, &*t, err)
}

/// The credentials to read the template's flavor and image with: its own
/// `identityRef`, else its cluster's OpenStackCluster's. `None` when neither is
/// known (yet).
async fn credentials_of(
    t: &OpenStackMachineTemplate,
    ctx: &TemplateContext,
    ns: &str,
) -> Result<Option<OpenStackCluster>, ReconcileError> {
    let cluster = match t.labels().get(CLUSTER_NAME_LABEL) {
        Some(name) => {
            let clusters: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), ns, &ctx.capi.cluster);
            clusters.get_opt(name).await?
        }
        None => None,
    };
    // A paused Cluster's objects are left to whoever paused it (a move, a takeover).
    if cluster
        .as_ref()
        .is_some_and(|c| c.data.pointer("/spec/paused") == Some(&Value::Bool(true)))
    {
        return Ok(None);
    }
    if let Some(own) = &t.spec.template.spec.identity_ref {
        let mut holder = OpenStackCluster::new(&t.name_any(), Default::default());
        holder.metadata.namespace = Some(ns.to_string());
        holder.spec.identity_ref = (**own).clone();
        return Ok(Some(holder));
    }
    let Some(osc_name) = cluster
        .as_ref()
        .and_then(|c| c.data.pointer("/spec/infrastructureRef/name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    Ok(Api::<OpenStackCluster>::namespaced(ctx.client.clone(), ns)
        .get_opt(osc_name)
        .await?)
}

/// A problem only a change of the spec, the Secret or the cloud fixes.
fn user(reason: &str, message: impl Into<String>) -> InfraError {
    InfraError::User {
        reason: reason.to_string(),
        message: message.into(),
    }
}

/// The status the template's flavor and image give, asked of the cloud.
async fn observe(
    t: &OpenStackMachineTemplate,
    ctx: &TemplateContext,
    ns: &str,
    osc: &OpenStackCluster,
) -> Result<OpenStackMachineTemplateStatus, InfraError> {
    let identity = read_identity(&ctx.client, osc).await.map_err(|e| match e {
        IdentityError::User { reason, message } => user(reason, message),
        IdentityError::Api(e) => InfraError::Transient {
            reason: "IdentityUnreadable".into(),
            message: e.to_string(),
            retry_after: None,
            unavailable: false,
        },
    })?;
    let clients = ctx
        .clouds
        .clients_for(&identity)
        .map_err(|e| user("InvalidIdentity", e.to_string()))?;
    let spec = &t.spec.template.spec;
    let flavors = clients
        .compute
        .flavors()
        .await
        .map_err(|e| crate::infra::cluster::os("FlavorLookupFailed", e))?;
    let flavor = match (&spec.flavor_id, &spec.flavor) {
        (Some(id), _) if !id.is_empty() => flavors.iter().find(|f| &f.id == id),
        (_, Some(name)) if !name.is_empty() => flavors.iter().find(|f| &f.name == name),
        _ => return Err(user("InvalidMachineSpec", "the template names no flavor")),
    }
    .ok_or_else(|| {
        user(
            "FlavorNotFound",
            format!(
                "flavor {} is not in Nova",
                spec.flavor_id
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .or(spec.flavor.as_deref())
                    .unwrap_or_default()
            ),
        )
    })?;
    let mut flavor = flavor.clone();
    if flavor.extra_specs.is_empty() {
        flavor.extra_specs = clients
            .compute
            .flavor_extra_specs(&flavor.id)
            .await
            .map_err(|e| crate::infra::cluster::os("FlavorLookupFailed", e))?;
    }
    // The image only adds nodeInfo: a template whose image cannot be read yet still
    // gets its capacity.
    let image_id = match resolve_image_ref(&ctx.client, ns, &spec.image).await {
        Ok(Some(ImageRefState::Available(id))) => Some(id),
        Ok(Some(ImageRefState::Waiting(_))) | Err(_) => None,
        Ok(None) => resolve_image(
            &*clients,
            &spec.image,
            "InvalidMachineSpec",
            "the template's",
        )
        .await
        .ok(),
    };
    let image = match image_id {
        Some(id) => clients.image.get(&id).await.ok(),
        None => None,
    };
    let root = spec
        .root_volume
        .as_ref()
        .and_then(|r| u64::try_from(r.size_gib).ok());
    Ok(crate::infra::template::status(
        &flavor,
        root,
        image.as_ref(),
    ))
}

/// A merge patch from `old` to `new`: keys `new` dropped are set to null.
fn status_patch(
    old: Option<&OpenStackMachineTemplateStatus>,
    new: &OpenStackMachineTemplateStatus,
) -> Value {
    let mut capacity = Map::new();
    if let Some(old) = old {
        for k in old.capacity.keys() {
            capacity.insert(k.clone(), Value::Null);
        }
    }
    for (k, v) in &new.capacity {
        capacity.insert(k.clone(), json!(v.0));
    }
    json!({"status": {
        "capacity": capacity,
        "nodeInfo": new.node_info.as_ref().map(|n| json!(n)).unwrap_or(Value::Null),
    }})
}

async fn reconcile_inner(
    t: &OpenStackMachineTemplate,
    ctx: &TemplateContext,
) -> driver::Reconciled {
    let ns = t.namespace().ok_or(ReconcileError::NoNamespace)?;
    if t.annotations().contains_key(PAUSED_ANNOTATION) {
        return Ok((Action::await_change(), ReconcileOutcome::skipped));
    }
    let Some(osc) = credentials_of(t, ctx, &ns).await? else {
        tracing::debug!("no cluster or identity for this template yet");
        return Ok((Action::requeue(ctx.user_error), ReconcileOutcome::skipped));
    };
    let status = match observe(t, ctx, &ns, &osc).await {
        Ok(s) => s,
        Err(InfraError::User { reason, message }) => {
            tracing::warn!(%reason, %message, "the template's capacity is not known");
            return Ok((
                Action::requeue(ctx.user_error),
                ReconcileOutcome::user_error,
            ));
        }
        Err(e) => return Err(e.into()),
    };
    if t.status.as_ref() != Some(&status) {
        let api: Api<OpenStackMachineTemplate> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &t.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status_patch(t.status.as_ref(), &status)),
        )
        .await?;
        tracing::info!(capacity = ?status.capacity, node_info = ?status.node_info, "template capacity written");
    }
    Ok((Action::requeue(ctx.resync), ReconcileOutcome::success))
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<TemplateContext>,
    namespace: Option<&str>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<OpenStackMachineTemplate> = match namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    tracing::info!(
        namespace = namespace.unwrap_or("<all>"),
        resync_seconds = ctx.resync.as_secs(),
        "OpenStackMachineTemplate controller starting"
    );
    let (cache, templates) = watch::cached(api, ctx.watch_filter.as_deref());
    let results = Controller::for_stream(templates, cache)
        .with_config(ControllerRunConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx);
    driver::drain(results).await;
    tracing::info!("OpenStackMachineTemplate controller stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::machine::NodeInfo;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn the_patch_drops_what_the_flavor_no_longer_has() {
        let status = |pairs: &[(&str, &str)], os: Option<&str>| OpenStackMachineTemplateStatus {
            capacity: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
            node_info: os.map(|o| NodeInfo {
                operating_system: Some(o.into()),
                architecture: None,
            }),
        };
        let old = status(&[("cpu", "8"), ("nvidia.com/gpu", "1")], Some("linux"));
        let new = status(&[("cpu", "2"), ("memory", "4Gi")], None);
        assert_eq!(
            status_patch(Some(&old), &new),
            json!({"status": {
                "capacity": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": null},
                "nodeInfo": null}})
        );
        assert_eq!(
            status_patch(None, &old),
            json!({"status": {
                "capacity": {"cpu": "8", "nvidia.com/gpu": "1"},
                "nodeInfo": {"operatingSystem": "linux"}}})
        );
    }
}

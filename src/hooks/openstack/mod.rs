//! Lifecycle hooks that act on the cloud, registered beside the holds:
//!
//! - `openstack-preflight` (BeforeClusterUpgrade, BeforeControlPlaneUpgrade,
//!   AfterControlPlaneUpgrade, BeforeWorkersUpgrade, AfterWorkersUpgrade): an
//!   image for every version machines will boot and quota for the rollout's surge
//!   machines (after a step: for the steps still to come);
//! - `openstack-create-check` (BeforeClusterCreate): what the Cluster's variables
//!   name exists and the project's quota holds its first machines ([`creation`]);
//! - `openstack-cleanup` (BeforeClusterDelete): the load balancers and volumes
//!   the cluster's cloud provider created;
//! - `bootstrap-vars` (AfterControlPlaneInitialized): the Secret the bootstrap
//!   reads is current, and the Cluster gets an Event saying so;
//! - `addons` (AfterControlPlaneUpgrade): the CCM and CSI follow the control
//!   plane to its new minor, applied by CAPI before the workers move ([`addons`]).
//!
//! Beside them, [`topology`] looks up the resources a Cluster's variables name for
//! ValidateTopology.
//!
//! Every replica answers them from the store its own watch keeps
//! (`controller::cache`, through `kubernetes::watch`), with the cluster's own credentials (the
//! OpenStackCluster's `identityRef`). Cloud work runs in the background
//! ([`jobs`]); a call answers from the latest result or asks CAPI to come back.

pub mod addons;
pub mod cleanup;
pub mod creation;
pub mod jobs;
pub mod preflight;
pub mod topology;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use stackhook_openstack::{ClientCache, Clients};

use super::{Answer, LifecycleHandler, Registry};
use crate::config::{ConfigError, ServeArgs};
use crate::hooks::results::ClusterResults;
use crate::infra::api::OpenStackCluster;
use crate::infra::bootstrap;
use crate::infra::cluster::CloudSource;
use crate::kubernetes::bootstrap_vars::{self, SecretChange};
use crate::kubernetes::capi;
use crate::kubernetes::identity::read_identity;
use crate::sdk::cluster::ClusterApiVersion;
use crate::sdk::lifecycle::{LifecycleEvent, UpgradeVersions};
use crate::sdk::Hook;
use jobs::{Jobs, View};
use preflight::ImageMatch;

/// Cluster annotation that lets an upgrade go ahead without the preflight.
pub const SKIP_PREFLIGHT_ANNOTATION: &str = "hooks.stackhook.io/skip-upgrade-preflight";
/// Cluster annotation that lets a deletion go ahead without the cleanup.
pub const SKIP_CLEANUP_ANNOTATION: &str = "hooks.stackhook.io/skip-delete-cleanup";
pub use capi::MAGNUM_UUID_LABEL;

/// How the cloud hooks behave; from the `serve` flags.
#[derive(Clone, Debug)]
pub struct Settings {
    pub images: ImageMatch,
    /// `retryAfterSeconds` while a check or cleanup runs.
    pub running_retry_after_seconds: u32,
    /// `retryAfterSeconds` when a check found something to fix.
    pub blocked_retry_after_seconds: u32,
    /// How long a call waits for the job it started.
    pub wait: Duration,
    /// How long a finished job answers repeated calls.
    pub fresh_for: Duration,
    pub cleanup: cleanup::Pace,
}

impl Settings {
    pub fn from_args(args: &ServeArgs) -> Result<Settings, ConfigError> {
        let images = ImageMatch {
            property: args.upgrade_image_property.clone(),
            name_pattern: args
                .upgrade_image_name_pattern
                .clone()
                .filter(|p| !p.is_empty()),
        };
        images.validate().map_err(ConfigError::ImageNamePattern)?;
        Ok(Settings {
            images,
            running_retry_after_seconds: args.cloud_check_retry_after_seconds.max(1),
            blocked_retry_after_seconds: args.hold_retry_after_seconds.max(1),
            wait: Duration::from_millis(args.cloud_check_wait_milliseconds),
            fresh_for: Duration::from_secs(args.cloud_check_ttl_seconds),
            cleanup: cleanup::Pace::default(),
        })
    }
}

/// What the three handlers share.
pub struct CloudHooks {
    client: Client,
    results: ClusterResults,
    clouds: Arc<ClientCache>,
    settings: Settings,
    recorder: Recorder,
    preflights: Jobs<Result<preflight::Report, String>>,
    cleanups: Jobs<Result<cleanup::Report, String>>,
    /// CAPI's addons kinds, discovered at the first upgrade of a cluster with addons.
    resource_sets: tokio::sync::OnceCell<Option<crate::kubernetes::resource_set::ResourceSetApi>>,
}

/// `reportingController` of the Events the hooks record.
pub const REPORTER: &str = "stackhook-hooks";

/// The OpenStackCluster a hook call is about.
enum Target {
    /// The Cluster's infrastructure is not an OpenStackCluster.
    NotOpenStack,
    /// Not known here yet: the watch has not listed everything.
    Loading,
    /// Named, but not found after the first list.
    Missing(String),
    Found {
        namespace: String,
        cluster: String,
        osc: Arc<OpenStackCluster>,
    },
}

impl CloudHooks {
    pub fn new(
        client: Client,
        results: ClusterResults,
        clouds: Arc<ClientCache>,
        settings: Settings,
    ) -> CloudHooks {
        let reporter = Reporter {
            controller: REPORTER.to_string(),
            instance: crate::kubernetes::leader::default_identity_host(),
        };
        CloudHooks {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            results,
            clouds,
            settings,
            preflights: Jobs::new(),
            cleanups: Jobs::new(),
            resource_sets: tokio::sync::OnceCell::new(),
        }
    }

    /// Adds the three handlers to `registry`.
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        registry.register(Arc::new(PreflightHandler(self.clone())));
        registry.register(Arc::new(CleanupHandler(self.clone())));
        registry.register(Arc::new(BootstrapVarsHandler(self.clone())));
        registry.register(Arc::new(addons::AddonsHandler(self.clone())));
    }

    fn target(&self, event: &LifecycleEvent) -> Target {
        let ns = event.cluster.namespace().to_string();
        let Some(r) = capi::infrastructure_ref_of(event.cluster.raw(), Some(ns.clone())) else {
            return Target::NotOpenStack;
        };
        let osc_ns = r.namespace.clone().unwrap_or(ns);
        match self.results.get(&osc_ns, &r.name).and_then(|r| r.object) {
            Some(stored) => match stored.decode() {
                Ok(osc) => Target::Found {
                    namespace: osc_ns,
                    cluster: event.cluster.name().to_string(),
                    osc: Arc::new(osc),
                },
                Err(e) => Target::Missing(format!("{osc_ns}/{} (unreadable: {e})", r.name)),
            },
            None if !self.results.is_synced() => Target::Loading,
            None => Target::Missing(format!("{osc_ns}/{}", r.name)),
        }
    }

    /// The cluster's own clients: its identity Secret, through the shared cache.
    async fn clients(&self, osc: &OpenStackCluster) -> Result<Arc<Clients>, String> {
        let identity = read_identity(&self.client, osc)
            .await
            .map_err(|e| e.to_string())?;
        self.clouds
            .clients_for(&identity)
            .map_err(|e| format!("identity Secret {}: {e}", identity.name))
    }

    fn loading(&self) -> Answer {
        Answer::Block {
            retry_after_seconds: self.settings.running_retry_after_seconds,
            message: "waiting for this replica's first list of OpenStackClusters".into(),
        }
    }
}

/// The name cloud-provider-openstack was given for this cluster (see
/// [`capi::cloud_provider_cluster_name`]).
pub fn cloud_provider_cluster_name(osc: &OpenStackCluster, event: &LifecycleEvent) -> String {
    capi::cloud_provider_cluster_name(osc, event.cluster.raw(), event.cluster.name())
}

struct PreflightHandler(Arc<CloudHooks>);

const PREFLIGHT_HOOKS: [Hook; 5] = [
    Hook::BeforeClusterUpgrade,
    Hook::BeforeControlPlaneUpgrade,
    Hook::AfterControlPlaneUpgrade,
    Hook::BeforeWorkersUpgrade,
    Hook::AfterWorkersUpgrade,
];

impl LifecycleHandler for PreflightHandler {
    fn name(&self) -> &str {
        "openstack-preflight"
    }

    fn hooks(&self) -> &[Hook] {
        &PREFLIGHT_HOOKS
    }

    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        async move {
            let hooks = &self.0;
            if event
                .cluster
                .annotation(SKIP_PREFLIGHT_ANNOTATION)
                .is_some()
            {
                return Answer::Proceed(Some(format!(
                    "skipped by annotation {SKIP_PREFLIGHT_ANNOTATION}"
                )));
            }
            let (namespace, cluster, osc) = match hooks.target(event) {
                Target::Found {
                    namespace,
                    cluster,
                    osc,
                } => (namespace, cluster, osc),
                Target::NotOpenStack => return Answer::Proceed(None),
                Target::Loading => return hooks.loading(),
                Target::Missing(name) => {
                    return Answer::Proceed(Some(format!(
                        "OpenStackCluster {name} not found; nothing to check"
                    )))
                }
            };
            let machines = hooks.results.machines(&namespace, &cluster);
            let plan = preflight::plan(event, &machines);
            if plan.versions.is_empty() && plan.phases.is_empty() {
                return Answer::Proceed(None);
            }
            let target = match &event.versions {
                UpgradeVersions::FromTo { to, .. } => to.clone(),
                _ => plan.versions.join(", "),
            };
            let key = format!("{namespace}/{cluster}/{}", plan.key());
            let job_hooks = hooks.clone();
            let view = hooks
                .preflights
                .answer(
                    &key,
                    hooks.settings.fresh_for,
                    hooks.settings.wait,
                    move |_| async move {
                        let clients = job_hooks.clients(&osc).await?;
                        let started = std::time::Instant::now();
                        let report = preflight::run(&clients, &plan, &job_hooks.settings.images)
                            .await
                            .map_err(|e| e.to_string());
                        tracing::info!(
                            cluster = %cluster,
                            namespace = %namespace,
                            problems = report.as_ref().map(|r| r.problems.len()).unwrap_or(0),
                            took_ms = started.elapsed().as_millis() as u64,
                            "upgrade preflight finished"
                        );
                        report
                    },
                )
                .await;
            match view {
                View::Running(_) => Answer::Block {
                    retry_after_seconds: hooks.settings.running_retry_after_seconds,
                    message: format!("checking OpenStack images and quota for Kubernetes {target}"),
                },
                View::Done(Ok(Ok(report))) if report.problems.is_empty() => Answer::Proceed(None),
                View::Done(Ok(Ok(report))) => Answer::Block {
                    retry_after_seconds: hooks.settings.blocked_retry_after_seconds,
                    message: report.problems.join("; "),
                },
                View::Done(Ok(Err(e)) | Err(e)) => Answer::Block {
                    retry_after_seconds: hooks.settings.blocked_retry_after_seconds,
                    message: format!("could not check OpenStack for Kubernetes {target}: {e}"),
                },
            }
        }
        .boxed()
    }
}

struct CleanupHandler(Arc<CloudHooks>);

impl LifecycleHandler for CleanupHandler {
    fn name(&self) -> &str {
        "openstack-cleanup"
    }

    fn hooks(&self) -> &[Hook] {
        &[Hook::BeforeClusterDelete]
    }

    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        async move {
            let hooks = &self.0;
            if event.cluster.annotation(SKIP_CLEANUP_ANNOTATION).is_some() {
                return Answer::Proceed(Some(format!(
                    "skipped by annotation {SKIP_CLEANUP_ANNOTATION}"
                )));
            }
            let (namespace, cluster, osc) = match hooks.target(event) {
                Target::Found {
                    namespace,
                    cluster,
                    osc,
                } => (namespace, cluster, osc),
                Target::NotOpenStack => return Answer::Proceed(None),
                Target::Loading => return hooks.loading(),
                Target::Missing(name) => {
                    return Answer::Proceed(Some(format!(
                        "OpenStackCluster {name} not found; nothing to clean up"
                    )))
                }
            };
            let name = cloud_provider_cluster_name(&osc, event);
            let key = format!("{namespace}/{cluster}/{name}");
            let job_hooks = hooks.clone();
            let job_name = name.clone();
            let view = hooks
                .cleanups
                .answer(&key, hooks.settings.fresh_for, hooks.settings.wait, move |progress| async move {
                    let clients = job_hooks.clients(&osc).await?;
                    cleanup::run(&clients, &job_name, &progress, job_hooks.settings.cleanup).await
                })
                .await;
            match view {
                View::Running(progress) => Answer::Block {
                    retry_after_seconds: hooks.settings.running_retry_after_seconds,
                    message: progress.unwrap_or_else(|| {
                        format!(
                            "looking for load balancers and volumes the cloud provider created for cluster {name}"
                        )
                    }),
                },
                View::Done(Ok(Ok(report))) if report == cleanup::Report::default() => {
                    Answer::Proceed(None)
                }
                View::Done(Ok(Ok(report))) => Answer::Proceed(Some(format!(
                    "removed {} that the cloud provider created for cluster {name}",
                    report.describe()
                ))),
                View::Done(Ok(Err(e)) | Err(e)) => Answer::Block {
                    retry_after_seconds: hooks.settings.blocked_retry_after_seconds,
                    message: format!(
                        "could not remove what the cloud provider created for cluster {name}: {e}"
                    ),
                },
            }
        }
        .boxed()
    }
}

struct BootstrapVarsHandler(Arc<CloudHooks>);

impl LifecycleHandler for BootstrapVarsHandler {
    fn name(&self) -> &str {
        "bootstrap-vars"
    }

    fn hooks(&self) -> &[Hook] {
        &[Hook::AfterControlPlaneInitialized]
    }

    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        async move {
            let hooks = &self.0;
            let (namespace, cluster, osc) = match hooks.target(event) {
                Target::Found {
                    namespace,
                    cluster,
                    osc,
                } => (namespace, cluster, osc),
                Target::NotOpenStack | Target::Missing(_) => return Answer::Proceed(None),
                // CAPI retries a failed call of this hook with backoff.
                Target::Loading => {
                    return Answer::Fail(
                        "waiting for this replica's first list of OpenStackClusters".into(),
                    )
                }
            };
            let secret = bootstrap::secret_name(&cluster);
            let written = match bootstrap_vars::machines_of(&hooks.client, &namespace, &cluster)
                .await
            {
                Ok(machines) => bootstrap_vars::ensure(&hooks.client, &osc, &cluster, &machines)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let change = match written {
                Ok(c) => c,
                Err(e) => return Answer::Fail(format!("writing Secret {secret}: {e}")),
            };
            let what = match change {
                SecretChange::Created => "created",
                SecretChange::Updated => "updated",
                SecretChange::Unchanged => "already current",
            };
            let note = format!("Secret {secret} with the bootstrap's values {what}");
            let regarding = cluster_reference(event);
            let e = Event {
                type_: EventType::Normal,
                reason: "BootstrapVarsCurrent".into(),
                note: Some(note),
                action: "AfterControlPlaneInitialized".into(),
                secondary: Some(osc.object_ref(&())),
            };
            if let Err(err) = hooks.recorder.publish(&e, &regarding).await {
                tracing::warn!(error = %err, cluster = %cluster, "recording the Event failed");
            }
            Answer::Proceed(Some(format!("Secret {secret} is current")))
        }
        .boxed()
    }
}

/// The Cluster the request carries, as an Event's `regarding`.
fn cluster_reference(event: &LifecycleEvent) -> ObjectReference {
    let version = match event.cluster.contract() {
        ClusterApiVersion::V1Beta1 => "v1beta1",
        ClusterApiVersion::V1Beta2 => "v1beta2",
    };
    ObjectReference {
        api_version: Some(format!("{}/{version}", capi::GROUP)),
        kind: Some("Cluster".into()),
        name: Some(event.cluster.name().to_string()),
        namespace: Some(event.cluster.namespace().to_string()),
        uid: event
            .cluster
            .raw()
            .pointer("/metadata/uid")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::extensions::{CloudProviderSpec, ClusterSpecExtensions};
    use crate::infra::api::OpenStackClusterSpec;
    use crate::sdk::cluster::Cluster;
    use serde_json::json;

    fn event(labels: serde_json::Value) -> LifecycleEvent {
        LifecycleEvent {
            hook: Hook::BeforeClusterDelete,
            settings: Default::default(),
            cluster: Cluster::from_value(json!({"metadata": {"name": "kube-ab12c",
                "namespace": "magnum-system", "labels": labels}}))
            .unwrap(),
            versions: UpgradeVersions::None,
            control_plane_upgrades: vec![],
            workers_upgrades: vec![],
        }
    }

    #[test]
    fn cloud_provider_name_prefers_the_spec_then_magnum_then_the_cluster() {
        let mut osc = OpenStackCluster::new("kube-ab12c", OpenStackClusterSpec::default());
        assert_eq!(
            cloud_provider_cluster_name(&osc, &event(json!({}))),
            "kube-ab12c"
        );
        let magnum = event(json!({"cluster-uuid": "5d12f6fd-a196-4bf0-ae4c-1f639a523a52"}));
        assert_eq!(
            cloud_provider_cluster_name(&osc, &magnum),
            "5d12f6fd-a196-4bf0-ae4c-1f639a523a52"
        );
        osc.spec.extensions = Some(Box::new(ClusterSpecExtensions {
            cloud_provider: Some(CloudProviderSpec {
                cluster_name: Some("kubernetes".into()),
            }),
            ..Default::default()
        }));
        assert_eq!(cloud_provider_cluster_name(&osc, &magnum), "kubernetes");
    }

    #[test]
    fn events_regard_the_cluster_in_its_api_version() {
        let mut e = event(json!({}));
        e.cluster = Cluster::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u-9"}}))
        .unwrap();
        let r = cluster_reference(&e);
        assert_eq!(r.api_version.as_deref(), Some("cluster.x-k8s.io/v1beta2"));
        assert_eq!(r.uid.as_deref(), Some("u-9"));
        assert_eq!(r.kind.as_deref(), Some("Cluster"));
    }
}

//! BeforeClusterCreate: the cloud can hold what the Cluster asks for before CAPI
//! creates anything — every image, flavor, network and server group its variables
//! name exists, and the project's quota has room for its first machines.
//!
//! CAPI calls BeforeClusterCreate before it computes the topology (and so before
//! ValidateTopology), and while the hook holds it computes nothing. So the demand is
//! read from the Cluster itself: its ClusterClass says which of our packs validate
//! it (`spec.patches[].external.validateTopologyExtension`), each such pack's
//! `cloudChecks` turns the Cluster's variables into lookups, and its flavor checks
//! marked `machines` give the control plane's, each MachineDeployment's and the
//! bastion's flavor ([`crate::engine::cloud_checks::creation_plan`]). The lookups
//! share ValidateTopology's cache; the quota arithmetic is the upgrade
//! preflight's ([`super::preflight::fit`]).
//!
//! Only a definite answer holds a creation: a class that cannot be read, a missing
//! identity Secret or a cloud that does not answer lets the Cluster through with a
//! note, as ValidateTopology does. With `--validate-cloud warn` problems are logged
//! and never hold.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use stackhook_openstack::ClientCache;

use super::jobs::{Jobs, View};
use super::preflight::{self, FlavorRef, Phase, Surge};
use super::topology::{self, LookupCache, Mode};
use super::Settings;
use crate::engine::cloud_checks::{By, CloudVerdict, CreationPlan};
use crate::engine::clusterclass::{ClassPatch, Cluster, ClusterClass};
use crate::engine::PatchEngine;
use crate::hooks::{Answer, LifecycleHandler};
use crate::sdk::lifecycle::LifecycleEvent;
use crate::sdk::Hook;

/// Cluster annotation that lets a creation go ahead without the check.
pub const SKIP_CREATE_CHECK_ANNOTATION: &str = "hooks.stackhook.io/skip-create-check";

/// The phase's name in quota messages.
pub const PHASE: &str = "cluster's first machines";

/// What one check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Definite problems: the creation waits for them to be fixed.
    pub problems: Vec<String>,
    /// What could not be checked.
    pub unchecked: Vec<String>,
}

/// The BeforeClusterCreate handler `openstack-create-check`.
pub struct CreateCheck(Arc<Inner>);

struct Inner {
    client: Client,
    engine: Arc<dyn PatchEngine>,
    clouds: Arc<ClientCache>,
    lookups: Arc<LookupCache>,
    settings: Settings,
    mode: Mode,
    jobs: Jobs<Result<Report, String>>,
}

impl CreateCheck {
    pub fn new(
        client: Client,
        engine: Arc<dyn PatchEngine>,
        clouds: Arc<ClientCache>,
        lookups: Arc<LookupCache>,
        settings: Settings,
        mode: Mode,
    ) -> CreateCheck {
        CreateCheck(Arc::new(Inner {
            client,
            engine,
            clouds,
            lookups,
            settings,
            mode,
            jobs: Jobs::new(),
        }))
    }
}

/// The machines of a creation plan as one preflight phase: all of them start at once.
pub fn phase(plan: &CreationPlan) -> Phase {
    Phase {
        name: PHASE,
        surge: plan
            .machines
            .iter()
            .map(|m| Surge {
                of: m.of.clone(),
                machines: m.replicas,
                flavor: match &m.flavor {
                    (By::Id, v) => FlavorRef::Id(v.clone()),
                    (By::Name, v) => FlavorRef::Name(v.clone()),
                },
                // CAPO's one default port; ports a class adds are not counted.
                ports_each: 1,
            })
            .collect(),
    }
}

/// A digest of what the check reads from the Cluster: its topology.
fn topology_hash(cluster: &serde_json::Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cluster
        .pointer("/spec/topology")
        .map(|t| t.to_string())
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

/// The packs that validate `cluster`: the ValidateTopology handlers its class's
/// external patches name, in the class's order.
fn validate_handlers(class: &ClusterClass) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in &class.patches {
        if let ClassPatch::External(e) = p {
            if let Some(h) = &e.validate {
                if !out.contains(h) {
                    out.push(h.clone());
                }
            }
        }
    }
    out
}

/// The Cluster's ClusterClass, in the Cluster's API version.
async fn read_class(client: &Client, cluster: &Cluster) -> Result<ClusterClass, String> {
    let version = cluster
        .api_version
        .rsplit('/')
        .next()
        .unwrap_or("v1beta1")
        .to_string();
    let gvk = GroupVersionKind::gvk(crate::engine::clusterclass::GROUP, &version, "ClusterClass");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterclasses");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &cluster.class_namespace, &resource);
    let what = format!("ClusterClass {}/{}", cluster.class_namespace, cluster.class);
    let object = api
        .get(&cluster.class)
        .await
        .map_err(|e| format!("reading {what}: {e}"))?;
    let value = serde_json::to_value(&object).map_err(|e| format!("{what}: {e}"))?;
    ClusterClass::from_value(&value).map_err(|e| e.to_string())
}

impl Inner {
    async fn check(self: Arc<Self>, cluster: Cluster) -> Result<Report, String> {
        let class = read_class(&self.client, &cluster).await?;
        let plans: Vec<CreationPlan> = validate_handlers(&class)
            .iter()
            .filter_map(|h| self.engine.creation_plan(h, &cluster))
            .collect();
        let mut report = Report::default();
        for plan in &plans {
            let clients =
                match topology::plan_clients(&self.client, &self.clouds, &plan.cloud).await {
                    Ok(c) => c,
                    Err(e) => {
                        report.unchecked.push(e);
                        continue;
                    }
                };
            let answers = topology::look_up(&clients, &self.lookups, &plan.cloud).await;
            match answers.verdict(&plan.cloud) {
                CloudVerdict::Invalid(problems) => {
                    // Sizing needs the flavors it would name as missing.
                    report.problems.extend(problems);
                    continue;
                }
                CloudVerdict::Unknown(why) => {
                    report.unchecked.push(why);
                    continue;
                }
                CloudVerdict::Valid => {}
            }
            if plan.machines.is_empty() {
                continue;
            }
            match preflight::quota_problems(&clients, &[phase(plan)]).await {
                Ok(p) => report.problems.extend(p),
                Err(e) => report.unchecked.push(format!("the project's quota: {e}")),
            }
        }
        Ok(report)
    }
}

impl LifecycleHandler for CreateCheck {
    fn name(&self) -> &str {
        "openstack-create-check"
    }

    fn hooks(&self) -> &[Hook] {
        &[Hook::BeforeClusterCreate]
    }

    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        async move {
            if event
                .cluster
                .annotation(SKIP_CREATE_CHECK_ANNOTATION)
                .is_some()
            {
                return Answer::Proceed(Some(format!(
                    "skipped by annotation {SKIP_CREATE_CHECK_ANNOTATION}"
                )));
            }
            // Not a managed topology: no class, nothing this check reads.
            let Ok(cluster) = Cluster::from_value(event.cluster.raw()) else {
                return Answer::Proceed(None);
            };
            // The same question (this Cluster, this topology) is answered for the TTL.
            let key = format!(
                "{}/{}/{}/{:x}",
                cluster.namespace,
                cluster.name,
                cluster.uid.as_deref().unwrap_or_default(),
                topology_hash(event.cluster.raw())
            );
            let inner = &self.0;
            let me = inner.clone();
            let (namespace, name) = (cluster.namespace.clone(), cluster.name.clone());
            let view = inner
                .jobs
                .answer(
                    &key,
                    inner.settings.fresh_for,
                    inner.settings.wait,
                    move |_| me.check(cluster),
                )
                .await;
            match view {
                View::Running(_) => Answer::Block {
                    retry_after_seconds: inner.settings.running_retry_after_seconds,
                    message: format!("checking OpenStack for the {PHASE}"),
                },
                View::Done(Ok(Ok(report))) => inner.answer(&namespace, &name, report),
                // As ValidateTopology: only a definite answer holds a Cluster back.
                View::Done(Ok(Err(e)) | Err(e)) => {
                    tracing::warn!(cluster = %name, namespace = %namespace, error = %e,
                        "a new cluster could not be checked against the cloud; it is not held up");
                    Answer::Proceed(Some(format!("not checked: {e}")))
                }
            }
        }
        .boxed()
    }
}

impl Inner {
    fn answer(&self, namespace: &str, name: &str, report: Report) -> Answer {
        if !report.unchecked.is_empty() {
            tracing::warn!(cluster = %name, namespace = %namespace,
                unchecked = %report.unchecked.join("; "),
                "part of a new cluster could not be checked against the cloud");
        }
        if report.problems.is_empty() {
            return match report.unchecked.is_empty() {
                true => Answer::Proceed(None),
                false => Answer::Proceed(Some(format!(
                    "not checked: {}",
                    report.unchecked.join("; ")
                ))),
            };
        }
        let problems = report.problems.join("; ");
        if self.mode == Mode::Warn {
            tracing::warn!(cluster = %name, namespace = %namespace, problems = %problems,
                "the cloud cannot hold a new cluster (--validate-cloud warn: not held)");
            return Answer::Proceed(Some(problems));
        }
        Answer::Block {
            retry_after_seconds: self.settings.blocked_retry_after_seconds,
            message: problems,
        }
    }
}

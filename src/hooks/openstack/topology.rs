//! ValidateTopology's look into the cloud: the resources a Cluster's variables name
//! (see `engine::cloud_checks`) exist in the cluster's own cloud.
//!
//! CAPI calls ValidateTopology on every topology reconcile and gives it ~10 s, so
//! lookups are kept for `--validate-cloud-ttl-seconds` per cloud scope and resource
//! (clusters of one project share them), and so is a finished answer per Secret,
//! cloud and values; the work runs as a background job
//! ([`super::jobs`]), and a call waits for it only `--validate-cloud-wait-milliseconds`.
//! Only a definite answer refuses a topology: a missing identity Secret, a cloud that
//! cannot be asked or a lookup still running lets it through with a warning, because
//! CAPO reports such problems on its own objects later anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use stackhook_openstack::compute::{Compute, Flavor, ServerGroup};
use stackhook_openstack::config::{AuthMethod, CloudConfig};
use stackhook_openstack::image::Images;
use stackhook_openstack::networking::{Network, Networking, Subnet};
use stackhook_openstack::{ClientCache, Clients, OsError};

use super::jobs::{Jobs, View};
use crate::engine::cloud_checks::{
    cloud_label, problem, By, CloudPlan, CloudVerdict, Found, Lookup, ResourceKind,
    TopologyCloudCheck,
};
use crate::infra::api::types::{IdentityRefType, OpenStackIdentityReference};
use crate::infra::cluster::CloudSource;
use crate::kubernetes::identity::read_identity_secret;
use crate::metrics::{CloudCheckLabels, CloudCheckResult};

/// `--validate-cloud`: what ValidateTopology does with the cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// No lookups.
    Off,
    /// Look up and log what is missing, but never refuse a topology.
    Warn,
    /// Refuse a topology that names a resource the cloud definitely does not have.
    Enforce,
}

/// How the checks behave; from the `serve` flags.
#[derive(Debug, Clone, Copy)]
pub struct TopologySettings {
    pub mode: Mode,
    /// How long a lookup's answer is reused.
    pub ttl: Duration,
    /// How long a call waits for lookups before letting the topology through.
    pub wait: Duration,
}

/// Answers kept per cloud scope and resource, so repeated calls (and clusters in
/// one project) do not ask the cloud again within the TTL.
pub struct LookupCache {
    ttl: Duration,
    entries: Mutex<HashMap<(String, Lookup), (Found, Instant)>>,
}

impl LookupCache {
    pub fn new(ttl: Duration) -> LookupCache {
        LookupCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `lookup` in `scope`, if one younger than the TTL at `now`.
    pub fn get(&self, scope: &str, lookup: &Lookup, now: Instant) -> Option<Found> {
        let map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(scope.to_string(), lookup.clone()))
            .filter(|(_, at)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(f, _)| f.clone())
    }

    /// Keeps an answer found at `now`; expired entries leave at the same time.
    pub fn put(&self, scope: &str, lookup: &Lookup, found: Found, now: Instant) {
        let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| now.saturating_duration_since(*at) < self.ttl);
        map.insert((scope.to_string(), lookup.clone()), (found, now));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Who sees which resources: the Keystone URL, the region and the project (or the
/// application credential, whose project is fixed). Images, networks and server
/// groups are project-scoped, so answers are shared only within one scope.
pub fn scope_key(config: &CloudConfig) -> String {
    let who = match &config.auth {
        AuthMethod::Password {
            project,
            project_domain,
            ..
        } => format!("project {project:?} {project_domain:?}"),
        // A credential given by name is only unique per user.
        AuthMethod::ApplicationCredential {
            credential,
            user,
            user_domain,
            ..
        } => format!("credential {credential:?} {user:?} {user_domain:?}"),
    };
    format!(
        "{} {} {who}",
        config.auth_url,
        config.region.as_deref().unwrap_or_default()
    )
}

/// The checker the server holds when it has Kubernetes access.
pub struct TopologyChecks {
    client: Client,
    clouds: Arc<ClientCache>,
    settings: TopologySettings,
    lookups: Arc<LookupCache>,
    jobs: Jobs<Result<Answers, String>>,
    counts: Family<CloudCheckLabels, Counter>,
    recorder: Recorder,
}

impl TopologyChecks {
    pub fn new(
        client: Client,
        clouds: Arc<ClientCache>,
        settings: TopologySettings,
        counts: Family<CloudCheckLabels, Counter>,
        lookups: Arc<LookupCache>,
    ) -> TopologyChecks {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: super::REPORTER.to_string(),
                instance: crate::kubernetes::leader::default_identity_host(),
            },
        );
        TopologyChecks {
            recorder,
            client,
            clouds,
            lookups,
            settings,
            jobs: Jobs::new(),
            counts,
        }
    }

    fn count(&self, result: CloudCheckResult) {
        self.counts
            .get_or_create(&CloudCheckLabels { result })
            .inc();
    }
}

impl TopologyChecks {
    /// CAPI 1.11+ puts only "got failure response, please check controller logs" in
    /// the Cluster's TopologyReconciled condition and keeps the answer's message in
    /// its own log; a Warning Event on the Cluster shows what the cloud is missing
    /// where `kubectl describe cluster` looks. The recorder folds repeats into one
    /// Event with a count.
    async fn record_refusal(&self, plan: &CloudPlan, problems: &[String]) {
        let Some(uid) = &plan.cluster_uid else {
            return;
        };
        let regarding = ObjectReference {
            api_version: Some("cluster.x-k8s.io/v1beta1".into()),
            kind: Some("Cluster".into()),
            name: Some(plan.cluster.clone()),
            namespace: Some(plan.namespace.clone()),
            uid: Some(uid.clone()),
            ..ObjectReference::default()
        };
        let note = crate::sdk::clip::clip_to(
            &format!("pack {:?}: {}", plan.pack, problems.join("; ")),
            1000,
        )
        .into_owned();
        let event = Event {
            type_: EventType::Warning,
            reason: "CloudResourcesMissing".into(),
            note: Some(note),
            action: "ValidateTopology".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &regarding).await {
            tracing::warn!(error = %e, cluster = %plan.cluster, "recording the Event failed");
        }
    }
}

impl TopologyCloudCheck for TopologyChecks {
    fn check<'a>(&'a self, plan: CloudPlan) -> BoxFuture<'a, CloudVerdict> {
        async move {
            if self.settings.mode == Mode::Off {
                return CloudVerdict::Valid;
            }
            let client = self.client.clone();
            let clouds = self.clouds.clone();
            let lookups = self.lookups.clone();
            let job_plan = plan.clone();
            // A finished answer serves the same question (Secret, cloud, lookups) for
            // the TTL, like the lookups under it: a call never waits for the cloud
            // twice, and a job that outlived its call answers the next one.
            let view = self
                .jobs
                .answer(&plan.key(), self.settings.ttl, self.settings.wait, move |_| {
                    run(client, clouds, lookups, job_plan)
                })
                .await;
            let verdict = match view {
                View::Done(Ok(Ok(answers))) => answers.verdict(&plan),
                View::Done(Ok(Err(e)) | Err(e)) => CloudVerdict::Unknown(e),
                View::Running(_) => CloudVerdict::Unknown(format!(
                    "the lookups did not finish within {} ms; they go on in the background",
                    self.settings.wait.as_millis()
                )),
            };
            match &verdict {
                CloudVerdict::Valid => {
                    self.count(CloudCheckResult::valid);
                    verdict
                }
                CloudVerdict::Unknown(why) => {
                    self.count(CloudCheckResult::unknown);
                    tracing::warn!(
                        cluster_namespace = %plan.namespace,
                        cluster_name = %plan.cluster,
                        pack = %plan.pack,
                        reason = %why,
                        "ValidateTopology could not check the cloud; the topology is not held up"
                    );
                    verdict
                }
                CloudVerdict::Invalid(problems) => {
                    self.count(CloudCheckResult::invalid);
                    if self.settings.mode == Mode::Warn {
                        tracing::warn!(
                            cluster_namespace = %plan.namespace,
                            cluster_name = %plan.cluster,
                            pack = %plan.pack,
                            problems = %problems.join("; "),
                            "the topology names resources the cloud does not have (--validate-cloud warn: not refused)"
                        );
                        return CloudVerdict::Valid;
                    }
                    self.record_refusal(&plan, problems).await;
                    verdict
                }
            }
        }
        .boxed()
    }
}

/// What the cloud said about one plan's lookups. Messages are made per call from the
/// caller's own plan: another Cluster with the same Secret and values shares the
/// answers, but its MachineDeployments have other names.
#[derive(Clone, Debug, Default)]
pub(super) struct Answers {
    /// `cloud "x" (region y)`, for messages.
    label: String,
    found: HashMap<Lookup, Found>,
    /// Lookups the cloud could not answer.
    errors: Vec<String>,
}

impl Answers {
    pub(super) fn verdict(&self, plan: &CloudPlan) -> CloudVerdict {
        let problems: Vec<String> = plan
            .checks
            .iter()
            .filter_map(|(place, lookup)| {
                self.found
                    .get(lookup)
                    .and_then(|f| problem(place, lookup, f, &self.label))
            })
            .collect();
        if !problems.is_empty() {
            // Definite problems stand even when other lookups failed.
            CloudVerdict::Invalid(problems)
        } else if !self.errors.is_empty() {
            CloudVerdict::Unknown(format!("asking {}: {}", self.label, self.errors.join("; ")))
        } else {
            CloudVerdict::Valid
        }
    }
}

/// One plan's work: the identity Secret, the clients, then every lookup; `Err` when
/// the cloud could not be asked at all.
async fn run(
    client: Client,
    clouds: Arc<ClientCache>,
    cache: Arc<LookupCache>,
    plan: CloudPlan,
) -> Result<Answers, String> {
    let clients = plan_clients(&client, &clouds, &plan).await?;
    Ok(look_up(&clients, &cache, &plan).await)
}

/// The clients of the identity Secret and cloud `plan` names.
pub(super) async fn plan_clients(
    client: &Client,
    clouds: &ClientCache,
    plan: &CloudPlan,
) -> Result<Arc<Clients>, String> {
    let reference = OpenStackIdentityReference {
        type_: IdentityRefType::Secret,
        name: plan.secret.clone(),
        cloud_name: plan.cloud.clone(),
        region: None,
    };
    let identity = read_identity_secret(client, &plan.namespace, &reference)
        .await
        .map_err(|e| e.to_string())?;
    clouds
        .clients_for(&identity)
        .map_err(|e| format!("identity Secret {}/{}: {e}", plan.namespace, plan.secret))
}

/// Every lookup of `plan`, from `cache` when it has a fresh answer.
pub(super) async fn look_up(clients: &Clients, cache: &LookupCache, plan: &CloudPlan) -> Answers {
    let config = clients.session.config();
    let scope = scope_key(config);
    let mut answers = Answers {
        label: cloud_label(&plan.cloud, config.region.as_deref()),
        ..Answers::default()
    };
    let mut finder = Finder::new(clients);
    for lookup in plan.lookups() {
        if let Some(f) = cache.get(&scope, &lookup, Instant::now()) {
            answers.found.insert(lookup, f);
            continue;
        }
        match finder.find(&lookup).await {
            Ok(f) => {
                cache.put(&scope, &lookup, f.clone(), Instant::now());
                answers.found.insert(lookup, f);
            }
            Err(e) => answers.errors.push(format!("{lookup}: {e}")),
        }
    }
    answers
}

/// Lookups against one cloud; Nova's flavor and server group lists are read once.
struct Finder<'a> {
    clients: &'a Clients,
    flavors: Option<Vec<Flavor>>,
    server_groups: Option<Vec<ServerGroup>>,
}

impl<'a> Finder<'a> {
    fn new(clients: &'a Clients) -> Self {
        Finder {
            clients,
            flavors: None,
            server_groups: None,
        }
    }

    async fn find(&mut self, l: &Lookup) -> Result<Found, OsError> {
        let c = self.clients;
        match (l.kind, l.by) {
            (ResourceKind::Flavor, by) => {
                if self.flavors.is_none() {
                    self.flavors = Some(c.compute.flavors().await?);
                }
                let flavors = self.flavors.as_deref().unwrap_or_default();
                let n = flavors
                    .iter()
                    .filter(|f| match by {
                        By::Name => f.name == l.value,
                        By::Id => f.id == l.value,
                    })
                    .count();
                Ok(count_found(n))
            }
            (ResourceKind::Image, By::Id) => absent_on_404(c.image.get(&l.value).await),
            (ResourceKind::Image, By::Name) => {
                let images = c.image.list(&[("name", l.value.clone())]).await?;
                Ok(count_found(
                    images.iter().filter(|i| i.name == l.value).count(),
                ))
            }
            (ResourceKind::Network, By::Id) => {
                absent_on_404(c.network.get::<Network>(&l.value).await)
            }
            (ResourceKind::ExternalNetwork, By::Id) => {
                match c.network.get::<Network>(&l.value).await {
                    Ok(n) if n.external => Ok(Found::One),
                    Ok(_) => Ok(Found::NotExternal),
                    Err(e) if e.is_not_found() => Ok(Found::Missing),
                    Err(e) => Err(e),
                }
            }
            (ResourceKind::Network | ResourceKind::ExternalNetwork, By::Name) => {
                let nets: Vec<Network> = c.network.list(&[("name", l.value.clone())]).await?;
                let nets: Vec<&Network> = nets.iter().filter(|n| n.name == l.value).collect();
                if l.kind == ResourceKind::ExternalNetwork && nets.len() == 1 && !nets[0].external {
                    return Ok(Found::NotExternal);
                }
                Ok(count_found(nets.len()))
            }
            (ResourceKind::Subnet, By::Id) => {
                absent_on_404(c.network.get::<Subnet>(&l.value).await)
            }
            (ResourceKind::Subnet, By::Name) => {
                let subnets: Vec<Subnet> = c.network.list(&[("name", l.value.clone())]).await?;
                Ok(count_found(
                    subnets.iter().filter(|s| s.name == l.value).count(),
                ))
            }
            (ResourceKind::ServerGroup, by) => {
                if self.server_groups.is_none() {
                    self.server_groups = Some(c.compute.server_groups().await?);
                }
                let groups = self.server_groups.as_deref().unwrap_or_default();
                Ok(count_found(
                    groups
                        .iter()
                        .filter(|g| match by {
                            By::Name => g.name == l.value,
                            By::Id => g.id == l.value,
                        })
                        .count(),
                ))
            }
        }
    }
}

fn count_found(n: usize) -> Found {
    match n {
        0 => Found::Missing,
        1 => Found::One,
        n => Found::Many(n),
    }
}

fn absent_on_404<T>(r: Result<T, OsError>) -> Result<Found, OsError> {
    match r {
        Ok(_) => Ok(Found::One),
        Err(e) if e.is_not_found() => Ok(Found::Missing),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_shared_only_by_who_sees_the_same_resources() {
        let key = |auth: &str| {
            let yaml = format!(
                "clouds:\n  c:\n    region_name: RegionOne\n    auth:\n      auth_url: http://keystone:5000/v3\n{auth}"
            );
            scope_key(&CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap())
        };
        let appcred = |user: &str| {
            key(&format!(
                "      application_credential_name: capi\n      application_credential_secret: s\n      username: {user}\n      user_domain_name: Default\n    auth_type: v3applicationcredential\n"
            ))
        };
        let password = |project: &str, secret: &str| {
            key(&format!(
                "      username: u\n      password: {secret}\n      project_name: {project}\n      user_domain_name: Default\n      project_domain_name: Default\n"
            ))
        };
        assert_ne!(
            appcred("alice"),
            appcred("bob"),
            "a credential name is per user"
        );
        assert_eq!(appcred("alice"), appcred("alice"));
        assert_ne!(password("p1", "x"), password("p2", "x"));
        assert_eq!(
            password("p1", "x"),
            password("p1", "y"),
            "the secret is not part of it"
        );
        assert!(!password("p1", "hunter2").contains("hunter2"));
    }

    fn flavor(v: &str) -> Lookup {
        Lookup {
            kind: ResourceKind::Flavor,
            by: By::Name,
            value: v.into(),
        }
    }

    #[test]
    fn lookups_are_kept_for_the_ttl_per_scope() {
        let cache = LookupCache::new(Duration::from_secs(60));
        let t0 = Instant::now();
        cache.put("a", &flavor("m1.small"), Found::One, t0);
        cache.put("a", &flavor("m1.hugee"), Found::Missing, t0);
        assert_eq!(cache.get("a", &flavor("m1.small"), t0), Some(Found::One));
        assert_eq!(
            cache.get("a", &flavor("m1.hugee"), t0 + Duration::from_secs(59)),
            Some(Found::Missing)
        );
        // Another project does not see this one's answers.
        assert_eq!(cache.get("b", &flavor("m1.small"), t0), None);
        // Expired: asked again.
        assert_eq!(
            cache.get("a", &flavor("m1.small"), t0 + Duration::from_secs(60)),
            None
        );
        // Expired entries leave when a new one comes.
        cache.put(
            "a",
            &flavor("m1.large"),
            Found::One,
            t0 + Duration::from_secs(61),
        );
        assert_eq!(cache.len(), 1);
    }

    fn plan(holder: &str, flavors: &[&str]) -> CloudPlan {
        use crate::engine::cloud_checks::Place;
        CloudPlan {
            pack: "openstack-v1".into(),
            namespace: "ns".into(),
            cluster: "c".into(),
            cluster_uid: None,
            secret: "s".into(),
            cloud: "openstack".into(),
            checks: flavors
                .iter()
                .map(|f| (Place::variable(holder, "openstackWorker.flavor"), flavor(f)))
                .collect(),
        }
    }

    #[test]
    fn answers_become_each_callers_own_messages() {
        let answers = Answers {
            label: cloud_label("openstack", Some("RegionOne")),
            found: [
                (flavor("m1.small"), Found::One),
                (flavor("m1.hugee"), Found::Missing),
            ]
            .into_iter()
            .collect(),
            errors: vec![],
        };
        // Two clusters with the same Secret and values share the answers; each
        // message names the caller's own MachineDeployment.
        for md in ["MachineDeployment a-md-0: ", "MachineDeployment b-md-0: "] {
            assert_eq!(
                answers.verdict(&plan(md, &["m1.small", "m1.hugee"])),
                CloudVerdict::Invalid(vec![format!(
                    "{md}variable openstackWorker.flavor: flavor \"m1.hugee\" not found in cloud \"openstack\" (region RegionOne)"
                )])
            );
        }
        assert_eq!(
            answers.verdict(&plan("", &["m1.small"])),
            CloudVerdict::Valid
        );
        // A failed lookup does not hide a definite problem, and alone refuses nothing.
        let partly = Answers {
            errors: vec!["image \"u\": HTTP 503".into()],
            ..answers
        };
        assert!(matches!(
            partly.verdict(&plan("", &["m1.hugee"])),
            CloudVerdict::Invalid(_)
        ));
        assert_eq!(
            partly.verdict(&plan("", &["m1.small"])),
            CloudVerdict::Unknown(
                "asking cloud \"openstack\" (region RegionOne): image \"u\": HTTP 503".into()
            )
        );
    }

    #[test]
    fn counts_become_answers() {
        assert_eq!(count_found(0), Found::Missing);
        assert_eq!(count_found(1), Found::One);
        assert_eq!(count_found(3), Found::Many(3));
    }
}

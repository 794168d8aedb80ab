//! The upgrade preflight: before CAPI rolls machines to a new Kubernetes version,
//! (a) Glance must hold an active image for that version, and (b) the project's
//! quotas must leave room for the rollout's surge machines.
//!
//! After a step (AfterControlPlaneUpgrade, AfterWorkersUpgrade) the same holds for
//! the steps still to come.
//!
//! Surge, as CAPI rolls: the control plane adds one machine at a time
//! (KubeadmControlPlane's default `maxSurge: 1`); each MachineDeployment adds its
//! `maxSurge` (default 1) and `topology.cluster.x-k8s.io/upgrade-concurrency`
//! of them (default 1) roll at once, after the control plane. The two phases do
//! not overlap, so each must fit on its own. Flavors are those the cluster's
//! machines use now.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;
use stackhook_openstack::compute::{Compute, Flavor};
use stackhook_openstack::identity::Identity;
use stackhook_openstack::image::Images;
use stackhook_openstack::quota::{self, ComputeLimits, Usage};
use stackhook_openstack::{Clients, OsError};

use crate::infra::bootstrap::MachineFacts;
use crate::sdk::cluster::Cluster;
use crate::sdk::lifecycle::{LifecycleEvent, UpgradeVersions};
use crate::sdk::Hook;

/// Cluster annotation: MachineDeployments upgraded at once (CAPI's default 1).
pub const UPGRADE_CONCURRENCY_ANNOTATION: &str = "topology.cluster.x-k8s.io/upgrade-concurrency";

/// How a Glance image is recognised as one for a Kubernetes version.
#[derive(Clone, Debug)]
pub struct ImageMatch {
    /// Image property holding the version, e.g. `kube_version`.
    pub property: String,
    /// A name pattern with `{version}` in it, as given.
    pub name_pattern: Option<String>,
}

impl ImageMatch {
    /// Checks that the name pattern is a regular expression for any version.
    pub fn validate(&self) -> Result<(), String> {
        match &self.name_pattern {
            Some(p) => self.name_regex(p, "v1.33.1").map(drop),
            None => Ok(()),
        }
    }

    fn name_regex(&self, pattern: &str, version: &str) -> Result<Regex, String> {
        Regex::new(&pattern.replace("{version}", &regex::escape(version)))
            .map_err(|e| e.to_string())
    }

    fn describe(&self, version: &str) -> String {
        match &self.name_pattern {
            Some(p) => format!(
                "property {}={version}, or a name matching {}",
                self.property,
                p.replace("{version}", version)
            ),
            None => format!("property {}={version}", self.property),
        }
    }
}

/// Where a flavor is named: by ID (resolved on the machine) or by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FlavorRef {
    Id(String),
    Name(String),
}

/// Machines one rollout step adds at once, of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Surge {
    /// `control plane`, or the MachineDeployment.
    pub of: String,
    pub machines: u64,
    pub flavor: FlavorRef,
    pub ports_each: u64,
}

/// A phase of the rollout; the machines in it are added at the same time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    /// `control-plane rollout` or `worker rollout`.
    pub name: &'static str,
    pub surge: Vec<Surge>,
}

/// What to check for one hook call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Kubernetes versions machines will be created with.
    pub versions: Vec<String>,
    pub phases: Vec<Phase>,
}

impl Plan {
    /// A stable key for the job table: same plan, same job.
    pub fn key(&self) -> String {
        format!("{self:?}")
    }
}

/// The versions and phases `event` is about, from the cluster's machines.
pub fn plan(event: &LifecycleEvent, machines: &[MachineFacts]) -> Plan {
    let mut versions = BTreeSet::new();
    if let UpgradeVersions::FromTo { to, .. } = &event.versions {
        versions.insert(to.clone());
    }
    // Every version the steps named in the request will boot.
    let steps = || {
        event
            .control_plane_upgrades
            .iter()
            .chain(&event.workers_upgrades)
            .map(|s| s.version.clone())
    };
    let (control_plane, workers) = match event.hook {
        // The whole upgrade: every intermediate version is booted too.
        Hook::BeforeClusterUpgrade => {
            versions.extend(steps());
            (true, true)
        }
        Hook::BeforeControlPlaneUpgrade => (true, false),
        Hook::BeforeWorkersUpgrade => (false, true),
        // A step is done: what the steps still to come will boot, checked before CAPI
        // gets there, so a missing image or quota is reported while the control plane
        // rests at a supported version. A worker step comes between control-plane
        // steps when the workers must follow to stay within the version skew.
        Hook::AfterControlPlaneUpgrade | Hook::AfterWorkersUpgrade => {
            versions.extend(steps());
            (
                !event.control_plane_upgrades.is_empty(),
                !event.workers_upgrades.is_empty(),
            )
        }
        _ => (false, false),
    };
    let live: Vec<&MachineFacts> = machines.iter().filter(|m| !m.deleting).collect();
    let mut phases = Vec::new();
    if control_plane {
        if let Some(m) = representative(live.iter().copied().filter(|m| m.control_plane)) {
            phases.push(Phase {
                name: "control-plane rollout",
                surge: vec![Surge {
                    of: "control plane".into(),
                    machines: 1,
                    flavor: flavor_of(m),
                    ports_each: m.ports as u64,
                }],
            });
        }
    }
    if workers {
        let mut by_deployment: BTreeMap<String, Vec<&MachineFacts>> = BTreeMap::new();
        for m in live.iter().filter(|m| !m.control_plane) {
            let group = m
                .topology_deployment
                .clone()
                .or_else(|| m.deployment.clone())
                .unwrap_or_else(|| "machines without a MachineDeployment".into());
            by_deployment.entry(group).or_default().push(m);
        }
        let mut surges: Vec<Surge> = by_deployment
            .into_iter()
            .filter_map(|(name, ms)| {
                let m = representative(ms.iter().copied())?;
                Some(Surge {
                    machines: max_surge(&event.cluster, &name, ms.len() as u64),
                    flavor: flavor_of(m),
                    ports_each: m.ports as u64,
                    of: name,
                })
            })
            .collect();
        // The deployments rolling at once; the largest ones, to be safe.
        surges.sort_by(|a, b| b.machines.cmp(&a.machines).then(a.of.cmp(&b.of)));
        surges.truncate(upgrade_concurrency(&event.cluster));
        surges.sort_by(|a, b| a.of.cmp(&b.of));
        if !surges.is_empty() {
            phases.push(Phase {
                name: "worker rollout",
                surge: surges,
            });
        }
    }
    Plan {
        versions: versions.into_iter().collect(),
        phases,
    }
}

fn flavor_of(m: &MachineFacts) -> FlavorRef {
    match (&m.flavor_id, &m.flavor) {
        (Some(id), _) => FlavorRef::Id(id.clone()),
        (None, Some(name)) => FlavorRef::Name(name.clone()),
        (None, None) => FlavorRef::Name(String::new()),
    }
}

/// Outside a rollout the machines of one role share a flavor, so any one
/// stands for them; the last by name, so the choice is stable.
fn representative<'a>(ms: impl Iterator<Item = &'a MachineFacts>) -> Option<&'a MachineFacts> {
    ms.max_by(|a, b| a.name.cmp(&b.name))
}

/// `topology.cluster.x-k8s.io/upgrade-concurrency`, at least 1.
fn upgrade_concurrency(cluster: &Cluster) -> usize {
    cluster
        .annotation(UPGRADE_CONCURRENCY_ANNOTATION)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// The MachineDeployment's `maxSurge` from the Cluster's topology (v1beta1
/// `strategy`, v1beta2 `rollout.strategy`): a number, or a percentage of its
/// replicas rounded up, as CAPI computes it. Default 1.
fn max_surge(cluster: &Cluster, topology_name: &str, machines: u64) -> u64 {
    let md = cluster
        .raw()
        .pointer("/spec/topology/workers/machineDeployments")
        .and_then(Value::as_array)
        .and_then(|mds| {
            mds.iter()
                .find(|md| md.get("name").and_then(Value::as_str) == Some(topology_name))
        });
    let Some(md) = md else { return 1 };
    let surge = md
        .pointer("/rollout/strategy/rollingUpdate/maxSurge")
        .or_else(|| md.pointer("/strategy/rollingUpdate/maxSurge"));
    let replicas = md
        .get("replicas")
        .and_then(Value::as_u64)
        .unwrap_or(machines);
    match surge {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(1),
        Some(Value::String(s)) => match s.trim().strip_suffix('%').map(str::parse::<u64>) {
            Some(Ok(pct)) => (replicas * pct).div_ceil(100),
            _ => 1,
        },
        _ => 1,
    }
}

/// What the check found: nothing means the upgrade may go ahead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub problems: Vec<String>,
}

/// Runs the plan against the cloud with the cluster's own credentials.
pub async fn run(clients: &Clients, plan: &Plan, images: &ImageMatch) -> Result<Report, OsError> {
    let mut problems = Vec::new();
    for version in &plan.versions {
        if !has_image(clients, images, version).await? {
            problems.push(format!(
                "no active Glance image for Kubernetes {version} ({})",
                images.describe(version)
            ));
        }
    }
    problems.extend(quota_problems(clients, &plan.phases).await?);
    Ok(Report { problems })
}

/// Whether each phase fits the project's free compute and port quota.
pub async fn quota_problems(clients: &Clients, phases: &[Phase]) -> Result<Vec<String>, OsError> {
    let mut problems = Vec::new();
    if !phases.is_empty() {
        let flavors = clients.compute.flavors().await?;
        let limits = quota::compute_limits(&clients.session).await?;
        let project = clients
            .identity
            .project()
            .await?
            .map(|p| p.id)
            .unwrap_or_default();
        let ports = quota::network_quota(&clients.session, &project)
            .await?
            .get("port")
            .copied()
            .unwrap_or(Usage {
                limit: None,
                used: 0,
            });
        for phase in phases {
            problems.extend(fit(phase, &flavors, &limits, &ports));
        }
    }
    Ok(problems)
}

async fn has_image(clients: &Clients, images: &ImageMatch, version: &str) -> Result<bool, OsError> {
    let active = ("status", "active".to_string());
    // Versions are written with and without the leading `v`.
    let bare = version.trim_start_matches('v');
    for v in [version.to_string(), bare.to_string(), format!("v{bare}")]
        .into_iter()
        .collect::<BTreeSet<_>>()
    {
        let found = clients
            .image
            .list(&[(images.property.as_str(), v), active.clone()])
            .await?;
        if !found.is_empty() {
            return Ok(true);
        }
    }
    if let Some(pattern) = &images.name_pattern {
        let re = images
            .name_regex(pattern, version)
            .map_err(OsError::Config)?;
        let all = clients
            .image
            .list(&[active, ("limit", "1000".to_string())])
            .await?;
        return Ok(all.iter().any(|i| re.is_match(&i.name)));
    }
    Ok(false)
}

/// Whether one phase fits the free quota; a message per resource that does not.
pub fn fit(
    phase: &Phase,
    flavors: &[Flavor],
    limits: &ComputeLimits,
    ports: &Usage,
) -> Vec<String> {
    let mut problems = Vec::new();
    let (mut instances, mut cores, mut ram, mut port_count) = (0u64, 0u64, 0u64, 0u64);
    let mut described = Vec::new();
    for s in &phase.surge {
        let flavor = flavors.iter().find(|f| match &s.flavor {
            FlavorRef::Id(id) => &f.id == id,
            FlavorRef::Name(n) => &f.name == n,
        });
        let Some(flavor) = flavor else {
            let shown = match &s.flavor {
                FlavorRef::Id(v) | FlavorRef::Name(v) => v,
            };
            problems.push(format!(
                "the {} cannot be sized: flavor {shown:?} of the {} is not in Nova",
                phase.name, s.of
            ));
            continue;
        };
        instances += s.machines;
        cores += s.machines * flavor.vcpus;
        ram += s.machines * flavor.ram;
        port_count += s.machines * s.ports_each;
        described.push(format!("{} × {} for the {}", s.machines, flavor.name, s.of));
    }
    let mut short = Vec::new();
    for (one, many, need, usage) in [
        ("instance", "instances", instances, &limits.instances),
        ("core", "cores", cores, &limits.cores),
        ("MiB of RAM", "MiB of RAM", ram, &limits.ram_mib),
        ("port", "ports", port_count, ports),
    ] {
        if let (Some(free), Some(limit)) = (usage.free(), usage.limit) {
            if need > free {
                let what = if need == 1 { one } else { many };
                short.push(format!(
                    "{need} {what} needed, {free} free (quota {limit}, {} in use)",
                    usage.used
                ));
            }
        }
    }
    if !short.is_empty() {
        problems.push(format!(
            "project quota too small for the {} ({}): {}",
            phase.name,
            described.join(", "),
            short.join("; ")
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::common::UpgradeStep;
    use serde_json::json;

    fn event(hook: Hook, cluster: Value, cp_steps: &[&str]) -> LifecycleEvent {
        LifecycleEvent {
            hook,
            settings: Default::default(),
            cluster: Cluster::from_value(cluster).unwrap(),
            versions: UpgradeVersions::FromTo {
                from: "v1.33.1".into(),
                to: "v1.35.0".into(),
            },
            control_plane_upgrades: cp_steps
                .iter()
                .map(|v| UpgradeStep {
                    version: v.to_string(),
                })
                .collect(),
            workers_upgrades: vec![],
        }
    }

    fn m(name: &str, cp: bool, md: Option<&str>, flavor: &str) -> MachineFacts {
        MachineFacts {
            name: name.into(),
            cluster_name: "prod".into(),
            control_plane: cp,
            topology_deployment: md.map(str::to_string),
            flavor: Some(flavor.into()),
            ports: 1,
            ..Default::default()
        }
    }

    fn machines() -> Vec<MachineFacts> {
        vec![
            m("prod-cp-1", true, None, "m1.medium"),
            m("prod-cp-2", true, None, "m1.medium"),
            m("prod-md-0-a", false, Some("md-0"), "m1.small"),
            m("prod-md-0-b", false, Some("md-0"), "m1.small"),
            m("prod-md-1-a", false, Some("md-1"), "m1.large"),
        ]
    }

    fn flavors() -> Vec<Flavor> {
        [
            ("m1.small", 1, 2048),
            ("m1.medium", 2, 4096),
            ("m1.large", 4, 8192),
        ]
        .into_iter()
        .map(|(n, c, r)| Flavor {
            id: format!("id-{n}"),
            name: n.into(),
            vcpus: c,
            ram: r,
            disk: 20,
            ..Flavor::default()
        })
        .collect()
    }

    #[test]
    fn cluster_upgrade_checks_every_version_and_both_phases() {
        let c = json!({"metadata": {"name": "prod", "namespace": "ns"},
            "spec": {"topology": {"workers": {"machineDeployments": [
                {"name": "md-0", "replicas": 10,
                 "rollout": {"strategy": {"rollingUpdate": {"maxSurge": "25%"}}}}]}}}});
        let p = plan(
            &event(Hook::BeforeClusterUpgrade, c, &["v1.34.1", "v1.35.0"]),
            &machines(),
        );
        assert_eq!(p.versions, ["v1.34.1", "v1.35.0"]);
        assert_eq!(p.phases.len(), 2);
        assert_eq!(
            p.phases[0].surge,
            [Surge {
                of: "control plane".into(),
                machines: 1,
                flavor: FlavorRef::Name("m1.medium".into()),
                ports_each: 1
            }]
        );
        // One deployment at a time by default: the one adding the most machines,
        // md-0 (25 % of 10 replicas, rounded up).
        let w = &p.phases[1].surge;
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].of.as_str(), w[0].machines), ("md-0", 3));
    }

    #[test]
    fn concurrency_and_v1beta1_strategy_are_read_from_the_cluster() {
        let c = json!({"metadata": {"name": "prod", "namespace": "ns",
                "annotations": {UPGRADE_CONCURRENCY_ANNOTATION: "2"}},
            "spec": {"topology": {"workers": {"machineDeployments": [
                {"name": "md-1", "strategy": {"rollingUpdate": {"maxSurge": 2}}}]}}}});
        let p = plan(&event(Hook::BeforeWorkersUpgrade, c, &[]), &machines());
        assert_eq!(p.versions, ["v1.35.0"]);
        assert_eq!(p.phases.len(), 1, "no control-plane phase");
        let w: Vec<(&str, u64)> = p.phases[0]
            .surge
            .iter()
            .map(|s| (s.of.as_str(), s.machines))
            .collect();
        assert_eq!(w, [("md-0", 1), ("md-1", 2)]);
        let cp = plan(
            &event(
                Hook::BeforeControlPlaneUpgrade,
                json!({"metadata": {"name": "prod"}}),
                &[],
            ),
            &machines(),
        );
        assert_eq!(cp.phases.len(), 1);
        assert_eq!(cp.phases[0].name, "control-plane rollout");
    }

    /// After a step reached v1.34.1 with `cp_steps` and `worker_step` still to come:
    /// the versions those steps boot and both rollouts are checked; once no step is
    /// left, nothing is.
    fn after_a_step(hook: Hook, cp_steps: &[&str], worker_step: &str, versions: &[&str]) {
        let c = json!({"metadata": {"name": "prod", "namespace": "ns"}});
        let mut e = event(hook, c, cp_steps);
        e.versions = UpgradeVersions::Reached("v1.34.1".into());
        e.workers_upgrades = vec![UpgradeStep {
            version: worker_step.into(),
        }];
        let p = plan(&e, &machines());
        // The version reached is booted already: only the next ones are asked about.
        assert_eq!(p.versions, versions);
        let names: Vec<&str> = p.phases.iter().map(|p| p.name).collect();
        assert_eq!(names, ["control-plane rollout", "worker rollout"]);
        // The last step done and the workers up to date: nothing left to check.
        e.control_plane_upgrades.clear();
        e.workers_upgrades.clear();
        let p = plan(&e, &machines());
        assert!(p.versions.is_empty() && p.phases.is_empty(), "{p:?}");
    }

    #[test]
    fn after_a_control_plane_step_the_steps_still_to_come_are_checked() {
        after_a_step(
            Hook::AfterControlPlaneUpgrade,
            &["v1.35.0"],
            "v1.35.0",
            &["v1.35.0"],
        );
    }

    #[test]
    fn after_a_worker_step_between_control_plane_steps_the_rest_is_checked() {
        // Workers four minors behind: CAPI moves them to v1.34 before the control
        // plane goes on to v1.35 and v1.36.
        after_a_step(
            Hook::AfterWorkersUpgrade,
            &["v1.35.0", "v1.36.0"],
            "v1.36.0",
            &["v1.35.0", "v1.36.0"],
        );
    }

    #[test]
    fn quota_messages_name_the_phase_the_flavor_and_the_shortfall() {
        let phase = Phase {
            name: "worker rollout",
            surge: vec![Surge {
                of: "md-1".into(),
                machines: 2,
                flavor: FlavorRef::Name("m1.large".into()),
                ports_each: 1,
            }],
        };
        let limits = ComputeLimits {
            instances: Usage::new(10, 2),
            cores: Usage::new(10, 4),
            ram_mib: Usage::new(-1, 0),
        };
        assert_eq!(
            fit(&phase, &flavors(), &limits, &Usage::new(100, 3)),
            [
                "project quota too small for the worker rollout (2 × m1.large for the md-1): \
              8 cores needed, 6 free (quota 10, 4 in use)"
            ]
        );
        let roomy = ComputeLimits {
            cores: Usage::new(8, 0),
            ..limits
        };
        assert!(fit(&phase, &flavors(), &roomy, &Usage::new(-1, 0)).is_empty());
        assert_eq!(
            fit(&phase, &flavors(), &roomy, &Usage::new(4, 3)),
            [
                "project quota too small for the worker rollout (2 × m1.large for the md-1): \
              2 ports needed, 1 free (quota 4, 3 in use)"
            ]
        );
        let gone = Phase {
            surge: vec![Surge {
                flavor: FlavorRef::Id("deleted".into()),
                ..phase.surge[0].clone()
            }],
            ..phase
        };
        assert_eq!(
            fit(&gone, &flavors(), &roomy, &Usage::new(-1, 0)),
            ["the worker rollout cannot be sized: flavor \"deleted\" of the md-1 is not in Nova"]
        );
    }

    #[test]
    fn name_patterns_take_the_version_literally() {
        let m = ImageMatch {
            property: "kube_version".into(),
            name_pattern: Some("^ubuntu-2404-kube-{version}$".into()),
        };
        m.validate().unwrap();
        let re = m
            .name_regex("^ubuntu-2404-kube-{version}$", "v1.34.1")
            .unwrap();
        assert!(re.is_match("ubuntu-2404-kube-v1.34.1"));
        assert!(
            !re.is_match("ubuntu-2404-kube-v1x34x1"),
            "dots are not wildcards"
        );
        assert!(ImageMatch {
            property: "p".into(),
            name_pattern: Some("([".into())
        }
        .validate()
        .is_err());
    }
}

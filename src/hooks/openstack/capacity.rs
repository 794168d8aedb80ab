//! Room in the project for a new cluster's first machines, checked at
//! BeforeClusterCreate.
//!
//! CAPI's BeforeClusterCreate request carries only the Cluster; the machines it is
//! about to create are known from the ValidateTopology call CAPI makes just before
//! it in the same reconcile, whose patched OpenStackMachineTemplates name the
//! flavors and whose builtin variables give the replicas. ValidateTopology's cloud
//! check keeps that demand here per Cluster; BeforeClusterCreate sizes it against
//! the project's compute and port quota (the same arithmetic as the upgrade
//! preflight's surge). A replica that saw no ValidateTopology call for the Cluster
//! (another replica answered it, or the class names no resource stackhook checks)
//! lets the Cluster through, as ValidateTopology does when it cannot ask the cloud.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::cloud_checks::{By, CloudPlan, FirstMachines};

use super::preflight::{FlavorRef, Phase, Plan, Surge};

/// The name of the phase in messages.
pub const PHASE: &str = "cluster's first machines";

/// How long a demand is kept after the last ValidateTopology call that named it:
/// CAPI calls ValidateTopology on every reconcile, so a live creation renews it.
const KEEP: Duration = Duration::from_secs(600);
/// At most this many Clusters are remembered; the oldest go first.
const MAX_ENTRIES: usize = 10_000;

/// What one Cluster's topology needs, and with which identity to ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// `builtin.cluster.uid`: a Cluster made anew under the same name is another.
    pub uid: Option<String>,
    /// The identity Secret, in the Cluster's namespace, and its clouds.yaml entry.
    pub secret: String,
    pub cloud: String,
    pub machines: Vec<FirstMachines>,
}

impl Demand {
    /// The preflight plan that sizes these machines: no image to look for (the
    /// images were looked up by ValidateTopology), one phase with every machine.
    pub fn plan(&self) -> Plan {
        Plan {
            versions: Vec::new(),
            phases: vec![Phase {
                name: PHASE,
                surge: self
                    .machines
                    .iter()
                    .map(|m| Surge {
                        of: m.of.clone(),
                        machines: m.replicas,
                        flavor: match &m.flavor {
                            (By::Id, v) => FlavorRef::Id(v.clone()),
                            (By::Name, v) => FlavorRef::Name(v.clone()),
                        },
                        ports_each: m.ports_each,
                    })
                    .collect(),
            }],
        }
    }
}

/// The latest demand per Cluster (namespace, name).
#[derive(Default)]
pub struct Demands {
    entries: Mutex<HashMap<(String, String), (Demand, Instant)>>,
}

impl Demands {
    pub fn new() -> Demands {
        Demands::default()
    }

    /// Keeps what `plan` says the Cluster's topology starts with.
    pub fn note(&self, plan: &CloudPlan) {
        self.note_at(plan, Instant::now());
    }

    fn note_at(&self, plan: &CloudPlan, now: Instant) {
        if plan.first_machines.is_empty() {
            return;
        }
        let demand = Demand {
            uid: plan.cluster_uid.clone(),
            secret: plan.secret.clone(),
            cloud: plan.cloud.clone(),
            machines: plan.first_machines.clone(),
        };
        let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| now.saturating_duration_since(*at) < KEEP);
        if map.len() >= MAX_ENTRIES {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            (plan.namespace.clone(), plan.cluster.clone()),
            (demand, now),
        );
    }

    /// The demand of Cluster `namespace/name` with `uid` (when both sides know it).
    pub fn get(&self, namespace: &str, name: &str, uid: Option<&str>) -> Option<Demand> {
        self.get_at(namespace, name, uid, Instant::now())
    }

    fn get_at(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        now: Instant,
    ) -> Option<Demand> {
        let map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(namespace.to_string(), name.to_string()))
            .filter(|(_, at)| now.saturating_duration_since(*at) < KEEP)
            .map(|(d, _)| d)
            .filter(|d| match (d.uid.as_deref(), uid) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            })
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(uid: Option<&str>, machines: Vec<FirstMachines>) -> CloudPlan {
        CloudPlan {
            pack: "openstack-v1".into(),
            namespace: "ns".into(),
            cluster: "prod".into(),
            cluster_uid: uid.map(str::to_string),
            secret: "prod-cloud-config".into(),
            cloud: "openstack".into(),
            checks: vec![],
            first_machines: machines,
        }
    }

    fn m(of: &str, replicas: u64, flavor: (By, &str)) -> FirstMachines {
        FirstMachines {
            of: of.into(),
            replicas,
            flavor: (flavor.0, flavor.1.into()),
            ports_each: 1,
        }
    }

    #[test]
    fn the_latest_demand_of_the_same_cluster_is_kept_and_sized_as_one_phase() {
        let d = Demands::new();
        let t0 = Instant::now();
        d.note_at(
            &plan(
                Some("u1"),
                vec![m("control plane", 1, (By::Name, "m1.small"))],
            ),
            t0,
        );
        let machines = vec![
            m("MachineDeployment md-0", 2, (By::Id, "f-2")),
            m("control plane", 3, (By::Name, "m1.large")),
        ];
        d.note_at(&plan(Some("u1"), machines), t0 + Duration::from_secs(1));
        let got = d
            .get_at("ns", "prod", Some("u1"), t0 + Duration::from_secs(2))
            .unwrap();
        assert_eq!(
            (got.secret.as_str(), got.cloud.as_str()),
            ("prod-cloud-config", "openstack")
        );
        let p = got.plan();
        assert!(p.versions.is_empty());
        assert_eq!(p.phases.len(), 1);
        assert_eq!(p.phases[0].name, PHASE);
        let surge: Vec<(&str, u64, &FlavorRef)> = p.phases[0]
            .surge
            .iter()
            .map(|s| (s.of.as_str(), s.machines, &s.flavor))
            .collect();
        assert_eq!(
            surge,
            [
                ("MachineDeployment md-0", 2, &FlavorRef::Id("f-2".into())),
                ("control plane", 3, &FlavorRef::Name("m1.large".into())),
            ]
        );
    }

    #[test]
    fn another_cluster_of_the_same_name_an_old_demand_or_none_is_not_used() {
        let d = Demands::new();
        let t0 = Instant::now();
        // Nothing to size: nothing kept.
        d.note_at(&plan(Some("u1"), vec![]), t0);
        assert_eq!(d.get_at("ns", "prod", None, t0), None);
        d.note_at(
            &plan(
                Some("u1"),
                vec![m("control plane", 1, (By::Name, "m1.small"))],
            ),
            t0,
        );
        assert!(d.get_at("ns", "prod", Some("u1"), t0).is_some());
        assert!(
            d.get_at("ns", "prod", None, t0).is_some(),
            "no uid in the request"
        );
        assert_eq!(d.get_at("ns", "prod", Some("u2"), t0), None, "made anew");
        assert_eq!(d.get_at("other", "prod", Some("u1"), t0), None);
        assert_eq!(
            d.get_at("ns", "prod", Some("u1"), t0 + KEEP),
            None,
            "expired"
        );
    }
}

//! What the OpenStack objects last said, kept in memory so that lifecycle
//! handlers answer from it without a round trip to the apiserver.
//!
//! Every replica fills it from a read-only watch of OpenStackClusters and
//! OpenStackMachines (`controller::cache`); the leading replica's controller also
//! writes each result as soon as it has written the status. Until the first
//! lists are in, [`ClusterResults::is_synced`] is false and a miss means "not
//! known yet", not "no such cluster".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;

use crate::infra::api::extensions::ClusterStatusExtensions;
use crate::infra::api::names::CLUSTER_NAME_LABEL;
use crate::infra::api::OpenStackCluster;
use crate::infra::bootstrap::MachineFacts;
use crate::kubernetes::capi;

/// The latest state of one OpenStackCluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterResult {
    /// `metadata.generation` of the object the result was computed from.
    pub generation: Option<i64>,
    pub ready: bool,
    /// `status.extensions` as written.
    pub extensions: Option<Box<ClusterStatusExtensions>>,
    /// The control-plane VIP (API load balancer VIP or fixed IP).
    pub control_plane_vip: Option<String>,
    /// The reserved ingress VIP.
    pub ingress_vip: Option<String>,
    /// `spec.controlPlaneEndpoint` as `(host, port)`.
    pub control_plane_endpoint: Option<(String, i32)>,
    /// The CAPI Cluster it belongs to (owner reference, else the cluster-name label).
    pub cluster_name: Option<String>,
    /// The object itself without managed fields: the hooks read its identity
    /// reference, spec and status from here.
    pub object: Option<StoredCluster>,
}

/// An OpenStackCluster kept as its JSON text. Every replica holds one per cluster
/// next to the leader's controller cache; as text it takes a fifth of the memory of
/// the decoded object (about 1.3 KB against 6.6 KB for a CAPO-sized one), and
/// lifecycle hooks, the only readers, are rare enough to decode it each time.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredCluster(Arc<str>);

impl StoredCluster {
    /// Keeps `osc` without its managed fields and kubectl's last-applied copy.
    pub fn new(osc: &OpenStackCluster) -> Result<StoredCluster, serde_json::Error> {
        let mut object = osc.clone();
        crate::kubernetes::watch::trim(&mut object);
        Ok(StoredCluster(serde_json::to_string(&object)?.into()))
    }

    pub fn decode(&self) -> Result<OpenStackCluster, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

impl ClusterResult {
    /// Reads the result out of an object whose status was just written or watched.
    pub fn from_cluster(osc: &OpenStackCluster) -> ClusterResult {
        let status = osc.status.as_ref();
        let extensions = status.and_then(|s| s.extensions.clone());
        let lbs = extensions.as_ref().and_then(|e| e.load_balancers.as_ref());
        let control_plane_vip = lbs
            .and_then(|l| l.control_plane.as_ref())
            .and_then(|v| v.vip.clone())
            .or_else(|| {
                status
                    .and_then(|s| s.api_server_load_balancer.as_ref())
                    .map(|lb| lb.internal_ip.clone())
                    .filter(|ip| !ip.is_empty())
            });
        let ingress_vip = lbs
            .and_then(|l| l.ingress.as_ref())
            .and_then(|v| v.vip.clone());
        ClusterResult {
            generation: osc.metadata.generation,
            ready: status.is_some_and(|s| s.ready),
            extensions,
            control_plane_vip,
            ingress_vip,
            control_plane_endpoint: osc
                .spec
                .control_plane_endpoint
                .as_ref()
                .filter(|e| !e.host.is_empty())
                .map(|e| (e.host.clone(), e.port)),
            cluster_name: capi::owner_cluster_name(osc)
                .or_else(|| osc.labels().get(CLUSTER_NAME_LABEL).cloned()),
            // Serializing a typed object has no way to fail (string keys only).
            object: StoredCluster::new(osc).ok(),
        }
    }
}

type Key = (String, String);

#[derive(Debug, Default)]
struct Inner {
    clusters: RwLock<HashMap<Key, ClusterResult>>,
    /// `(namespace, CAPI cluster)` → machine name → facts.
    machines: RwLock<HashMap<Key, BTreeMap<String, MachineFacts>>>,
    clusters_synced: AtomicBool,
    machines_synced: AtomicBool,
}

/// Shared map from `(namespace, name)` to the latest [`ClusterResult`], and the
/// machines of each CAPI Cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterResults {
    inner: Arc<Inner>,
}

fn key(namespace: &str, name: &str) -> Key {
    (namespace.to_string(), name.to_string())
}

impl ClusterResults {
    pub fn new() -> ClusterResults {
        ClusterResults::default()
    }

    // A writer cannot panic while holding a lock (plain map operations), so a
    // poisoned lock still holds consistent data.

    pub fn get(&self, namespace: &str, name: &str) -> Option<ClusterResult> {
        let map = self
            .inner
            .clusters
            .read()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&key(namespace, name)).cloned()
    }

    pub fn set(&self, namespace: &str, name: &str, result: ClusterResult) {
        let mut map = self
            .inner
            .clusters
            .write()
            .unwrap_or_else(|e| e.into_inner());
        map.insert(key(namespace, name), result);
    }

    pub fn remove(&self, namespace: &str, name: &str) {
        let mut map = self
            .inner
            .clusters
            .write()
            .unwrap_or_else(|e| e.into_inner());
        map.remove(&key(namespace, name));
    }

    /// Keeps only the clusters in `live` (after a fresh list).
    pub fn retain_clusters(&self, live: &HashSet<Key>) {
        let mut map = self
            .inner
            .clusters
            .write()
            .unwrap_or_else(|e| e.into_inner());
        map.retain(|k, _| live.contains(k));
    }

    /// Drops everything and forgets that it was ever synced.
    pub fn clear(&self) {
        self.inner
            .clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner
            .machines
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner.clusters_synced.store(false, Ordering::SeqCst);
        self.inner.machines_synced.store(false, Ordering::SeqCst);
    }

    pub fn len(&self) -> usize {
        self.inner
            .clusters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a machine; false when nothing changed.
    pub fn set_machine(&self, namespace: &str, facts: MachineFacts) -> bool {
        let mut map = self
            .inner
            .machines
            .write()
            .unwrap_or_else(|e| e.into_inner());
        // A machine relabelled to another cluster leaves its old one.
        for (k, machines) in map.iter_mut() {
            if k.0 == namespace && k.1 != facts.cluster_name {
                machines.remove(&facts.name);
            }
        }
        let machines = map.entry(key(namespace, &facts.cluster_name)).or_default();
        if machines.get(&facts.name) == Some(&facts) {
            return false;
        }
        machines.insert(facts.name.clone(), facts);
        true
    }

    pub fn remove_machine(&self, namespace: &str, name: &str) {
        let mut map = self
            .inner
            .machines
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for (k, machines) in map.iter_mut() {
            if k.0 == namespace {
                machines.remove(name);
            }
        }
        map.retain(|_, m| !m.is_empty());
    }

    /// Keeps only the machines in `live`, as `(namespace, machine name)`.
    pub fn retain_machines(&self, live: &HashSet<Key>) {
        let mut map = self
            .inner
            .machines
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for (k, machines) in map.iter_mut() {
            machines.retain(|name, _| live.contains(&(k.0.clone(), name.clone())));
        }
        map.retain(|_, m| !m.is_empty());
    }

    /// The machines of the CAPI Cluster `cluster`, by name.
    pub fn machines(&self, namespace: &str, cluster: &str) -> Vec<MachineFacts> {
        let map = self
            .inner
            .machines
            .read()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&key(namespace, cluster))
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn set_clusters_synced(&self) {
        self.inner.clusters_synced.store(true, Ordering::SeqCst);
    }

    pub fn set_machines_synced(&self) {
        self.inner.machines_synced.store(true, Ordering::SeqCst);
    }

    /// Both lists have been read at least once.
    pub fn is_synced(&self) -> bool {
        self.inner.clusters_synced.load(Ordering::SeqCst)
            && self.inner.machines_synced.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::cluster::LoadBalancer;
    use crate::infra::api::extensions::{LoadBalancersStatus, VirtualIp};
    use crate::infra::api::types::ApiEndpoint;
    use crate::infra::api::{OpenStackClusterSpec, OpenStackClusterStatus};

    fn osc() -> OpenStackCluster {
        let mut o = OpenStackCluster::new("c1", OpenStackClusterSpec::default());
        o.metadata.generation = Some(3);
        o
    }

    #[test]
    fn vip_prefers_extensions_then_load_balancer() {
        let mut o = osc();
        o.status = Some(OpenStackClusterStatus {
            ready: true,
            api_server_load_balancer: Some(Box::new(LoadBalancer {
                internal_ip: "10.0.0.5".into(),
                ..Default::default()
            })),
            ..Default::default()
        });
        o.spec.control_plane_endpoint = Some(Box::new(ApiEndpoint {
            host: "203.0.113.7".into(),
            port: 6443,
        }));
        let r = ClusterResult::from_cluster(&o);
        assert_eq!(r.control_plane_vip.as_deref(), Some("10.0.0.5"));
        assert_eq!(r.generation, Some(3));
        assert!(r.ready);
        assert_eq!(
            r.control_plane_endpoint,
            Some(("203.0.113.7".to_string(), 6443))
        );

        o.status.as_mut().unwrap().extensions = Some(Box::new(ClusterStatusExtensions {
            load_balancers: Some(LoadBalancersStatus {
                control_plane: Some(VirtualIp {
                    vip: Some("10.0.0.9".into()),
                }),
                ingress: Some(VirtualIp {
                    vip: Some("10.0.0.10".into()),
                }),
            }),
            ..Default::default()
        }));
        let r = ClusterResult::from_cluster(&o);
        assert_eq!(r.control_plane_vip.as_deref(), Some("10.0.0.9"));
        assert_eq!(r.ingress_vip.as_deref(), Some("10.0.0.10"));
    }

    #[test]
    fn machines_are_kept_per_cluster_and_follow_relabels() {
        let r = ClusterResults::new();
        let m = |name: &str, cluster: &str| MachineFacts {
            name: name.into(),
            cluster_name: cluster.into(),
            ..Default::default()
        };
        assert!(r.set_machine("ns", m("a", "prod")));
        assert!(!r.set_machine("ns", m("a", "prod")), "no change");
        assert!(r.set_machine("ns", m("b", "prod")));
        assert!(r.set_machine("other", m("a", "prod")));
        let names = |ns: &str, c: &str| -> Vec<String> {
            r.machines(ns, c).into_iter().map(|m| m.name).collect()
        };
        assert_eq!(names("ns", "prod"), ["a", "b"]);
        assert!(r.set_machine("ns", m("b", "dev")));
        assert_eq!(names("ns", "prod"), ["a"]);
        assert_eq!(names("ns", "dev"), ["b"]);
        r.remove_machine("ns", "a");
        assert!(names("ns", "prod").is_empty());
        r.retain_machines(&HashSet::from([("ns".to_string(), "b".to_string())]));
        assert_eq!(names("ns", "dev"), ["b"]);
        assert!(names("other", "prod").is_empty());
        assert!(!r.is_synced());
        r.set_clusters_synced();
        r.set_machines_synced();
        assert!(r.is_synced());
    }

    #[test]
    fn store_is_shared_between_clones() {
        let a = ClusterResults::new();
        let b = a.clone();
        a.set("ns", "c1", ClusterResult::from_cluster(&osc()));
        assert_eq!(b.get("ns", "c1").and_then(|r| r.generation), Some(3));
        assert!(b.get("other", "c1").is_none());
        b.remove("ns", "c1");
        assert!(a.is_empty());
    }
}

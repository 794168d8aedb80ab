//! What the OpenStackCluster controller last published, kept in memory so that
//! lifecycle handlers answer from it without a round trip to the apiserver. The
//! controllers write it; the registry hands it to the handlers.
//!
//! Only the leader reconciles, so on other replicas the store stays empty and
//! readers must treat a miss as "not known here", not as "not ready".

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::infra::api::extensions::ClusterStatusExtensions;
use crate::infra::api::OpenStackCluster;

/// The latest reconcile result of one OpenStackCluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterResult {
    /// `metadata.generation` of the object the result was computed from.
    pub generation: Option<i64>,
    pub ready: bool,
    /// `status.extensions` as written.
    pub extensions: Option<ClusterStatusExtensions>,
    /// The control-plane VIP (API load balancer VIP or fixed IP).
    pub control_plane_vip: Option<String>,
    /// The reserved ingress VIP.
    pub ingress_vip: Option<String>,
    /// `spec.controlPlaneEndpoint` as `(host, port)`.
    pub control_plane_endpoint: Option<(String, i32)>,
}

impl ClusterResult {
    /// Reads the result out of an object whose status was just written.
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
        }
    }
}

/// Shared map from `(namespace, name)` to the latest [`ClusterResult`].
#[derive(Clone, Debug, Default)]
pub struct ClusterResults {
    inner: Arc<RwLock<HashMap<(String, String), ClusterResult>>>,
}

impl ClusterResults {
    pub fn new() -> ClusterResults {
        ClusterResults::default()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<ClusterResult> {
        // A writer cannot panic while holding the lock (plain map operations),
        // so a poisoned lock still holds consistent data.
        let map = self.inner.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    pub fn set(&self, namespace: &str, name: &str, result: ClusterResult) {
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        map.insert((namespace.to_string(), name.to_string()), result);
    }

    pub fn remove(&self, namespace: &str, name: &str) {
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        map.remove(&(namespace.to_string(), name.to_string()));
    }

    /// Drops everything, e.g. when this replica stops leading and the entries
    /// would go stale.
    pub fn clear(&self) {
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        map.clear();
    }

    pub fn len(&self) -> usize {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            api_server_load_balancer: Some(LoadBalancer {
                internal_ip: "10.0.0.5".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        o.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: "203.0.113.7".into(),
            port: 6443,
        });
        let r = ClusterResult::from_cluster(&o);
        assert_eq!(r.control_plane_vip.as_deref(), Some("10.0.0.5"));
        assert_eq!(r.generation, Some(3));
        assert!(r.ready);
        assert_eq!(
            r.control_plane_endpoint,
            Some(("203.0.113.7".to_string(), 6443))
        );

        o.status.as_mut().unwrap().extensions = Some(ClusterStatusExtensions {
            load_balancers: Some(LoadBalancersStatus {
                control_plane: Some(VirtualIp {
                    vip: Some("10.0.0.9".into()),
                }),
                ingress: Some(VirtualIp {
                    vip: Some("10.0.0.10".into()),
                }),
            }),
            ..Default::default()
        });
        let r = ClusterResult::from_cluster(&o);
        assert_eq!(r.control_plane_vip.as_deref(), Some("10.0.0.9"));
        assert_eq!(r.ingress_vip.as_deref(), Some("10.0.0.10"));
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

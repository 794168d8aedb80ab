//! What the last converged pass over the cloud saw, per OpenStackCluster.
//!
//! Most passes of a built cluster are started by its machines (an address, a
//! reservation, a deletion to publish), not by anything the cloud pass reads. kube's
//! controller does not say why a pass started, so the object tells: when its spec,
//! metadata and status are what the last converged pass left, and its identity
//! Secret is the same, the cloud has nothing new to be asked about. Such a pass
//! republishes the machines alone; the cloud is checked again when the resync is due,
//! as for a cluster nobody touches.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::infra::api::OpenStackCluster;
use crate::infra::seam::IdentitySecret;

/// A hash of everything a cloud pass reads from the object and its identity Secret.
/// The Secret's resourceVersion stands for its content; status and spec are hashed as
/// they serialize, which is how they come back from the API server.
pub fn inputs(osc: &OpenStackCluster, identity: &IdentitySecret) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_vec(&osc.spec)
        .unwrap_or_default()
        .hash(&mut h);
    serde_json::to_vec(&osc.status)
        .unwrap_or_default()
        .hash(&mut h);
    osc.labels().hash(&mut h);
    osc.annotations().hash(&mut h);
    osc.finalizers().hash(&mut h);
    osc.metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut h);
    (
        &identity.namespace,
        &identity.name,
        &identity.resource_version,
        &identity.cloud_name,
        &identity.region,
    )
        .hash(&mut h);
    h.finish()
}

/// Per (namespace, name): the inputs after the last pass, and when the cloud was
/// last found converged.
#[derive(Debug, Default)]
pub struct Converged {
    seen: Mutex<HashMap<(String, String), (u64, Instant)>>,
}

impl Converged {
    /// How long until the resync is due, when `inputs` are what the last pass left
    /// and the cloud was found converged less than `resync` ago; `None` when the
    /// cloud has to be asked.
    pub fn until_resync(
        &self,
        ns: &str,
        name: &str,
        inputs: u64,
        resync: Duration,
    ) -> Option<Duration> {
        let map = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&(ns.to_string(), name.to_string())) {
            Some((seen, at)) if *seen == inputs => {
                resync.checked_sub(at.elapsed()).filter(|d| !d.is_zero())
            }
            _ => None,
        }
    }

    /// Records a pass over the cloud, started at `at`, that found everything in place
    /// and left the object with `inputs`.
    pub fn converged(&self, ns: &str, name: &str, inputs: u64, at: Instant) {
        let mut map = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        map.insert((ns.to_string(), name.to_string()), (inputs, at));
    }

    /// Records the inputs a republishing pass left (a status with new machine
    /// facts), keeping the time of the last pass over the cloud.
    pub fn republished(&self, ns: &str, name: &str, inputs: u64) {
        let mut map = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get_mut(&(ns.to_string(), name.to_string())) {
            entry.0 = inputs;
        }
    }

    /// The next pass asks the cloud.
    pub fn forget(&self, ns: &str, name: &str) {
        let mut map = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&(ns.to_string(), name.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inputs_within_the_resync_skip_the_cloud_until_it_is_due() {
        let c = Converged::default();
        let resync = Duration::from_secs(600);
        assert_eq!(
            c.until_resync("ns", "a", 1, resync),
            None,
            "nothing seen yet"
        );
        c.converged("ns", "a", 1, Instant::now());
        let left = c.until_resync("ns", "a", 1, resync).expect("fresh");
        assert!(left <= resync && left > Duration::from_secs(590));
        assert_eq!(c.until_resync("ns", "a", 2, resync), None, "other inputs");
        assert_eq!(c.until_resync("ns", "b", 1, resync), None, "other object");
        c.republished("ns", "a", 2);
        assert!(c.until_resync("ns", "a", 2, resync).is_some());
        assert_eq!(c.until_resync("ns", "a", 1, resync), None);
        c.forget("ns", "a");
        assert_eq!(c.until_resync("ns", "a", 2, resync), None);
    }

    #[test]
    fn a_pass_older_than_the_resync_asks_the_cloud() {
        let c = Converged::default();
        let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(700)) else {
            return; // a clock this young cannot hold the case
        };
        c.converged("ns", "a", 1, long_ago);
        assert_eq!(c.until_resync("ns", "a", 1, Duration::from_secs(600)), None);
        c.republished("ns", "b", 1);
        assert_eq!(
            c.until_resync("ns", "b", 1, Duration::from_secs(600)),
            None,
            "republishing records nothing for an object never found converged"
        );
    }
}

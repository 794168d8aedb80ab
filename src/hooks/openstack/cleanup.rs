//! Cleanup before CAPI deletes a cluster's infrastructure: what controllers
//! inside the cluster created in the project and nobody would delete. Octavia
//! load balancers of Services of type LoadBalancer keep their VIP ports on the
//! cluster subnet, so the network cannot be deleted while they exist; volumes
//! of PersistentVolumes would simply leak.
//!
//! Recognised as cloud-provider-openstack creates them, by the cluster name the
//! cloud-controller-manager and the Cinder CSI driver were started with:
//! load balancers named `kube_service_<cluster>_<namespace>_<service>`
//! (Kubernetes names hold no `_`, so the prefix cannot match another cluster's),
//! volumes with the metadata `cinder.csi.openstack.org/cluster: <cluster>`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use stackhook_openstack::blockstorage::{BlockStorage, Volume, VolumeFilter};
use stackhook_openstack::loadbalancing::{LoadBalancer, LoadBalancing};
use stackhook_openstack::{Clients, OsError};

use super::jobs::Progress;

/// Volume metadata the Cinder CSI driver writes: its `--cluster` value.
pub const CSI_CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";

/// The start of the names of the load balancers the cloud-controller-manager
/// of cluster `name` creates.
pub fn load_balancer_prefix(name: &str) -> String {
    format!("kube_service_{name}_")
}

/// One load balancer of cluster `name`'s Services.
pub fn is_cluster_load_balancer(lb: &LoadBalancer, name: &str) -> bool {
    lb.name.starts_with(&load_balancer_prefix(name))
}

/// One volume of cluster `name`'s PersistentVolumes.
pub fn is_cluster_volume(v: &Volume, name: &str) -> bool {
    v.metadata.get(CSI_CLUSTER_KEY).map(String::as_str) == Some(name)
}

/// What a run removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub load_balancers: usize,
    pub volumes: usize,
}

impl Report {
    pub fn describe(&self) -> String {
        format!(
            "{} and {}",
            count(self.load_balancers, "load balancer"),
            count(self.volumes, "volume")
        )
    }
}

pub fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// How long a run keeps at it, and how often it looks again.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    pub poll: Duration,
    pub give_up_after: Duration,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            poll: Duration::from_secs(2),
            give_up_after: Duration::from_secs(600),
        }
    }
}

/// Deletes the cluster's load balancers (with everything under them) and volumes
/// (detaching them from servers first), and returns once none is left.
pub async fn run(
    clients: &Clients,
    name: &str,
    progress: &Progress,
    pace: Pace,
) -> Result<Report, String> {
    let started = Instant::now();
    let mut seen_lbs = BTreeSet::new();
    let mut seen_volumes = BTreeSet::new();
    loop {
        let lbs: Vec<LoadBalancer> = clients
            .load_balancer
            .list(&[])
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|lb: &LoadBalancer| is_cluster_load_balancer(lb, name))
            .collect();
        let filter = VolumeFilter {
            name: None,
            metadata: [(CSI_CLUSTER_KEY.to_string(), name.to_string())].into(),
        };
        let volumes: Vec<Volume> = clients
            .block_storage
            .volumes(&filter)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|v| is_cluster_volume(v, name))
            .collect();
        if lbs.is_empty() && volumes.is_empty() {
            return Ok(Report {
                load_balancers: seen_lbs.len(),
                volumes: seen_volumes.len(),
            });
        }
        let left = Report {
            load_balancers: lbs.len(),
            volumes: volumes.len(),
        };
        if started.elapsed() > pace.give_up_after {
            return Err(format!(
                "{} of cluster {name} still there after {} s",
                left.describe(),
                pace.give_up_after.as_secs()
            ));
        }
        progress.set(format!(
            "deleting {} that the cloud provider created for cluster {name}",
            left.describe()
        ));
        for lb in &lbs {
            seen_lbs.insert(lb.id.clone());
            // Octavia refuses changes while it works on one; the next round retries.
            if lb.is_pending() {
                continue;
            }
            tolerate(
                clients
                    .load_balancer
                    .delete_load_balancer_cascade(&lb.id)
                    .await,
            )?;
            tracing::info!(load_balancer = %lb.name, id = %lb.id, "deleting a Service's load balancer");
        }
        for v in &volumes {
            seen_volumes.insert(v.id.clone());
            match v.status.as_str() {
                "in-use" => {
                    for a in &v.attachments {
                        tolerate(clients.compute.detach_volume(&a.server_id, &v.id).await)?;
                    }
                }
                "available" | "error" | "error_extending" | "error_managing" => {
                    tolerate(clients.block_storage.delete_volume(&v.id).await)?;
                    tracing::info!(volume = %v.name, id = %v.id, "deleting a PersistentVolume's volume");
                }
                // creating, attaching, detaching, deleting...: Cinder is busy with it.
                _ => {}
            }
        }
        tokio::time::sleep(pace.poll).await;
    }
}

/// Gone already (404) or busy (409, 400 for a state change in between) is for
/// the next round; anything else ends the run.
fn tolerate(r: Result<(), OsError>) -> Result<(), String> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() || e.is_conflict() || e.status() == Some(400) => {
            tracing::debug!(error = %e, "retrying next round");
            Ok(())
        }
        Err(e) if e.is_retryable() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(name: &str) -> LoadBalancer {
        LoadBalancer {
            id: name.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn only_this_cluster_s_resources_match() {
        assert!(is_cluster_load_balancer(
            &lb("kube_service_prod_default_web"),
            "prod"
        ));
        assert!(!is_cluster_load_balancer(
            &lb("kube_service_prod2_default_web"),
            "prod"
        ));
        assert!(!is_cluster_load_balancer(
            &lb("kube_service_pro_d_web"),
            "prod"
        ));
        assert!(!is_cluster_load_balancer(
            &lb("k8s-clusterapi-cluster-ns-prod-kubeapi"),
            "prod"
        ));
        let vol = |v: Option<&str>| Volume {
            id: "v".into(),
            metadata: v
                .map(|v| [(CSI_CLUSTER_KEY.to_string(), v.to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        };
        assert!(is_cluster_volume(&vol(Some("prod")), "prod"));
        assert!(!is_cluster_volume(&vol(Some("prod-2")), "prod"));
        assert!(!is_cluster_volume(&vol(None), "prod"));
    }

    #[test]
    fn reports_read_naturally() {
        assert_eq!(
            Report {
                load_balancers: 1,
                volumes: 0
            }
            .describe(),
            "1 load balancer and 0 volumes"
        );
        assert_eq!(count(2, "volume"), "2 volumes");
    }
}

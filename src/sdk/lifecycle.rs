//! Lifecycle hook requests. Each hook has its own typed request (with its own required
//! fields); handlers see them through [`LifecycleEvent`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::catalog::Hook;
use super::cluster::Cluster;
use super::common::{Settings, UpgradeStep};

/// Requests with nothing but the Cluster: BeforeClusterCreate,
/// AfterControlPlaneInitialized, BeforeClusterDelete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub cluster: Cluster,
}

/// BeforeClusterUpgrade, BeforeControlPlaneUpgrade, BeforeWorkersUpgrade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeforeUpgradeRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub cluster: Cluster,
    pub from_kubernetes_version: String,
    pub to_kubernetes_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_plane_upgrades: Vec<UpgradeStep>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers_upgrades: Vec<UpgradeStep>,
}

/// AfterControlPlaneUpgrade, AfterWorkersUpgrade, AfterClusterUpgrade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AfterUpgradeRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub cluster: Cluster,
    pub kubernetes_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_plane_upgrades: Vec<UpgradeStep>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers_upgrades: Vec<UpgradeStep>,
}

/// What a lifecycle handler sees, whatever the hook.
#[derive(Debug, Clone, PartialEq)]
pub struct LifecycleEvent {
    pub hook: Hook,
    pub settings: Settings,
    pub cluster: Cluster,
    /// Upgrade hooks: `from`/`to` of the (next) step, or the reached version.
    pub versions: UpgradeVersions,
    pub control_plane_upgrades: Vec<UpgradeStep>,
    pub workers_upgrades: Vec<UpgradeStep>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeVersions {
    None,
    FromTo { from: String, to: String },
    Reached(String),
}

impl LifecycleEvent {
    pub fn from_cluster_request(hook: Hook, r: ClusterRequest) -> Self {
        LifecycleEvent {
            hook,
            settings: r.settings,
            cluster: r.cluster,
            versions: UpgradeVersions::None,
            control_plane_upgrades: vec![],
            workers_upgrades: vec![],
        }
    }

    pub fn from_before_upgrade(hook: Hook, r: BeforeUpgradeRequest) -> Self {
        LifecycleEvent {
            hook,
            settings: r.settings,
            cluster: r.cluster,
            versions: UpgradeVersions::FromTo {
                from: r.from_kubernetes_version,
                to: r.to_kubernetes_version,
            },
            control_plane_upgrades: r.control_plane_upgrades,
            workers_upgrades: r.workers_upgrades,
        }
    }

    pub fn from_after_upgrade(hook: Hook, r: AfterUpgradeRequest) -> Self {
        LifecycleEvent {
            hook,
            settings: r.settings,
            cluster: r.cluster,
            versions: UpgradeVersions::Reached(r.kubernetes_version),
            control_plane_upgrades: r.control_plane_upgrades,
            workers_upgrades: r.workers_upgrades,
        }
    }
}

//! GenerateUpgradePlan (CAPI ≥ 1.12).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cluster::Cluster;
use super::common::{ResponseStatus, Settings, UpgradeStep};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateUpgradePlanRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub cluster: Cluster,
    pub from_control_plane_kubernetes_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_workers_kubernetes_version: Option<String>,
    pub to_kubernetes_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateUpgradePlanResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub control_plane_upgrades: Vec<UpgradeStep>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers_upgrades: Vec<UpgradeStep>,
}

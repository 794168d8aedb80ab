//! In-place update hooks (CAPI ≥ 1.12, feature gate InPlaceUpdates).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{Patch, ResponseStatus, Settings};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineUpdateSide {
    pub machine: Value,
    pub infrastructure_machine: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_config: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanUpdateMachineRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub current: MachineUpdateSide,
    pub desired: MachineUpdateSide,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanUpdateMachineResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_patch: Option<Patch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_machine_patch: Option<Patch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_config_patch: Option<Patch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetUpdateSide {
    pub machine_set: Value,
    pub infrastructure_machine_template: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_config_template: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanUpdateMachineSetRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub current: MachineSetUpdateSide,
    pub desired: MachineSetUpdateSide,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanUpdateMachineSetResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_set_patch: Option<Patch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_machine_template_patch: Option<Patch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_config_template_patch: Option<Patch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredMachine {
    pub machine: Value,
    pub infrastructure_machine: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_config: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateMachineRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    pub desired: DesiredMachine,
}

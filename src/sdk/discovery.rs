//! Discovery: the list of handlers this server offers.

use serde::{Deserialize, Serialize};

use super::common::ResponseStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum FailurePolicy {
    #[default]
    Fail,
    Ignore,
}

/// The request carries nothing but TypeMeta (no settings).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
pub struct DiscoveryRequest {}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionHook {
    pub api_version: String,
    pub hook: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionHandler {
    pub name: String,
    pub request_hook: GroupVersionHook,
    pub timeout_seconds: i32,
    pub failure_policy: FailurePolicy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub handlers: Vec<ExtensionHandler>,
}

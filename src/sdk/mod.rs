//! Wire types of the CAPI Runtime SDK (`hooks.runtime.cluster.x-k8s.io/v1alpha1`),
//! with exact camelCase names. The server decodes into these and nothing else.

pub mod catalog;
pub mod clip;
pub mod cluster;
pub mod common;
pub mod decode;
pub mod discovery;
pub mod inplace;
pub mod lifecycle;
pub mod topology;
pub mod upgrade_plan;

pub use catalog::{CapiVersion, Hook};
pub use common::{CommonResponse, ResponseStatus, RetryResponse};

/// The group/version every hook request and response carries.
pub const API_VERSION: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";

/// The `kind` of the response to `hook`.
pub fn response_kind(hook: Hook) -> String {
    format!("{}Response", hook.name())
}

impl CommonResponse {
    pub fn new(hook: Hook, status: ResponseStatus, message: impl Into<String>) -> Self {
        CommonResponse {
            api_version: API_VERSION.to_string(),
            kind: response_kind(hook),
            status,
            message: message.into(),
        }
    }
}

impl RetryResponse {
    pub fn new(
        hook: Hook,
        status: ResponseStatus,
        message: impl Into<String>,
        retry_after_seconds: i32,
    ) -> Self {
        RetryResponse {
            api_version: API_VERSION.to_string(),
            kind: response_kind(hook),
            status,
            message: message.into(),
            retry_after_seconds,
        }
    }
}

//! Wire types of the CAPI Runtime SDK (`hooks.runtime.cluster.x-k8s.io/v1alpha1`).

pub mod catalog;

pub use catalog::{CapiVersion, Hook};

/// The group/version every hook request and response carries.
pub const API_VERSION: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";

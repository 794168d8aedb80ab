//! The Kubernetes plumbing the controllers and the hooks share: CAPI object
//! views, identity Secrets, the per-cluster Secrets and objects stackhook
//! writes, and the leader check, and the trimmed watches both read through. Both sides sit above it; it knows neither.

pub mod bootstrap_vars;
pub mod capi;
pub mod identity;
pub mod leader;
pub mod resource_set;
pub mod secrets;
pub mod watch;

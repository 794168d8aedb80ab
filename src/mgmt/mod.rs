//! What stackhook reads from the management cluster for both of its jobs: the hook
//! server and the OpenStack controllers sit above this layer and never import from
//! each other for it.

pub mod capi_version;

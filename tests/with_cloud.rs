//! Tests against the loopback OpenStack of `tests/cloud/` (and, for the
//! end-to-end ones, a real API server); each skips with one line without them.
//!
//! One binary per set of real parts: each test file is a module of it.
#[path = "support/cloud.rs"]
mod cloud;
#[path = "support/crd_schema.rs"]
mod crd_schema;
#[path = "support/infra.rs"]
mod infra;
#[path = "support/kube.rs"]
mod kube_server;
#[path = "support/machine.rs"]
mod machine_support;
#[path = "support/replica.rs"]
mod replica;
#[path = "support/server.rs"]
mod server;

mod bootstrap_vars;
mod cloud_bastion;
mod cloud_cluster;
mod cloud_hooks;
mod cloud_machine;
mod cloud_machine_client;
mod cloud_smoke;
mod cloud_template;
mod cloud_validate;
mod cloud_vip;
mod e2e;

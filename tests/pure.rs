//! Tests that need nothing outside this repository: the engine, the packs, the
//! renderers, the CLI commands, the HTTPS server started as a real process, and the
//! controllers against a scripted API server.
//!
//! One binary per set of real parts: each test file is a module of it.
#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/crd_schema.rs"]
mod crd_schema;
#[path = "engine_support/mod.rs"]
mod engine_support;
#[path = "support/server.rs"]
mod server;

mod capo_fields;
mod controller_cluster;
mod controller_lease;
mod crds;
mod deploy_crds;
mod engine_cache;
mod engine_cel;
mod engine_discover_validate;
mod engine_generate;
mod engine_packs;
mod engine_packs_capi;
mod engine_packs_golden;
mod equivalence;
mod magnum_equivalence;
mod packs_networking;
mod packs_openstack;
mod plan_cli;
mod registry;
mod release;
mod render_bootstrap_vars;
mod render_capi;
mod render_classes;
mod render_packs;
mod serve_controllers;
mod server_errors;
mod server_hooks;
mod server_limits;
mod server_packs;
mod server_tls;
mod validate_cli;

//! stackhook: a Cluster API Runtime Extension server with OpenStack infrastructure
//! controllers in the same process.

pub mod addons;
pub mod admin;
pub mod config;
pub mod controller;
pub mod engine;
pub mod hooks;
pub mod infra;
pub mod kubernetes;
pub mod metrics;
pub mod mgmt;
pub mod plan;
pub mod process;
pub mod render;
pub mod sdk;
pub mod server;
pub mod telemetry;

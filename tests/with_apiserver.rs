//! Tests against a real Kubernetes API server (`shared/kube`) and, for
//! clusterctl, the real clusterctl; each skips with one line without them.
//!
//! One binary per set of real parts: each test file is a module of it.
#[path = "support/clusterctl.rs"]
mod clusterctl;
#[path = "support/kube.rs"]
mod kube_server;
#[path = "support/server.rs"]
mod server;

mod capi_version;
#[path = "clusterctl.rs"]
mod clusterctl_cli;
mod controller_machine;
mod controller_parity;
mod crds_capo_apiserver;
mod plan_kube;

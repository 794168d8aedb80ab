//! Tests in which the real Cluster API managers (and CAPO) of `shared/capi` drive
//! stackhook against the loopback cloud; each skips with one line without them.
//!
//! One binary per set of real parts: each test file is a module of it.
#[path = "support/capi.rs"]
mod capi;
#[path = "support/capo.rs"]
mod capo;
#[path = "support/cloud.rs"]
mod cloud;
#[path = "support/clusterctl.rs"]
mod clusterctl;
#[path = "support/infra.rs"]
mod infra;
#[path = "support/kube.rs"]
mod kube_server;
#[path = "support/server.rs"]
mod server;

#[path = "capi.rs"]
mod capi_life;
mod capo_handback;
mod capo_side_by_side;
mod capo_takeover;

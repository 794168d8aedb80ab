//! OpenStack infrastructure: the CAPO-compatible API types and, later, the
//! controllers that reconcile them in-process.

pub mod api;
pub mod cluster;
pub mod seam;

pub use api::{crds, crds_yaml};

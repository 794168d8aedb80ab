//! OpenStack infrastructure: the CAPO-compatible API types, the seam between
//! the Kubernetes and cloud halves of the controllers, and the cloud half of
//! the OpenStackCluster controller.

pub mod api;
pub mod bootstrap;
pub mod cluster;
pub mod conditions;
pub mod machine;
pub mod seam;
pub mod template;

pub use api::{crds, crds_yaml};

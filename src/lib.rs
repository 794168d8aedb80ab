//! stackhook: a Cluster API Runtime Extension server with OpenStack infrastructure
//! controllers in the same process.

pub mod infra;
pub mod sdk;

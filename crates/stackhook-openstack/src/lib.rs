//! OpenStack client layer: clouds.yaml, a Keystone v3 session, and one small
//! trait per service (Identity, Networking, LoadBalancing, Compute, Images) with the
//! real implementation, so the reconcile logic can be exercised against
//! fakes as well as a real cloud.

pub mod cache;
pub mod compute;
pub mod config;
pub mod error;
pub mod identity;
pub mod image;
pub mod loadbalancing;
pub mod networking;
pub mod session;

use std::sync::Arc;

pub use cache::{CacheKey, ClientCache};
pub use config::CloudConfig;
pub use error::OsError;
pub use session::{CallCounts, Session};

/// The service clients of one cloud, sharing one session and token.
#[derive(Debug)]
pub struct Clients {
    pub session: Arc<Session>,
    pub identity: identity::Keystone,
    pub network: networking::Neutron,
    pub load_balancer: loadbalancing::Octavia,
    pub compute: compute::Nova,
    pub image: image::Glance,
}

impl Clients {
    pub fn new(config: CloudConfig, cacert: Option<&[u8]>) -> Result<Self, OsError> {
        let session = Arc::new(Session::new(config, cacert)?);
        Ok(Self {
            identity: identity::Keystone::new(session.clone()),
            network: networking::Neutron::new(session.clone()),
            load_balancer: loadbalancing::Octavia::new(session.clone()),
            compute: compute::Nova::new(session.clone()),
            image: image::Glance::new(session.clone()),
            session,
        })
    }
}

//! The OpenStack client of stackhook: clouds.yaml, a Keystone v3 session,
//! and one small trait per service (Identity, Networking, LoadBalancing,
//! Compute, Images, BlockStorage) with its real implementation on that session,
//! and the project's quotas.
//!
//! Written for the controllers rather than as a general SDK: only the calls
//! they make, errors that keep the HTTP status (a reconcile must tell "try
//! again" from "the spec is wrong"), and no Kubernetes types. The traits
//! exist so that code driving several services can be written once, over
//! [`CloudClients`], and tested against an in-memory cloud that fails on
//! demand as well as against a real one.

pub mod blockstorage;
pub mod cache;
pub mod compute;
pub mod config;
pub mod error;
pub mod identity;
pub mod image;
pub mod loadbalancing;
pub mod networking;
pub mod quota;
pub mod session;

use std::sync::Arc;

pub use cache::{CacheKey, ClientCache};
pub use config::CloudConfig;
pub use error::OsError;
pub use session::{CallCounts, Session};

use blockstorage::BlockStorage;
use compute::Compute;
use identity::Identity;
use image::Images;
use loadbalancing::LoadBalancing;
use networking::Networking;

/// The service clients of one cloud, seen through their traits, so that a
/// reconcile can be generic over the real [`Clients`] and a test double.
pub trait CloudClients: Send + Sync + 'static {
    /// Keystone: the token's project and the catalog.
    type Identity: Identity;
    /// Neutron.
    type Network: Networking;
    /// Octavia.
    type LoadBalancer: LoadBalancing;
    /// Nova.
    type Compute: Compute;
    /// Glance.
    type Image: Images;
    /// Cinder (root and data volumes of machines).
    type BlockStorage: BlockStorage;

    /// The clouds.yaml entry the clients were built from (auth URL and
    /// region are published as facts about the cluster).
    fn config(&self) -> &CloudConfig;
    fn identity(&self) -> &Self::Identity;
    fn network(&self) -> &Self::Network;
    fn load_balancer(&self) -> &Self::LoadBalancer;
    fn compute(&self) -> &Self::Compute;
    fn image(&self) -> &Self::Image;
    fn block_storage(&self) -> &Self::BlockStorage;
}

/// The real service clients of one cloud, sharing one session and token.
#[derive(Debug)]
pub struct Clients {
    /// Exposed for its request counts and token, which tests and
    /// benchmarks read.
    pub session: Arc<Session>,
    pub identity: identity::Keystone,
    pub network: networking::Neutron,
    pub load_balancer: loadbalancing::Octavia,
    pub compute: compute::Nova,
    pub image: image::Glance,
    pub block_storage: blockstorage::Cinder,
}

impl Clients {
    /// Builds the clients without contacting the cloud: the first request
    /// authenticates. `cacert` replaces the system roots when given.
    pub fn new(config: CloudConfig, cacert: Option<&[u8]>) -> Result<Self, OsError> {
        let cap = config.compute_max_microversion;
        let session = Arc::new(Session::new(config, cacert)?);
        let mut compute = compute::Nova::new(session.clone());
        if let Some(max) = cap {
            compute = compute.with_max_microversion(max);
        }
        Ok(Self {
            identity: identity::Keystone::new(session.clone()),
            network: networking::Neutron::new(session.clone()),
            load_balancer: loadbalancing::Octavia::new(session.clone()),
            compute,
            image: image::Glance::new(session.clone()),
            block_storage: blockstorage::Cinder::new(session.clone()),
            session,
        })
    }
}

impl CloudClients for Clients {
    type Identity = identity::Keystone;
    type Network = networking::Neutron;
    type LoadBalancer = loadbalancing::Octavia;
    type Compute = compute::Nova;
    type Image = image::Glance;
    type BlockStorage = blockstorage::Cinder;

    fn config(&self) -> &CloudConfig {
        self.session.config()
    }
    fn identity(&self) -> &Self::Identity {
        &self.identity
    }
    fn network(&self) -> &Self::Network {
        &self.network
    }
    fn load_balancer(&self) -> &Self::LoadBalancer {
        &self.load_balancer
    }
    fn compute(&self) -> &Self::Compute {
        &self.compute
    }
    fn image(&self) -> &Self::Image {
        &self.image
    }
    fn block_storage(&self) -> &Self::BlockStorage {
        &self.block_storage
    }
}

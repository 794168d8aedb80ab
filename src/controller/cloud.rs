//! The one place that decides which cloud half the controllers drive.

use super::ControllerConfig;
use crate::infra::api::OpenStackCluster;
use crate::infra::seam::{
    ClusterInfra, ClusterOutcome, ClusterScope, DeleteProgress, IdentitySecret, InfraError,
    StatusSink,
};

/// The cloud half used by `stackhook serve --controllers`.
pub fn cluster_infra(cfg: &ControllerConfig) -> impl ClusterInfra {
    NoCloudBackend {
        ntp_server: cfg.ntp_server.clone(),
        management_vip: cfg.management_vip.clone(),
    }
}

/// Stands in while no OpenStack implementation is built in: every pass ends in
/// a user-visible `NoCloudBackend` condition instead of pretending to converge,
/// and deletion keeps the finalizer because nothing could be cleaned up.
#[derive(Clone, Debug, Default)]
pub struct NoCloudBackend {
    pub ntp_server: Option<String>,
    pub management_vip: Option<String>,
}

impl NoCloudBackend {
    fn error() -> InfraError {
        InfraError::User {
            reason: "NoCloudBackend".into(),
            message: "this build of stackhook has no OpenStack backend for the OpenStackCluster controller".into(),
        }
    }
}

impl ClusterInfra for NoCloudBackend {
    async fn reconcile(
        &self,
        _scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink,
    ) -> Result<ClusterOutcome, InfraError> {
        Err(Self::error())
    }

    async fn delete(
        &self,
        _scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink,
    ) -> Result<DeleteProgress, InfraError> {
        Err(Self::error())
    }
}

//! The one place that decides which cloud half the controllers drive.

use super::ControllerConfig;
use crate::infra::cluster::{OpenStackClusterInfra, PlatformConfig};
use crate::infra::seam::ClusterInfra;

/// The cloud half used by `stackhook serve --controllers`: the real OpenStack one,
/// with the platform facts (NTP, management VIP) no OpenStack API provides.
pub fn cluster_infra(cfg: &ControllerConfig) -> impl ClusterInfra {
    OpenStackClusterInfra::new(PlatformConfig {
        ntp_server: cfg.ntp_server.clone(),
        management_vip: cfg.management_vip.clone(),
    })
}

//! The one place that decides which cloud halves the controllers drive.

use std::sync::Arc;

use stackhook_openstack::ClientCache;

use super::ControllerConfig;
use crate::infra::cluster::{OpenStackClusterInfra, PlatformConfig};
use crate::infra::machine::OpenStackMachineInfra;
use crate::infra::seam::{ClusterInfra, MachineInfra};

/// The cloud halves used by `stackhook serve --controllers`: the real OpenStack ones,
/// sharing `clouds` (with the hooks, too: one session and token per identity),
/// with the platform facts (NTP, management VIP) no OpenStack API provides.
pub fn infra(
    cfg: &ControllerConfig,
    clouds: Arc<ClientCache>,
) -> (impl ClusterInfra, impl MachineInfra) {
    let cluster = OpenStackClusterInfra::with_clouds(
        PlatformConfig {
            ntp_server: cfg.ntp_server.clone(),
            management_vip: cfg.management_vip.clone(),
        },
        clouds.clone(),
    );
    (cluster, OpenStackMachineInfra::with_clouds(clouds))
}

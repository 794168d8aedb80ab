//! One addons pass for a cluster, shared by the OpenStackCluster controller
//! (which keeps the content current with the cloud's facts) and the
//! AfterControlPlaneUpgrade hook (which alone moves the Kubernetes version on
//! for Clusters with a topology, so the new content reaches CAPI only once the
//! control plane has been upgraded).

use kube::Client;
use stackhook_openstack::blockstorage::{BlockStorage, VolumeType};
use stackhook_openstack::config::CloudConfig;
use stackhook_openstack::{CloudClients, OsError};

use super::{render, AddonsError, Inputs, Rendered};
use crate::infra::api::OpenStackCluster;
use crate::kubernetes::resource_set::{self, Changes, ResourceSetApi};

/// What the cloud says that the addons need besides the OpenStackCluster.
#[derive(Clone, Debug)]
pub struct CloudFacts {
    pub cloud: CloudConfig,
    pub cacert: Option<Vec<u8>>,
    pub volume_types: Vec<VolumeType>,
    pub default_volume_type: Option<String>,
}

impl CloudFacts {
    /// Reads the volume types (only when the CSI driver is wanted: two GETs).
    pub async fn read<C: CloudClients>(
        clients: &C,
        cacert: Option<Vec<u8>>,
        with_volume_types: bool,
    ) -> Result<CloudFacts, OsError> {
        let (volume_types, default_volume_type) = if with_volume_types {
            let bs = clients.block_storage();
            let types = bs.volume_types().await?;
            let default = match bs.default_volume_type().await {
                Ok(t) => Some(t.name),
                // No default type configured: no StorageClass is the default.
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e),
            };
            (types, default)
        } else {
            (Vec::new(), None)
        };
        Ok(CloudFacts {
            cloud: clients.config().clone(),
            cacert,
            volume_types,
            default_volume_type,
        })
    }
}

/// Facts from the CAPI Cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterFacts {
    pub name: String,
    /// The cloud provider's name for the cluster.
    pub provider_name: String,
    pub pod_cidr: Option<String>,
    /// `spec.topology.version`: a topology Cluster's addons move on only
    /// through the upgrade hook.
    pub topology_version: Option<String>,
}

impl ClusterFacts {
    /// From a Cluster of either contract (`v1beta1` and `v1beta2` share these paths).
    pub fn of(cluster: &serde_json::Value, name: &str, provider_name: String) -> ClusterFacts {
        let s = |p: &str| {
            cluster
                .pointer(p)
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let pod_cidr = cluster
            .pointer("/spec/clusterNetwork/pods/cidrBlocks")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .find(|c| !c.contains(':'))
            .map(str::to_string);
        ClusterFacts {
            name: name.to_string(),
            provider_name,
            pod_cidr,
            topology_version: s("/spec/topology/version"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Render(#[from] AddonsError),
    #[error("writing the addons' resource set: {0}")]
    Kube(#[from] kube::Error),
    #[error("no Kubernetes version for the addons yet (the Cluster has no spec.topology.version)")]
    NoVersion,
}

/// The result of a pass.
#[derive(Clone, Debug)]
pub struct Installed {
    pub rendered: Rendered,
    pub kubernetes_version: String,
    pub changes: Changes,
}

/// Renders and writes the addons. `version` is the Kubernetes version to render
/// for; `None` keeps the one recorded on the ClusterResourceSet (or, the first
/// time, the Cluster's).
pub async fn ensure(
    client: &Client,
    api: &ResourceSetApi,
    osc: &OpenStackCluster,
    cluster: &ClusterFacts,
    facts: &CloudFacts,
    version: Option<&str>,
) -> Result<Installed, InstallError> {
    let Some(addons) = osc.spec.extensions.as_ref().and_then(|e| e.addons.as_ref()) else {
        return Err(InstallError::NoVersion);
    };
    let namespace = kube::ResourceExt::namespace(osc).unwrap_or_default();
    let kubernetes_version = match version {
        Some(v) => v.to_string(),
        None => match resource_set::recorded_version(client, api, &namespace, &cluster.name).await?
        {
            Some(v) => v,
            None => cluster
                .topology_version
                .clone()
                .ok_or(InstallError::NoVersion)?,
        },
    };
    let rendered = render(&Inputs {
        cluster: &cluster.name,
        provider_cluster_name: &cluster.provider_name,
        addons,
        osc,
        cloud: &facts.cloud,
        cacert: facts.cacert.as_deref(),
        volume_types: &facts.volume_types,
        default_volume_type: facts.default_volume_type.as_deref(),
        kubernetes_version: &kubernetes_version,
        pod_cidr: cluster.pod_cidr.as_deref(),
    })?;
    let changes = resource_set::ensure(
        client,
        api,
        osc,
        &cluster.name,
        &rendered,
        &kubernetes_version,
    )
    .await?;
    Ok(Installed {
        rendered,
        kubernetes_version,
        changes,
    })
}

//! Names, labels and finalizers CAPO uses, so that resources made by CAPO and
//! by us are found by the same lookups and a cluster can move between them.

use super::cluster::OpenStackCluster;
use super::machine::OpenStackMachine;

/// API group of the infrastructure kinds.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Served and storage version.
pub const VERSION: &str = "v1beta1";
/// Label CAPI reads to find which version of a CRD implements a contract.
pub const CONTRACT_LABEL: &str = "cluster.x-k8s.io/v1beta1";
/// Label CAPI puts on infrastructure objects.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label CAPI puts on control-plane Machines.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

pub const CLUSTER_FINALIZER: &str = "openstackcluster.infrastructure.cluster.x-k8s.io";
pub const MACHINE_FINALIZER: &str = "openstackmachine.infrastructure.cluster.x-k8s.io";
pub const SERVER_FINALIZER: &str = "openstackserver.infrastructure.cluster.x-k8s.io";
/// On IPAddressClaims made for floating IP pools.
pub const IP_CLAIM_FINALIZER: &str = "openstackmachine.infrastructure.cluster.x-k8s.io/ip-claim";

/// Condition types and reasons CAPO sets.
pub mod conditions {
    pub const READY: &str = "Ready";
    pub const NETWORK_READY: &str = "NetworkReady";
    pub const ROUTER_READY: &str = "RouterReady";
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub const API_ENDPOINT_READY: &str = "APIEndpointReady";
    pub const INSTANCE_READY: &str = "InstanceReady";
    /// The literal type string CAPO uses, suffix included.
    pub const API_SERVER_INGRESS_READY: &str = "APIServerIngressReadyCondition";

    pub const OPENSTACK_ERROR: &str = "OpenStackError";
    pub const NETWORK_CREATE_FAILED: &str = "NetworkCreateFailed";
    pub const SUBNET_CREATE_FAILED: &str = "SubnetCreateFailed";
    pub const ROUTER_CREATE_FAILED: &str = "RouterCreateFailed";
    pub const SECURITY_GROUP_CREATE_FAILED: &str = "SecurityGroupCreateFailed";
    pub const API_ENDPOINT_CONFIG_FAILED: &str = "APIEndpointConfigFailed";
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    pub const INVALID_MACHINE_SPEC: &str = "InvalidMachineSpec";
    pub const INSTANCE_CREATE_FAILED: &str = "InstanceCreateFailed";
    pub const INSTANCE_NOT_FOUND: &str = "InstanceNotFound";
    pub const INSTANCE_STATE_ERROR: &str = "InstanceStateError";
    pub const INSTANCE_DELETED: &str = "InstanceDeleted";
    pub const INSTANCE_NOT_READY: &str = "InstanceNotReady";
    pub const INSTANCE_DELETE_FAILED: &str = "InstanceDeleteFailed";
    pub const DEPENDENCY_FAILED: &str = "DependencyFailed";
    pub const LOAD_BALANCER_MEMBER_ERROR: &str = "LoadBalancerMemberError";
    pub const FLOATING_IP_ERROR: &str = "FloatingIPError";
}

/// Role of a managed security group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityGroupRole {
    ControlPlane,
    Worker,
    Bastion,
}

impl SecurityGroupRole {
    fn suffix(self) -> &'static str {
        match self {
            Self::ControlPlane => "controlplane",
            Self::Worker => "worker",
            Self::Bastion => "bastion",
        }
    }
}

/// Names derived from the CAPI Cluster (namespace and name), which is what
/// CAPO keys its OpenStack resources on, not the OpenStackCluster's own name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNames {
    pub namespace: String,
    pub name: String,
}

impl ClusterNames {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// `<namespace>-<name>`.
    pub fn cluster_resource_name(&self) -> String {
        format!("{}-{}", self.namespace, self.name)
    }

    /// Shared by the managed network, subnet and router.
    pub fn network_name(&self) -> String {
        format!("k8s-clusterapi-cluster-{}", self.cluster_resource_name())
    }

    /// The prefix is `k8s-cluster`, not `k8s-clusterapi`, as in CAPO.
    pub fn security_group_name(&self, role: SecurityGroupRole) -> String {
        format!(
            "k8s-cluster-{}-secgroup-{}",
            self.cluster_resource_name(),
            role.suffix()
        )
    }

    pub fn load_balancer_name(&self) -> String {
        format!("{}-kubeapi", self.network_name())
    }

    /// Listener, pool and health monitor of one port share this name.
    pub fn load_balancer_port_name(&self, port: u16) -> String {
        format!("{}-{port}", self.load_balancer_name())
    }

    pub fn load_balancer_member_name(&self, port: u16, machine: &str) -> String {
        format!("{}-{machine}", self.load_balancer_port_name(port))
    }

    /// Our ingress VIP port; not a CAPO resource.
    pub fn ingress_vip_port_name(&self) -> String {
        format!("{}-ingress-vip", self.network_name())
    }

    /// The port reserving the API VIP without a load balancer; not a CAPO resource.
    pub fn api_vip_port_name(&self) -> String {
        format!("{}-api-vip", self.network_name())
    }

    /// Bastion server and its OpenStackServer object.
    pub fn bastion_name(&self) -> String {
        format!("{}-bastion", self.name)
    }

    /// Description CAPO gives subnets, routers, load balancers and FIPs.
    pub fn description(&self) -> String {
        format!(
            "Created by cluster-api-provider-openstack cluster {}",
            self.cluster_resource_name()
        )
    }

    /// Description CAPO gives a server's ports: the Cluster's name alone.
    pub fn port_description(&self) -> String {
        format!(
            "Created by cluster-api-provider-openstack cluster {}",
            self.name
        )
    }
}

/// `<server>-<nameSuffix>`, else `<server>-<index>`.
pub fn port_name(server: &str, index: usize, name_suffix: Option<&str>) -> String {
    match name_suffix {
        Some(suffix) => format!("{server}-{suffix}"),
        None => format!("{server}-{index}"),
    }
}

pub fn root_volume_name(server: &str) -> String {
    format!("{server}-root")
}

pub fn block_device_volume_name(server: &str, device: &str) -> String {
    format!("{server}-{device}")
}

/// `openstack://<region>/<uuid>`; the region is empty when unset, giving
/// `openstack:///<uuid>`.
pub fn provider_id(region: Option<&str>, server_id: &str) -> String {
    format!("openstack://{}/{server_id}", region.unwrap_or_default())
}

/// Neutron tag on floating IPs a pool created.
pub fn floating_ip_pool_tag(pool: &str) -> String {
    format!("cluster-api-provider-openstack-fip-pool-{pool}")
}

impl OpenStackCluster {
    /// The owning CAPI Cluster: the cluster-name label, else this object's name.
    pub fn cluster_names(&self) -> ClusterNames {
        let meta = &self.metadata;
        let name = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(CLUSTER_NAME_LABEL))
            .or(meta.name.as_ref())
            .cloned()
            .unwrap_or_default();
        ClusterNames::new(meta.namespace.clone().unwrap_or_default(), name)
    }
}

impl OpenStackMachine {
    /// CAPI Cluster name from the label CAPI sets on infrastructure machines.
    pub fn cluster_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(CLUSTER_NAME_LABEL)
            .map(String::as_str)
    }

    /// Whether CAPI marked this machine as a control-plane member.
    pub fn is_control_plane(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
    }

    /// providerID for a server of this machine, using the machine's own
    /// identity region as CAPO does (not the cluster's).
    pub fn provider_id_for(&self, server_id: &str) -> String {
        let region = self
            .spec
            .identity_ref
            .as_ref()
            .and_then(|i| i.region.as_deref());
        provider_id(region, server_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_capo() {
        let n = ClusterNames::new("ns", "c1");
        assert_eq!(n.network_name(), "k8s-clusterapi-cluster-ns-c1");
        assert_eq!(
            n.security_group_name(SecurityGroupRole::Worker),
            "k8s-cluster-ns-c1-secgroup-worker"
        );
        assert_eq!(
            n.load_balancer_member_name(6443, "m0"),
            "k8s-clusterapi-cluster-ns-c1-kubeapi-6443-m0"
        );
        assert_eq!(n.bastion_name(), "c1-bastion");
        assert_eq!(
            n.api_vip_port_name(),
            "k8s-clusterapi-cluster-ns-c1-api-vip"
        );
        assert_eq!(port_name("m0", 1, None), "m0-1");
        assert_eq!(port_name("m0", 1, Some("storage")), "m0-storage");
        assert_eq!(provider_id(None, "u"), "openstack:///u");
        assert_eq!(
            provider_id(Some("RegionOne"), "u"),
            "openstack://RegionOne/u"
        );
    }
}

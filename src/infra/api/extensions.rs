//! Fields that are not in CAPO: the `extensions` contract through which the
//! Ansible bootstrap and control-plane providers read cluster and machine
//! facts (`spec.extensions` is user input, `status.extensions` is ours).
//!
//! Everything is optional so that a plain CAPO object is valid as it is.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Cluster inputs for the bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpecExtensions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<NetworkingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_interfaces: Option<NetworkInterfaces>,
    /// Addresses to reserve beside the API endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancers: Option<LoadBalancersSpec>,
    /// Per-cluster platform services; each falls back to the controller's flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformSpec>,
    /// How the in-cluster OpenStack cloud-controller-manager and Cinder CSI driver
    /// name this cluster, so cleanup on deletion finds what they created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_provider: Option<CloudProviderSpec>,
    /// The workload cluster's addons, installed through a ClusterResourceSet.
    /// Unset: none (CAPO's objects, and Magnum's clusters, whose driver brings
    /// its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<AddonsSpec>,
}

/// Which addons the controller renders for the cluster; each is on unless
/// turned off, once `addons` is there at all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonsSpec {
    /// The OpenStack cloud-controller-manager, which lifts the nodes'
    /// `uninitialized` taint and serves Services of type LoadBalancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_controller_manager: Option<AddonToggle>,
    /// The Cinder CSI driver and a StorageClass per Cinder volume type.
    #[serde(default, rename = "cinderCSI", skip_serializing_if = "Option::is_none")]
    pub cinder_csi: Option<AddonToggle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<CniAddon>,
}

impl AddonsSpec {
    pub fn cloud_controller_manager(&self) -> bool {
        self.cloud_controller_manager
            .as_ref()
            .is_none_or(|t| t.enabled != Some(false))
    }

    pub fn cinder_csi(&self) -> bool {
        self.cinder_csi
            .as_ref()
            .is_none_or(|t| t.enabled != Some(false))
    }

    /// The CNI to install, `None` for none.
    pub fn cni_plugin(&self) -> Option<CniPlugin> {
        match self.cni.as_ref().and_then(|c| c.plugin) {
            Some(CniPlugin::None) => None,
            Some(p) => Some(p),
            None => Some(CniPlugin::Cilium),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonToggle {
    /// Unset means on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// The CNI the controller installs; `none` when one is brought otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CniAddon {
    /// Unset: cilium.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<CniPlugin>,
    /// A Cilium release of the shipped table (`1.18.4`); unset: the table's default.
    /// Changing it re-applies Cilium at that version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub cilium_version: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CniPlugin {
    Cilium,
    None,
}

/// Platform services chosen per cluster (through a ClusterClass variable); the
/// controller publishes them in `status.extensions.platform`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlatformSpec {
    /// `ntp_server`; overrides `--ntp-server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<NtpSpec>,
    /// `vip_mgmt`; overrides `--management-vip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<ManagementSpec>,
}

/// The nodes' time source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NtpSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub server: Option<String>,
}

/// The management network's virtual IP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagementSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub vip: Option<String>,
}

/// The cluster name the cloud provider's components were started with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudProviderSpec {
    /// The cloud-controller-manager's `--cluster-name` and the Cinder CSI
    /// driver's `--cluster`. Unset: the Magnum cluster UUID for clusters Magnum
    /// created (their `cluster-uuid` label), else the CAPI Cluster's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub cluster_name: Option<String>,
}

/// VIPs the bootstrap wants reserved on the cluster network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancersSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressVipSpec>,
}

/// The ingress VIP: a Neutron port whose fixed IP nodes announce
/// (keepalived or Cilium L2); published as `status.extensions.loadBalancers.ingress.vip`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressVipSpec {
    /// Reserve the port; unset or false releases the address. An `Option`
    /// so the schema carries no default CAPO does not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Choice of CNI.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkingSpec {
    /// `kube_network_plugin`, e.g. `cilium` or `flannel`; not an enum so a
    /// new plugin needs no CRD change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub kube_network_plugin: Option<String>,
    /// Cilium settings the bootstrap renders into the chart's values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cilium: Option<CiliumSpec>,
}

/// What a user chooses for Cilium; the OpenStack IDs come from the cloud.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CiliumSpec {
    /// `vpc_cni_webhook_enable`, published as `status.extensions.networking.cilium.webhookEnable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_enable: Option<bool>,
    /// `tunnel` (default) or `native`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_mode: Option<CiliumRoutingMode>,
    /// `vxlan` (default) or `geneve`, for tunnel routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_protocol: Option<CiliumTunnelProtocol>,
    /// Pod CIDR routed without masquerading in native routing; the cluster
    /// network's first IPv4 subnet when unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "ipv4NativeRoutingCIDR"
    )]
    #[schemars(length(min = 1))]
    pub ipv4_native_routing_cidr: Option<String>,
    /// Cilium replaces kube-proxy (kubeadm then skips its addon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy_replacement: Option<bool>,
    /// Hubble relay and UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hubble: Option<bool>,
    /// How pods get addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<CiliumIpamSpec>,
}

/// Cilium's IPAM: `kubernetes` (per-node pod CIDRs), `cluster-pool`, or `openstack`
/// (pod addresses from Neutron ports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CiliumIpamSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "poolCIDR")]
    #[schemars(length(min = 1))]
    pub pool_cidr: Option<String>,
}

/// Cilium's `routingMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CiliumRoutingMode {
    Tunnel,
    Native,
}

/// Cilium's `tunnelProtocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CiliumTunnelProtocol {
    Vxlan,
    Geneve,
}

/// Node interface names the bootstrap binds to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterfaces {
    /// `keepalived_interface`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub keepalived: Option<String>,
    /// `flannel_interface`; one value for the whole cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub flannel: Option<String>,
}

/// Machine inputs for the bootstrap; the keepalived interface is per machine
/// in the bootstrap's own table, so a machine may override the cluster's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpecExtensions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_interfaces: Option<MachineNetworkInterfaces>,
    /// A server group the controller creates and owns, shared by the machines of
    /// one role: `<cluster>-control-plane` for the control plane,
    /// `<cluster>-<MachineDeployment>` for workers (the Magnum driver's names).
    /// Ignored when `spec.serverGroup` names an existing group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_group_policy: Option<ServerGroupPolicyName>,
}

/// Nova's server group policies; the soft ones need Nova 2.15.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServerGroupPolicyName {
    #[serde(rename = "affinity")]
    Affinity,
    #[serde(rename = "anti-affinity")]
    AntiAffinity,
    #[serde(rename = "soft-affinity")]
    SoftAffinity,
    #[serde(rename = "soft-anti-affinity")]
    SoftAntiAffinity,
}

/// Per-machine interface names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNetworkInterfaces {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub keepalived: Option<String>,
}

/// Cluster facts the controller publishes for the bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatusExtensions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<NetworkingStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancers: Option<LoadBalancersStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_stack: Option<OpenStackStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformStatus>,
    /// The cluster's machines' reservations (`node_resources`), copied from each
    /// OpenStackMachine's `status.extensions.nodeResources`, so the bootstrap
    /// reads one object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_resources: BTreeMap<String, NodeResources>,
}

/// CNI facts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkingStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cilium: Option<CiliumStatus>,
}

/// What Cilium's OpenStack IPAM needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CiliumStatus {
    /// Project the credentials are scoped to (Keystone `token.project.id`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "projectID")]
    pub project_id: Option<String>,
    /// First IPv4 subnet of the cluster network.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "defaultSubnetID"
    )]
    pub default_subnet_id: Option<String>,
    /// Control-plane and worker security groups.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "securityGroupIDs"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub security_group_ids: Vec<String>,
    /// `vpc_cni_webhook_enable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_enable: Option<bool>,
}

/// A virtual IP address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualIp {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<String>,
}

/// The cluster's VIPs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancersStatus {
    /// `master_virtual_vip`: the API load balancer VIP or fixed IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<VirtualIp>,
    /// `ingress_virtual_vip` and `harbor_addr`: a reserved Neutron port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<VirtualIp>,
}

/// Read-only cloud endpoints and scope; credentials stay in the Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackStatus {
    /// Identity endpoint (`openstack_auth_domain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keystone: Option<String>,
    /// Compute endpoint from the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nova: Option<String>,
    /// Network endpoint from the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neutron: Option<String>,
    /// Block-storage (or `volumev3`) endpoint from the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cinder: Option<String>,
    /// Project name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Project domain name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `cloud_master_vip`: the externally reachable API address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mgmt: Option<String>,
}

/// Platform services outside OpenStack's APIs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlatformStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<NtpStatus>,
    /// `vip_mgmt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<VirtualIp>,
}

/// Time source for the nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NtpStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// Machine facts the controller publishes for the bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatusExtensions {
    /// Keyed by machine name, as the bootstrap's `node_resources.<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_resources: BTreeMap<String, NodeResources>,
}

/// Resources held back from pods on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeResources {
    /// Resource name (`cpu`, `memory`, `ephemeral-storage`, `pid`) to the
    /// reserved amount, derived from the flavor by our own policy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::types::resource_list_schema")]
    pub reserved: BTreeMap<String, Quantity>,
}

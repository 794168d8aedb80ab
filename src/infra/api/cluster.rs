//! OpenStackCluster and OpenStackClusterTemplate (CAPO v1beta1).

// kube's `printcolumn(...)` repeats `type_ = ...` per column, which this
// lint mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::extensions::{ClusterSpecExtensions, ClusterStatusExtensions};
use super::machine::OpenStackMachineSpec;
use super::types::{
    ApiEndpoint, Condition, FailureDomainSpec, MachineResources, NetworkParam,
    OpenStackIdentityReference, ResolvedMachineSpec, RouterParam, SubnetParam,
};

fn some_true() -> Option<bool> {
    Some(true)
}

/// An allocation range inside a managed subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocationPool {
    pub start: String,
    pub end: String,
}

/// A subnet the controller creates, with its network and router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSpec {
    pub cidr: String,
    /// The only managed-subnet field that may change after creation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub dns_nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub allocation_pools: Vec<AllocationPool>,
}

/// A fixed router gateway IP on an external subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalRouterIpParam {
    /// Neutron picks an address on the subnet when unset.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "fixedIP")]
    pub fixed_ip: Option<String>,
    pub subnet: SubnetParam,
}

// Like CAPO's CRD, the schema has no defaults here (CAPO defaults in code): a schema
// default would change how every stored object reads once these CRDs replace CAPO's.
/// Octavia health monitor settings for each API listener's pool; unset fields take
/// CAPO's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServerLoadBalancerMonitor {
    /// Seconds between probes (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub delay: Option<i64>,
    /// Seconds a probe may take (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub timeout: Option<i64>,
    /// Successes before a member is up again (Octavia allows 1–10; default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max_retries: Option<i64>,
    /// Failures before a member is down (Octavia allows 1–10; default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max_retries_down: Option<i64>,
}

/// A monitor's settings with the defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonitorSettings {
    pub delay: i64,
    pub timeout: i64,
    pub max_retries: i64,
    pub max_retries_down: i64,
}

impl ApiServerLoadBalancerMonitor {
    /// The settings sent to Octavia: each unset field as CAPO defaults it.
    pub fn settings(&self) -> MonitorSettings {
        MonitorSettings {
            delay: self.delay.unwrap_or(10),
            timeout: self.timeout.unwrap_or(5),
            max_retries: self.max_retries.unwrap_or(5),
            max_retries_down: self.max_retries_down.unwrap_or(3),
        }
    }
}

/// The Octavia load balancer in front of the API servers; present means wanted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["enabled"]))]
pub struct ApiServerLoadBalancer {
    /// Defaults to true; omit the whole object to go without a load balancer.
    #[serde(default = "some_true", skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Extra TCP listeners next to the API server port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub additional_ports: Vec<i64>,
    /// Source CIDRs allowed on every listener (Octavia ≥ 2.12, not OVN).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "allowedCIDRs"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub allowed_cidrs: Vec<String>,
    /// Octavia provider; the cloud's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Network of the VIP instead of the cluster network; the API members
    /// then name the cluster's first subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Box<NetworkParam>>,
    /// Subnets of `network`, each resolved within it; the VIP goes on the
    /// first. Not looked at without `network`, as in CAPO.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub subnets: Vec<SubnetParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// Octavia flavor name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<ApiServerLoadBalancerMonitor>,
}

impl Default for ApiServerLoadBalancer {
    fn default() -> Self {
        Self {
            enabled: Some(true),
            additional_ports: Vec::new(),
            allowed_cidrs: Vec::new(),
            provider: None,
            network: None,
            subnets: Vec::new(),
            availability_zone: None,
            flavor: None,
            monitor: None,
        }
    }
}

/// Traffic direction of a security group rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuleDirection {
    #[default]
    Ingress,
    Egress,
}

/// IP family of a security group rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EtherType {
    #[default]
    IPv4,
    IPv6,
}

/// A security group the controller manages, usable as a rule's remote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ManagedSecurityGroupName {
    Bastion,
    Controlplane,
    Worker,
}

/// A user rule added to the managed groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.remoteGroupID) ? 1 : 0) + (has(self.remoteIPPrefix) ? 1 : 0) + (has(self.remoteManagedGroups) ? 1 : 0) <= 1",
    "message": "only one of remoteGroupID, remoteIPPrefix or remoteManagedGroups can be set"
}]))]
pub struct SecurityGroupRuleSpec {
    /// Identifies the rule for patches; not sent to Neutron.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub direction: RuleDirection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ether_type: Option<EtherType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range_min: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range_max: Option<i64>,
    /// Neutron protocol name or number (`tcp`, `udp`, `4`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "remoteGroupID"
    )]
    pub remote_group_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "remoteIPPrefix"
    )]
    pub remote_ip_prefix: Option<String>,
    /// Expands to one rule per named managed group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_managed_groups: Vec<ManagedSecurityGroupName>,
}

/// Security groups the controller creates and keeps in sync.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["allowAllInClusterTraffic"]))]
pub struct ManagedSecurityGroups {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub all_nodes_security_group_rules: Vec<SecurityGroupRuleSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub control_plane_nodes_security_group_rules: Vec<SecurityGroupRuleSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub worker_nodes_security_group_rules: Vec<SecurityGroupRuleSpec>,
    /// Replaces the etcd/kubelet rules with allow-all between nodes.
    #[serde(default)]
    pub allow_all_in_cluster_traffic: bool,
}

/// The SSH jump host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.enabled) && !self.enabled) || has(self.spec)",
    "message": "spec is required if bastion is enabled"
}]))]
pub struct Bastion {
    /// Set false and wait for deletion before removing the bastion.
    #[serde(default = "some_true", skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<OpenStackMachineSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// Address (not ID) of the floating IP to attach.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "floatingIP"
    )]
    #[schemars(extend("format" = "ipv4"))]
    pub floating_ip: Option<String>,
}

impl Default for Bastion {
    fn default() -> Self {
        Self {
            enabled: Some(true),
            spec: None,
            availability_zone: None,
            floating_ip: None,
        }
    }
}

/// Desired state of the cluster's shared OpenStack resources.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "OpenStackCluster",
    plural = "openstackclusters",
    namespaced,
    status = "OpenStackClusterStatus",
    shortname = "osc",
    category = "cluster-api",
    derive = "PartialEq",
    doc = "OpenStackCluster holds the network, security groups, API endpoint and bastion of a CAPI Cluster.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this OpenStackCluster belongs"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Cluster infrastructure is ready for OpenStack instances"
    ),
    printcolumn(
        name = "Network",
        type_ = "string",
        json_path = ".status.network.id",
        description = "Network the cluster is using"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "API Endpoint"
    ),
    printcolumn(
        name = "Bastion IP",
        type_ = "string",
        json_path = ".status.bastion.floatingIP",
        description = "Bastion address for breakglass access"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of OpenStackCluster"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.disableExternalNetwork) && self.disableExternalNetwork ? !has(self.bastion) || !has(self.bastion.floatingIP) : true",
        "message": "bastion floating IP cannot be set when disableExternalNetwork is true"
    },
    {
        "rule": "has(self.disableExternalNetwork) && self.disableExternalNetwork ? has(self.disableAPIServerFloatingIP) && self.disableAPIServerFloatingIP : true",
        "message": "disableAPIServerFloatingIP cannot be false when disableExternalNetwork is true"
    }
]))]
pub struct OpenStackClusterSpec {
    /// Subnets to create; at most one (IPv4) today.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub managed_subnets: Vec<SubnetSpec>,
    /// Existing router for managed subnets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Box<RouterParam>>,
    /// Existing network when there are no managed subnets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Box<NetworkParam>>,
    /// Existing subnets: none, one, or one IPv4 plus one IPv6.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub subnets: Vec<SubnetParam>,
    /// Needs Neutron's `net-mtu` extension; managed network only.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "networkMTU"
    )]
    pub network_mtu: Option<i64>,
    /// Fixed IPs of the managed router's gateway on the external network,
    /// one per entry; Neutron's default policy allows them to admins only.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "externalRouterIPs"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub external_router_ips: Vec<ExternalRouterIpParam>,
    /// The single `router:external` network is used when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_network: Option<Box<NetworkParam>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_external_network: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerLoadBalancer"
    )]
    pub api_server_load_balancer: Option<Box<ApiServerLoadBalancer>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "disableAPIServerFloatingIP"
    )]
    pub disable_api_server_floating_ip: Option<bool>,
    /// Floating IP address for the API; allocated when unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerFloatingIP"
    )]
    pub api_server_floating_ip: Option<String>,
    /// VIP on the cluster network; required without a load balancer and
    /// without a floating IP.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerFixedIP"
    )]
    pub api_server_fixed_ip: Option<String>,
    /// 6443 when unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerPort"
    )]
    #[schemars(range(min = 0, max = 65535))]
    pub api_server_port: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_security_groups: Option<ManagedSecurityGroups>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_port_security: Option<bool>,
    /// Tags for every taggable resource of the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
    /// Filled by the controller; the host cannot change once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<Box<ApiEndpoint>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub control_plane_availability_zones: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_omit_availability_zone: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Box<Bastion>>,
    pub identity_ref: OpenStackIdentityReference,
    /// Not in CAPO: inputs for the Ansible bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<ClusterSpecExtensions>>,
}

impl OpenStackClusterSpec {
    /// An API load balancer is wanted: the object is there and not disabled.
    pub fn api_load_balancer_enabled(&self) -> bool {
        self.api_server_load_balancer
            .as_ref()
            .is_some_and(|l| l.enabled != Some(false))
    }
}

/// A Neutron network the cluster uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    pub name: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// A Neutron port that holds a virtual IP for the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VipPort {
    pub id: String,
    pub name: String,
    pub ip_address: String,
}

/// A Neutron subnet the cluster uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    pub name: String,
    pub id: String,
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// A network and the subnets machines get addresses from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatusWithSubnets {
    #[serde(flatten)]
    pub network: NetworkStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
}

/// The cluster router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Router {
    pub name: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// External gateway fixed IPs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
}

/// The API server load balancer as created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    pub name: String,
    pub id: String,
    /// The floating IP; written as soon as it is allocated.
    pub ip: String,
    /// The VIP on the load balancer network.
    #[serde(rename = "internalIP")]
    pub internal_ip: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "allowedCIDRs"
    )]
    pub allowed_cidrs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Where the VIP is: `spec.apiServerLoadBalancer.network` and its
    /// subnets, else the cluster network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_network: Option<Box<NetworkStatusWithSubnets>>,
}

/// A managed security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    pub name: String,
    pub id: String,
}

/// The bastion server as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BastionStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
    /// Nova server status (`ACTIVE`, `BUILD`, `ERROR`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "floatingIP"
    )]
    pub floating_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedMachineSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<MachineResources>,
}

/// CAPI v1beta2 contract: set once the infrastructure is provisioned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// Observed state of an OpenStackCluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["ready"]))]
pub struct OpenStackClusterStatus {
    /// Deprecated by the CAPI v1beta2 contract; kept for v1beta1 readers.
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Box<NetworkStatusWithSubnets>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_network: Option<Box<NetworkStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Box<Router>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerLoadBalancer"
    )]
    pub api_server_load_balancer: Option<Box<LoadBalancer>>,
    /// Availability zone name to its properties; rebuilt on each reconcile.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_domains: BTreeMap<String, FailureDomainSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_security_group: Option<Box<SecurityGroupStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_security_group: Option<Box<SecurityGroupStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion_security_group: Option<Box<SecurityGroupStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Box<BastionStatus>>,
    /// Not in CAPO: the Neutron port that reserves `spec.apiServerFixedIP`
    /// on the cluster network when no load balancer holds it (a keepalived
    /// VIP), so no other port is given that address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerVIPPort"
    )]
    pub api_server_vip_port: Option<Box<VipPort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Not in CAPO: values for the Ansible bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<ClusterStatusExtensions>>,
}

/// The cluster a template stamps out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterTemplateResource {
    pub spec: OpenStackClusterSpec,
}

/// Template for OpenStackClusters, referenced by a ClusterClass.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "OpenStackClusterTemplate",
    plural = "openstackclustertemplates",
    namespaced,
    shortname = "osct",
    category = "cluster-api",
    derive = "PartialEq",
    doc = "OpenStackClusterTemplate is the template for OpenStackClusters."
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterTemplateSpec {
    pub template: OpenStackClusterTemplateResource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_capo() {
        assert_eq!(ApiServerLoadBalancer::default().enabled, Some(true));
        assert_eq!(Bastion::default().enabled, Some(true));
        let m = ApiServerLoadBalancerMonitor::default().settings();
        assert_eq!(
            (m.delay, m.timeout, m.max_retries, m.max_retries_down),
            (10, 5, 5, 3)
        );
    }
}

//! OpenStackMachine and OpenStackMachineTemplate (CAPO v1beta1).

// kube's `printcolumn(...)` repeats `type_ = ...` per column, which this
// lint mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::extensions::{MachineSpecExtensions, MachineStatusExtensions};
use super::types::{
    Condition, ImageParam, MachineResources, NodeAddress, OpenStackIdentityReference, PortOpts,
    ResolvedMachineSpec, SecurityGroupParam, ServerGroupParam, TypedLocalObjectReference,
};

/// Where a volume's availability zone comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum VolumeAzSource {
    /// The `name` field.
    #[default]
    Name,
    /// The CAPI Machine's failure domain (the pre-v1beta1 behaviour).
    Machine,
}

/// Volume availability zone; unset means Cinder picks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.from) || self.from == 'Name' ? has(self.name) : !has(self.name)",
    "message": "name is required when from is Name (the default), and forbidden otherwise"
}]))]
pub struct VolumeAvailabilityZone {
    #[serde(default)]
    pub from: VolumeAzSource,
    /// Cinder AZ names cannot hold spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = r"^[^ ]+$"))]
    pub name: Option<String>,
}

/// Cinder options for a volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceVolume {
    /// Cinder volume type; the cloud default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<VolumeAvailabilityZone>,
}

/// Boot from a Cinder volume instead of the flavor's local disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootVolume {
    #[serde(rename = "sizeGiB")]
    #[schemars(range(min = 1))]
    pub size_gib: i64,
    #[serde(flatten)]
    pub volume: BlockDeviceVolume,
}

/// Kind of extra disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BlockDeviceType {
    /// An ephemeral disk on the hypervisor.
    Local,
    /// A Cinder volume.
    #[default]
    Volume,
}

/// Storage of an extra disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.type == 'Volume' || !has(self.volume)",
    "message": "volume may only be set when type is Volume"
}]))]
pub struct BlockDeviceStorage {
    #[serde(rename = "type")]
    pub type_: BlockDeviceType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<BlockDeviceVolume>,
}

/// An extra disk, tagged with its name so the guest can find it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalBlockDevice {
    /// `root` is taken by the root volume's `<server>-root` name.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != 'root'", "message": "name 'root' is reserved for the root volume"}]))]
    pub name: String,
    #[serde(rename = "sizeGiB")]
    #[schemars(range(min = 1))]
    pub size_gib: i64,
    pub storage: BlockDeviceStorage,
}

/// A Nova server metadata entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerMetadata {
    #[schemars(length(max = 255))]
    pub key: String,
    #[schemars(length(max = 255))]
    pub value: String,
}

/// Type tag of a scheduler hint value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SchedulerHintValueType {
    #[default]
    Bool,
    String,
    Number,
}

/// A typed `os:scheduler_hints` value; a union so the JSON type sent to Nova
/// is explicit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type == 'Bool' ? has(self.bool) : !has(self.bool)", "message": "bool is required when type is Bool, and forbidden otherwise"},
    {"rule": "self.type == 'Number' ? has(self.number) : !has(self.number)", "message": "number is required when type is Number, and forbidden otherwise"},
    {"rule": "self.type == 'String' ? has(self.string) : !has(self.string)", "message": "string is required when type is String, and forbidden otherwise"}
]))]
pub struct SchedulerHintAdditionalValue {
    #[serde(rename = "type")]
    pub type_: SchedulerHintValueType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub string: Option<String>,
}

/// An extra scheduler hint, e.g. for custom Nova filters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerHintAdditionalProperty {
    #[schemars(length(min = 1))]
    pub name: String,
    pub value: SchedulerHintAdditionalValue,
}

/// One server: the OpenStackMachine spec, also used for the bastion.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "OpenStackMachine",
    plural = "openstackmachines",
    namespaced,
    status = "OpenStackMachineStatus",
    shortname = "osm",
    category = "cluster-api",
    derive = "PartialEq",
    doc = "OpenStackMachine is one Nova server of a CAPI Machine.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "Cluster to which this OpenStackMachine belongs"
    ),
    printcolumn(
        name = "InstanceState",
        type_ = "string",
        json_path = ".status.instanceState",
        description = "OpenStack instance state"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "OpenStack instance ready status"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "OpenStack instance ID"
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
        description = "Machine object which owns with this OpenStackMachine"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of OpenStackMachine"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.flavor) || has(self.flavorID)", "message": "at least one of flavor or flavorID must be set"}]))]
pub struct OpenStackMachineSpec {
    /// `openstack://<region>/<server uuid>`, set by the controller.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    /// Flavor name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub flavor: Option<String>,
    /// Flavor ID; wins over `flavor`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "flavorID")]
    #[schemars(length(min = 1))]
    pub flavor_id: Option<String>,
    /// Boot image, also the root volume's source.
    pub image: ImageParam,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
    /// One port on the cluster network when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<PortOpts>,
    /// Added to every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub security_groups: Vec<SecurityGroupParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trunk: Option<bool>,
    /// Server and port tags, on top of the cluster's; Nova ≥ 2.52.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"]))]
    pub server_metadata: Vec<ServerMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_drive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<Box<RootVolume>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub additional_block_devices: Vec<AdditionalBlockDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_group: Option<Box<ServerGroupParam>>,
    /// Per-machine credentials; the cluster's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<Box<OpenStackIdentityReference>>,
    /// IPAM pool for a floating IP, e.g. an OpenStackFloatingIPPool.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "floatingIPPoolRef"
    )]
    pub floating_ip_pool_ref: Option<Box<TypedLocalObjectReference>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub scheduler_hint_additional_properties: Vec<SchedulerHintAdditionalProperty>,
    /// Not in CAPO: inputs for the Ansible bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<MachineSpecExtensions>>,
}

/// Observed state of an OpenStackMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineStatus {
    /// Deprecated by the CAPI v1beta2 contract; kept for v1beta1 readers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachineInitialization>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceID"
    )]
    pub instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,
    /// No longer written here; the OpenStackServer carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Box<ResolvedMachineSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<MachineResources>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Not in CAPO: values for the Ansible bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<MachineStatusExtensions>>,
}

/// CAPI v1beta2 contract: set once the infrastructure is provisioned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineInitialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// The machine a template stamps out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineTemplateResource {
    pub spec: OpenStackMachineSpec,
}

/// Template for OpenStackMachines; immutable, so a change means a new
/// template and a rollout.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "OpenStackMachineTemplate",
    plural = "openstackmachinetemplates",
    namespaced,
    status = "OpenStackMachineTemplateStatus",
    shortname = "osmt",
    category = "cluster-api",
    derive = "PartialEq",
    doc = "OpenStackMachineTemplate is the template for OpenStackMachines."
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineTemplateSpec {
    pub template: OpenStackMachineTemplateResource,
}

/// What the cluster autoscaler needs to scale a MachineDeployment from zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineTemplateStatus {
    /// `cpu`, `memory`, `ephemeral-storage`, `storage` and GPUs from the flavor
    /// (`infra::template`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "super::types::resource_list_schema")]
    pub capacity: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
}

/// Node facts known before the node exists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// From the image's `os_type` property.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
    /// From the image's `architecture` property, as Kubernetes names it (`amd64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

//! Building blocks shared by the cluster and machine kinds: resource lookups
//! (id or filter), identity references, ports, resolved resources and the
//! CAPI v1beta1 types CAPO embeds.
//!
//! Every optional field is an `Option` or a skipped-when-empty list so that an
//! object read from the apiserver serializes back to the same JSON.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tag filters, as Neutron's `tags`, `tags-any`, `not-tags` and `not-tags-any`
/// list filters. Tags may not be empty or hold commas because Neutron joins
/// them with commas in the query string.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterByNeutronTags {
    /// Resources must carry all of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = r"^[^,]+$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
    /// Resources must carry at least one of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = r"^[^,]+$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags_any: Vec<String>,
    /// Resources carrying all of these tags are excluded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = r"^[^,]+$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub not_tags: Vec<String>,
    /// Resources carrying any of these tags are excluded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = r"^[^,]+$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub not_tags_any: Vec<String>,
}

/// Query for a network; an empty filter would match every network, so at
/// least one property is required.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct NetworkFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "projectID")]
    pub project_id: Option<String>,
    #[serde(flatten)]
    pub tags: FilterByNeutronTags,
}

/// A network by ID or by filter, never both: mixing them was ambiguous before
/// CAPO v1beta1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct NetworkParam {
    /// Network UUID; saves a lookup and cannot be ambiguous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<NetworkFilter>,
}

/// Query for a subnet; at least one property.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct SubnetFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "projectID")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "gatewayIP")]
    pub gateway_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "ipv6AddressMode"
    )]
    pub ipv6_address_mode: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "ipv6RAMode"
    )]
    pub ipv6_ra_mode: Option<String>,
    #[serde(flatten)]
    pub tags: FilterByNeutronTags,
}

/// A subnet by ID or by filter, never both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct SubnetParam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<SubnetFilter>,
}

/// Query for a security group; at least one property.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct SecurityGroupFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "projectID")]
    pub project_id: Option<String>,
    #[serde(flatten)]
    pub tags: FilterByNeutronTags,
}

/// A security group by ID or by filter, never both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct SecurityGroupParam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<SecurityGroupFilter>,
}

/// Query for a router; at least one property.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct RouterFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "projectID")]
    pub project_id: Option<String>,
    #[serde(flatten)]
    pub tags: FilterByNeutronTags,
}

/// A router by ID or by filter, never both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct RouterParam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<RouterFilter>,
}

/// Query for a Nova server group; Nova can only list them, so name is all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ServerGroupFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
}

/// An existing server group by ID or by name; CAPO never creates one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct ServerGroupParam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<ServerGroupFilter>,
}

/// Glance query; name and tags together must match exactly one image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ImageFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
}

/// A named object in the referrer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceReference {
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The boot image: by ID, by Glance filter, or through an ORC `Image` object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct ImageParam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uuid"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<ImageFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<ResourceReference>,
}

/// Where credentials come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum IdentityRefType {
    /// A Secret in the object's namespace with a `clouds.yaml` key.
    #[default]
    Secret,
    /// A cluster-scoped `OpenStackClusterIdentity` pointing at a Secret.
    ClusterIdentity,
}

/// Credentials for OpenStack: a `clouds.yaml` holder and the entry to use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackIdentityReference {
    #[serde(default, rename = "type")]
    pub type_: IdentityRefType,
    /// Name of the Secret or of the OpenStackClusterIdentity.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Entry of `clouds.yaml` to use.
    #[schemars(length(min = 1))]
    pub cloud_name: String,
    /// Overrides `region_name`; immutable because it is part of providerIDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "region is immutable"}]))]
    pub region: Option<String>,
}

/// A fixed IP on a port: a subnet, an address, or both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FixedIp {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubnetParam>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ipAddress")]
    pub ip_address: Option<String>,
}

/// An extra address Neutron lets the port send from (VIPs, keepalived).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressPair {
    #[serde(rename = "ipAddress")]
    pub ip_address: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "macAddress"
    )]
    pub mac_address: Option<String>,
}

/// The two `binding:profile` uses CAPO supports; a free map was unsafe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingProfile {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "ovsHWOffload"
    )]
    pub ovs_hw_offload: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "trustedVF")]
    pub trusted_vf: Option<bool>,
}

/// One extra key/value for the Neutron port create body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValueSpec {
    /// Identifies the pair for list merges; not sent to Neutron.
    pub name: String,
    pub key: String,
    pub value: String,
}

/// Port fields that hold no references, shared by requested and resolved ports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedPortSpecFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_state_up: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "macAddress"
    )]
    pub mac_address: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub allowed_address_pairs: Vec<AddressPair>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "hostID")]
    pub host_id: Option<String>,
    /// Not an enum: Neutron drivers add their own vNIC types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vnic_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<BindingProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_port_security: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_uplink_status: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub value_specs: Vec<ValueSpec>,
}

/// A port to create for a server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortOpts {
    /// Defaults to the cluster network when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Port name suffix; the list index when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "fixedIPs")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub fixed_ips: Vec<FixedIp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub security_groups: Vec<SecurityGroupParam>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
    /// Inherits the machine's `trunk` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trunk: Option<bool>,
    #[serde(flatten)]
    pub fields: ResolvedPortSpecFields,
}

/// A fixed IP with its subnet resolved to an ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedFixedIp {
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "subnet")]
    pub subnet_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ipAddress")]
    pub ip_address: Option<String>,
}

/// A port with every reference resolved, persisted before creation so the
/// create is idempotent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedPortSpec {
    pub name: String,
    pub description: String,
    #[serde(rename = "networkID")]
    pub network_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trunk: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "fixedIPs")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub fixed_ips: Vec<ResolvedFixedIp>,
    /// Security group IDs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub security_groups: Vec<String>,
    #[serde(flatten)]
    pub fields: ResolvedPortSpecFields,
}

/// IDs of everything a machine spec refers to, fixed at creation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedMachineSpec {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "serverGroupID"
    )]
    pub server_group_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "imageID")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "flavorID")]
    pub flavor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ResolvedPortSpec>,
}

/// A created port, recorded so that deletion finds it even without a server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortStatus {
    pub id: String,
}

/// OpenStack resources created for a machine or the bastion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineResources {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<PortStatus>,
}

/// CAPI v1beta1 `APIEndpoint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    pub host: String,
    pub port: i32,
}

/// CAPI v1beta1 `FailureDomainSpec`, one availability zone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomainSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// CAPI v1beta1 `Condition`, the shape `clusterctl describe` reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 256))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub severity: Option<String>,
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub message: Option<String>,
}

/// Kubernetes `NodeAddress`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP` or `InternalDNS` as CAPO fills it.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

/// Kubernetes `TypedLocalObjectReference`, e.g. to an OpenStackFloatingIPPool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct TypedLocalObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

/// Kubernetes quantity syntax, as the apiserver's own `ResourceList` declares it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Schema of a `ResourceList` (name to int-or-string quantity); k8s-openapi's
/// own one has no `type`, which a structural schema needs.
pub fn resource_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        }
    })
}

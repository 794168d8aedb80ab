//! Neutron (service type `network`, API v2.0): the resources a cluster's
//! infrastructure is made of, with tags.

use std::future::Future;
use std::sync::Arc;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::compute::given;
use crate::error::OsError;
use crate::session::Session;

const SERVICE: &[&str] = &["network"];

/// A Neutron collection: `/v2.0/<plural>`, bodies keyed by `<singular>`.
pub trait NeutronResource: DeserializeOwned + Send + 'static {
    /// The key one resource is wrapped in, e.g. `security_group`.
    const SINGULAR: &'static str;
    /// The collection's path segment, e.g. `security-groups`.
    const PLURAL: &'static str;
}

/// A Neutron network: the cluster's own, or an external one to route to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Network {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, rename = "router:external")]
    pub external: bool,
    #[serde(default)]
    pub subnets: Vec<String>,
}

/// A range of a subnet that Neutron hands out addresses from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct AllocationPool {
    pub start: String,
    pub end: String,
}

/// A Neutron subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Subnet {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub network_id: String,
    #[serde(default)]
    pub cidr: String,
    #[serde(default)]
    pub ip_version: u8,
    #[serde(default)]
    pub dns_nameservers: Vec<String>,
    #[serde(default)]
    pub allocation_pools: Vec<AllocationPool>,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// An address of a port on a subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct FixedIp {
    #[serde(default)]
    pub subnet_id: String,
    #[serde(default)]
    pub ip_address: String,
}

/// A router's external gateway: the external network and its addresses there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct GatewayInfo {
    #[serde(default)]
    pub network_id: String,
    #[serde(default)]
    pub external_fixed_ips: Vec<FixedIp>,
}

/// A Neutron router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Router {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub external_gateway_info: Option<GatewayInfo>,
}

/// An extra address a port may answer for (a VIP), beside its fixed IPs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct AddressPair {
    pub ip_address: String,
    #[serde(default)]
    pub mac_address: Option<String>,
}

/// A Neutron port: a server's interface, a router interface or a reserved VIP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Port {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub network_id: String,
    #[serde(default)]
    pub device_id: String,
    #[serde(default)]
    pub device_owner: String,
    #[serde(default)]
    pub fixed_ips: Vec<FixedIp>,
    #[serde(default)]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// Security group IDs.
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub description: String,
    /// `ACTIVE` once bound to a host and up, `DOWN` otherwise.
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub mac_address: String,
    /// `None` where the port-security extension is missing.
    #[serde(default)]
    pub port_security_enabled: Option<bool>,
    /// `binding:profile`; shown to admins (and services) only by default policy.
    #[serde(default, rename = "binding:profile")]
    pub binding_profile: Option<Value>,
    /// `None` where the `uplink-status-propagation` extension is missing.
    #[serde(default)]
    pub propagate_uplink_status: Option<bool>,
}

/// An address wanted on a new port: a subnet, an address, or both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixedIpRequest {
    pub subnet_id: Option<String>,
    pub ip_address: Option<String>,
}

/// A new port as CAPO creates a machine's ports (`POST /v2.0/ports`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCreate {
    pub name: String,
    pub network_id: String,
    pub description: Option<String>,
    /// Empty: Neutron picks an address on each subnet of the network.
    pub fixed_ips: Vec<FixedIpRequest>,
    /// Security group IDs; Neutron puts the project's `default` group on a
    /// port created without any.
    pub security_groups: Vec<String>,
    pub allowed_address_pairs: Vec<AddressPair>,
    /// `Some(false)` turns anti-spoofing off, which Neutron allows only on a
    /// port without security groups.
    pub port_security_enabled: Option<bool>,
    /// Not in [`PortCreate::body`]: Neutron drops `tags` from a port
    /// create body, or refuses them (networks), even where it lists the
    /// `tag-creation` extension. [`Networking::create_port`] sets them
    /// with a second call, as CAPO does.
    pub tags: Vec<String>,
    pub admin_state_up: Option<bool>,
    pub mac_address: Option<String>,
}

impl PortCreate {
    /// The body for [`Networking::create`], without the envelope. With
    /// port security off, `security_groups` is sent empty whatever the
    /// field holds: Neutron refuses (409) a group on such a port, and the
    /// machine-wide groups a caller adds to every port would otherwise make
    /// a port without port security impossible.
    ///
    /// Optional strings that are empty (`Some("")`) stay out like `None`, as
    /// in CAPO's port body (gophercloud's `omitempty` on `description`,
    /// `mac_address` and the fixed IP's `subnet_id` and `ip_address`).
    pub fn body(&self) -> Value {
        let mut v = json!({"name": self.name, "network_id": self.network_id});
        if let Some(d) = given(&self.description) {
            v["description"] = json!(d);
        }
        if !self.fixed_ips.is_empty() {
            v["fixed_ips"] = Value::Array(
                self.fixed_ips
                    .iter()
                    .map(|f| fixed_ip(f.subnet_id.as_deref(), f.ip_address.as_deref()))
                    .collect(),
            );
        }
        if self.port_security_enabled == Some(false) {
            v["port_security_enabled"] = json!(false);
            v["security_groups"] = json!([]);
        } else {
            if let Some(enabled) = self.port_security_enabled {
                v["port_security_enabled"] = json!(enabled);
            }
            if !self.security_groups.is_empty() {
                v["security_groups"] = json!(self.security_groups);
            }
        }
        if !self.allowed_address_pairs.is_empty() {
            v["allowed_address_pairs"] = address_pairs(&self.allowed_address_pairs);
        }
        if let Some(up) = self.admin_state_up {
            v["admin_state_up"] = json!(up);
        }
        if let Some(mac) = given(&self.mac_address) {
            v["mac_address"] = json!(mac);
        }
        v
    }
}

/// One `fixed_ips` entry of a port body: the subnet and the address, each
/// only when set and not empty (CAPO's `ports.IP`, both `omitempty`).
pub fn fixed_ip(subnet_id: Option<&str>, ip_address: Option<&str>) -> Value {
    let mut ip = Map::new();
    if let Some(s) = subnet_id.filter(|s| !s.is_empty()) {
        ip.insert("subnet_id".into(), json!(s));
    }
    if let Some(a) = ip_address.filter(|a| !a.is_empty()) {
        ip.insert("ip_address".into(), json!(a));
    }
    Value::Object(ip)
}

/// The `allowed_address_pairs` value Neutron takes: a MAC only when set and
/// not empty (an explicit `null` is refused, an empty one is no MAC).
pub fn address_pairs(pairs: &[AddressPair]) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(|p| match given(&p.mac_address) {
                Some(mac) => json!({"ip_address": p.ip_address, "mac_address": mac}),
                None => json!({"ip_address": p.ip_address}),
            })
            .collect(),
    )
}

/// A security group rule; `None` fields mean "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct SecurityGroupRule {
    pub id: String,
    #[serde(default)]
    pub security_group_id: String,
    pub direction: String,
    #[serde(default)]
    pub ethertype: String,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub port_range_min: Option<i64>,
    #[serde(default)]
    pub port_range_max: Option<i64>,
    #[serde(default)]
    pub remote_group_id: Option<String>,
    #[serde(default)]
    pub remote_ip_prefix: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// A security group with its rules (Neutron embeds them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub security_group_rules: Vec<SecurityGroupRule>,
}

/// A floating IP: an external address, bound to a port or free.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct FloatingIp {
    pub id: String,
    #[serde(default)]
    pub floating_ip_address: String,
    #[serde(default)]
    pub floating_network_id: String,
    #[serde(default)]
    pub port_id: Option<String>,
    #[serde(default)]
    pub fixed_ip_address: Option<String>,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A trunk: VLAN subports carried over one parent port. Found by its parent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Trunk {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub port_id: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// An API extension Neutron serves (`GET /v2.0/extensions`); the alias says what
/// it adds, e.g. `trunk`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Extension {
    pub alias: String,
    #[serde(default)]
    pub name: String,
}

macro_rules! resource {
    ($t:ty, $s:literal, $p:literal) => {
        impl NeutronResource for $t {
            const SINGULAR: &'static str = $s;
            const PLURAL: &'static str = $p;
        }
    };
}
resource!(Network, "network", "networks");
resource!(Subnet, "subnet", "subnets");
resource!(Router, "router", "routers");
resource!(Port, "port", "ports");
resource!(SecurityGroup, "security_group", "security-groups");
resource!(
    SecurityGroupRule,
    "security_group_rule",
    "security-group-rules"
);
resource!(FloatingIp, "floatingip", "floatingips");
resource!(Trunk, "trunk", "trunks");
resource!(Extension, "extension", "extensions");

/// Query parameters for list calls, e.g. `[("name", n)]`.
pub type Query<'a> = [(&'a str, String)];

/// Whether Neutron refused a bulk request as such: the API with
/// `allow_bulk = False` answers 400 "Bulk operation not supported"; a 404
/// naming bulk is taken the same way. Every other error is the request's own.
pub fn bulk_unsupported(e: &OsError) -> bool {
    matches!(e.status(), Some(400 | 404)) && e.message().to_ascii_lowercase().contains("bulk")
}

/// Neutron, one method per HTTP verb over the typed collections plus the
/// calls that are not plain CRUD.
pub trait Networking: Send + Sync {
    /// `GET /v2.0/<plural>`; repeated keys are ORed, different keys ANDed.
    fn list<T: NeutronResource>(
        &self,
        query: &Query<'_>,
    ) -> impl Future<Output = Result<Vec<T>, OsError>> + Send;
    /// One resource; a 404 means it is gone.
    fn get<T: NeutronResource>(&self, id: &str) -> impl Future<Output = Result<T, OsError>> + Send;
    /// `body` is the object without its `{singular: ...}` envelope.
    fn create<T: NeutronResource>(
        &self,
        body: Value,
    ) -> impl Future<Output = Result<T, OsError>> + Send;
    /// `body` holds only the fields to change.
    fn update<T: NeutronResource>(
        &self,
        id: &str,
        body: Value,
    ) -> impl Future<Output = Result<T, OsError>> + Send;
    /// 409 while the resource is in use (ports on a network, a group on a port).
    fn delete<T: NeutronResource>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<(), OsError>> + Send;
    /// `POST /v2.0/security-group-rules` with `{"security_group_rules": [...]}`:
    /// `rules` (bodies as for [`Networking::create`]) in one request. Neutron
    /// takes only rules of one group per request and creates all of them or
    /// none (409 if one exists already); a Neutron that refuses bulk
    /// requests is recognised by [`bulk_unsupported`].
    fn create_security_group_rules(
        &self,
        rules: Vec<Value>,
    ) -> impl Future<Output = Result<Vec<SecurityGroupRule>, OsError>> + Send;
    /// `PUT /v2.0/<plural>/<id>/tags/<tag>`: adds one tag, idempotent.
    fn add_tag<T: NeutronResource>(
        &self,
        id: &str,
        tag: &str,
    ) -> impl Future<Output = Result<(), OsError>> + Send;
    /// `PUT /v2.0/<plural>/<id>/tags`: replaces all tags in one call.
    fn set_tags<T: NeutronResource>(
        &self,
        id: &str,
        tags: &[String],
    ) -> impl Future<Output = Result<(), OsError>> + Send;
    /// Connects the subnet to the router (a port on the subnet's gateway).
    fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> impl Future<Output = Result<(), OsError>> + Send;
    /// Disconnects the subnet; a network cannot be deleted while connected.
    fn remove_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> impl Future<Output = Result<(), OsError>> + Send;

    /// Creates the port, then sets its tags (see [`PortCreate::tags`]). A
    /// failure in between leaves an untagged port, which the caller finds
    /// again by name on its next pass and tags then.
    fn create_port(&self, port: &PortCreate) -> impl Future<Output = Result<Port, OsError>> + Send
    where
        Self: Sized,
    {
        let body = port.body();
        async move {
            let mut created: Port = self.create(body).await?;
            if !port.tags.is_empty() {
                self.set_tags::<Port>(&created.id, &port.tags).await?;
                created.tags = port.tags.clone();
            }
            Ok(created)
        }
    }

    /// Lets a port answer for `ip` too (a VIP held by keepalived or Cilium
    /// L2 announcements); no write when the pair is already there.
    fn allow_address(
        &self,
        port_id: &str,
        ip: &str,
    ) -> impl Future<Output = Result<Port, OsError>> + Send
    where
        Self: Sized,
    {
        async move {
            let port: Port = self.get(port_id).await?;
            if port
                .allowed_address_pairs
                .iter()
                .any(|p| p.ip_address == ip)
            {
                return Ok(port);
            }
            let mut pairs = port.allowed_address_pairs;
            pairs.push(AddressPair {
                ip_address: ip.to_owned(),
                mac_address: None,
            });
            self.set_allowed_address_pairs(port_id, &pairs).await
        }
    }

    /// Stops a port answering for `ip` (a VIP moved away or a machine
    /// leaving the control plane); no write when the pair is not there.
    fn disallow_address(
        &self,
        port_id: &str,
        ip: &str,
    ) -> impl Future<Output = Result<Port, OsError>> + Send
    where
        Self: Sized,
    {
        async move {
            let port: Port = self.get(port_id).await?;
            if !port
                .allowed_address_pairs
                .iter()
                .any(|p| p.ip_address == ip)
            {
                return Ok(port);
            }
            let pairs: Vec<AddressPair> = port
                .allowed_address_pairs
                .into_iter()
                .filter(|p| p.ip_address != ip)
                .collect();
            self.set_allowed_address_pairs(port_id, &pairs).await
        }
    }

    /// Replaces the port's allowed address pairs with `pairs` (Neutron has
    /// no call that adds or removes one).
    fn set_allowed_address_pairs(
        &self,
        port_id: &str,
        pairs: &[AddressPair],
    ) -> impl Future<Output = Result<Port, OsError>> + Send
    where
        Self: Sized,
    {
        let body = json!({ "allowed_address_pairs": address_pairs(pairs) });
        async move { self.update(port_id, body).await }
    }
}

/// The real Neutron client.
#[derive(Clone, Debug)]
pub struct Neutron {
    session: Arc<Session>,
}

impl Neutron {
    /// A Neutron client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self { session }
    }
}

impl Networking for Neutron {
    async fn list<T: NeutronResource>(&self, query: &Query<'_>) -> Result<Vec<T>, OsError> {
        let path = format!("/v2.0/{}", T::PLURAL);
        self.session
            .list_wrapped(SERVICE, &path, &T::PLURAL.replace('-', "_"), query)
            .await
    }

    async fn get<T: NeutronResource>(&self, id: &str) -> Result<T, OsError> {
        let path = format!("/v2.0/{}/{id}", T::PLURAL);
        self.session.get_wrapped(SERVICE, &path, T::SINGULAR).await
    }

    async fn create<T: NeutronResource>(&self, body: Value) -> Result<T, OsError> {
        let path = format!("/v2.0/{}", T::PLURAL);
        self.session
            .send_wrapped(Method::POST, SERVICE, &path, T::SINGULAR, body)
            .await
    }

    async fn update<T: NeutronResource>(&self, id: &str, body: Value) -> Result<T, OsError> {
        let path = format!("/v2.0/{}/{id}", T::PLURAL);
        self.session
            .send_wrapped(Method::PUT, SERVICE, &path, T::SINGULAR, body)
            .await
    }

    async fn delete<T: NeutronResource>(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/v2.0/{}/{id}", T::PLURAL);
        self.session.delete_path(SERVICE, &path).await
    }

    async fn create_security_group_rules(
        &self,
        rules: Vec<Value>,
    ) -> Result<Vec<SecurityGroupRule>, OsError> {
        let plural = SecurityGroupRule::PLURAL;
        self.session
            .send_wrapped(
                Method::POST,
                SERVICE,
                &format!("/v2.0/{plural}"),
                &plural.replace('-', "_"),
                Value::Array(rules),
            )
            .await
    }

    async fn add_tag<T: NeutronResource>(&self, id: &str, tag: &str) -> Result<(), OsError> {
        let path = format!("/v2.0/{}/{id}/tags/{}", T::PLURAL, encode_segment(tag));
        self.session
            .request(Method::PUT, SERVICE, &path, &[], None, &vec![])
            .await
            .map(drop)
    }

    async fn set_tags<T: NeutronResource>(&self, id: &str, tags: &[String]) -> Result<(), OsError> {
        let path = format!("/v2.0/{}/{id}/tags", T::PLURAL);
        let body = json!({ "tags": tags });
        self.session
            .request(Method::PUT, SERVICE, &path, &[], Some(&body), &vec![])
            .await
            .map(drop)
    }

    async fn add_router_interface(&self, router_id: &str, subnet_id: &str) -> Result<(), OsError> {
        let path = format!("/v2.0/routers/{router_id}/add_router_interface");
        let body = json!({ "subnet_id": subnet_id });
        self.session
            .request(Method::PUT, SERVICE, &path, &[], Some(&body), &vec![])
            .await
            .map(drop)
    }

    async fn remove_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<(), OsError> {
        let path = format!("/v2.0/routers/{router_id}/remove_router_interface");
        let body = json!({ "subnet_id": subnet_id });
        self.session
            .request(Method::PUT, SERVICE, &path, &[], Some(&body), &vec![])
            .await
            .map(drop)
    }
}

/// Percent-encodes a path segment (tags may hold `/`, `:`, spaces...).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::unwrap_body;

    #[test]
    fn decodes_neutron_bodies() {
        let v = json!({"security_groups": [{
            "id": "sg1", "name": "n", "tags": ["a"],
            "security_group_rules": [{"id": "r1", "direction": "egress", "ethertype": "IPv4",
                "protocol": null, "port_range_min": null, "port_range_max": null,
                "remote_group_id": null, "remote_ip_prefix": null}]
        }]});
        let sgs: Vec<SecurityGroup> =
            unwrap_body(SERVICE, Some(v), "security_groups", "/p").unwrap();
        assert_eq!(sgs[0].security_group_rules[0].direction, "egress");
        let n: Network = unwrap_body(
            SERVICE,
            Some(json!({"network": {"id": "x", "router:external": true}})),
            "network",
            "/p",
        )
        .unwrap();
        assert!(n.external);
        assert!(unwrap_body::<Network>(SERVICE, Some(json!({})), "network", "/p").is_err());
    }

    #[test]
    fn builds_port_create_bodies() {
        let port = PortCreate {
            name: "m-0".into(),
            network_id: "n".into(),
            description: Some("Created by stackhook".into()),
            fixed_ips: vec![FixedIpRequest {
                subnet_id: Some("s".into()),
                ip_address: None,
            }],
            security_groups: vec!["sg".into()],
            allowed_address_pairs: vec![AddressPair {
                ip_address: "10.0.0.10".into(),
                mac_address: None,
            }],
            tags: vec!["t".into()],
            ..Default::default()
        };
        assert_eq!(
            port.body(),
            json!({"name": "m-0", "network_id": "n", "description": "Created by stackhook",
                "fixed_ips": [{"subnet_id": "s"}], "security_groups": ["sg"],
                "allowed_address_pairs": [{"ip_address": "10.0.0.10"}]})
        );
        let open = PortCreate {
            port_security_enabled: Some(false),
            ..port
        };
        let body = open.body();
        assert_eq!(body["port_security_enabled"], false);
        assert_eq!(body["security_groups"], json!([]));
        let bare = PortCreate {
            name: "p".into(),
            network_id: "n".into(),
            ..Default::default()
        };
        assert_eq!(bare.body(), json!({"name": "p", "network_id": "n"}));
    }

    #[test]
    fn empty_optional_fields_stay_out_of_the_port_body() {
        type Case = (
            &'static str,
            &'static [&'static str],
            fn(&mut PortCreate),
            fn(&mut PortCreate),
        );
        let pair = |mac: &str| AddressPair {
            ip_address: "10.0.0.10".into(),
            mac_address: Some(mac.into()),
        };
        let cases: [Case; 5] = [
            (
                "description",
                &["description"],
                |p| p.description = Some(String::new()),
                |p| p.description = Some("d".into()),
            ),
            (
                "mac_address",
                &["mac_address"],
                |p| p.mac_address = Some(String::new()),
                |p| p.mac_address = Some("fa:16:3e:00:00:01".into()),
            ),
            (
                "fixed IP subnet",
                &["fixed_ips", "0", "subnet_id"],
                |p| {
                    p.fixed_ips = vec![FixedIpRequest {
                        subnet_id: Some(String::new()),
                        ip_address: Some("10.0.0.5".into()),
                    }]
                },
                |p| {
                    p.fixed_ips = vec![FixedIpRequest {
                        subnet_id: Some("s".into()),
                        ip_address: None,
                    }]
                },
            ),
            (
                "fixed IP address",
                &["fixed_ips", "0", "ip_address"],
                |p| {
                    p.fixed_ips = vec![FixedIpRequest {
                        subnet_id: Some("s".into()),
                        ip_address: Some(String::new()),
                    }]
                },
                |p| {
                    p.fixed_ips = vec![FixedIpRequest {
                        subnet_id: None,
                        ip_address: Some("10.0.0.5".into()),
                    }]
                },
            ),
            (
                "security_groups",
                &["security_groups"],
                |p| p.security_groups = Vec::new(),
                |p| p.security_groups = vec!["sg".into()],
            ),
        ];
        let bare = || PortCreate {
            name: "m-0".into(),
            network_id: "n".into(),
            ..Default::default()
        };
        for (field, path, empty, set) in cases {
            let mut unset = bare();
            empty(&mut unset);
            let body = unset.body();
            assert!(!has(&body, path), "{field} empty: {body}");
            let mut given = bare();
            set(&mut given);
            let body = given.body();
            assert!(has(&body, path), "{field} set: {body}");
        }
        // The address pair's MAC.
        assert_eq!(
            address_pairs(&[pair("")]),
            json!([{"ip_address": "10.0.0.10"}])
        );
        assert_eq!(
            address_pairs(&[pair("fa:16:3e:00:00:02")]),
            json!([{"ip_address": "10.0.0.10", "mac_address": "fa:16:3e:00:00:02"}])
        );
    }

    fn has(body: &Value, path: &[&str]) -> bool {
        let mut at = body;
        for key in path {
            let next = match key.parse::<usize>() {
                Ok(i) => at.get(i),
                Err(_) => at.get(*key),
            };
            match next {
                Some(v) => at = v,
                None => return false,
            }
        }
        true
    }

    #[test]
    fn recognises_a_refused_bulk_request() {
        let http = |status, message: &str| OsError::Http {
            service: "network".into(),
            method: "POST".into(),
            path: "/v2.0/security-group-rules".into(),
            status,
            message: message.into(),
            retry_after: None,
        };
        assert!(bulk_unsupported(&http(400, "Bulk operation not supported")));
        assert!(bulk_unsupported(&http(404, "bulk create is not available")));
        assert!(!bulk_unsupported(&http(400, "Resources required")));
        assert!(!bulk_unsupported(&http(
            409,
            "Duplicate Security Group Rule in POST (bulk)"
        )));
        assert!(!bulk_unsupported(&http(
            400,
            "Only allowed to update rules for one security profile at a time"
        )));
    }

    #[test]
    fn encodes_tag_segments() {
        assert_eq!(encode_segment("a-b_c.d"), "a-b_c.d");
        assert_eq!(encode_segment("k8s/ns c"), "k8s%2Fns%20c");
    }
}

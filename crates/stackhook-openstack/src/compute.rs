//! Nova (service type `compute`, v2.1): availability zones, server groups,
//! flavors and servers, each request pinned to a microversion.

use std::future::Future;
use std::sync::Arc;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::OsError;
use crate::session::{Headers, Session};

const SERVICE: &[&str] = &["compute"];

/// CAPO's floor: every Nova call it makes works at 2.38.
pub const BASE_MICROVERSION: &str = "2.38";
/// The server-group body with a single `policy` (and `rules`).
pub const SERVER_GROUP_MICROVERSION: &str = "2.64";

/// Server tags in the create body need 2.52; CAPO sends 2.53 with tags.
pub const SERVER_TAGS_MICROVERSION: &str = "2.53";

/// Both header spellings: older Novas know only the second.
pub fn microversion_headers(version: &str) -> Headers {
    vec![
        ("OpenStack-API-Version", format!("compute {version}")),
        ("X-OpenStack-Nova-API-Version", version.to_owned()),
    ]
}

/// A Nova availability zone; the available ones become failure domains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvailabilityZone {
    pub name: String,
    pub available: bool,
}

/// A Nova server group (affinity policy for a machine set).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerGroup {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub policy: Option<String>,
    #[serde(default)]
    pub members: Vec<String>,
}

/// A Nova flavor; specs name it, servers are created with its ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Flavor {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// Cores; node reservations scale with them.
    #[serde(default)]
    pub vcpus: u64,
    /// Memory in MiB.
    #[serde(default)]
    pub ram: u64,
    /// Root disk in GiB (0: the image's size, or boot from volume).
    #[serde(default)]
    pub disk: u64,
}

/// One address of a server, from its `addresses` map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerAddress {
    pub addr: String,
    #[serde(default)]
    pub version: u8,
    /// `fixed` or `floating`.
    #[serde(default, rename = "OS-EXT-IPS:type")]
    pub kind: Option<String>,
}

/// Why Nova put a server in ERROR, for the condition message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerFault {
    #[serde(default)]
    pub message: String,
}

/// A Nova server as `GET /servers/{id}` shows it, at the base microversion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Server {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// `BUILD`, `ACTIVE`, `ERROR`, `DELETED`...
    #[serde(default)]
    pub status: String,
    #[serde(default, rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Network name → addresses.
    #[serde(default)]
    pub addresses: std::collections::BTreeMap<String, Vec<ServerAddress>>,
    #[serde(default)]
    pub key_name: Option<String>,
    #[serde(default)]
    pub fault: Option<ServerFault>,
    /// The zone Nova placed it in.
    #[serde(default, rename = "OS-EXT-AZ:availability_zone")]
    pub availability_zone: Option<String>,
    /// Base64 user data; shown to admins only.
    #[serde(default, rename = "OS-EXT-SRV-ATTR:user_data")]
    pub user_data: Option<String>,
}

/// The Nova calls the cluster flow needs.
pub trait Compute: Send + Sync {
    /// The zones and whether each is available.
    fn availability_zones(
        &self,
    ) -> impl Future<Output = Result<Vec<AvailabilityZone>, OsError>> + Send;
    /// All flavors visible to the project (names are resolved client side).
    fn flavors(&self) -> impl Future<Output = Result<Vec<Flavor>, OsError>> + Send;
    /// Servers whose name matches the regex `name` (Nova filters by regex).
    fn servers_named(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<Server>, OsError>> + Send;
    /// One server; a 404 means it is gone.
    fn server(&self, id: &str) -> impl Future<Output = Result<Server, OsError>> + Send;
    /// `body` is the object without its `{"server": ...}` envelope (scheduler
    /// hints may be given in it under [`SCHEDULER_HINTS_KEY`]); the answer holds
    /// only the ID.
    fn create_server(
        &self,
        body: Value,
        microversion: &str,
    ) -> impl Future<Output = Result<String, OsError>> + Send;
    /// Starts the deletion; the server lingers (task state `deleting`) until Nova is done.
    fn delete_server(&self, id: &str) -> impl Future<Output = Result<(), OsError>> + Send;
}

/// The real Nova client.
#[derive(Clone, Debug)]
pub struct Nova {
    session: Arc<Session>,
}

impl Nova {
    /// A Nova client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self { session }
    }
}

fn decode_err(path: &str, message: impl Into<String>) -> OsError {
    OsError::Decode {
        service: "compute".into(),
        path: path.to_owned(),
        message: message.into(),
    }
}

impl Compute for Nova {
    async fn availability_zones(&self) -> Result<Vec<AvailabilityZone>, OsError> {
        let path = "/os-availability-zone";
        let v = self
            .call(Method::GET, path, &[], None, BASE_MICROVERSION)
            .await?;
        parse_zones(v.as_ref()).ok_or_else(|| decode_err(path, "no availabilityZoneInfo"))
    }

    async fn flavors(&self) -> Result<Vec<Flavor>, OsError> {
        let path = "/flavors/detail";
        take(self.get_json(path, &[]).await?, "flavors", path)
    }

    async fn servers_named(&self, name: &str) -> Result<Vec<Server>, OsError> {
        let path = "/servers/detail";
        take(
            self.get_json(path, &[("name", name.to_owned())]).await?,
            "servers",
            path,
        )
    }

    async fn server(&self, id: &str) -> Result<Server, OsError> {
        let path = format!("/servers/{id}");
        take(self.get_json(&path, &[]).await?, "server", &path)
    }

    async fn create_server(&self, body: Value, microversion: &str) -> Result<String, OsError> {
        let path = "/servers";
        let body = server_envelope(body);
        let v = self
            .call(Method::POST, path, &[], Some(&body), microversion)
            .await?
            .ok_or_else(|| decode_err(path, "empty response"))?;
        v.pointer("/server/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| decode_err(path, "no server id"))
    }

    async fn delete_server(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/servers/{id}");
        self.call(Method::DELETE, &path, &[], None, BASE_MICROVERSION)
            .await
            .map(drop)
    }
}

/// `{"server": body}`, with `os:scheduler_hints` moved out of `body` to sit beside
/// the server object, where Nova reads it.
pub fn server_envelope(mut body: Value) -> Value {
    let hints = body
        .as_object_mut()
        .and_then(|o| o.remove(SCHEDULER_HINTS_KEY));
    let mut envelope = json!({ "server": body });
    if let Some(h) = hints.filter(|h| h.as_object().is_some_and(|o| !o.is_empty())) {
        envelope[SCHEDULER_HINTS_KEY] = h;
    }
    envelope
}

/// Key of the scheduler hints (server group, custom filters) in a create body.
pub const SCHEDULER_HINTS_KEY: &str = "os:scheduler_hints";

/// Server groups belong to the machine flow, which the cluster reconcile
/// does not drive, so they stay off the [`Compute`] trait.
impl Nova {
    /// All server groups of the project.
    pub async fn server_groups(&self) -> Result<Vec<ServerGroup>, OsError> {
        let path = "/os-server-groups";
        let v = self
            .call(Method::GET, path, &[], None, SERVER_GROUP_MICROVERSION)
            .await?;
        take(v, "server_groups", path)
    }

    /// `policy`: `affinity`, `anti-affinity`, `soft-affinity` or `soft-anti-affinity`.
    pub async fn create_server_group(
        &self,
        name: &str,
        policy: &str,
    ) -> Result<ServerGroup, OsError> {
        let path = "/os-server-groups";
        let body = json!({"server_group": {"name": name, "policy": policy}});
        let v = self
            .call(
                Method::POST,
                path,
                &[],
                Some(&body),
                SERVER_GROUP_MICROVERSION,
            )
            .await?;
        take(v, "server_group", path)
    }

    /// Deletes a server group; Nova refuses while it has members.
    pub async fn delete_server_group(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/os-server-groups/{id}");
        self.call(Method::DELETE, &path, &[], None, SERVER_GROUP_MICROVERSION)
            .await
            .map(drop)
    }

    /// One Nova request at `microversion` (Nova reads the header per call).
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        microversion: &str,
    ) -> Result<Option<Value>, OsError> {
        self.session
            .request(
                method,
                SERVICE,
                path,
                query,
                body,
                &microversion_headers(microversion),
            )
            .await
    }

    async fn get_json(&self, path: &str, query: &[(&str, String)]) -> Result<Value, OsError> {
        self.call(Method::GET, path, query, None, BASE_MICROVERSION)
            .await?
            .ok_or_else(|| decode_err(path, "empty response"))
    }
}

fn take<T: serde::de::DeserializeOwned>(
    v: impl Into<Option<Value>>,
    key: &str,
    path: &str,
) -> Result<T, OsError> {
    let inner = v
        .into()
        .as_mut()
        .and_then(|v| v.get_mut(key))
        .map(Value::take)
        .ok_or_else(|| decode_err(path, format!("no {key}")))?;
    serde_json::from_value(inner).map_err(|e| decode_err(path, e.to_string()))
}

/// `{"availabilityZoneInfo": [{"zoneName", "zoneState": {"available"}}]}`.
pub fn parse_zones(v: Option<&Value>) -> Option<Vec<AvailabilityZone>> {
    let list = v?.get("availabilityZoneInfo")?.as_array()?;
    Some(
        list.iter()
            .filter_map(|z| {
                Some(AvailabilityZone {
                    name: z.get("zoneName")?.as_str()?.to_owned(),
                    available: z
                        .pointer("/zoneState/available")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nova_zone_list() {
        let v = json!({"availabilityZoneInfo": [
            {"zoneName": "az1", "zoneState": {"available": true}, "hosts": null},
            {"zoneName": "broken", "zoneState": {"available": false}, "hosts": null}
        ]});
        let zones = parse_zones(Some(&v)).unwrap();
        assert_eq!(zones.len(), 2);
        assert!(zones[0].available && !zones[1].available);
        assert!(parse_zones(Some(&json!({}))).is_none());
    }

    #[test]
    fn scheduler_hints_sit_beside_the_server() {
        let e = server_envelope(json!({"name": "m", SCHEDULER_HINTS_KEY: {"group": "g"}}));
        assert_eq!(
            e,
            json!({"server": {"name": "m"}, SCHEDULER_HINTS_KEY: {"group": "g"}})
        );
        let e = server_envelope(json!({"name": "m", SCHEDULER_HINTS_KEY: {}}));
        assert_eq!(e, json!({"server": {"name": "m"}}));
    }

    #[test]
    fn sends_both_microversion_headers() {
        let h = microversion_headers("2.64");
        assert!(h.contains(&("OpenStack-API-Version", "compute 2.64".to_owned())));
        assert!(h.contains(&("X-OpenStack-Nova-API-Version", "2.64".to_owned())));
    }
}

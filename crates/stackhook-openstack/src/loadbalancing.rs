//! Octavia (service type `load-balancer`, `/v2/lbaas`). Status is only ever
//! read with GET: callers requeue on `PENDING_*` instead of waiting here.

use std::future::Future;
use std::sync::Arc;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::error::OsError;
use crate::session::Session;

const SERVICE: &[&str] = &["load-balancer"];

/// An Octavia collection: `/v2/lbaas/<plural>`.
pub trait OctaviaResource: DeserializeOwned + Send + 'static {
    /// The key one resource is wrapped in, e.g. `listener`.
    const SINGULAR: &'static str;
    /// The collection's path segment and list key, e.g. `listeners`.
    const PLURAL: &'static str;
}

/// A load balancer; changes wait until `provisioning_status` is ACTIVE again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct LoadBalancer {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub provisioning_status: String,
    #[serde(default)]
    pub operating_status: String,
    #[serde(default)]
    pub vip_address: String,
    #[serde(default)]
    pub vip_port_id: String,
    #[serde(default)]
    pub vip_subnet_id: String,
    #[serde(default)]
    pub vip_network_id: String,
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

impl LoadBalancer {
    /// Octavia accepts changes to it and its children.
    pub fn is_active(&self) -> bool {
        self.provisioning_status == "ACTIVE"
    }
    /// Octavia is working on it and refuses changes (409) until it is done.
    pub fn is_pending(&self) -> bool {
        self.provisioning_status.starts_with("PENDING_")
    }
}

/// A listener: one frontend port of a load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Listener {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub protocol_port: i64,
    #[serde(default)]
    pub allowed_cidrs: Option<Vec<String>>,
    #[serde(default)]
    pub provisioning_status: String,
}

/// A pool: the backends behind a listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Pool {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub healthmonitor_id: Option<String>,
    #[serde(default)]
    pub provisioning_status: String,
}

/// A pool member: one backend address, e.g. a control-plane machine's port.
/// Members live under their pool (`/v2/lbaas/pools/{pool_id}/members`), so
/// they are not an [`OctaviaResource`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Member {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub protocol_port: i64,
    #[serde(default)]
    pub subnet_id: Option<String>,
    /// Can stay `PENDING_*` while the load balancer is ACTIVE (CAPO #2763),
    /// so a caller waiting for a member checks this, not only the LB.
    #[serde(default)]
    pub provisioning_status: String,
    #[serde(default)]
    pub operating_status: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A health monitor: how a pool's members are checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct HealthMonitor {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub delay: i64,
    #[serde(default)]
    pub timeout: i64,
    #[serde(default)]
    pub max_retries: i64,
    #[serde(default)]
    pub max_retries_down: i64,
}

/// A load balancer provider driver (`amphora`, `ovn`…).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Provider {
    pub name: String,
}

/// An Octavia flavor (provider-specific sizing), chosen by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Flavor {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub enabled: bool,
}

macro_rules! resource {
    ($t:ty, $s:literal, $p:literal) => {
        impl OctaviaResource for $t {
            const SINGULAR: &'static str = $s;
            const PLURAL: &'static str = $p;
        }
    };
}
resource!(LoadBalancer, "loadbalancer", "loadbalancers");
resource!(Listener, "listener", "listeners");
resource!(Pool, "pool", "pools");
resource!(HealthMonitor, "healthmonitor", "healthmonitors");
resource!(Provider, "provider", "providers");
resource!(Flavor, "flavor", "flavors");

/// Octavia operations the cluster flow needs.
pub trait LoadBalancing: Send + Sync {
    /// `GET /v2/lbaas/<plural>` with filters such as `name` or `loadbalancer_id`.
    fn list<T: OctaviaResource>(
        &self,
        query: &[(&str, String)],
    ) -> impl Future<Output = Result<Vec<T>, OsError>> + Send;
    /// One resource; a 404 means it is gone.
    fn get<T: OctaviaResource>(&self, id: &str) -> impl Future<Output = Result<T, OsError>> + Send;
    /// `body` is the object without its `{singular: ...}` envelope.
    fn create<T: OctaviaResource>(
        &self,
        body: Value,
    ) -> impl Future<Output = Result<T, OsError>> + Send;
    /// Fails with 409 while the load balancer is `PENDING_*`.
    fn update<T: OctaviaResource>(
        &self,
        id: &str,
        body: Value,
    ) -> impl Future<Output = Result<T, OsError>> + Send;
    /// `DELETE /loadbalancers/{id}?cascade=true`: listeners, pools, members
    /// and monitors go with it.
    fn delete_load_balancer_cascade(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<(), OsError>> + Send;
    /// The current API version (`GET /`, last `id`), e.g. `(2, 27)`.
    fn api_version(&self) -> impl Future<Output = Result<(u32, u32), OsError>> + Send;

    /// The members of a pool, with filters such as `name` or `address`.
    fn members(
        &self,
        pool_id: &str,
        query: &[(&str, String)],
    ) -> impl Future<Output = Result<Vec<Member>, OsError>> + Send;
    /// One member; a 404 means it (or its pool) is gone.
    fn member(
        &self,
        pool_id: &str,
        id: &str,
    ) -> impl Future<Output = Result<Member, OsError>> + Send;
    /// `body` is the object without its `{"member": ...}` envelope
    /// (`name`, `address`, `protocol_port`, `subnet_id`, `tags`...). Fails
    /// with 409 while the load balancer is `PENDING_*`.
    fn create_member(
        &self,
        pool_id: &str,
        body: Value,
    ) -> impl Future<Output = Result<Member, OsError>> + Send;
    /// Fails with 409 while the load balancer is `PENDING_*`.
    fn delete_member(
        &self,
        pool_id: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), OsError>> + Send;
}

/// The real Octavia client.
#[derive(Clone, Debug)]
pub struct Octavia {
    session: Arc<Session>,
}

impl Octavia {
    /// An Octavia client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self { session }
    }
}

impl LoadBalancing for Octavia {
    async fn list<T: OctaviaResource>(&self, query: &[(&str, String)]) -> Result<Vec<T>, OsError> {
        let path = format!("/v2/lbaas/{}", T::PLURAL);
        self.session
            .list_wrapped(SERVICE, &path, T::PLURAL, query)
            .await
    }

    async fn get<T: OctaviaResource>(&self, id: &str) -> Result<T, OsError> {
        let path = format!("/v2/lbaas/{}/{id}", T::PLURAL);
        self.session.get_wrapped(SERVICE, &path, T::SINGULAR).await
    }

    async fn create<T: OctaviaResource>(&self, body: Value) -> Result<T, OsError> {
        let path = format!("/v2/lbaas/{}", T::PLURAL);
        self.session
            .send_wrapped(Method::POST, SERVICE, &path, T::SINGULAR, body)
            .await
    }

    async fn update<T: OctaviaResource>(&self, id: &str, body: Value) -> Result<T, OsError> {
        let path = format!("/v2/lbaas/{}/{id}", T::PLURAL);
        self.session
            .send_wrapped(Method::PUT, SERVICE, &path, T::SINGULAR, body)
            .await
    }

    async fn delete_load_balancer_cascade(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/v2/lbaas/loadbalancers/{id}");
        self.session
            .request(
                Method::DELETE,
                SERVICE,
                &path,
                &[("cascade", "true".to_owned())],
                None,
                &vec![],
            )
            .await
            .map(drop)
    }

    async fn api_version(&self) -> Result<(u32, u32), OsError> {
        let v = self
            .session
            .request(Method::GET, SERVICE, "/", &[], None, &vec![])
            .await?;
        let versions = v
            .as_ref()
            .and_then(|v| v.get("versions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        versions
            .iter()
            .filter_map(|v| v.get("id").and_then(Value::as_str))
            .filter_map(parse_version)
            .max()
            .ok_or_else(|| OsError::Decode {
                service: "load-balancer".into(),
                path: "/".into(),
                message: "no API version listed".into(),
            })
    }
    async fn members(
        &self,
        pool_id: &str,
        query: &[(&str, String)],
    ) -> Result<Vec<Member>, OsError> {
        self.session
            .list_wrapped(SERVICE, &members_path(pool_id), "members", query)
            .await
    }

    async fn member(&self, pool_id: &str, id: &str) -> Result<Member, OsError> {
        let path = format!("{}/{id}", members_path(pool_id));
        self.session.get_wrapped(SERVICE, &path, "member").await
    }

    async fn create_member(&self, pool_id: &str, body: Value) -> Result<Member, OsError> {
        self.session
            .send_wrapped(
                Method::POST,
                SERVICE,
                &members_path(pool_id),
                "member",
                body,
            )
            .await
    }

    async fn delete_member(&self, pool_id: &str, id: &str) -> Result<(), OsError> {
        let path = format!("{}/{id}", members_path(pool_id));
        self.session.delete_path(SERVICE, &path).await
    }
}

fn members_path(pool_id: &str) -> String {
    format!("/v2/lbaas/pools/{pool_id}/members")
}

/// `v2.27` → `(2, 27)`.
pub fn parse_version(s: &str) -> Option<(u32, u32)> {
    let (major, minor) = s.trim_start_matches('v').split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_and_states() {
        assert_eq!(parse_version("v2.27"), Some((2, 27)));
        assert_eq!(parse_version("2.0"), Some((2, 0)));
        assert_eq!(parse_version("v2"), None);
        let lb = LoadBalancer {
            provisioning_status: "PENDING_UPDATE".into(),
            ..Default::default()
        };
        assert!(lb.is_pending() && !lb.is_active());
    }

    #[test]
    fn decodes_members() {
        let members: Vec<Member> = crate::session::unwrap_body(
            SERVICE,
            Some(serde_json::json!({"members": [{"id": "m1", "name": "cp-0",
                "address": "10.6.0.5", "protocol_port": 6443, "subnet_id": null,
                "provisioning_status": "PENDING_CREATE", "operating_status": "NO_MONITOR",
                "weight": 1, "tags": []}], "members_links": []})),
            "members",
            "/v2/lbaas/pools/p/members",
        )
        .unwrap();
        assert_eq!(members[0].protocol_port, 6443);
        assert_eq!(members[0].subnet_id, None);
        assert_eq!(members_path("p"), "/v2/lbaas/pools/p/members");
    }
}

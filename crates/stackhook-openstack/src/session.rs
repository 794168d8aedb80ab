//! An authenticated HTTP session against one cloud: Keystone v3 token, the
//! service catalog, endpoint lookup, refresh before expiry, and the request
//! plumbing every service client shares.
//!
//! Written on reqwest rather than the `openstack`/`osauth` crates: those hide
//! the token body (project ID, name and domain, which `status.extensions`
//! publishes) and the raw catalog URLs, have no Octavia, security-group
//! rules, tags, availability zones or server groups, expose no HTTP status
//! on errors (we must tell 409/429/5xx from user errors) and take a CA bundle
//! only as a file path. What remains to write is a token request and a
//! catalog filter, which is smaller than working around all of that.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::config::{AuthMethod, CloudConfig, NameOrId};
use crate::error::{service_message, OsError};

/// Renew this long before Keystone's `expires_at`, so a token never expires
/// halfway through a reconcile.
const REFRESH_MARGIN: Duration = Duration::from_secs(10 * 60);
/// Attempts for idempotent requests that failed with 429/5xx or no answer.
const ATTEMPTS: u32 = 3;
/// How long a request waits for its answer unless the process or the cloud's
/// `api_timeout` says otherwise. Every request has a deadline: a service that
/// accepts connections and never answers must not hold a reconcile (and its
/// worker) for longer.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The request deadline of the sessions made from now on, once per process.
static REQUEST_TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// Sets the process's request deadline (`--openstack-request-timeout-seconds`);
/// `false` when it was set before. A cloud's `api_timeout` still wins.
pub fn set_request_timeout(timeout: Duration) -> bool {
    REQUEST_TIMEOUT.set(timeout).is_ok()
}

fn request_timeout(config: &CloudConfig) -> Duration {
    config
        .api_timeout
        .or_else(|| REQUEST_TIMEOUT.get().copied())
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT)
}

/// `token.project` from Keystone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct TokenProject {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub domain: TokenDomain,
}

/// The domain of the token's project, published with its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct TokenDomain {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
}

/// One catalog service.
#[derive(Clone, Debug, Deserialize)]
pub struct CatalogEntry {
    #[serde(rename = "type")]
    pub service_type: String,
    #[serde(default)]
    pub endpoints: Vec<CatalogEndpoint>,
}

/// One URL of a catalog service, per region and interface.
#[derive(Clone, Debug, Deserialize)]
pub struct CatalogEndpoint {
    pub interface: String,
    #[serde(default)]
    pub region_id: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    pub url: String,
}

#[derive(Deserialize)]
struct TokenBody {
    token: TokenInner,
}

#[derive(Deserialize)]
struct TokenInner {
    expires_at: String,
    #[serde(default)]
    project: Option<TokenProject>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

/// A token with what came with it. `Debug` prints the token itself redacted.
#[derive(Clone, Debug)]
pub struct Token {
    /// `X-Subject-Token`; read only to set `X-Auth-Token` on a request.
    value: SecretString,
    /// When to fetch the next token.
    refresh_at: jiff::Timestamp,
    pub project: Option<TokenProject>,
    pub catalog: Vec<CatalogEntry>,
}

/// Request counts, for tests and benchmarks of how chatty a reconcile is.
#[derive(Debug, Default)]
pub struct CallStats {
    reads: AtomicU64,
    writes: AtomicU64,
    auths: AtomicU64,
    retries: AtomicU64,
}

/// A point-in-time copy of [`CallStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub reads: u64,
    pub writes: u64,
    pub auths: u64,
    pub retries: u64,
}

impl std::ops::Sub for CallCounts {
    type Output = CallCounts;
    fn sub(self, o: Self) -> Self {
        CallCounts {
            reads: self.reads.saturating_sub(o.reads),
            writes: self.writes.saturating_sub(o.writes),
            auths: self.auths.saturating_sub(o.auths),
            retries: self.retries.saturating_sub(o.retries),
        }
    }
}

impl CallStats {
    /// The counts now; subtract two snapshots to count one reconcile.
    pub fn snapshot(&self) -> CallCounts {
        CallCounts {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            auths: self.auths.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}

/// Extra headers for one request (microversions).
pub type Headers = Vec<(&'static str, String)>;

/// A session; cheap to share behind an `Arc`.
pub struct Session {
    http: reqwest::Client,
    config: CloudConfig,
    token: Mutex<Option<Arc<Token>>>,
    stats: CallStats,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("auth_url", &self.config.auth_url)
            .field("region", &self.config.region)
            .finish_non_exhaustive()
    }
}

/// The `User-Agent` of every session this process makes, once set.
static USER_AGENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The default `User-Agent`: `stackhook/<version>`.
pub const DEFAULT_USER_AGENT: &str = concat!("stackhook/", env!("CARGO_PKG_VERSION"));

/// Sets the `User-Agent` of the sessions made from now on, once per process, so a
/// cloud's API logs tell one management cluster's calls from another's. `false`
/// when it was set before.
pub fn set_user_agent(ua: String) -> bool {
    USER_AGENT.set(ua).is_ok()
}

impl Session {
    /// Builds the HTTP client; authenticates lazily on the first request.
    /// `cacert` replaces the system roots when given, as CAPO's Secret key does.
    pub fn new(config: CloudConfig, cacert: Option<&[u8]>) -> Result<Self, OsError> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(request_timeout(&config))
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(
                USER_AGENT
                    .get()
                    .map(String::as_str)
                    .unwrap_or(DEFAULT_USER_AGENT),
            );
        match cacert {
            Some(pem) => {
                let certs = reqwest::Certificate::from_pem_bundle(pem)
                    .map_err(|e| OsError::Config(format!("cacert is not a PEM bundle: {e}")))?;
                if certs.is_empty() {
                    return Err(OsError::Config("cacert holds no certificate".into()));
                }
                for cert in certs {
                    builder = builder.add_root_certificate(cert);
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for cert in native.certs {
                    if let Ok(c) = reqwest::Certificate::from_der(cert.as_ref()) {
                        builder = builder.add_root_certificate(c);
                    }
                }
            }
        }
        if !config.verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        let http = builder
            .build()
            .map_err(|e| OsError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            config,
            token: Mutex::new(None),
            stats: CallStats::default(),
        })
    }

    /// The clouds.yaml entry the session was built from.
    pub fn config(&self) -> &CloudConfig {
        &self.config
    }

    /// Requests made so far.
    pub fn stats(&self) -> &CallStats {
        &self.stats
    }

    /// A valid token, fetching a new one when none is cached or it is close
    /// to expiry.
    pub async fn token(&self) -> Result<Arc<Token>, OsError> {
        let mut guard = self.token.lock().await;
        if let Some(t) = guard.as_ref() {
            if t.refresh_at > jiff::Timestamp::now() {
                return Ok(t.clone());
            }
        }
        let fresh = Arc::new(self.authenticate().await?);
        *guard = Some(fresh.clone());
        Ok(fresh)
    }

    fn auth_body(&self) -> Value {
        fn named(r: &NameOrId) -> Value {
            match r {
                NameOrId::Id(id) => json!({"id": id}),
                NameOrId::Name(name) => json!({"name": name}),
            }
        }
        fn user(u: &NameOrId, domain: Option<&NameOrId>) -> Value {
            let mut v = named(u);
            if let (NameOrId::Name(_), Some(d)) = (u, domain) {
                v["domain"] = named(d);
            } else if let NameOrId::Name(_) = u {
                v["domain"] = json!({"id": "default"});
            }
            v
        }
        match &self.config.auth {
            AuthMethod::Password {
                user: u,
                user_domain,
                password,
                project,
                project_domain,
            } => {
                let mut user_v = user(u, user_domain.as_ref());
                user_v["password"] = json!(password.expose_secret());
                let mut body = json!({"auth": {"identity": {
                    "methods": ["password"],
                    "password": {"user": user_v}
                }}});
                if let Some(p) = project {
                    let mut pv = named(p);
                    if let NameOrId::Name(_) = p {
                        pv["domain"] = project_domain
                            .as_ref()
                            .map(named)
                            .unwrap_or_else(|| json!({"id": "default"}));
                    }
                    body["auth"]["scope"] = json!({"project": pv});
                }
                body
            }
            AuthMethod::ApplicationCredential {
                credential,
                user: owner,
                user_domain,
                secret,
            } => {
                let mut cred = named(credential);
                cred["secret"] = json!(secret.expose_secret());
                if let (NameOrId::Name(_), Some(o)) = (credential, owner) {
                    cred["user"] = user(o, user_domain.as_ref());
                }
                json!({"auth": {"identity": {
                    "methods": ["application_credential"],
                    "application_credential": cred
                }}})
            }
        }
    }

    async fn authenticate(&self) -> Result<Token, OsError> {
        let url = format!("{}/auth/tokens", self.config.auth_url);
        self.stats.auths.fetch_add(1, Ordering::Relaxed);
        let transport = |e: reqwest::Error| OsError::Transport {
            service: "identity".into(),
            method: "POST".into(),
            path: "/v3/auth/tokens".into(),
            message: chain(&e),
            timeout: e.is_timeout(),
        };
        let resp = self
            .http
            .post(&url)
            .json(&self.auth_body())
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status();
        let subject = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let retry_after = retry_after(resp.headers());
        let text = resp.text().await.map_err(transport)?;
        if !status.is_success() {
            return Err(OsError::Http {
                service: "identity".into(),
                method: "POST".into(),
                path: "/v3/auth/tokens".into(),
                status: status.as_u16(),
                message: service_message(&text),
                retry_after,
            });
        }
        let decode = |message: String| OsError::Decode {
            service: "identity".into(),
            path: "/v3/auth/tokens".into(),
            message,
        };
        let value: SecretString = subject
            .ok_or_else(|| decode("no X-Subject-Token header".into()))?
            .into();
        let body: TokenBody =
            serde_json::from_str(&text).map_err(|e| decode(format!("token body: {e}")))?;
        let expires_at: jiff::Timestamp = body
            .token
            .expires_at
            .parse()
            .map_err(|e| decode(format!("expires_at: {e}")))?;
        tracing::debug!(auth_url = %self.config.auth_url, %expires_at, "new Keystone token");
        Ok(Token {
            value,
            refresh_at: refresh_at(jiff::Timestamp::now(), expires_at),
            project: body.token.project,
            catalog: body.token.catalog,
        })
    }

    /// The raw catalog URL of the first of `types` present for the
    /// configured region and interface (endpoint overrides first).
    pub async fn endpoint(&self, types: &[&str]) -> Result<String, OsError> {
        for t in types {
            if let Some(url) = self.config.endpoint_overrides.get(*t) {
                return Ok(url.trim_end_matches('/').to_owned());
            }
        }
        let token = self.token().await?;
        catalog_url(
            &token.catalog,
            types,
            self.config.region.as_deref(),
            &self.config.interface,
        )
        .map(|u| u.trim_end_matches('/').to_owned())
        .ok_or_else(|| OsError::NoEndpoint {
            service: types.first().copied().unwrap_or_default().to_owned(),
            region: self.config.region.clone(),
            interface: self.config.interface.clone(),
        })
    }

    /// One JSON request to a service; `None` for empty bodies (204).
    ///
    /// GET, PUT and DELETE are retried on 429, 5xx (not 501) and transport
    /// errors; POST is not, because a create that failed after reaching the
    /// service may have happened, and the caller's adopt-by-name handles that
    /// on the next pass. A 401 fetches a new token and repeats once.
    pub async fn request(
        &self,
        method: Method,
        service: &[&str],
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        headers: &Headers,
    ) -> Result<Option<Value>, OsError> {
        let idempotent = method != Method::POST && method != Method::PATCH;
        let mut attempt = 0;
        let mut reauthed = false;
        loop {
            attempt += 1;
            match self
                .send_once(&method, service, path, query, body, headers)
                .await
            {
                Err(e) if e.status() == Some(401) && !reauthed => {
                    reauthed = true;
                    *self.token.lock().await = None;
                }
                // A request that got no answer in time is not sent again: a hung
                // service would hold the caller ATTEMPTS times as long.
                Err(e)
                    if idempotent
                        && attempt < ATTEMPTS
                        && e.is_retryable()
                        && !e.is_conflict()
                        && !e.is_timeout() =>
                {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    let wait = e
                        .retry_after()
                        .unwrap_or(Duration::from_millis(200 << attempt))
                        .min(Duration::from_secs(5));
                    tracing::debug!(error = %e, ?wait, "retrying OpenStack request");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    async fn send_once(
        &self,
        method: &Method,
        service: &[&str],
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        headers: &Headers,
    ) -> Result<Option<Value>, OsError> {
        let base = self.endpoint(service).await?;
        let token = self.token().await?;
        let url = join_url(&base, path);
        let service_name = service.first().copied().unwrap_or_default();
        let mut hm = HeaderMap::new();
        for (k, v) in headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                hm.insert(name, value);
            }
        }
        if let Ok(mut v) = HeaderValue::from_str(token.value.expose_secret()) {
            v.set_sensitive(true);
            hm.insert("x-auth-token", v);
        }
        let mut req = self
            .http
            .request(method.clone(), &url)
            .headers(hm)
            .header("accept", "application/json");
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        if *method == Method::GET || *method == Method::HEAD {
            self.stats.reads.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
        }
        let deadline = request_timeout(&self.config);
        let transport = |e: reqwest::Error| OsError::Transport {
            service: service_name.to_owned(),
            method: method.to_string(),
            path: path.to_owned(),
            message: if e.is_timeout() {
                format!("no answer within {} s", deadline.as_secs_f64())
            } else {
                chain(&e)
            },
            timeout: e.is_timeout(),
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let text = resp.text().await.map_err(transport)?;
        if !status.is_success() {
            return Err(OsError::Http {
                service: service_name.to_owned(),
                method: method.to_string(),
                path: path.to_owned(),
                status: status.as_u16(),
                message: service_message(&text),
                retry_after,
            });
        }
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| OsError::Decode {
                service: service_name.to_owned(),
                path: path.to_owned(),
                message: e.to_string(),
            })
    }
}

/// reqwest's top-level message ("error sending request") hides the cause.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// [`REFRESH_MARGIN`] before expiry, or a quarter of the lifetime for
/// clouds with tokens shorter than that margin (which would otherwise mean a
/// new token for every request).
fn refresh_at(now: jiff::Timestamp, expires: jiff::Timestamp) -> jiff::Timestamp {
    let lifetime = expires.duration_since(now);
    let margin = jiff::SignedDuration::try_from(REFRESH_MARGIN)
        .unwrap_or_default()
        .min(lifetime / 4);
    expires.checked_sub(margin).unwrap_or(now)
}

/// `Retry-After` in seconds (the HTTP-date form is rare from OpenStack).
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    h.get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// Appends `path` to a catalog URL; catalogs register Neutron and Octavia
/// both with and without the version segment, so a repeated one is dropped.
pub fn join_url(base: &str, path: &str) -> String {
    let base = base.trim_end_matches('/');
    for v in ["/v2.0", "/v2", "/v2.1", "/v3"] {
        if base.ends_with(v) && (path == v || path.starts_with(&format!("{v}/"))) {
            return format!("{base}{}", &path[v.len()..]);
        }
    }
    format!("{base}{path}")
}

/// Catalog filter: the first of `types` with an endpoint on `interface` in
/// `region` (any region when none is configured).
pub fn catalog_url(
    catalog: &[CatalogEntry],
    types: &[&str],
    region: Option<&str>,
    interface: &str,
) -> Option<String> {
    for t in types {
        for entry in catalog.iter().filter(|e| e.service_type == *t) {
            let found = entry.endpoints.iter().find(|ep| {
                ep.interface == interface
                    && region.is_none_or(|r| {
                        ep.region_id.as_deref() == Some(r) || ep.region.as_deref() == Some(r)
                    })
            });
            if let Some(ep) = found {
                return Some(ep.url.clone());
            }
        }
    }
    None
}

/// Takes `{"<key>": ...}` out of a response body: the envelope Neutron, Octavia and
/// Nova wrap every resource and list in.
pub fn unwrap_body<T: serde::de::DeserializeOwned>(
    service: &[&str],
    v: Option<Value>,
    key: &str,
    path: &str,
) -> Result<T, OsError> {
    let inner = v.and_then(|mut v| v.get_mut(key).map(Value::take));
    let err = |message: String| OsError::Decode {
        service: service.first().copied().unwrap_or_default().into(),
        path: path.to_owned(),
        message,
    };
    let inner = inner.ok_or_else(|| err(format!("no {key:?} in the response")))?;
    serde_json::from_value(inner).map_err(|e| err(e.to_string()))
}

/// The resource calls Neutron and Octavia share: a collection at `collection`, lists
/// under the `plural` key, one resource as `{"<singular>": ...}` both ways.
impl Session {
    /// `GET collection`, the list under `plural`.
    pub async fn list_wrapped<T: serde::de::DeserializeOwned>(
        &self,
        service: &[&str],
        collection: &str,
        plural: &str,
        query: &[(&str, String)],
    ) -> Result<Vec<T>, OsError> {
        let v = self
            .request(Method::GET, service, collection, query, None, &vec![])
            .await?;
        unwrap_body(service, v, plural, collection)
    }

    /// `GET path`, the resource under `singular`.
    pub async fn get_wrapped<T: serde::de::DeserializeOwned>(
        &self,
        service: &[&str],
        path: &str,
        singular: &str,
    ) -> Result<T, OsError> {
        let v = self
            .request(Method::GET, service, path, &[], None, &vec![])
            .await?;
        unwrap_body(service, v, singular, path)
    }

    /// POST (create) or PUT (update) of one resource.
    pub async fn send_wrapped<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        service: &[&str],
        path: &str,
        singular: &str,
        body: Value,
    ) -> Result<T, OsError> {
        let body = json!({ singular: body });
        let v = self
            .request(method, service, path, &[], Some(&body), &vec![])
            .await?;
        unwrap_body(service, v, singular, path)
    }

    /// `DELETE path`, retried like every idempotent request.
    pub async fn delete_path(&self, service: &[&str], path: &str) -> Result<(), OsError> {
        self.request(Method::DELETE, service, path, &[], None, &vec![])
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Vec<CatalogEntry> {
        serde_json::from_value(json!([
            {"type": "network", "endpoints": [
                {"interface": "public", "region_id": "R1", "region": "R1", "url": "https://net-r1"},
                {"interface": "internal", "region_id": "R1", "region": "R1", "url": "http://net-r1-int"},
                {"interface": "public", "region_id": "R2", "region": "R2", "url": "https://net-r2"}
            ]},
            {"type": "volumev3", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": "https://cinder/v3/p"}
            ]}
        ]))
        .unwrap()
    }

    #[test]
    fn catalog_filters_region_interface_and_aliases() {
        let c = catalog();
        assert_eq!(
            catalog_url(&c, &["network"], Some("R2"), "public").as_deref(),
            Some("https://net-r2")
        );
        assert_eq!(
            catalog_url(&c, &["network"], Some("R1"), "internal").as_deref(),
            Some("http://net-r1-int")
        );
        assert_eq!(catalog_url(&c, &["network"], Some("R3"), "public"), None);
        assert_eq!(
            catalog_url(&c, &["block-storage", "volumev3"], Some("R1"), "public").as_deref(),
            Some("https://cinder/v3/p")
        );
    }

    fn body_for(yaml: &str) -> Value {
        let config = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap();
        Session::new(config, None).unwrap().auth_body()
    }

    #[test]
    fn keystone_v3_auth_bodies() {
        let b = body_for(
            "clouds: {c: {auth: {auth_url: 'http://k/v3', username: alice, password: pw, \
             user_domain_name: Default, project_name: demo, project_domain_id: default}}}",
        );
        assert_eq!(
            b,
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": {
                    "name": "alice", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"name": "demo", "domain": {"id": "default"}}}
            }})
        );
        let b = body_for(
            "clouds: {c: {auth_type: v3applicationcredential, auth: {auth_url: 'http://k', \
             application_credential_id: ac1, application_credential_secret: s}}}",
        );
        assert_eq!(
            b,
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": {"id": "ac1", "secret": "s"}
            }}})
        );
        let b = body_for(
            "clouds: {c: {auth: {auth_url: 'http://k', user_id: u1, password: pw, project_id: p1}}}",
        );
        assert_eq!(
            b["auth"]["identity"]["password"]["user"],
            json!({"id": "u1", "password": "pw"})
        );
        assert_eq!(b["auth"]["scope"], json!({"project": {"id": "p1"}}));
    }

    #[test]
    fn token_debug_shows_the_project_but_not_the_token() {
        let token = Token {
            value: "gAAAAABtoken-5e1f".to_owned().into(),
            refresh_at: "2026-01-01T00:50:00Z".parse().unwrap(),
            project: Some(TokenProject {
                id: "p-42".into(),
                name: "demo".into(),
                domain: TokenDomain::default(),
            }),
            catalog: catalog(),
        };
        for shown in [format!("{token:?}"), format!("{token:#?}")] {
            assert!(!shown.contains("gAAAAABtoken-5e1f"), "{shown}");
            assert!(shown.contains("REDACTED"), "{shown}");
            assert!(shown.contains("p-42") && shown.contains("demo"), "{shown}");
            assert!(shown.contains("https://net-r1"), "{shown}");
        }
    }

    #[test]
    fn session_debug_shows_no_password() {
        let config = CloudConfig::from_clouds_yaml(
            b"clouds: {c: {region_name: R1, auth: {auth_url: 'https://k', username: a, password: 'pw-91c2'}}}",
            "c",
            None,
        )
        .unwrap();
        let session = Session::new(config, None).unwrap();
        let shown = format!("{session:?}");
        assert!(!shown.contains("pw-91c2"), "{shown}");
        assert!(
            shown.contains("https://k/v3") && shown.contains("R1"),
            "{shown}"
        );
        let shown = format!("{:?}", session.config());
        assert!(!shown.contains("pw-91c2"), "{shown}");
        assert!(shown.contains("https://k/v3"), "{shown}");
        // The request body is the one place the password is read.
        assert_eq!(
            session.auth_body()["auth"]["identity"]["password"]["user"]["password"],
            "pw-91c2"
        );
    }

    #[test]
    fn refreshes_before_expiry() {
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let hour: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        assert_eq!(refresh_at(now, hour).to_string(), "2026-01-01T00:50:00Z");
        let short: jiff::Timestamp = "2026-01-01T00:04:00Z".parse().unwrap();
        assert_eq!(refresh_at(now, short).to_string(), "2026-01-01T00:03:00Z");
    }

    #[test]
    fn rejects_a_bad_ca_bundle() {
        let config = CloudConfig::from_clouds_yaml(
            b"clouds: {c: {auth: {auth_url: 'https://k', username: a, password: b}}}",
            "c",
            None,
        )
        .unwrap();
        let err = Session::new(config, Some(b"not a certificate")).unwrap_err();
        assert!(matches!(err, OsError::Config(_)), "{err}");
    }

    #[test]
    fn joins_versioned_catalog_urls() {
        assert_eq!(
            join_url("http://n/", "/v2.0/networks"),
            "http://n/v2.0/networks"
        );
        assert_eq!(
            join_url("http://n/v2.0", "/v2.0/networks"),
            "http://n/v2.0/networks"
        );
        assert_eq!(
            join_url("http://o/load-balancer/v2", "/v2/lbaas/pools"),
            "http://o/load-balancer/v2/lbaas/pools"
        );
        assert_eq!(
            join_url("http://nova/v2.1", "/os-availability-zone"),
            "http://nova/v2.1/os-availability-zone"
        );
    }
}

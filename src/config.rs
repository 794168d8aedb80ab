//! Configuration of `stackhook serve`: flags, and the per-handler settings file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Deserialize;

use crate::sdk::discovery::FailurePolicy;
use crate::sdk::CapiVersion;

/// `--capi-version`: a CAPI minor to pin, or `auto` (or empty) to find it in the
/// management cluster. `auto` is what clusterctl substitutes when the variable is
/// unset: it refuses an empty default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapiPin(pub Option<CapiVersion>);

impl std::str::FromStr for CapiPin {
    type Err = crate::sdk::catalog::CapiVersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() || s.trim().eq_ignore_ascii_case("auto") {
            Ok(CapiPin(None))
        } else {
            s.parse().map(|v| CapiPin(Some(v)))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// HTTPS address of the Runtime Extension server.
    #[arg(long, env = "STACKHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// Plain-HTTP address of /healthz, /readyz and /metrics.
    #[arg(long, env = "STACKHOOK_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,
    /// Serving certificate chain (PEM), e.g. cert-manager's tls.crt. Re-read on change.
    #[arg(long, env = "STACKHOOK_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of the serving certificate, e.g. cert-manager's tls.key.
    #[arg(long, env = "STACKHOOK_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// How often the certificate files are checked for changes.
    #[arg(long, default_value_t = 2)]
    pub tls_reload_interval_seconds: u64,
    /// Without a certificate, a self-signed CA and certificate are generated and the CA
    /// bundle is written to <dir>/ca.crt.
    #[arg(long, env = "STACKHOOK_SELF_SIGNED_DIR")]
    pub self_signed_dir: Option<PathBuf>,
    /// Extra DNS names or IPs for the self-signed certificate (repeatable).
    #[arg(long = "tls-san")]
    pub tls_sans: Vec<String>,
    /// Require client certificates signed by this CA bundle (CAPI ≥ 1.11 can present one).
    #[arg(long, env = "STACKHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Pins the CAPI minor served (Discovery lists only the hooks it knows). Unset, it
    /// is read from the management cluster's Cluster CRD and followed across CAPI
    /// upgrades; without Kubernetes access it is the newest supported.
    #[arg(long, env = "STACKHOOK_CAPI_VERSION", default_value = "auto")]
    pub capi_version: CapiPin,
    /// YAML file with per-handler `timeoutSeconds` and `failurePolicy`.
    #[arg(long, env = "STACKHOOK_HANDLER_CONFIG")]
    pub handler_config: Option<PathBuf>,
    /// Seconds CAPI waits before asking again while a cluster is held.
    #[arg(long, default_value_t = 30)]
    pub hold_retry_after_seconds: u32,
    /// Kubernetes versions known to GenerateUpgradePlan (comma-separated vX.Y.Z).
    #[arg(long, value_delimiter = ',')]
    pub kubernetes_versions: Vec<String>,
    /// Advertise the in-place update hooks (CAPI ≥ 1.12). Only one extension may.
    #[arg(long)]
    pub enable_in_place_hooks: bool,
    /// Largest accepted request body. CAPI's requests for a large cluster (a few dozen
    /// MachineDeployments) stay well under 1 MiB.
    #[arg(long, env = "STACKHOOK_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Time allowed for in-flight requests after SIGTERM, once the grace period is over.
    #[arg(long, default_value_t = 20)]
    pub shutdown_timeout_seconds: u64,
    /// After SIGTERM the server reports not ready and keeps accepting for this long, so
    /// Endpoints drop the pod before its listener closes.
    #[arg(long, env = "STACKHOOK_SHUTDOWN_GRACE_SECONDS", default_value_t = 5)]
    pub shutdown_grace_seconds: u64,
    /// A request body must arrive whole within this many seconds of its header.
    #[arg(
        long,
        env = "STACKHOOK_BODY_READ_TIMEOUT_SECONDS",
        default_value_t = 10
    )]
    pub body_read_timeout_seconds: u64,
    /// A connection with no request in flight for this long is closed (HTTP/2
    /// keep-alive pings do not count as use).
    #[arg(long, env = "STACKHOOK_IDLE_TIMEOUT_SECONDS", default_value_t = 90)]
    pub idle_timeout_seconds: u64,
    /// Open client connections; further ones are closed as soon as they are accepted.
    #[arg(long, env = "STACKHOOK_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Request-body bytes held by all requests in flight together; a request that would
    /// go over is answered with a Failure at once.
    #[arg(long, env = "STACKHOOK_MAX_IN_FLIGHT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_in_flight_bytes: usize,
    /// An HTTP/1.1 client must send a request's whole header within this many seconds
    /// (a client trickling bytes would otherwise hold its connection forever).
    #[arg(
        long,
        env = "STACKHOOK_HEADER_READ_TIMEOUT_SECONDS",
        default_value_t = 10
    )]
    pub header_read_timeout_seconds: u64,
    /// Streams one HTTP/2 connection may have open at once. CAPI's runtime client sends
    /// up to its topology concurrency (10 by default) per connection.
    #[arg(
        long,
        env = "STACKHOOK_HTTP2_MAX_CONCURRENT_STREAMS",
        default_value_t = 100
    )]
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 keep-alive ping interval; a connection whose peer does not answer a ping
    /// within the same time is closed. 0 turns pings off.
    #[arg(long, env = "STACKHOOK_HTTP2_KEEP_ALIVE_SECONDS", default_value_t = 30)]
    pub http2_keep_alive_seconds: u64,
    /// Directory of extension packs to serve instead of the embedded ones.
    #[arg(long, env = "STACKHOOK_EXTENSIONS")]
    pub extensions: Option<PathBuf>,
    /// GeneratePatches answers kept for requests that differ only in item UIDs (CAPI
    /// resends the same request on every reconcile); 0 turns the cache off.
    #[arg(long, env = "STACKHOOK_PATCH_CACHE_ENTRIES", default_value_t = 1024)]
    pub patch_cache_entries: usize,
    /// Bytes the GeneratePatches answer cache may hold in all; the least useful
    /// answers leave first.
    #[arg(long, env = "STACKHOOK_PATCH_CACHE_BYTES", default_value_t = crate::engine::cache::DEFAULT_BYTES)]
    pub patch_cache_bytes: u64,
    /// An answer larger than this is never stored.
    #[arg(long, env = "STACKHOOK_PATCH_CACHE_MAX_ANSWER_BYTES", default_value_t = 1024 * 1024)]
    pub patch_cache_max_answer_bytes: u64,
    /// Log line format.
    #[arg(long, value_enum, env = "STACKHOOK_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Run the OpenStack infrastructure controllers in this process. They stay
    /// off (hooks are still served) when no Kubernetes config is found.
    #[arg(long, env = "STACKHOOK_CONTROLLERS")]
    pub controllers: bool,
    /// Kubeconfig for the controllers; else $KUBECONFIG, ~/.kube/config or the
    /// in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "STACKHOOK_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Reconcile only objects whose `cluster.x-k8s.io/watch-filter` label has this
    /// value (CAPI's and CAPO's `--watch-filter`), to split clusters between managers.
    /// Each value elects its own leader: the Lease is `<leader-election-id>-<value>`.
    #[arg(long, env = "STACKHOOK_WATCH_FILTER", value_parser = parse_watch_filter)]
    pub watch_filter: Option<String>,
    /// Run the controllers only on the replica that holds a Lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_election: bool,
    /// Namespace of the Lease (default: the pod's own namespace).
    #[arg(long, env = "STACKHOOK_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "stackhook-controllers")]
    pub leader_election_id: String,
    /// How long a Lease holds without renewal before another replica may take it.
    #[arg(long, default_value_t = 15)]
    pub leader_election_lease_duration_seconds: u64,
    /// The holder steps down when it could not renew for this long.
    #[arg(long, default_value_t = 10)]
    pub leader_election_renew_deadline_seconds: u64,
    /// Time between acquire or renew attempts.
    #[arg(long, default_value_t = 2)]
    pub leader_election_retry_period_seconds: u64,
    /// OpenStackClusters reconciled at once.
    #[arg(long, default_value_t = 10)]
    pub controller_concurrency: u16,
    /// Objects per list request while the watches fill their caches: each watch holds
    /// at most one page of whole objects at a time.
    #[arg(long, env = "STACKHOOK_WATCH_PAGE_SIZE", default_value_t = crate::kubernetes::watch::PAGE_SIZE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub watch_page_size: u32,
    /// `User-Agent` of every OpenStack request, so the cloud's API logs tell this
    /// management cluster's calls from others' (default `stackhook/<version>`).
    #[arg(long, env = "STACKHOOK_OPENSTACK_USER_AGENT")]
    pub openstack_user_agent: Option<String>,
    /// How long one OpenStack request waits for its answer; a cloud's clouds.yaml
    /// `api_timeout` wins. A request that times out is not sent again.
    #[arg(long, env = "STACKHOOK_OPENSTACK_REQUEST_TIMEOUT_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub openstack_request_timeout_seconds: u64,
    /// NTP server published to the bootstrap in status.extensions.platform.ntp.
    #[arg(long, env = "STACKHOOK_NTP_SERVER")]
    pub ntp_server: Option<String>,
    /// Management VIP published in status.extensions.platform.management.
    #[arg(long, env = "STACKHOOK_MANAGEMENT_VIP")]
    pub management_vip: Option<String>,
    /// Glance image property holding an image's Kubernetes version: an upgrade
    /// waits until an active image has the target version in it.
    #[arg(
        long,
        env = "STACKHOOK_UPGRADE_IMAGE_PROPERTY",
        default_value = "kube_version"
    )]
    pub upgrade_image_property: String,
    /// Regular expression an image's name may match instead, with `{version}`
    /// standing for the target version, e.g. `^ubuntu-2404-kube-{version}$`.
    #[arg(long, env = "STACKHOOK_UPGRADE_IMAGE_NAME_PATTERN")]
    pub upgrade_image_name_pattern: Option<String>,
    /// Seconds CAPI is asked to wait while an OpenStack check or cleanup runs.
    #[arg(long, default_value_t = 5)]
    pub cloud_check_retry_after_seconds: u32,
    /// How long a hook call waits for the check it started before it answers
    /// "still running"; keep it well under the handler's timeoutSeconds.
    #[arg(long, default_value_t = 2000)]
    pub cloud_check_wait_milliseconds: u64,
    /// How long a finished check answers repeated calls before it runs again.
    #[arg(long, default_value_t = 10)]
    pub cloud_check_ttl_seconds: u64,
    /// ValidateTopology looks up the OpenStack resources a Cluster's variables name
    /// (flavors, images, networks...) in its cloud: `enforce` refuses a topology that
    /// names a missing one, `warn` only logs it, `off` does not look. Needs Kubernetes
    /// access (`--controllers`) to read the identity Secret.
    #[arg(
        long,
        value_enum,
        env = "STACKHOOK_VALIDATE_CLOUD",
        default_value = "enforce"
    )]
    pub validate_cloud: crate::hooks::openstack::topology::Mode,
    /// How long a lookup's answer is reused, per cloud project and resource.
    #[arg(long, default_value_t = 60)]
    pub validate_cloud_ttl_seconds: u64,
    /// How long a ValidateTopology call waits for its lookups before letting the
    /// topology through unchecked; keep it under the handler's timeoutSeconds.
    #[arg(long, default_value_t = 5000)]
    pub validate_cloud_wait_milliseconds: u64,
}

/// One handler's Discovery settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HandlerSettings {
    #[serde(default = "default_timeout")]
    pub timeout_seconds: i32,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
}

fn default_timeout() -> i32 {
    10
}

impl Default for HandlerSettings {
    fn default() -> Self {
        HandlerSettings {
            timeout_seconds: default_timeout(),
            failure_policy: FailurePolicy::Fail,
        }
    }
}

/// The handler settings file:
/// ```yaml
/// defaults: {timeoutSeconds: 10, failurePolicy: Fail}
/// handlers:
///   before-cluster-delete: {timeoutSeconds: 5, failurePolicy: Ignore}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    #[serde(default)]
    pub defaults: HandlerSettings,
    #[serde(default)]
    pub handlers: BTreeMap<String, HandlerSettings>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        /// Boxed: the parser's error carries a source snippet and is large.
        source: Box<serde_saphyr::DeserializeError>,
    },
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
    #[error("--upgrade-image-name-pattern: {0}")]
    ImageNamePattern(String),
}

impl HandlerConfig {
    pub fn load(path: &Path) -> Result<HandlerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let cfg: HandlerConfig =
            serde_saphyr::from_str(&text).map_err(|source| ConfigError::Parse {
                path: path.to_path_buf(),
                source: Box::new(source),
            })?;
        let check = |where_: &str, s: &HandlerSettings| {
            if !(0..=30).contains(&s.timeout_seconds) {
                return Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    problem: format!(
                        "{where_}.timeoutSeconds is {}; CAPI accepts 0 to 30",
                        s.timeout_seconds
                    ),
                });
            }
            Ok(())
        };
        check("defaults", &cfg.defaults)?;
        for (name, s) in &cfg.handlers {
            check(&format!("handlers.{name}"), s)?;
        }
        Ok(cfg)
    }

    pub fn settings_for(&self, handler: &str) -> HandlerSettings {
        self.handlers.get(handler).copied().unwrap_or(self.defaults)
    }
}

/// A watch-filter is a label value: at most 63 characters of `[A-Za-z0-9._-]`,
/// starting and ending with a letter or digit (empty means no filter).
fn parse_watch_filter(value: &str) -> Result<String, String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends_ok = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if value.len() > 63
        || !value.chars().all(ok_char)
        || !ends_ok(value.chars().next())
        || !ends_ok(value.chars().last())
    {
        return Err(format!(
            "{value:?} is not a label value (at most 63 of A-Z a-z 0-9 . _ -, \
             beginning and ending with a letter or digit)"
        ));
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capi_pin_is_a_minor_or_auto() {
        let pin = |s: &str| s.parse::<CapiPin>().map(|p| p.0.map(|v| v.minor));
        assert_eq!(pin("auto"), Ok(None));
        assert_eq!(pin(""), Ok(None));
        assert_eq!(pin("1.12"), Ok(Some(12)));
        assert_eq!(pin("v1.13.4"), Ok(Some(13)));
        assert!(pin("1.9").is_err());
        assert!(pin("latest").is_err());
    }
}

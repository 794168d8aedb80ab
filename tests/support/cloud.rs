//! Finds (or starts) the loopback OpenStack of `tests/cloud/` for integration tests.
//!
//! Include with `#[path = "support/cloud.rs"] mod cloud;` and start each test with
//! `let Some(clouds) = cloud::clouds_yaml() else { return };` so that a plain
//! `cargo test` skips it. Uses std, serde-saphyr and serde_json only.
//!
//! - `STACKHOOK_TEST_CLOUD=/path/to/clouds.yaml`: use that running cloud.
//! - `STACKHOOK_CLOUD_TESTS=1`: run `tests/cloud/up` once per test process (a no-op
//!   when the cloud is already up) and use its `clouds.yaml` in the state dir
//!   (`STACKHOOK_CLOUD_DIR`, default `/var/tmp/stackhook-cloud`).
//! - neither: `clouds_yaml()` returns `None` and says how to run the cloud tests.

#![allow(dead_code)]

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Env var naming the clouds.yaml of an already running cloud.
pub const ENV_CLOUDS: &str = "STACKHOOK_TEST_CLOUD";
/// Env var that lets the tests start the cloud themselves (`1`).
pub const ENV_START: &str = "STACKHOOK_CLOUD_TESTS";
/// Env var overriding the cloud's state dir.
pub const ENV_STATE_DIR: &str = "STACKHOOK_CLOUD_DIR";
pub const DEFAULT_STATE_DIR: &str = "/var/tmp/stackhook-cloud";

/// Names of the entries `tests/cloud/up` writes into clouds.yaml.
pub const ADMIN: &str = "admin";
pub const MEMBER: &str = "member";
pub const MEMBER_APPCRED: &str = "member-appcred";

static STARTED: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The cloud's state dir (where `up` writes clouds.yaml, logs and pidfiles).
pub fn state_dir() -> PathBuf {
    match std::env::var_os(ENV_STATE_DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_STATE_DIR),
    }
}

/// The `tests/cloud` directory of this checkout.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("cloud")
}

/// Path of a running test cloud's clouds.yaml, or `None` (with a one-line hint on
/// stderr) when cloud tests are not enabled. Panics if they are enabled but the
/// cloud cannot be found or started.
pub fn clouds_yaml() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_CLOUDS).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{ENV_CLOUDS}={} is not a file", p.display());
        return Some(p);
    }
    if std::env::var(ENV_START).as_deref() != Ok("1") {
        eprintln!(
            "skipping: no test cloud; run `STACKHOOK_CLOUD_TESTS=1 cargo test --test with_cloud` \
             (starts tests/cloud/up, needs root) or set {ENV_CLOUDS}=path/to/clouds.yaml"
        );
        return None;
    }
    match STARTED.get_or_init(start_cloud) {
        Ok(p) => Some(p.clone()),
        Err(e) => panic!("{e}"),
    }
}

fn start_cloud() -> Result<PathBuf, String> {
    let up = scripts_dir().join("up");
    // up's own output goes to stderr so that it never mixes with test results.
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let status = Command::new("bash")
        .arg(&up)
        .stdin(Stdio::null())
        .stdout(stdout)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", up.display()))?;
    if !status.success() {
        return Err(format!(
            "{} failed ({status}); logs in {}/logs",
            up.display(),
            state_dir().display()
        ));
    }
    let p = state_dir().join("clouds.yaml");
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} succeeded but {} is missing",
            up.display(),
            p.display()
        ))
    }
}

/// One entry of clouds.yaml. Fields absent from the entry are empty strings
/// (the application-credential entry has no username/password/project).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudEntry {
    pub auth_url: String,
    pub username: String,
    pub password: String,
    pub project_name: String,
    pub user_domain_name: String,
    pub project_domain_name: String,
    pub region_name: String,
    /// `password` or `v3applicationcredential`.
    pub auth_type: String,
    pub application_credential_id: String,
    pub application_credential_secret: String,
}

/// The entry `name` (see [`ADMIN`], [`MEMBER`], [`MEMBER_APPCRED`]) of the running
/// cloud's clouds.yaml; `None` when cloud tests are not enabled or the entry is absent.
pub fn entry(name: &str) -> Option<CloudEntry> {
    let path = clouds_yaml()?;
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_entry(&text, name)
}

/// Parses entry `name` out of clouds.yaml text.
pub fn parse_entry(clouds_yaml: &str, name: &str) -> Option<CloudEntry> {
    let doc: serde_json::Value = serde_saphyr::from_str(clouds_yaml).ok()?;
    let e = doc.get("clouds")?.get(name)?;
    let auth = e.get("auth");
    let s = |v: Option<&serde_json::Value>, k: &str| -> String {
        v.and_then(|v| v.get(k))
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    Some(CloudEntry {
        auth_url: s(auth, "auth_url"),
        username: s(auth, "username"),
        password: s(auth, "password"),
        project_name: s(auth, "project_name"),
        user_domain_name: s(auth, "user_domain_name"),
        project_domain_name: s(auth, "project_domain_name"),
        region_name: s(Some(e), "region_name"),
        auth_type: match s(Some(e), "auth_type") {
            t if t.is_empty() => "password".to_string(),
            t => t,
        },
        application_credential_id: s(auth, "application_credential_id"),
        application_credential_secret: s(auth, "application_credential_secret"),
    })
}

/// Where each API's access log ends now: [`requests_since`] counts what comes after.
#[derive(Debug, Clone, Default)]
pub struct AccessMark(std::collections::BTreeMap<PathBuf, u64>);

fn access_logs() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(state_dir().join("logs")) else {
        return Vec::new();
    };
    let mut logs: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-access.log"))
        .collect();
    logs.sort();
    logs
}

pub fn access_mark() -> AccessMark {
    AccessMark(
        access_logs()
            .into_iter()
            .map(|p| {
                let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                (p, len)
            })
            .collect(),
    )
}

/// Requests the cloud's APIs logged after `mark`, by `service method` (e.g.
/// `neutron POST`), read from the access logs `tests/cloud/up` writes. Placement is
/// left out: only Nova's own services call it.
/// With `agent`, only the requests whose `User-Agent` is exactly that.
pub fn requests_since(
    mark: &AccessMark,
    agent: Option<&str>,
) -> std::collections::BTreeMap<String, u64> {
    requests_since_by(mark, &|ua: &str| agent.is_none_or(|a| ua == a))
}

/// Like [`requests_since`], for the requests whose `User-Agent` passes `agent`.
pub fn requests_since_by(
    mark: &AccessMark,
    agent: &dyn Fn(&str) -> bool,
) -> std::collections::BTreeMap<String, u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut out = std::collections::BTreeMap::new();
    for path in access_logs() {
        let service = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("-access.log"))
            .unwrap_or_default()
            .to_string();
        if service.starts_with("placement") {
            continue;
        }
        let Ok(mut f) = std::fs::File::open(&path) else {
            continue;
        };
        let from = mark.0.get(&path).copied().unwrap_or(0);
        if f.seek(SeekFrom::Start(from)).is_err() {
            continue;
        }
        let mut text = String::new();
        let _ = f.read_to_string(&mut text);
        for line in text.lines() {
            // `[27/Nov/2026:09:44:45 +0000] "GET /v2.0/ports?… HTTP/1.1" 200 "ua"`
            let Some(method) = line.split('"').nth(1).and_then(|r| r.split(' ').next()) else {
                continue;
            };
            if !agent(line.split('"').nth(3).unwrap_or_default()) {
                continue;
            }
            *out.entry(format!("{service} {method}")).or_insert(0) += 1;
        }
    }
    out
}

/// The writes logged after `mark` by `agent`, in order, each as `service METHOD path`
/// with the path's IDs as `{id}` and tags as `{tag}`
/// (`neutron PUT /v2.0/routers/{id}/add_router_interface`),
/// and the mark after the last whole line read.
pub fn write_points_since(mark: &AccessMark, agent: &str) -> (Vec<String>, AccessMark) {
    use std::io::{Read, Seek, SeekFrom};
    let id_like = |seg: &str| {
        (seg.len() == 36 && seg.matches('-').count() == 4)
            || (seg.len() == 32 && seg.chars().all(|c| c.is_ascii_hexdigit()))
    };
    let mut out = Vec::new();
    let mut next = mark.0.clone();
    for path in access_logs() {
        let service = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("-access.log"))
            .unwrap_or_default()
            .to_string();
        let Ok(mut f) = std::fs::File::open(&path) else {
            continue;
        };
        let from = mark.0.get(&path).copied().unwrap_or(0);
        if f.seek(SeekFrom::Start(from)).is_err() {
            continue;
        }
        let mut text = String::new();
        let _ = f.read_to_string(&mut text);
        // Whole lines only: one being written is read on the next call.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        next.insert(path.clone(), from + whole as u64);
        if service.starts_with("placement") || service.starts_with("keystone") {
            continue;
        }
        for line in text[..whole].lines() {
            let mut parts = line.split('"');
            let request = parts.nth(1).unwrap_or_default();
            if parts.nth(1).unwrap_or_default() != agent {
                continue;
            }
            let mut words = request.split(' ');
            let (Some(method), Some(target)) = (words.next(), words.next()) else {
                continue;
            };
            if !matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") {
                continue;
            }
            let mut path: Vec<&str> = Vec::new();
            for seg in target.split('?').next().unwrap_or_default().split('/') {
                path.push(match path.last() {
                    Some(&"tags") => "{tag}",
                    _ if id_like(seg) => "{id}",
                    _ => seg,
                });
            }
            out.push(format!("{service} {method} {}", path.join("/")));
        }
    }
    (out, AccessMark(next))
}

/// The writes among `requests` (POST, PUT, PATCH, DELETE), Keystone's token
/// requests not counted.
pub fn writes(requests: &std::collections::BTreeMap<String, u64>) -> u64 {
    requests
        .iter()
        .filter(|(k, _)| !k.starts_with("keystone"))
        .filter(|(k, _)| {
            let m = k.rsplit(' ').next().unwrap_or_default();
            matches!(m, "POST" | "PUT" | "PATCH" | "DELETE")
        })
        .map(|(_, n)| n)
        .sum()
}

//! A real Kubernetes API server for the end-to-end tests, and Cluster API's CRDs.
//!
//! Both come from the project's `shared/kube` folder beside the repository
//! (`STACKHOOK_KUBE_DIR`, default `<repo>/../shared/kube`): its `up DIR` starts
//! kube-apiserver with etcd on loopback and prints a kubeconfig path, `down DIR` stops
//! them, and `crds/cluster-api-<version>/` holds CAPI's own CRDs of that release.
//!
//! - `STACKHOOK_E2E_KUBECONFIG=path`: use that cluster (kind, k3d, or an API server
//!   `.ci/run` started); CAPI's CRDs still come from the folder.
//! - unset: start an API server of our own in a temporary state dir, stopped on drop.
//! - no folder: [`api_server`] says why the tests cannot run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use serde_json::{json, Value};

/// Env var naming the kubeconfig of the cluster to test against.
pub const ENV_KUBECONFIG: &str = "STACKHOOK_E2E_KUBECONFIG";
/// Env var naming the folder with `up`, `down` and `crds/`.
pub const ENV_KUBE_DIR: &str = "STACKHOOK_KUBE_DIR";
/// Field manager of everything the tests apply.
pub const MANAGER: &str = "stackhook-e2e";

/// `STACKHOOK_KUBE_DIR`, else `<repo>/../shared/kube`.
pub fn kube_dir() -> PathBuf {
    match std::env::var_os(ENV_KUBE_DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/kube"),
    }
}

/// The API server the tests use; an own one is stopped when this is dropped.
pub struct ApiServer {
    pub kubeconfig: PathBuf,
    /// Where CAPI's CRDs are.
    pub kube_dir: PathBuf,
    /// The state dir of an API server started here.
    own: Option<tempfile::TempDir>,
}

impl ApiServer {
    pub fn started_here(&self) -> bool {
        self.own.is_some()
    }

    /// CAPI's CRDs of one release, e.g. `cluster-api-v1.10.10`.
    pub fn capi_crds(&self, release: &str) -> Vec<Value> {
        let dir = self.kube_dir.join("crds").join(release);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no CRDs in {}", dir.display());
        files
            .iter()
            .flat_map(|p| {
                let text = std::fs::read_to_string(p).expect("CRD file");
                yaml_documents(&text)
            })
            .collect()
    }

    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
        Client::try_from(config).expect("client")
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(state) = &self.own {
            let _ = Command::new("bash")
                .arg(self.kube_dir.join("down"))
                .arg(state.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status();
        }
    }
}

/// The API server to test against, or why there is none (for a one-line skip).
/// Panics when `STACKHOOK_E2E_KUBECONFIG` is set but CAPI's CRDs are missing, or
/// when starting an API server fails.
pub fn api_server() -> Result<ApiServer, String> {
    let kube_dir = kube_dir();
    let given = std::env::var_os(ENV_KUBECONFIG)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    if !kube_dir.join("crds").is_dir() {
        let why = format!(
            "{} does not exist (set {ENV_KUBE_DIR} to the folder with `up` and Cluster API's CRDs)",
            kube_dir.display()
        );
        if given.is_some() {
            panic!("{ENV_KUBECONFIG} is set, but {why}");
        }
        return Err(why);
    }
    let kube_dir = kube_dir.canonicalize().expect("kube dir");
    if let Some(kubeconfig) = given {
        assert!(
            kubeconfig.is_file(),
            "{ENV_KUBECONFIG}={} is not a file",
            kubeconfig.display()
        );
        return Ok(ApiServer {
            kubeconfig,
            kube_dir,
            own: None,
        });
    }
    Ok(start_own(kube_dir, "stackhook-e2e-kube-"))
}

/// What `up` makes the same way for every state dir: the unpacked binaries (about 4 s
/// of a core to unpack kube-apiserver; etcd fetched from Debian when not installed)
/// and the test PKI (four RSA keys). The suite starts a few dozen API servers, side by
/// side on two cores: each new state dir gets these linked from the first one's.
const CACHED: &[&str] = &[
    "bin/kube-apiserver",
    "bin/etcd",
    "pki/ca.key",
    "pki/ca.crt",
    "pki/server.key",
    "pki/server.crt",
    "pki/admin.key",
    "pki/admin.crt",
    "pki/sa.key",
    "pki/sa.pub",
];

fn cache_dir() -> PathBuf {
    std::env::temp_dir().join("stackhook-kube-cache")
}

/// Links the cached files into `state` (`up` checks kube-apiserver's checksum, so a
/// stale cache only costs the unpack). All or nothing: `up` makes the PKI anew when
/// `pki/admin.crt` is missing.
fn seed_from_cache(state: &Path) {
    let cache = cache_dir();
    if !CACHED.iter().all(|f| cache.join(f).is_file()) {
        return;
    }
    for f in CACHED {
        let to = state.join(f);
        let _ = std::fs::create_dir_all(to.parent().expect("parent"));
        let _ = std::fs::hard_link(cache.join(f), &to)
            .or_else(|_| std::fs::copy(cache.join(f), &to).map(|_| ()));
    }
}

/// Keeps what a successful `up` made in `state` for the next state dirs.
fn fill_cache(state: &Path) {
    let cache = cache_dir();
    if CACHED.iter().all(|f| cache.join(f).is_file()) {
        return;
    }
    // A dir of its own first, renamed into place: a concurrent test sees all or none.
    let Ok(tmp) = tempfile::Builder::new()
        .prefix("stackhook-kube-cache-")
        .tempdir_in(std::env::temp_dir())
    else {
        return;
    };
    for f in CACHED {
        let to = tmp.path().join(f);
        let _ = std::fs::create_dir_all(to.parent().expect("parent"));
        if std::fs::copy(state.join(f), &to).is_err() {
            return;
        }
    }
    let tmp = tmp.keep();
    if std::fs::rename(&tmp, &cache).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

/// Set (to `1`) beside `STACKHOOK_E2E_KUBECONFIG` when that API server is shared by
/// tests running side by side, as `.ci/run` does.
pub const ENV_SHARED: &str = "STACKHOOK_E2E_KUBECONFIG_SHARED";

/// Like [`api_server`], for a test that changes what other tests read there (CAPI's
/// CRDs of another release, CRDs deleted with their objects): an API server of its
/// own when the given one is shared.
pub fn api_server_alone() -> Result<ApiServer, String> {
    let dir = kube_dir();
    if std::env::var(ENV_SHARED).as_deref() == Ok("1") && dir.join("up").is_file() {
        let dir = dir.canonicalize().expect("kube dir");
        return Ok(start_own(dir, "stackhook-e2e-alone-"));
    }
    api_server()
}

/// Starts an API server of our own (stopped on drop), whatever
/// `STACKHOOK_E2E_KUBECONFIG` says: for tests that install webhooks or CRDs other
/// tests must not see.
pub fn start_own(kube_dir: PathBuf, prefix: &str) -> ApiServer {
    start_own_with(kube_dir, prefix, false)
}

/// [`start_own`] for a stand-in workload API server: started as kubeadm starts a
/// cluster's, with `--allow-privileged=true`, without which the API server refuses
/// every privileged container (a CNI agent, a CSI node plugin).
pub fn start_own_workload(kube_dir: PathBuf, prefix: &str) -> ApiServer {
    start_own_with(kube_dir, prefix, true)
}

fn start_own_with(kube_dir: PathBuf, prefix: &str, privileged: bool) -> ApiServer {
    let state = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("state dir");
    seed_from_cache(state.path());
    let script = if privileged {
        let text = std::fs::read_to_string(kube_dir.join("up")).expect("reading up");
        let here = format!("HERE={}", kube_dir.display());
        let edited = text
            .replacen("HERE=$(cd \"$(dirname \"$0\")\" && pwd)", &here, 1)
            .replacen(
                "--authorization-mode RBAC",
                "--authorization-mode RBAC --allow-privileged=true",
                1,
            );
        assert!(
            edited.contains(&here) && edited.contains("--allow-privileged=true"),
            "{}/up no longer reads as expected: the stand-in cannot allow privileged pods",
            kube_dir.display()
        );
        let path = state.path().join("up-workload");
        std::fs::write(&path, edited).expect("writing up-workload");
        path
    } else {
        kube_dir.join("up")
    };
    let out = Command::new("bash")
        .arg(script)
        .arg(state.path())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("running up");
    // Stops what `up` started even when it failed half-way.
    let mut server = ApiServer {
        kubeconfig: PathBuf::new(),
        kube_dir,
        own: Some(state),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "up failed ({}): {stdout}", out.status);
    fill_cache(server.own.as_ref().expect("own state").path());
    server.kubeconfig = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        server.kubeconfig.is_file(),
        "up printed no kubeconfig: {stdout}"
    );
    server
}

/// The non-empty documents of a multi-document YAML text, as JSON.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(text).expect("YAML documents");
    docs.into_iter().filter(|v| !v.is_null()).collect()
}

/// Server-side applies CRDs (taking over fields other managers own) and waits
/// until each is Established.
pub async fn apply_crds(client: &Client, crds: &[Value]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("CRD name");
        // A later CAPI's CRD left by an earlier run stores a version the older one
        // lacks, which the server refuses to drop: start that CRD afresh.
        let versions: Vec<&str> = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str())
            .collect();
        let stored = api
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading CRD {name}: {e}"))
            .and_then(|c| c.status)
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        if stored.iter().any(|v| !versions.contains(&v.as_str())) {
            eprintln!(
                "deleting CRD {name}: it stores {stored:?}, the one to apply has {versions:?}"
            );
            api.delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting CRD {name}: {e}"));
            wait_for(&format!("CRD {name} to go"), async || {
                matches!(api.get_opt(name).await, Ok(None))
            })
            .await;
        }
        api.patch(name, &params, &Patch::Apply(crd))
            .await
            .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
    }
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("CRD name");
        wait_for(&format!("CRD {name} to be established"), async || {
            api.get(name).await.ok().is_some_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
        })
        .await;
    }
}

/// Waits (up to 60 s) until the API server prefers `version` of `group`.
pub async fn wait_for_preferred_version(client: &Client, group: &str, version: &str) {
    wait_for(&format!("{group} to prefer {version}"), async || {
        client.list_api_groups().await.ok().is_some_and(|groups| {
            groups.groups.iter().any(|g| {
                g.name == group
                    && g.preferred_version
                        .as_ref()
                        .is_some_and(|v| v.version == version)
            })
        })
    })
    .await;
}

/// A new namespace `<prefix>-<pid>-<n>`; each test works in its own, since
/// without a controller-manager a deleted namespace is never emptied.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    let name = format!(
        "{prefix}-{}-{:x}{}",
        std::process::id(),
        nanos & 0xfff,
        N.fetch_add(1, Ordering::SeqCst)
    );
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"stackhook-e2e": "true"}}}),
        )
        .expect("namespace"),
    )
    .await
    .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    name
}

/// Deletes a namespace (it may stay Terminating where no controller-manager runs).
pub async fn delete_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = api.delete(name, &DeleteParams::default()).await {
        eprintln!("deleting namespace {name}: {e}");
    }
}

/// Polls `check` for up to 60 s (see [`poll`]).
pub async fn wait_for<F>(what: &str, check: F)
where
    F: AsyncFnMut() -> bool,
{
    wait_up_to(Duration::from_secs(60), what, check).await;
}

/// Polls `check` for up to `limit` (see [`poll`]); panics after that.
pub async fn wait_up_to<F>(limit: Duration, what: &str, check: F)
where
    F: AsyncFnMut() -> bool,
{
    assert!(
        poll(limit, check).await,
        "timed out after {limit:?} waiting for {what}"
    );
}

/// Waits until `count` has stood still for `window` (what it counts has settled,
/// e.g. a controller's requests after a takeover), up to `limit`; whether it did.
pub async fn settle<F: FnMut() -> u64>(limit: Duration, window: Duration, mut count: F) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut last = count();
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = count();
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        } else if since.elapsed() >= window {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}

/// Polls `check` until it holds or `limit` passes; whether it held. The pause
/// grows from 100 ms to 500 ms: a quick condition is seen at once, and a long wait
/// asks the API server or the cloud twice a second (a step of a test that waits
/// longer between looks pays that latency at every step).
pub async fn poll<F: AsyncFnMut() -> bool>(limit: Duration, mut check: F) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = Duration::from_millis(100);
    loop {
        if check().await {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 3 / 2).min(Duration::from_millis(500));
    }
}

/// An identity Secret as CAPO reads it: `clouds.yaml` under that key.
pub async fn identity_secret(client: &kube::Client, ns: &str, name: &str, clouds_yaml: &str) {
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), ns);
    api.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "stringData": {"clouds.yaml": clouds_yaml}
        }))
        .unwrap(),
    )
    .await
    .expect("identity Secret");
}

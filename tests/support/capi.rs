//! The real Cluster API managers for tests, from the project's `shared/capi` folder
//! beside the repository (`STACKHOOK_CAPI_DIR`, default `<repo>/../shared/capi`):
//! core (topology controller, Runtime SDK registry), the kubeadm bootstrap and
//! control-plane managers and their webhooks, per CAPI generation.
//!
//! A [`Bed`] is one management cluster: an API server of its own (CAPI's webhooks
//! are registered with `failurePolicy: Fail`, so no other test may share it),
//! stackhook's CRDs, the managers of one CAPI release, and a second API server, the
//! **stand-in workload cluster**. CAPI connects to every cluster's control-plane
//! endpoint through `<cluster>-kubeconfig`; in the test cloud that endpoint is a
//! floating IP on `public` (203.0.113.0/24), which is not a loopback address. So
//! every cluster gets a `<cluster>-kubeconfig` Secret that points at the stand-in
//! before it has an endpoint (KCP keeps a kubeconfig Secret it does not own), and
//! [`Bed::assert_loopback_only`] checks every manager's log for a dial to anything
//! else.
//!
//! [`StandInKubelet`] plays the kubelets and kubeadm of the workload cluster: for
//! each Machine with a providerID, a Ready Node with that providerID; for
//! control-plane Machines also the static Pods KCP checks and the `kubeadm-config`
//! ConfigMap by which KCP calls a control plane initialized.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};

use super::kube_server::{self, ApiServer, MANAGER};

#[path = "capi_up.rs"]
mod up;
use up::{Manager, Up};

/// Env var naming the folder with `up`, `down` and the managers.
pub const ENV_CAPI_DIR: &str = "STACKHOOK_CAPI_DIR";

/// One CAPI generation the suite runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// `CAPI_VERSION` of `shared/capi/up`.
    pub capi: &'static str,
    /// The CAPI minor stackhook must find (`--capi-version` pins the same).
    pub flag: &'static str,
    /// The version CAPI's controllers write `cluster.x-k8s.io` objects in.
    pub cluster_api: &'static str,
    /// The ClusterClass overlay of `clusterclasses/openstack-kubeadm`.
    pub overlay: &'static str,
}

pub const V1_10: Release = Release {
    capi: "v1.10",
    flag: "1.10",
    cluster_api: "v1beta1",
    overlay: "capi-1.10",
};
pub const V1_11: Release = Release {
    capi: "v1.11",
    flag: "1.11",
    cluster_api: "v1beta2",
    overlay: "capi-1.11",
};
pub const V1_13: Release = Release {
    capi: "v1.13",
    flag: "1.13",
    cluster_api: "v1beta2",
    overlay: "capi-1.12",
};

impl Release {
    /// From v1.12 CAPI runs chained upgrades and asks for an upgrade plan.
    pub fn chained_upgrades(self) -> bool {
        !matches!(self.capi, "v1.10" | "v1.11")
    }

    /// v1.10 has no v1beta2 API at all.
    pub fn is_v1beta2(self) -> bool {
        self.cluster_api == "v1beta2"
    }

    /// The ExtensionConfig's API version in this release's preferred form.
    pub fn extension_config_api(self) -> &'static str {
        if self.is_v1beta2() {
            "runtime.cluster.x-k8s.io/v1beta2"
        } else {
            "runtime.cluster.x-k8s.io/v1alpha1"
        }
    }
}

/// `STACKHOOK_CAPI_DIR`, else `<repo>/../shared/capi`.
pub fn capi_dir() -> PathBuf {
    match std::env::var_os(ENV_CAPI_DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/capi"),
    }
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One bed at a time within a test process: `cargo test` runs a binary's tests as
/// threads, and each bed is two API servers and three or four managers on two cores
/// (the CAPO tests also tell CAPO's requests apart by user agent, not by test).
/// nextest (`.ci/run`) gives each test a process, two slots and the `capo` group.
pub static ONE_BED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A management cluster with the real CAPI managers and a stand-in workload cluster.
pub struct Bed {
    pub release: Release,
    pub capi_dir: PathBuf,
    state: tempfile::TempDir,
    /// `STATE_DIR/env` of `up`: ports, PID files and logs of each manager.
    pub env: BTreeMap<String, String>,
    up: std::sync::Mutex<Up>,
    pub mgmt: ApiServer,
    pub standin: ApiServer,
}

impl Bed {
    /// Starts everything, or says why it cannot run here (for a one-line skip).
    /// Panics when the folders exist but something fails to start.
    pub fn start(release: Release) -> Result<Bed, String> {
        Self::start_with(release, &install_stackhook_crds)
    }

    /// Like [`Bed::start`], with the providers installed by `install` (given the
    /// management cluster's kubeconfig) before the managers start, e.g. by
    /// `clusterctl init`.
    pub fn start_with(
        release: Release,
        install: &dyn Fn(&Path) -> Result<(), String>,
    ) -> Result<Bed, String> {
        Self::start_managers(release, install, &[])
    }

    /// Like [`Bed::start_with`], starting the managers `up` is given by name
    /// (`capi`, `bootstrap`, `controlplane`, `capo`; none: the first three).
    pub fn start_managers(
        release: Release,
        install: &dyn Fn(&Path) -> Result<(), String>,
        managers: &[&str],
    ) -> Result<Bed, String> {
        let capi_dir = capi_dir();
        if !capi_dir.join("up").is_file() {
            return Err(format!(
                "{} does not exist (set {ENV_CAPI_DIR} to the folder with the Cluster API managers)",
                capi_dir.display()
            ));
        }
        let kube_dir = kube_server::kube_dir();
        if !kube_dir.join("up").is_file() {
            return Err(format!("{} does not exist", kube_dir.display()));
        }
        let capi_dir = capi_dir.canonicalize().expect("capi dir");
        let kube_dir = kube_dir.canonicalize().expect("kube dir");
        // Both API servers come up side by side: each spends most of its seconds waiting.
        let (mgmt, standin) = std::thread::scope(|s| {
            let mgmt = s.spawn(|| kube_server::start_own(kube_dir.clone(), "stackhook-capi-mgmt-"));
            let standin = s.spawn(|| {
                kube_server::start_own_workload(kube_dir.clone(), "stackhook-capi-workload-")
            });
            (
                mgmt.join().expect("the management API server"),
                standin.join().expect("the stand-in API server"),
            )
        });
        if let Err(e) = install(&mgmt.kubeconfig) {
            panic!("installing the providers: {e}");
        }
        let state = tempfile::Builder::new()
            .prefix("stackhook-capi-")
            .tempdir()
            .expect("state dir");
        let managers: Vec<Manager> = managers.iter().map(|m| Manager::parse(m)).collect();
        let mut up = Up::new(&capi_dir, release, state.path());
        on_own_runtime(|| async {
            up.start(&mgmt.client().await, &mgmt.kubeconfig, &managers)
                .await
        });
        Ok(Bed {
            release,
            capi_dir,
            state,
            env: up.env.clone(),
            up: std::sync::Mutex::new(up),
            mgmt,
            standin,
        })
    }

    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// `clusterctl` as `up` unpacked it.
    pub fn clusterctl(&self) -> PathBuf {
        self.state.path().join("bin/clusterctl")
    }

    /// Each manager's log file and its text.
    pub fn manager_logs(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter(|(k, _)| k.ends_with("_LOG"))
            .map(|(k, path)| (k.clone(), std::fs::read_to_string(path).unwrap_or_default()))
            .collect()
    }

    /// No manager tried to reach an address outside 127.0.0.0/8 (a dial error or a
    /// request URL naming one).
    pub fn assert_loopback_only(&self) {
        let mut found = Vec::new();
        for (name, text) in self.manager_logs() {
            for line in text.lines() {
                for addr in dialed_addresses(line) {
                    if !addr.starts_with("127.") && addr != "localhost" {
                        found.push(format!("{name}: {addr}: {}", clip(line, 300)));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "a manager connected (or tried to) outside loopback:\n{}",
            found.join("\n")
        );
    }

    /// Log lines of a manager that contain `needle` (e.g. `CAPI_LOG`).
    pub fn log_lines(&self, manager: &str, needle: &str) -> Vec<String> {
        let path = self.env.get(manager).expect("manager log");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    pub async fn client(&self) -> Client {
        self.mgmt.client().await
    }

    pub async fn standin_client(&self) -> Client {
        self.standin.client().await
    }

    /// Applies YAML to the management cluster (server-side), every object moved into
    /// namespace `ns` (`default` for cluster-scoped ones is ignored by the server).
    pub fn apply(&self, ns: &str, yaml: &str) {
        self.try_apply(ns, yaml)
            .unwrap_or_else(|e| panic!("kubectl apply in {ns}: {e}"));
    }

    /// Like [`Bed::apply`], but returns the error output instead of panicking.
    pub fn try_apply(&self, ns: &str, yaml: &str) -> Result<String, String> {
        let items: Vec<Value> = kube_server::yaml_documents(yaml)
            .into_iter()
            .map(|mut d| {
                if d["kind"] != "ExtensionConfig" && d["kind"] != "Namespace" {
                    d["metadata"]["namespace"] = json!(ns);
                }
                d
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        try_kubectl(
            &self.mgmt.kubeconfig,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager",
                MANAGER,
                "-f",
                "-",
            ],
            Some(&list.to_string()),
        )
    }

    /// The `<cluster>-kubeconfig` Secret pointing at the stand-in, as CAPI reads it
    /// (the cluster-name label puts it in CAPI's Secret cache).
    pub async fn point_at_standin(&self, ns: &str, cluster: &str) {
        let kubeconfig = inline_kubeconfig(&self.standin.kubeconfig);
        self.cluster_secret(ns, cluster, "kubeconfig", json!({"value": kubeconfig}))
            .await;
    }

    /// The Secrets KCP reads for a control plane whose etcd it does not manage
    /// (`etcd.external`): the etcd CA's certificate alone (`<cluster>-etcd`; without
    /// its key KCP signs nothing with it) and the API server's etcd client pair
    /// (`<cluster>-apiserver-etcd-client`), which KCP loads as a key pair.
    pub async fn external_etcd_secrets(&self, ns: &str, cluster: &str) {
        let pki = stackhook::server::tls::self_signed(&[]).expect("test PKI");
        self.cluster_secret(ns, cluster, "etcd", json!({"tls.crt": pki.ca_pem}))
            .await;
        self.cluster_secret(
            ns,
            cluster,
            "apiserver-etcd-client",
            json!({"tls.crt": pki.cert_pem, "tls.key": pki.key_pem}),
        )
        .await;
    }

    /// `<cluster>-<suffix>` as CAPI writes its Secrets (the cluster-name label puts it
    /// in CAPI's Secret cache), applied with `string_data`.
    async fn cluster_secret(&self, ns: &str, cluster: &str, suffix: &str, string_data: Value) {
        let name = format!("{cluster}-{suffix}");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": string_data,
        }))
        .expect("secret");
        let secrets: Api<Secret> = Api::namespaced(self.client().await, ns);
        secrets
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap_or_else(|e| panic!("Secret {ns}/{name}: {e}"));
    }

    /// Stops one manager (`capo-manager`, …) and nothing else, then removes its
    /// admission webhooks (failurePolicy Fail: left behind, they block every write
    /// of its kinds).
    pub fn stop_manager(&self, binary: &str) {
        let stopped = self
            .up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop(binary);
        assert!(stopped, "{binary} is not running");
        kubectl(
            &self.mgmt.kubeconfig,
            &[
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                &format!("test-capi-{binary}-mutating"),
                &format!("test-capi-{binary}-validating"),
                "--ignore-not-found",
            ],
            None,
        );
    }

    /// Starts one more manager (`capi`, `bootstrap`, `controlplane`, `capo`) next
    /// to the running ones, with its CRDs applied over the installed ones and its
    /// webhooks registered, as installing that provider does.
    pub fn start_manager(&mut self, manager: &str) {
        let manager = Manager::parse(manager);
        let up = self.up.get_mut().unwrap_or_else(|e| e.into_inner());
        let mgmt = &self.mgmt;
        on_own_runtime(|| async {
            up.start(&mgmt.client().await, &mgmt.kubeconfig, &[manager])
                .await
        });
        self.env = up.env.clone();
    }

    /// Stops the managers (the API servers stop when dropped, webhooks and all).
    fn down(&self) {
        self.up.lock().unwrap_or_else(|e| e.into_inner()).stop_all();
    }

    /// Copies the managers' logs to `STACKHOOK_CAPI_LOGS/<prefix>-*` when set, for
    /// a failed CI run to show.
    pub fn keep_logs(&self, prefix: &str) {
        let Some(dir) = std::env::var_os("STACKHOOK_CAPI_LOGS") else {
            return;
        };
        let dir = PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        for (k, path) in self.env.iter().filter(|(k, _)| k.ends_with("_LOG")) {
            let _ = std::fs::copy(path, dir.join(format!("{prefix}-{k}.log")));
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        // Named by the test process too: beds of one release run side by side.
        self.keep_logs(&format!("{}-{}", self.release.capi, std::process::id()));
        self.down();
    }
}

/// Runs `fut` to its end on a runtime of its own, on a thread of its own: the
/// beds are started from synchronous code, inside and outside a test's runtime.
fn on_own_runtime<F: std::future::Future<Output = ()>>(make: impl FnOnce() -> F + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(make())
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Installs `stackhook crds` (server-side), for [`Bed::start_with`]: before the
/// managers start, since CAPI's look the contract label up at start.
pub fn install_stackhook_crds(kubeconfig: &Path) -> Result<(), String> {
    let text = stackhook_crds()?;
    try_kubectl(
        kubeconfig,
        &["apply", "--server-side", "-f", "-"],
        Some(&text),
    )
    .map(|_| ())
}

/// Replaces the installed CRDs of the same names (CAPO's) with `stackhook crds`, as
/// the takeover runbook does (`kubectl replace`, dropping CAPO's conversion webhook).
pub fn replace_with_stackhook_crds(kubeconfig: &Path) {
    let text = stackhook_crds().unwrap_or_else(|e| panic!("{e}"));
    kubectl(kubeconfig, &["replace", "-f", "-"], Some(&text));
}

/// What `stackhook crds` prints.
fn stackhook_crds() -> Result<String, String> {
    let crds = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .map_err(|e| format!("stackhook crds: {e}"))?;
    if !crds.status.success() {
        return Err("stackhook crds failed".into());
    }
    String::from_utf8(crds.stdout).map_err(|e| e.to_string())
}

/// The kubeconfig `up` writes (file paths) with the files' contents inline, as CAPI
/// reads a `<cluster>-kubeconfig` Secret (KCP parses its client certificate).
pub fn inline_kubeconfig(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("kubeconfig");
    let v: Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    let b64 = |p: &Value| {
        let file = p.as_str().expect("a file path");
        data_encoding::BASE64.encode(&std::fs::read(file).unwrap_or_else(|e| panic!("{file}: {e}")))
    };
    let cluster = &v["clusters"][0]["cluster"];
    let user = &v["users"][0]["user"];
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "workload", "cluster": {
            "server": cluster["server"],
            "certificate-authority-data": b64(&cluster["certificate-authority"])}}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": b64(&user["client-certificate"]),
            "client-key-data": b64(&user["client-key"])}}],
        "contexts": [{"name": "workload", "context": {"cluster": "workload", "user": "admin"}}],
        "current-context": "workload",
    })
    .to_string()
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The hosts a Go log line says were dialed or requested: `dial tcp HOST:PORT` and
/// `https://HOST:PORT`.
pub fn dialed_addresses(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["dial tcp ", "https://", "http://"] {
        let mut rest = line;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let host: String = rest
                .chars()
                .take_while(|c| {
                    c.is_ascii_alphanumeric()
                        || *c == '.'
                        || *c == '-'
                        || *c == '['
                        || *c == ']'
                        || *c == ':'
                })
                .collect();
            let host = host
                .rsplit_once(':')
                .map(|(h, _)| h.to_string())
                .unwrap_or(host);
            // Only IP addresses: names in logs are API groups and docs links.
            if host.chars().all(|c| c.is_ascii_digit() || c == '.')
                && host.matches('.').count() == 3
            {
                out.push(host);
            }
        }
    }
    out
}

/// Runs kubectl against `kubeconfig`, panicking on failure.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    try_kubectl(kubeconfig, args, stdin).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
}

pub fn try_kubectl(
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl (install it, or run .ci/run, which does)");
    {
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes()).expect("kubectl stdin");
        }
    }
    let out = child.wait_with_output().expect("kubectl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `kubectl kustomize` of a folder of the repository.
pub fn kustomize(dir: &str) -> String {
    let out = Command::new("kubectl")
        .args(["kustomize"])
        .arg(repo().join(dir))
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A `cluster.x-k8s.io` kind in the version CAPI writes it in this release.
pub fn capi_resource(release: Release, group: &str, kind: &str, plural: &str) -> ApiResource {
    let version = if release.is_v1beta2() {
        "v1beta2"
    } else {
        "v1beta1"
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// ExtensionConfig in the version this release prefers.
pub fn extension_configs(release: Release) -> ApiResource {
    let version = release
        .extension_config_api()
        .rsplit('/')
        .next()
        .unwrap_or("v1alpha1");
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("runtime.cluster.x-k8s.io", version, "ExtensionConfig"),
        "extensionconfigs",
    )
}

pub fn clusters(release: Release) -> ApiResource {
    capi_resource(release, "cluster.x-k8s.io", "Cluster", "clusters")
}

pub fn machines(release: Release) -> ApiResource {
    capi_resource(release, "cluster.x-k8s.io", "Machine", "machines")
}

pub fn machine_deployments(release: Release) -> ApiResource {
    capi_resource(
        release,
        "cluster.x-k8s.io",
        "MachineDeployment",
        "machinedeployments",
    )
}

pub fn cluster_classes(release: Release) -> ApiResource {
    capi_resource(
        release,
        "cluster.x-k8s.io",
        "ClusterClass",
        "clusterclasses",
    )
}

pub fn kcps(release: Release) -> ApiResource {
    capi_resource(
        release,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    )
}

pub fn infra(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", kind),
        plural,
    )
}

/// The condition `type` of an object, in whichever place this release keeps it
/// (`status.conditions`; for v1beta2 objects also `status.v1beta2.conditions`, and
/// `status.deprecated.v1beta1.conditions`).
pub fn condition(obj: &Value, type_: &str) -> Option<Value> {
    let places = [
        &obj["status"]["conditions"],
        &obj["status"]["v1beta2"]["conditions"],
        &obj["status"]["deprecated"]["v1beta1"]["conditions"],
    ];
    places
        .iter()
        .filter_map(|p| p.as_array())
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
}

pub fn condition_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == "True")
}

/// Plays the kubelets and kubeadm of a stand-in workload cluster for the Machines of
/// one namespace, until dropped.
pub struct StandInKubelet {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl StandInKubelet {
    pub fn start(mgmt: Client, standin: Client, release: Release, ns: &str) -> StandInKubelet {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ns = ns.to_string();
        let task = tokio::spawn(async move {
            let mut known = BTreeSet::new();
            while !flag.load(Ordering::SeqCst) {
                if let Err(e) = sync_nodes(&mgmt, &standin, release, &ns, &mut known).await {
                    eprintln!("stand-in kubelet: {e}");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        StandInKubelet { stop, task }
    }
}

impl Drop for StandInKubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.abort();
    }
}

const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
const STATIC_PODS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
];

/// One pass: a Node for every Machine with a providerID that has none yet (a Node
/// CAPI deleted while draining a Machine is not made again).
async fn sync_nodes(
    mgmt: &Client,
    standin: &Client,
    release: Release,
    ns: &str,
    known: &mut BTreeSet<String>,
) -> Result<(), kube::Error> {
    let machines: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), ns, &machines(release));
    let nodes: Api<DynamicObject> = Api::all_with(
        standin.clone(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Node"), "nodes"),
    );
    for m in machines.list(&Default::default()).await? {
        let name = m.metadata.name.clone().unwrap_or_default();
        let Some(provider_id) = m.data["spec"]["providerID"].as_str() else {
            continue;
        };
        if m.metadata.deletion_timestamp.is_some() || !known.insert(name.clone()) {
            continue;
        }
        let version = m.data["spec"]["version"]
            .as_str()
            .unwrap_or("v1.33.1")
            .to_string();
        let control_plane = m
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL));
        let mut labels = json!({"kubernetes.io/hostname": name});
        if control_plane {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
        }
        // kubeadm taints a control-plane node; KCP checks it.
        let taints = if control_plane {
            json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        let node: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": provider_id, "taints": taints},
        }))
        .expect("node");
        nodes
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&node),
            )
            .await?;
        let now = jiff::Timestamp::now().to_string();
        let status = json!({"status": {
            // Ready, and no pressure: CAPI's NodeHealthy (and so a Machine's Ready and
            // Available, which a MachineDeployment's rollout waits for) reads all four.
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "stand-in kubelet", "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": version, "machineID": "", "systemUUID": "", "bootID": "",
                         "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
        }});
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        if control_plane {
            control_plane_parts(standin, &name, &version).await?;
        }
    }
    Ok(())
}

/// What kubeadm init/join leaves on a control-plane node that KCP reads: the static
/// Pods (Running, Ready) and the `kubeadm-config` ConfigMap.
async fn control_plane_parts(
    standin: &Client,
    node: &str,
    version: &str,
) -> Result<(), kube::Error> {
    let ns = "kube-system";
    let sas: Api<DynamicObject> = Api::namespaced_with(
        standin.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ServiceAccount"),
            "serviceaccounts",
        ),
    );
    // No controller-manager makes it; Pod admission wants it.
    let sa: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}
    }))
    .expect("sa");
    sas.patch(
        "default",
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&sa),
    )
    .await?;
    let pods: Api<DynamicObject> = Api::namespaced_with(
        standin.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods"),
    );
    for component in STATIC_PODS {
        let name = format!("{component}-{node}");
        let pod: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            // The kubelet's mirror of a static Pod: a drain leaves it alone.
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"component": component, "tier": "control-plane"},
                         "annotations": {"kubernetes.io/config.mirror": "stand-in"}},
            "spec": {"nodeName": node, "automountServiceAccountToken": false,
                     "containers": [{"name": component, "image": format!("registry.k8s.io/{component}:{version}")}]},
        }))
        .expect("pod");
        pods.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&pod),
        )
        .await?;
        let now = jiff::Timestamp::now().to_string();
        let status = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ]}});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    let cms: Api<DynamicObject> = Api::namespaced_with(
        standin.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
    );
    if cms.get_opt("kubeadm-config").await?.is_none() {
        let cm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kubeadm-config", "namespace": ns},
            "data": {"ClusterConfiguration": format!(
                "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: {version}\n")},
        }))
        .expect("cm");
        cms.create(&PostParams::default(), &cm).await?;
    }
    Ok(())
}

/// Deletes every object of `ar` in `ns` (no garbage collector runs here).
pub async fn delete_all(client: &Client, ns: &str, ar: &ApiResource) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let _ = api
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
}

/// Glance as a member of the test cloud: a client, a token and the public endpoint.
/// Through Glance's own API, because the client library reads images only.
async fn glance(member: &super::cloud::CloudEntry) -> (reqwest::Client, String, String) {
    let http = reqwest::Client::new();
    let auth = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": member.username, "password": member.password,
            "domain": {"name": member.user_domain_name}}}},
        "scope": {"project": {"name": member.project_name, "domain": {"name": member.project_domain_name}}}}});
    let resp = http
        .post(format!(
            "{}/auth/tokens",
            member.auth_url.trim_end_matches('/')
        ))
        .json(&auth)
        .send()
        .await
        .expect("keystone");
    let token = resp.headers()["x-subject-token"]
        .to_str()
        .expect("token")
        .to_string();
    let body: Value = resp.json().await.expect("token body");
    let url = body["token"]["catalog"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["type"] == "image")
        .and_then(|s| s["endpoints"].as_array())
        .into_iter()
        .flatten()
        .find(|e| e["interface"] == "public")
        .and_then(|e| e["url"].as_str())
        .expect("glance endpoint")
        .trim_end_matches('/')
        .to_string();
    (http, token, url)
}

/// Uploads an active Glance image `name` with `kube_version` set.
pub async fn create_image(
    member: &super::cloud::CloudEntry,
    name: &str,
    kube_version: &str,
) -> String {
    let (http, token, glance) = glance(member).await;
    let image: Value = http
        .post(format!("{glance}/v2/images"))
        .header("X-Auth-Token", &token)
        .json(
            &json!({"name": name, "disk_format": "raw", "container_format": "bare",
                      "kube_version": kube_version, "os_distro": "ubuntu"}),
        )
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("image create")
        .json()
        .await
        .expect("image");
    let id = image["id"].as_str().expect("image id").to_string();
    http.put(format!("{glance}/v2/images/{id}/file"))
        .header("X-Auth-Token", &token)
        .header("Content-Type", "application/octet-stream")
        .body(vec![0u8; 1 << 16])
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("image upload");
    id
}

/// Deletes every image with `kube_version` the member can see; returns how many.
pub async fn delete_images(member: &super::cloud::CloudEntry, kube_version: &str) -> usize {
    let (http, token, glance) = glance(member).await;
    let list: Value = http
        .get(format!("{glance}/v2/images?kube_version={kube_version}"))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("image list")
        .json()
        .await
        .expect("images");
    let ids: Vec<String> = list["images"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["id"].as_str().map(str::to_string))
        .collect();
    for id in &ids {
        http.delete(format!("{glance}/v2/images/{id}"))
            .header("X-Auth-Token", &token)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("image delete");
    }
    ids.len()
}

/// What Kubernetes' garbage collector does and this API server (no controller manager)
/// does not: owner references to Secrets that are gone are dropped. CAPI's topology
/// controller owns a new KubeadmControlPlane and infrastructure cluster by a "shim"
/// Secret too, and deletes the shim once the Cluster owns both; the reference left
/// behind would keep `clusterctl move` from ever ordering those objects.
pub async fn drop_dangling_secret_owners(client: &Client, ns: &str, resources: &[ApiResource]) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for ar in resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
        let Ok(list) = api.list(&Default::default()).await else {
            continue;
        };
        for o in list.items {
            let owners = o.metadata.owner_references.clone().unwrap_or_default();
            let mut kept = Vec::new();
            for r in &owners {
                let gone = r.kind == "Secret"
                    && r.api_version == "v1"
                    && !matches!(
                        secrets.get_opt(&r.name).await,
                        Ok(Some(s)) if s.metadata.uid.as_deref() == Some(r.uid.as_str())
                    );
                if !gone {
                    kept.push(r.clone());
                }
            }
            if kept.len() != owners.len() {
                let name = o.metadata.name.clone().unwrap_or_default();
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"ownerReferences": kept}})),
                )
                .await
                .unwrap_or_else(|e| panic!("dropping dangling owners of {} {name}: {e}", ar.kind));
            }
        }
    }
}

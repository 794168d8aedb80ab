//! What `shared/capi/up` does, in the test process: unpack one release's managers,
//! install CAPI's CRDs (and CAPO's), start the managers on free loopback ports, and
//! register their admission webhooks and CRD conversion, as a real install does.
//!
//! The script runs about forty kubectl processes per bed and writes each CRD three
//! times (apply, label, conversion patch; each write makes the API server rebuild
//! that CRD's OpenAPI). Here each CRD is written once, labels and conversion
//! included, over one client. The state directory keeps the script's layout
//! (`bin/`, `certs/`, `logs/`, `<binary>.pid`) and the same `env` keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Client;
use serde_json::json;

use super::kube_server::{yaml_documents, MANAGER};
use super::Release;

/// One manager `up` knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Capi,
    Bootstrap,
    ControlPlane,
    Capo,
}

impl Manager {
    pub fn parse(name: &str) -> Manager {
        match name {
            "capi" => Manager::Capi,
            "bootstrap" => Manager::Bootstrap,
            "controlplane" => Manager::ControlPlane,
            "capo" => Manager::Capo,
            other => panic!("unknown manager {other} (capi|bootstrap|controlplane|capo)"),
        }
    }

    pub fn binary(self) -> &'static str {
        match self {
            Manager::Capi => "capi-manager",
            Manager::Bootstrap => "kubeadm-bootstrap-manager",
            Manager::ControlPlane => "kubeadm-control-plane-manager",
            Manager::Capo => "capo-manager",
        }
    }

    /// The prefix of its keys in `env` (`CAPI_LOG`, `CAPO_PID_FILE`, ...).
    fn key(self) -> &'static str {
        match self {
            Manager::Capi => "CAPI",
            Manager::Bootstrap => "BOOTSTRAP",
            Manager::ControlPlane => "CONTROLPLANE",
            Manager::Capo => "CAPO",
        }
    }

    /// Whether it converts the multi-version CRDs of `group`: those of its provider.
    fn converts(self, group: &str) -> bool {
        provider_of(group) == Some(self)
    }

    fn feature_gates(self) -> Option<String> {
        let from = |var: &str, default: &str| {
            Some(std::env::var(var).unwrap_or_else(|_| default.to_string()))
        };
        match self {
            Manager::Capi => from("CAPI_FEATURE_GATES", "ClusterTopology=true,RuntimeSDK=true"),
            Manager::Bootstrap | Manager::ControlPlane => {
                from("KUBEADM_FEATURE_GATES", "ClusterTopology=true")
            }
            Manager::Capo => std::env::var("CAPO_FEATURE_GATES").ok(),
        }
        .filter(|g| !g.is_empty())
    }
}

/// Where one release's files are in `shared/capi`.
struct Layout {
    bins: PathBuf,
    crds: PathBuf,
    webhooks: PathBuf,
    /// The contract labels of the kubeadm providers' CRDs.
    kubeadm_contract: &'static [(&'static str, &'static str)],
}

const BOTH_CONTRACTS: &[(&str, &str)] = &[
    ("cluster.x-k8s.io/v1beta1", "v1beta1"),
    ("cluster.x-k8s.io/v1beta2", "v1beta2"),
];

fn layout(capi_dir: &Path, release: Release) -> Layout {
    match release.capi {
        "v1.13" => Layout {
            bins: capi_dir.join("bin"),
            crds: capi_dir.join("../kube/crds/cluster-api-v1.13.5"),
            webhooks: capi_dir.join("webhooks"),
            kubeadm_contract: BOTH_CONTRACTS,
        },
        v => Layout {
            bins: capi_dir.join(v).join("bin"),
            crds: capi_dir.join(v).join("crds"),
            webhooks: capi_dir.join(v).join("webhooks"),
            // v1.10's kubeadm CRDs have no v1beta2.
            kubeadm_contract: if v == "v1.10" {
                &BOTH_CONTRACTS[..1]
            } else {
                BOTH_CONTRACTS
            },
        },
    }
}

/// A started manager: its ports and process.
pub struct Started {
    pub manager: Manager,
    pub webhook_port: u16,
    pub child: Child,
}

/// The state of one bed's managers.
pub struct Up {
    capi_dir: PathBuf,
    release: Release,
    state: PathBuf,
    ca_pem: String,
    pub started: Vec<Started>,
    pub env: BTreeMap<String, String>,
}

impl Up {
    /// Makes the state directory's layout and the webhooks' certificate.
    pub fn new(capi_dir: &Path, release: Release, state: &Path) -> Up {
        for d in ["bin", "certs", "logs"] {
            std::fs::create_dir_all(state.join(d)).expect("state dir");
        }
        let tls = stackhook::server::tls::self_signed(&[]).expect("webhook certificate");
        stackhook::server::tls::write_self_signed(&state.join("certs"), &tls)
            .expect("writing the webhook certificate");
        let mut env = BTreeMap::new();
        env.insert("CAPI_VERSION".to_string(), release.capi.to_string());
        Up {
            capi_dir: capi_dir.to_path_buf(),
            release,
            state: state.to_path_buf(),
            ca_pem: tls.ca_pem,
            started: Vec::new(),
            env,
        }
    }

    /// Starts `managers` (none: core, bootstrap and control plane) against the API
    /// server of `client`/`kubeconfig`, and waits until each serves.
    pub async fn start(&mut self, client: &Client, kubeconfig: &Path, managers: &[Manager]) {
        let managers: Vec<Manager> = if managers.is_empty() {
            vec![Manager::Capi, Manager::Bootstrap, Manager::ControlPlane]
        } else {
            managers.to_vec()
        };
        if managers.contains(&Manager::Capo) {
            assert!(
                matches!(self.release.capi, "v1.12" | "v1.13"),
                "CAPO v0.14 runs with CAPI v1.12 or v1.13"
            );
        }
        let layout = layout(&self.capi_dir, self.release);
        for m in &managers {
            self.unpack(&layout, m.binary());
        }
        self.unpack(&layout, "clusterctl");
        // Ports first: the CRDs name the conversion endpoints before the managers listen.
        let ports: Vec<(Manager, [u16; 3])> = managers
            .iter()
            .map(|m| (*m, [free_port(), free_port(), free_port()]))
            .collect();
        let mut converters: Vec<(Manager, u16)> = self
            .started
            .iter()
            .map(|s| (s.manager, s.webhook_port))
            .collect();
        converters.extend(ports.iter().map(|(m, p)| (*m, p[2])));
        self.install_crds(client, &layout, &managers, &converters)
            .await;
        let mut new = Vec::new();
        for (m, [metrics, health, webhook]) in ports {
            let child = self.spawn(m, kubeconfig, metrics, health, webhook);
            new.push((m, health, webhook, child));
        }
        for (m, health, webhook, mut child) in new {
            self.wait_ready(m, health, &mut child).await;
            self.register_webhooks(client, &layout, m, webhook).await;
            self.started.push(Started {
                manager: m,
                webhook_port: webhook,
                child,
            });
        }
    }

    /// `bin/<binary>`, unpacked once per content (checked against `SHA256SUMS`) into
    /// a cache beside the state directories and linked in.
    fn unpack(&self, layout: &Layout, binary: &str) {
        let dir = if binary == "capo-manager" || binary == "clusterctl" {
            self.capi_dir.join("bin")
        } else {
            layout.bins.clone()
        };
        let sums = std::fs::read_to_string(dir.join("SHA256SUMS"))
            .unwrap_or_else(|e| panic!("{}/SHA256SUMS: {e}", dir.display()));
        let sum = sums
            .lines()
            .find_map(|l| {
                let (s, name) = l.split_once(char::is_whitespace)?;
                (name.trim() == binary).then(|| s.to_string())
            })
            .unwrap_or_else(|| panic!("no {binary} in {}/SHA256SUMS", dir.display()));
        let cache = std::env::temp_dir().join("stackhook-capi-bin").join(&sum);
        if !cache.is_file() {
            std::fs::create_dir_all(cache.parent().expect("cache dir")).expect("cache dir");
            let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
            let out = std::fs::File::create(&tmp).expect("unpacking");
            let ok = Command::new("xz")
                .arg("-dc")
                .arg(dir.join(format!("{binary}.xz")))
                .stdout(out)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "xz -dc {binary}.xz failed");
            let got = Command::new("sha256sum")
                .arg(&tmp)
                .output()
                .expect("sha256sum");
            let got = String::from_utf8_lossy(&got.stdout);
            assert!(
                got.split_whitespace().next() == Some(sum.as_str()),
                "{binary}: checksum {got} is not {sum}"
            );
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            std::fs::rename(&tmp, &cache).expect("cache");
        }
        let to = self.state.join("bin").join(binary);
        if !to.exists() {
            std::fs::hard_link(&cache, &to)
                .or_else(|_| std::fs::copy(&cache, &to).map(|_| ()))
                .unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        }
    }

    /// CAPI's CRDs always (CAPO's and ORC's Image with CAPO), each with the labels a
    /// real install adds (CAPI finds a provider kind's version for its contract by
    /// them) and, where it has several versions, conversion through the manager of
    /// its group; one server-side apply each, then Established.
    async fn install_crds(
        &self,
        client: &Client,
        layout: &Layout,
        managers: &[Manager],
        converters: &[(Manager, u16)],
    ) {
        let mut dirs = vec![layout.crds.clone()];
        if managers.contains(&Manager::Capo) {
            dirs.push(self.capi_dir.join("crds/capo"));
            dirs.push(self.capi_dir.join("crds/orc"));
        }
        let ca = data_encoding::BASE64.encode(self.ca_pem.as_bytes());
        let mut crds = Vec::new();
        for dir in dirs {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .collect();
            files.sort();
            for file in files {
                let text = std::fs::read_to_string(&file).expect("CRD file");
                for mut crd in yaml_documents(&text) {
                    let group = crd["spec"]["group"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let labels = &mut crd["metadata"]["labels"];
                    if !labels.is_object() {
                        *labels = json!({});
                    }
                    for (k, v) in provider_labels(&group, layout) {
                        labels[k] = json!(v);
                    }
                    let versions = crd["spec"]["versions"].as_array().map_or(0, Vec::len);
                    if versions > 1 {
                        if let Some((_, port)) = converters.iter().find(|(m, _)| m.converts(&group))
                        {
                            crd["spec"]["conversion"] = json!({
                                "strategy": "Webhook",
                                "webhook": {
                                    "conversionReviewVersions": ["v1"],
                                    "clientConfig": {
                                        "url": format!("https://127.0.0.1:{port}/convert"),
                                        "caBundle": ca,
                                    },
                                },
                            });
                        }
                    }
                    crds.push(crd);
                }
            }
        }
        super::kube_server::apply_crds(client, &crds).await;
    }

    fn spawn(
        &mut self,
        m: Manager,
        kubeconfig: &Path,
        metrics: u16,
        health: u16,
        webhook: u16,
    ) -> Child {
        let b = m.binary();
        let log = self.state.join("logs").join(format!("{b}.log"));
        let out = std::fs::File::create(&log).expect("manager log");
        let err = out.try_clone().expect("manager log");
        let mut cmd = Command::new(self.state.join("bin").join(b));
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg(format!(
                "--webhook-cert-dir={}",
                self.state.join("certs").display()
            ))
            .arg(format!("--webhook-port={webhook}"))
            .arg("--insecure-diagnostics")
            .arg(format!("--diagnostics-address=127.0.0.1:{metrics}"))
            .arg(format!("--health-addr=127.0.0.1:{health}"));
        if let Some(gates) = m.feature_gates() {
            cmd.arg(format!("--feature-gates={gates}"));
        }
        if m == Manager::Capi {
            if let Ok(extra) = std::env::var("CAPI_EXTRA_ARGS") {
                cmd.args(extra.split_whitespace());
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {b}: {e}"));
        let pid_file = self.state.join(format!("{b}.pid"));
        std::fs::write(&pid_file, child.id().to_string()).expect("pid file");
        let k = m.key();
        for (suffix, value) in [
            ("METRICS_PORT", metrics.to_string()),
            ("HEALTH_PORT", health.to_string()),
            ("WEBHOOK_PORT", webhook.to_string()),
            ("PID_FILE", pid_file.display().to_string()),
            ("LOG", log.display().to_string()),
        ] {
            self.env.insert(format!("{k}_{suffix}"), value);
        }
        child
    }

    /// `/readyz` answers and the controllers have started their workers.
    async fn wait_ready(&self, m: Manager, health: u16, child: &mut Child) {
        let b = m.binary();
        let log = self.state.join("logs").join(format!("{b}.log"));
        let http = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{health}/readyz");
        let mut exited = None;
        let ready = super::kube_server::poll(Duration::from_secs(180), async || {
            if let Ok(Some(status)) = child.try_wait() {
                exited = Some(status);
                return true;
            }
            http.get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
                && std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"Starting workers\""))
        })
        .await;
        if ready && exited.is_none() {
            return;
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        panic!(
            "{b} did not become ready ({}); see {}:\n{}",
            exited.map_or("180 s".to_string(), |s| s.to_string()),
            log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }

    /// The manager's admission webhooks, pointed at its port, as
    /// `test-capi-<binary>-{mutating,validating}`; `failurePolicy: Fail`, so they go
    /// with the manager ([`super::Bed::stop_manager`]).
    async fn register_webhooks(&self, client: &Client, layout: &Layout, m: Manager, port: u16) {
        let b = m.binary();
        let dir = if m == Manager::Capo {
            self.capi_dir.join("webhooks")
        } else {
            layout.webhooks.clone()
        };
        let path = dir.join(format!("{b}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ca = data_encoding::BASE64.encode(self.ca_pem.as_bytes());
        for mut doc in yaml_documents(&text) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let suffix = match kind.as_str() {
                "MutatingWebhookConfiguration" => "mutating",
                "ValidatingWebhookConfiguration" => "validating",
                _ => continue,
            };
            let name = format!("test-capi-{b}-{suffix}");
            doc["metadata"] = json!({"name": name, "labels": {"test-capi-webhook": "true"}});
            for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                hook["clientConfig"] = json!({
                    "url": format!("https://127.0.0.1:{port}{path}"),
                    "caBundle": ca,
                });
            }
            let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
            let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            api.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&doc),
            )
            .await
            .unwrap_or_else(|e| panic!("registering {name}: {e}"));
        }
    }

    /// Stops every manager: SIGTERM, then SIGKILL after 10 s.
    pub fn stop_all(&mut self) {
        for s in &mut self.started {
            stop(&mut s.child);
        }
        self.started.clear();
    }

    /// Stops one manager; whether it was running.
    pub fn stop(&mut self, binary: &str) -> bool {
        let Some(i) = self
            .started
            .iter()
            .position(|s| s.manager.binary() == binary)
        else {
            return false;
        };
        let mut s = self.started.remove(i);
        stop(&mut s.child);
        let _ = std::fs::remove_file(self.state.join(format!("{binary}.pid")));
        true
    }
}

fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    for _ in 0..40 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The manager whose provider owns the CRDs of `group`.
fn provider_of(group: &str) -> Option<Manager> {
    match group {
        "cluster.x-k8s.io"
        | "addons.cluster.x-k8s.io"
        | "runtime.cluster.x-k8s.io"
        | "ipam.cluster.x-k8s.io" => Some(Manager::Capi),
        "bootstrap.cluster.x-k8s.io" => Some(Manager::Bootstrap),
        "controlplane.cluster.x-k8s.io" => Some(Manager::ControlPlane),
        "infrastructure.cluster.x-k8s.io" => Some(Manager::Capo),
        _ => None,
    }
}

/// The labels `up` gives a CRD of `group` (kustomize's commonLabels of each release).
fn provider_labels(group: &str, layout: &Layout) -> Vec<(&'static str, &'static str)> {
    let (contract, provider): (&[(&str, &str)], _) = match provider_of(group) {
        Some(Manager::Capi) => (&[], "cluster-api"),
        Some(Manager::Bootstrap) => (layout.kubeadm_contract, "bootstrap-kubeadm"),
        Some(Manager::ControlPlane) => (layout.kubeadm_contract, "control-plane-kubeadm"),
        Some(Manager::Capo) => (&BOTH_CONTRACTS[..1], "infrastructure-openstack"),
        None => return Vec::new(),
    };
    let mut labels = contract.to_vec();
    labels.push(("cluster.x-k8s.io/provider", provider));
    labels
}

/// A loopback port free now (the manager binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

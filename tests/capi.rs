//! The real Cluster API drives stackhook: its managers (core with the topology
//! controller and the Runtime SDK registry, kubeadm bootstrap and control plane, all
//! from the project's `shared/capi` folder) on a real API server, stackhook's binary
//! registered by an ExtensionConfig and running its controllers against the loopback
//! cloud, and a stand-in workload API server on 127.0.0.1 (see tests/support/capi.rs).
//!
//! - `shipped_classes_*`: every shipped ClusterClass reaches VariablesReady (and, from
//!   v1.11, RefVersionsUpToDate) and every example Cluster TopologyReconciled, once
//!   per CAPI generation.
//! - `a_whole_life_*`: create → control plane → initialized →
//!   AfterControlPlaneInitialized → workers → scale up and down → an upgrade blocked by
//!   the preflight until its image exists → delete, nothing left in the cloud.
//! - `magnum_*`: the Magnum shape, with the identity Secret as the driver writes it.
//! - `a_misspelled_flavor_*`: ValidateTopology stops the topology until it is fixed.
//! - `plan_predictions_*`: `stackhook plan` against what CAPI then does, row by row.
//! - `killed_at_any_moment_*`: stackhook SIGKILLed and restarted at 30 points of a
//!   create, a scale-up and a delete; the cloud audited for duplicates and leftovers.
//!
//! Each skips with one line where `shared/` or the test cloud is absent.
//! `cargo test --test with_capi capi_life:: -- --nocapture` prints each milestone's time.

use crate::capi;
use crate::cloud;
use crate::clusterctl;
use crate::infra;
use crate::kube_server;
use crate::server;

#[path = "capi/kill.rs"]
mod killed;
#[path = "capi/plan.rs"]
mod plan_vs_capi;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::Client;
use serde_json::{json, Value};

use capi::{condition, condition_true, Bed, Release, StandInKubelet};
use kube_server::{poll, wait_up_to};
use server::Server;
use stackhook_openstack::compute::Compute;
use stackhook_openstack::image::Images;
use stackhook_openstack::networking::{self as net, Networking};

const EXTENSION: &str = "stackhook";

/// The server groups the tests make; those of the same names a failed run left are
/// removed first (only those: tests running beside this one have groups of their own).
const SERVER_GROUP_PREFIX: &str = "capi-sg-";

async fn remove_stale_server_groups(os: &stackhook_openstack::Clients, names: &[String]) {
    for g in os.compute.server_groups().await.expect("server groups") {
        if names
            .iter()
            .any(|n| g.name == format!("{SERVER_GROUP_PREFIX}{n}"))
        {
            let _ = os.compute.delete_server_group(&g.id).await;
        }
    }
}

/// The ID of the test cloud's v1.33.1 image.
async fn loopback_image(os: &stackhook_openstack::Clients) -> String {
    os.image
        .list(&[("name", "ubuntu-2404-kube-v1.33.1".to_string())])
        .await
        .expect("images")
        .first()
        .expect("image")
        .id
        .clone()
}

/// Soft-anti-affinity server groups with these names (after the test's prefix), for
/// variables that name existing groups; those of these names a failed run left go first.
async fn server_groups(os: &stackhook_openstack::Clients, names: &[String]) -> Vec<String> {
    remove_stale_server_groups(os, names).await;
    let mut ids = Vec::new();
    for name in names {
        let g = os
            .compute
            .create_server_group(
                &format!("{SERVER_GROUP_PREFIX}{name}"),
                stackhook_openstack::compute::ServerGroupPolicy::SoftAntiAffinity,
                &Default::default(),
            )
            .await
            .expect("server group");
        ids.push(g.id);
    }
    ids
}

/// What a test needs: the bed, stackhook registered with CAPI, the cloud.
struct World {
    bed: Bed,
    stackhook: Server,
    /// clouds.yaml with the member entry as `openstack` (the packs' default cloud).
    clouds_yaml: String,
    external_network: String,
    started: Instant,
    /// One session for the test's own look at the cloud: a new one per poll would be
    /// a Keystone token per poll.
    os: stackhook_openstack::Clients,
    /// Names the kept logs.
    what: &'static str,
    /// stackhook's `User-Agent` towards OpenStack.
    agent: String,
    /// stackhook's arguments, for a restart.
    args: Vec<String>,
    /// stackhook's log lines read so far (across restarts).
    logs: std::sync::Mutex<Vec<Value>>,
    /// The first process's hook address and certificate, kept for restarts after a
    /// SIGKILL (see `kill_and_restart`).
    kept: Option<(String, tempfile::TempDir)>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.keep_stackhook_logs();
    }
}

impl World {
    /// `None` (after one line saying why) where this machine cannot run the suite.
    async fn start(release: Release, what: &'static str, extra: &[&str]) -> Option<World> {
        Self::start_with(release, what, extra, None).await
    }

    /// With `repo`, the providers are installed by `clusterctl init` of its stackhook
    /// release, as a user installs them, instead of by `stackhook crds`.
    async fn start_with(
        release: Release,
        what: &'static str,
        extra: &[&str],
        repo: Option<(Arc<clusterctl::Repo>, &'static str)>,
    ) -> Option<World> {
        let Some(clouds_path) = cloud::clouds_yaml() else {
            println!("skipping capi {}: no test cloud", release.capi);
            return None;
        };
        let bed = match tokio::task::spawn_blocking(move || match repo {
            None => Bed::start(release),
            Some((repo, version)) => Bed::start_with(release, &|kubeconfig| {
                repo.init(&capi::repo(), kubeconfig, version)?;
                without_installed_extension_config(kubeconfig)
            }),
        })
        .await
        .expect("bed")
        {
            Ok(bed) => bed,
            Err(why) => {
                println!("skipping capi {}: {why}", release.capi);
                return None;
            }
        };
        let started = Instant::now();
        let kubeconfig = bed.mgmt.kubeconfig.display().to_string();
        // The cloud's access logs then tell this server's requests from other tests'.
        let agent = format!("stackhook-capi-{}-{what}", std::process::id());
        let mut args = vec![
            "--openstack-user-agent",
            &agent,
            "--controllers",
            "--kubeconfig",
            &kubeconfig,
            "--leader-election-namespace",
            "default",
        ];
        // Short leases unless the test sets its own.
        if !extra.contains(&"--leader-election-lease-duration-seconds") {
            args.extend_from_slice(&[
                "--leader-election-lease-duration-seconds",
                "8",
                "--leader-election-renew-deadline-seconds",
                "6",
                "--leader-election-retry-period-seconds",
                "1",
            ]);
        }
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let stackhook = Server::start_with_env(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[("RUST_LOG", Some("info"))],
        );
        let clouds_yaml =
            openstack_entry(&std::fs::read_to_string(&clouds_path).expect("clouds.yaml"));
        let os = checker(&clouds_path);
        let nets: Vec<net::Network> = os
            .network
            .list(&[("name", "public".to_string())])
            .await
            .expect("networks");
        let external_network = nets.first().expect("public network").id.clone();
        let world = World {
            bed,
            stackhook,
            clouds_yaml,
            external_network,
            started,
            os,
            what,
            agent,
            args,
            logs: Default::default(),
            kept: None,
        };
        // No `--capi-version`: stackhook finds which CAPI runs from the CRDs it serves.
        let served = world.metrics_text().await;
        let want = format!(
            "stackhook_capi_minor_served {}",
            release.flag.trim_start_matches("1.")
        );
        assert!(
            served.lines().any(|l| l == want),
            "stackhook did not find CAPI {}: {:?}",
            release.flag,
            served
                .lines()
                .find(|l| l.starts_with("stackhook_capi_minor_served"))
        );
        world.register().await;
        Some(world)
    }

    /// Stops stackhook and starts it again with `extra` arguments added, registered
    /// anew (a new port and CA): what a rollout of a new version looks like to CAPI.
    async fn restart(&mut self, extra: &[&str]) {
        self.keep_stackhook_logs();
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        self.stackhook = Server::start_with_env(&args, &[("RUST_LOG", Some("info"))]);
        self.register().await;
        self.step("stackhook restarted");
    }

    /// SIGKILLs stackhook and starts it again at once on the same address with the
    /// same certificate, as a container restarted in its pod: the ExtensionConfig
    /// stays valid, and the new process waits out the dead one's Lease.
    fn kill_and_restart(&mut self) {
        if self.kept.is_none() {
            let dir = tempfile::tempdir().expect("tempdir");
            for f in ["tls.crt", "tls.key"] {
                std::fs::copy(
                    self.stackhook.dir.path().join("ss").join(f),
                    dir.path().join(f),
                )
                .expect("the first process's certificate");
            }
            let port = self
                .stackhook
                .https
                .rsplit(':')
                .next()
                .expect("port")
                .to_string();
            self.kept = Some((format!("127.0.0.1:{port}"), dir));
        }
        let _ = self.stackhook.child.kill();
        let _ = self.stackhook.child.wait();
        // The dead process's last lines, before its Server is replaced.
        let _ = self.stackhook_logs();
        let (listen, dir) = self.kept.as_ref().expect("kept");
        let cert = dir.path().join("tls.crt").display().to_string();
        let key = dir.path().join("tls.key").display().to_string();
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend_from_slice(&[
            "--listen",
            listen,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
        ]);
        let ca = self.stackhook.ca_pem.clone();
        let https = self.stackhook.https.clone();
        self.stackhook = Server::start_exact(&args, &[("RUST_LOG", Some("info"))]);
        self.stackhook.ca_pem = ca;
        assert_eq!(self.stackhook.https, https, "restarted on another address");
    }

    fn step(&self, what: &str) {
        println!(
            "capi {}: {what} ({:.1} s)",
            self.bed.release.capi,
            self.started.elapsed().as_secs_f64()
        );
    }

    async fn client(&self) -> Client {
        self.bed.client().await
    }

    /// The ExtensionConfig that registers stackhook, and CAPI's discovery of it.
    async fn register(&self) {
        self.register_with(None).await;
    }

    /// With `settings`, which CAPI passes to every hook call.
    async fn register_with(&self, settings: Option<Value>) {
        // A `clusterctl init` installed the components' ExtensionConfig, which names
        // the in-cluster Service of a Deployment that cannot run here (no kubelet):
        // this one names the same binary, run on the host.
        capi::kubectl(
            &self.bed.mgmt.kubeconfig,
            &["delete", "extensionconfig", EXTENSION, "--ignore-not-found"],
            None,
        );
        let ca =
            data_encoding::BASE64.encode(self.stackhook.ca_pem.as_ref().expect("self-signed CA"));
        let mut ec = json!({
            "apiVersion": self.bed.release.extension_config_api(),
            "kind": "ExtensionConfig",
            "metadata": {"name": EXTENSION},
            "spec": {"clientConfig": {"url": self.stackhook.https, "caBundle": ca}},
        });
        if let Some(settings) = settings {
            ec["spec"]["settings"] = settings;
        }
        self.bed
            .apply("default", &serde_json::to_string(&ec).expect("json"));
        let ar = capi::extension_configs(self.bed.release);
        let api: Api<DynamicObject> = Api::all_with(self.client().await, &ar);
        wait_up_to(
            Duration::from_secs(90),
            "CAPI to discover stackhook",
            async || {
                api.get(EXTENSION).await.ok().is_some_and(|o| {
                    o.data["status"]["handlers"]
                        .as_array()
                        .is_some_and(|h| !h.is_empty())
                })
            },
        )
        .await;
        self.step("ExtensionConfig discovered");
    }

    /// A namespace with the identity Secret `<cluster>-cloud-config` for `clusters`.
    async fn namespace(&self, prefix: &str, clusters: &[&str]) -> String {
        let client = self.client().await;
        let ns = kube_server::namespace(&client, prefix).await;
        for c in clusters {
            kube_server::identity_secret(
                &client,
                &ns,
                &format!("{c}-cloud-config"),
                &self.clouds_yaml,
            )
            .await;
        }
        ns
    }

    /// Applies the openstack-kubeadm class of this release (with its templates).
    fn apply_kubeadm_class(&self, ns: &str) {
        let class = capi::kustomize(&format!(
            "clusterclasses/openstack-kubeadm/overlays/{}",
            self.bed.release.overlay
        ));
        self.bed.apply(ns, &class);
    }

    async fn wait_class_ready(&self, ns: &str, name: &str) {
        self.wait_class(ns, name, true).await;
    }

    /// VariablesReady, and with `refs` (from CAPI 1.11) RefVersionsUpToDate.
    async fn wait_class(&self, ns: &str, name: &str, refs: bool) {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client().await,
            ns,
            &capi::cluster_classes(self.bed.release),
        );
        let release = self.bed.release;
        let mut last = Value::Null;
        let ok = poll(Duration::from_secs(90), async || {
            let Ok(cc) = api.get(name).await else {
                return false;
            };
            last = cc.data.clone();
            let variables = condition_true(&cc.data, "VariablesReady")
                || condition_true(&cc.data, "VariablesReconciled");
            let up_to_date =
                !refs || !release.is_v1beta2() || condition_true(&cc.data, "RefVersionsUpToDate");
            variables && up_to_date
        })
        .await;
        assert!(
            ok,
            "ClusterClass {ns}/{name} not ready under CAPI {}: {}",
            release.capi,
            serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
        );
        self.step(&format!("ClusterClass {name} ready"));
    }

    /// The minimal example, filled in.
    fn minimal_cluster(&self, ns: &str, name: &str, vars: &[(&str, &str)]) -> String {
        let text = std::fs::read_to_string(
            capi::repo().join("clusterclasses/examples/openstack-kubeadm-minimal.yaml"),
        )
        .expect("example");
        let mut env: BTreeMap<&str, &str> = BTreeMap::from([
            ("CLUSTER_NAME", name),
            ("NAMESPACE", ns),
            (
                "OPENSTACK_EXTERNAL_NETWORK_ID",
                self.external_network.as_str(),
            ),
            ("WORKER_MACHINE_COUNT", "1"),
        ]);
        env.extend(vars.iter().copied());
        envsubst(&text, &env)
    }

    async fn wait_cluster<F: Fn(&Value) -> bool>(
        &self,
        ns: &str,
        name: &str,
        limit: Duration,
        what: &str,
        f: F,
    ) -> Value {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::clusters(self.bed.release));
        let mut last = Value::Null;
        let ok = poll(limit, async || {
            let Ok(c) = api.get(name).await else {
                return false;
            };
            last = serde_json::to_value(c).expect("json");
            f(&last)
        })
        .await;
        assert!(
            ok,
            "timed out after {limit:?} waiting for Cluster {ns}/{name}: {what}; status: {}",
            serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
        );
        self.step(what);
        last
    }

    async fn machines(&self, ns: &str) -> Vec<DynamicObject> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::machines(self.bed.release));
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// OpenStackMachines of `ns` whose name starts with `prefix` and whose server
    /// the controller reports in one of `states` (as `status.instanceState`).
    async fn infra_machines_in(&self, ns: &str, prefix: &str, states: &[&str]) -> Vec<String> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client().await,
            ns,
            &capi::infra("OpenStackMachine", "openstackmachines"),
        );
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|m| {
                m.data["status"]["instanceState"]
                    .as_str()
                    .is_some_and(|s| states.contains(&s))
            })
            .filter_map(|m| m.metadata.name)
            .filter(|n| n.starts_with(prefix))
            .collect()
    }

    /// Servers in the cloud whose name starts with `prefix`, by status.
    async fn servers(&self, prefix: &str) -> Vec<(String, String)> {
        self.os
            .compute
            .servers_named(prefix)
            .await
            .expect("servers")
            .into_iter()
            .filter(|s| s.name.starts_with(prefix))
            .map(|s| (s.name, s.status))
            .collect()
    }

    /// What a failed wait needs to be understood: our objects' status, CAPI's
    /// Machines, stackhook's warnings.
    async fn dump(&self, ns: &str) {
        let client = self.client().await;
        for ar in [
            capi::infra("OpenStackCluster", "openstackclusters"),
            capi::infra("OpenStackMachine", "openstackmachines"),
            capi::machines(self.bed.release),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            for o in api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                println!(
                    "{} {}: spec.providerID={} status={}",
                    ar.kind,
                    o.metadata.name.unwrap_or_default(),
                    o.data["spec"]["providerID"],
                    o.data["status"]
                );
            }
        }
        for l in self.stackhook.drain_logs() {
            let level = l["level"].as_str().unwrap_or_default();
            if level == "WARN" || level == "ERROR" {
                println!("stackhook: {l}");
            }
        }
    }

    /// Deletes the Cluster and waits until CAPI (and our finalizers) let it go.
    async fn delete_cluster(&self, ns: &str, name: &str) {
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::clusters(self.bed.release));
        clusters
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete cluster");
        let gone = poll(Duration::from_secs(240), async || {
            matches!(clusters.get_opt(name).await, Ok(None))
        })
        .await;
        if !gone {
            self.dump(ns).await;
        }
        assert!(gone, "Cluster {name} was not deleted");
        self.step("Cluster deleted");
    }

    /// The ClusterResourceSets and addons Secrets in `ns`, by name.
    async fn addons_objects(&self, ns: &str) -> (Vec<String>, Vec<String>) {
        let names = |items: Vec<kube::api::ObjectMeta>| -> Vec<String> {
            items.into_iter().filter_map(|m| m.name).collect()
        };
        let sets = match stackhook::kubernetes::resource_set::ResourceSetApi::discover(
            &self.client().await,
        )
        .await
        .expect("discovery")
        {
            Some(rs) => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client().await, ns, &rs.resource_set);
                let items = api.list(&ListParams::default()).await.expect("list");
                names(items.items.into_iter().map(|o| o.metadata).collect())
            }
            None => Vec::new(),
        };
        let secrets: Api<Secret> = Api::namespaced(self.client().await, ns);
        let labelled = secrets
            .list(&ListParams::default().labels(stackhook::kubernetes::resource_set::SECRET_LABEL))
            .await
            .expect("list");
        (
            sets,
            names(labelled.items.into_iter().map(|s| s.metadata).collect()),
        )
    }

    /// No server of the cluster and no network of its namespace left in the cloud.
    async fn assert_nothing_left(&self, ns: &str, name: &str) {
        assert_eq!(
            self.servers(name).await,
            Vec::<(String, String)>::new(),
            "servers left"
        );
        let nets: Vec<net::Network> = self.os.network.list(&[]).await.expect("networks");
        let left: Vec<&str> = nets
            .iter()
            .map(|n| n.name.as_str())
            .filter(|n| n.contains(ns))
            .collect();
        assert!(left.is_empty(), "networks left: {left:?}");
    }

    /// The counters a phase is measured by, now.
    async fn begin(&self, name: &'static str) -> Phase {
        Phase {
            name,
            started: Instant::now(),
            access: cloud::access_mark(),
            hooks: self.hook_calls().await,
            reconciles: self.reconciles().await,
            patch_cache: self.patch_cache().await,
        }
    }

    /// What happened since `begin`.
    async fn end(&self, p: Phase) -> PhaseReport {
        let requests = cloud::requests_since(&p.access, Some(&self.agent));
        let diff = |now: BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.into_iter()
                .filter_map(|(k, v)| {
                    let d = v.saturating_sub(then.get(&k).copied().unwrap_or(0));
                    (d > 0).then_some((k, d))
                })
                .collect::<BTreeMap<_, _>>()
        };
        let (hits, misses) = self.patch_cache().await;
        PhaseReport {
            name: p.name,
            seconds: p.started.elapsed().as_secs_f64(),
            cloud_writes: cloud::writes(&requests),
            cloud_requests: requests,
            hooks: diff(self.hook_calls().await, &p.hooks),
            reconciles: diff(self.reconciles().await, &p.reconciles),
            patch_hits: hits - p.patch_cache.0,
            patch_misses: misses - p.patch_cache.1,
        }
    }

    async fn metrics_text(&self) -> String {
        reqwest::get(format!("{}/metrics", self.stackhook.admin))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Reconciles by controller and outcome.
    async fn reconciles(&self) -> BTreeMap<String, u64> {
        let text = self.metrics_text().await;
        let mut out = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("stackhook_controller_reconciles_total{"))
        {
            let Some((labels, n)) = line.rsplit_once(' ') else {
                continue;
            };
            let label = |k: &str| {
                labels
                    .split(&format!("{k}=\""))
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap_or_default()
                    .to_string()
            };
            *out.entry(format!("{}/{}", label("controller"), label("outcome")))
                .or_insert(0) += n.parse::<f64>().unwrap_or(0.0) as u64;
        }
        out
    }

    /// GeneratePatches answers from the patch cache and computed: `(hits, misses)`.
    async fn patch_cache(&self) -> (u64, u64) {
        let text = self.metrics_text().await;
        let get = |result: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "stackhook_patch_cache_answers_total{{result=\"{result}\"}}"
                    ))
                })
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or(0.0) as u64
        };
        (get("hit"), get("miss"))
    }

    /// stackhook's log lines so far, to `STACKHOOK_CAPI_LOGS` when set.
    fn keep_stackhook_logs(&self) {
        let what = self.what;
        let Some(dir) = std::env::var_os("STACKHOOK_CAPI_LOGS") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        let text: String = self
            .stackhook_logs()
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        let _ = std::fs::write(
            dir.join(format!(
                "{}-{}-{what}-stackhook.log",
                self.bed.release.capi,
                std::process::id()
            )),
            text,
        );
    }

    /// A string field of the cluster's KubeadmControlPlane, empty while there is none.
    async fn kcp_field(&self, ns: &str, pointer: &str) -> String {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client().await, ns, &capi::kcps(self.bed.release));
        api.list(&ListParams::default())
            .await
            .ok()
            .and_then(|l| {
                l.items.first().map(|k| {
                    k.data
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                })
            })
            .unwrap_or_default()
    }

    /// Waits until CAPI holds the Cluster's upgrade with `message` (a hook's) in
    /// `TopologyReconciled`.
    async fn wait_upgrade_held(&self, ns: &str, name: &str, what: &str, message: &str) {
        let held = self
            .wait_cluster(ns, name, Duration::from_secs(90), what, |c| {
                condition(c, "TopologyReconciled").is_some_and(|t| {
                    t["status"] == "False"
                        && t["message"].as_str().is_some_and(|m| m.contains(message))
                })
            })
            .await;
        println!(
            "held: {}",
            condition(&held, "TopologyReconciled").unwrap_or_default()
        );
    }

    /// Every log line stackhook has printed so far.
    fn stackhook_logs(&self) -> Vec<Value> {
        let mut all = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        all.extend(self.stackhook.drain_logs());
        all.clone()
    }

    /// The lifecycle hooks stackhook answered for `cluster`, in the order of the
    /// calls, each run of repeated calls (a hold asked again) counted once.
    fn lifecycle_order(&self, cluster: &str, hooks: &[&str]) -> Vec<String> {
        let mut order: Vec<String> = Vec::new();
        for l in self.stackhook_logs() {
            let hook = l["hook"].as_str().unwrap_or_default();
            if l["message"] != "hook call"
                || l["cluster_name"] != cluster
                || l["outcome"] != "success"
                || !hooks.contains(&hook)
            {
                continue;
            }
            if order.last().map(String::as_str) != Some(hook) {
                order.push(hook.to_string());
            }
        }
        order
    }

    /// Applies the openstack-kubeadm class with its control plane on external etcd,
    /// as KCP must see a stand-in's: KCP then checks no etcd member, which nothing
    /// here could report, and rolls the control plane as on a real cloud.
    fn apply_kubeadm_class_external_etcd(&self, ns: &str) {
        let class = capi::kustomize(&format!(
            "clusterclasses/openstack-kubeadm/overlays/{}",
            self.bed.release.overlay
        ));
        let class = edit_documents(&class, |d| {
            if d["kind"] == "KubeadmControlPlaneTemplate" {
                d["spec"]["template"]["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]
                    ["etcd"] = json!({"external": {
                    "endpoints": ["https://127.0.0.1:2379"],
                    "caFile": "/etc/kubernetes/pki/etcd/ca.crt",
                    "certFile": "/etc/kubernetes/pki/apiserver-etcd-client.crt",
                    "keyFile": "/etc/kubernetes/pki/apiserver-etcd-client.key",
                }});
            }
        });
        self.bed.apply(ns, &class);
    }

    /// One JSON-patch op on the Cluster's topology, as a GitOps change would make.
    async fn set_topology(&self, ns: &str, name: &str, path: &str, value: Value) {
        let op = json!([{"op": "replace", "path": path, "value": value}]).to_string();
        let resource = format!("clusters.{}.cluster.x-k8s.io", self.bed.release.cluster_api);
        capi::kubectl(
            &self.bed.mgmt.kubeconfig,
            &["patch", &resource, name, "-n", ns, "--type=json", "-p", &op],
            None,
        );
        self.step(&format!("{path} = {value}"));
    }

    /// Waits until exactly `n` worker servers of `cluster` are ACTIVE, no other is
    /// left, and as many worker Machines have a node.
    async fn wait_workers(&self, ns: &str, cluster: &str, n: usize) {
        let prefix = format!("{cluster}-md-0-");
        let mut last = (Vec::new(), 0);
        let ok = poll(Duration::from_secs(180), async || {
            let nodes = self
                .machines(ns)
                .await
                .iter()
                .filter(|m| {
                    m.metadata
                        .name
                        .as_deref()
                        .is_some_and(|x| x.starts_with(&prefix))
                })
                .filter(|m| {
                    m.metadata.deletion_timestamp.is_none()
                        && !m.data["status"]["nodeRef"].is_null()
                })
                .count();
            // The API server first: a listing of servers costs Nova and Neutron more,
            // and is only worth it once the Machines agree.
            if nodes != n {
                last.1 = nodes;
                return false;
            }
            let servers = self.servers(&prefix).await;
            let done = servers.len() == n && servers.iter().all(|(_, s)| s == "ACTIVE");
            last = (servers, nodes);
            done
        })
        .await;
        if !ok {
            self.dump(ns).await;
        }
        assert!(
            ok,
            "waiting for {n} worker server(s) and node(s): have {last:?}"
        );
        self.step(&format!("{n} worker server(s) ACTIVE with a node"));
    }

    async fn hook_calls(&self) -> BTreeMap<String, u64> {
        let text = reqwest::get(format!("{}/metrics", self.stackhook.admin))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        let mut out = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("stackhook_hook_requests_total{"))
        {
            let Some((labels, n)) = line.rsplit_once(' ') else {
                continue;
            };
            let hook = labels
                .split("hook=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default();
            let outcome = labels
                .split("outcome=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or_default();
            *out.entry(format!("{hook}/{outcome}")).or_insert(0) +=
                n.parse::<f64>().unwrap_or(0.0) as u64;
        }
        out
    }
}

struct Phase {
    name: &'static str,
    started: Instant,
    access: cloud::AccessMark,
    hooks: BTreeMap<String, u64>,
    reconciles: BTreeMap<String, u64>,
    patch_cache: (u64, u64),
}

/// One phase of a cluster's life: how long, and what it cost.
#[derive(Debug)]
struct PhaseReport {
    name: &'static str,
    seconds: f64,
    /// stackhook's OpenStack requests by `service method`, from the cloud's access
    /// logs (by its `User-Agent`).
    cloud_requests: BTreeMap<String, u64>,
    cloud_writes: u64,
    hooks: BTreeMap<String, u64>,
    reconciles: BTreeMap<String, u64>,
    patch_hits: u64,
    patch_misses: u64,
}

impl std::fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {:.1} s; OpenStack writes {} ({:?}); hook calls {:?}; GeneratePatches from cache {} / computed {}; reconciles {:?}",
            self.name,
            self.seconds,
            self.cloud_writes,
            self.cloud_requests,
            self.hooks,
            self.patch_hits,
            self.patch_misses,
            self.reconciles
        )
    }
}

/// What CAPI's ClusterResourceSet controller applied to the stand-in for cluster
/// `name`, checked against the cloud: `cloud-config` with the cluster's subnet and
/// floating network, the CCM at `ccm_tag`, Cinder CSI with one StorageClass per
/// volume type the project sees, and Cilium; every resource Secret applied with
/// its current content. Returns the CCM resource's hash in the binding.
async fn assert_addons_applied(w: &World, ns: &str, name: &str, ccm_tag: &str) -> String {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
    use stackhook_openstack::blockstorage::BlockStorage;
    let standin = w.bed.standin_client().await;
    let ds: Api<DaemonSet> = Api::namespaced(standin.clone(), "kube-system");
    let applied = poll(Duration::from_secs(180), async || {
        ds.get_opt("openstack-cloud-controller-manager")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone())
            .is_some_and(|i| i.ends_with(ccm_tag))
    })
    .await;
    if !applied {
        w.dump(ns).await;
    }
    assert!(applied, "no CCM {ccm_tag} in the stand-in for {name}");
    let osc: Api<DynamicObject> = Api::namespaced_with(
        w.client().await,
        ns,
        &capi::infra("OpenStackCluster", "openstackclusters"),
    );
    let osc = osc
        .list(&ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={name}")))
        .await
        .expect("OpenStackClusters")
        .items
        .pop()
        .expect("the cluster's OpenStackCluster");
    let subnet = osc.data["status"]["network"]["subnets"][0]["id"]
        .as_str()
        .expect("subnet in status")
        .to_string();
    let secrets: Api<Secret> = Api::namespaced(standin.clone(), "kube-system");
    let conf = secrets
        .get("cloud-config")
        .await
        .expect("kube-system/cloud-config");
    let conf = String::from_utf8(conf.data.expect("data")["cloud.conf"].0.clone()).expect("utf-8");
    for want in [
        format!("subnet-id = \"{subnet}\""),
        format!("floating-network-id = \"{}\"", w.external_network),
        format!(
            "network-id = \"{}\"",
            osc.data["status"]["network"]["id"].as_str().unwrap_or("?")
        ),
    ] {
        assert!(conf.contains(&want), "{want} not in cloud.conf:\n{conf}");
    }
    // The credential is in cloud.conf, and nowhere in what the node bootstrap reads.
    let secret_line = conf
        .lines()
        .find(|l| l.starts_with("password = ") || l.starts_with("application-credential-secret = "))
        .expect("a credential in cloud.conf");
    let credential = secret_line
        .split(" = ")
        .nth(1)
        .unwrap_or_default()
        .trim_matches('"');
    assert!(credential.len() >= 6, "{secret_line}");
    let mgmt_secrets: Api<Secret> = Api::namespaced(w.client().await, ns);
    let vars = mgmt_secrets
        .get(&format!("{name}-bootstrap-vars"))
        .await
        .expect("bootstrap-vars");
    for (key, value) in vars.data.unwrap_or_default() {
        assert!(
            !String::from_utf8_lossy(&value.0).contains(credential),
            "the identity's credential in {name}-bootstrap-vars/{key}"
        );
    }
    let ccm = ds
        .get("openstack-cloud-controller-manager")
        .await
        .expect("CCM DaemonSet");
    let args = ccm.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(
        args.contains(&format!("--cluster-name={name}")),
        "the CCM is not named for the cleanup: {args:?}"
    );
    assert!(ds
        .get_opt("csi-cinder-nodeplugin")
        .await
        .expect("get")
        .is_some());
    assert!(
        ds.get_opt("cilium").await.expect("get").is_some(),
        "no Cilium agent"
    );
    let drivers: Api<CSIDriver> = Api::all(standin.clone());
    assert!(drivers
        .get_opt("cinder.csi.openstack.org")
        .await
        .expect("get")
        .is_some());
    let os = checker(&cloud::clouds_yaml().expect("clouds.yaml"));
    let types = os.block_storage.volume_types().await.expect("volume types");
    let classes: Api<StorageClass> = Api::all(standin);
    let have: BTreeSet<String> = classes
        .list(&ListParams::default())
        .await
        .expect("StorageClasses")
        .items
        .into_iter()
        .filter(|c| c.provisioner == "cinder.csi.openstack.org")
        .filter_map(|c| c.parameters?.get("type").cloned())
        .collect();
    let want: BTreeSet<String> = types.into_iter().map(|t| t.name).collect();
    assert!(want.len() >= 2, "the test cloud has volume types: {want:?}");
    assert_eq!(have, want, "one StorageClass per volume type");
    // CAPI's binding records every resource Secret applied, with its current content.
    let rs_api = stackhook::kubernetes::resource_set::ResourceSetApi::discover(&w.client().await)
        .await
        .expect("discovery")
        .expect("CAPI serves addons.cluster.x-k8s.io");
    let bindings: Api<DynamicObject> = Api::namespaced_with(w.client().await, ns, &rs_api.binding);
    let rs_secrets: Api<Secret> = Api::namespaced(w.client().await, ns);
    let mut ccm_hash = String::new();
    let current = poll(Duration::from_secs(60), async || {
        let Ok(b) = bindings.get(name).await else {
            return false;
        };
        let applied =
            stackhook::kubernetes::resource_set::applied_hashes(&b.data, &format!("{name}-addons"));
        let mut all = true;
        for part in ["cloud-config", "ccm", "cinder-csi", "cni"] {
            let secret = format!("{name}-addons-{part}");
            let Ok(s) = rs_secrets.get(&secret).await else {
                return false;
            };
            let data: BTreeMap<String, String> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            let hash = stackhook::addons::Rendered::hash(&data);
            all &= applied.get(&secret) == Some(&hash);
            if part == "ccm" {
                ccm_hash = hash;
            }
        }
        all
    })
    .await;
    assert!(
        current,
        "the binding does not show every addon applied with its current content"
    );
    w.step(&format!(
        "addons applied to the stand-in: CCM {ccm_tag}, CSI, {} StorageClasses, Cilium",
        have.len()
    ));
    ccm_hash
}

fn checker(clouds_path: &std::path::Path) -> stackhook_openstack::Clients {
    infra::checker(
        &std::fs::read(clouds_path).expect("clouds.yaml"),
        cloud::MEMBER,
    )
}

/// The test cloud's clouds.yaml with its member entry as `openstack`, the cloud the
/// packs name by default.
/// `yaml`'s documents, each passed through `edit`, as one multi-document text.
fn edit_documents(yaml: &str, edit: impl Fn(&mut Value)) -> String {
    kube_server::yaml_documents(yaml)
        .into_iter()
        .map(|mut d| {
            edit(&mut d);
            d.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn openstack_entry(clouds_yaml: &str) -> String {
    let v: Value = serde_saphyr::from_str(clouds_yaml).expect("clouds.yaml");
    let member = v["clouds"][cloud::MEMBER].clone();
    serde_json::to_string(&json!({"clouds": {"openstack": member}})).expect("json")
}

/// `${VAR}` and `${VAR:=default}` as clusterctl fills a template.
fn envsubst(text: &str, env: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').expect("closing brace") + at;
        let inner = &rest[at + 2..end];
        let (name, default) = match inner.split_once(":=") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match env.get(name).copied().or(default) {
            Some(v) => out.push_str(v),
            None => panic!("template variable {name} has no value"),
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_at_any_moment_under_capi_v1_13() {
    killed::killed_at_any_moment(capi::V1_13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_life_under_capi_v1_13() {
    whole_life(capi::V1_13).await;
}

async fn whole_life(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let Some(w) = World::start(release, "life", &["--hold-retry-after-seconds", "5"]).await else {
        return;
    };
    // Unique in the cloud, which outlives test runs.
    let name = &format!("life-{:x}", std::process::id() & 0xfffff);
    let ns = w.namespace("capi-life", &[name]).await;
    // From CAPI 1.12 the class plans chained upgrades through stackhook, which is
    // told the releases between (here: versions no other run uses, so that the test
    // images they need are this run's).
    let chained = release.chained_upgrades();
    let slot = match release.capi {
        "v1.10" => 0,
        "v1.11" => 1,
        _ => 2,
    };
    let patch = 100 + slot * 300 + std::process::id() % 300;
    let (mid, top) = (format!("v1.34.{patch}"), format!("v1.35.{patch}"));
    if chained {
        w.register_with(Some(json!({"kubernetesVersions": format!("{mid},{top}")})))
            .await;
        w.apply_kubeadm_class_external_etcd(&ns);
        w.bed.external_etcd_secrets(&ns, name).await;
    } else {
        w.apply_kubeadm_class(&ns);
    }
    w.wait_class_ready(&ns, "openstack-kubeadm").await;
    w.bed.point_at_standin(&ns, name).await;
    let _kubelet =
        StandInKubelet::start(w.client().await, w.bed.standin_client().await, release, &ns);
    let mut phases = Vec::new();

    // A misspelled flavor holds the creation at BeforeClusterCreate, which asks the
    // cloud before CAPI computes anything, with the message in the Cluster's
    // conditions, and nothing is created; fixed, the cluster proceeds.
    let phase = w.begin("held: misspelled flavor").await;
    let cluster = w.minimal_cluster(
        &ns,
        name,
        &[("OPENSTACK_CONTROL_PLANE_MACHINE_FLAVOR", "m1.mediumm")],
    );
    let cluster = if chained {
        // KCP reads certificate expiry from kubeadm on the node through the kubelet,
        // which a stand-in has not; the machines say it instead.
        edit_documents(&cluster, |d| {
            if d["kind"] == "Cluster" {
                d["spec"]["topology"]["controlPlane"]["metadata"]["annotations"] = json!({
                    "machine.cluster.x-k8s.io/certificates-expiry": "2099-01-01T00:00:00Z"
                });
            }
        })
    } else {
        cluster
    };
    w.bed.apply(&ns, &cluster);
    w.wait_upgrade_held(
        &ns,
        name,
        "creation held by BeforeClusterCreate",
        "openstack-create-check: variable openstackControlPlane.flavor: \
         flavor \"m1.mediumm\" not found in cloud \"openstack\"",
    )
    .await;
    assert!(
        w.servers(name).await.is_empty(),
        "a server despite the hold"
    );
    let osc: Api<DynamicObject> = Api::namespaced_with(
        w.client().await,
        &ns,
        &capi::infra("OpenStackCluster", "openstackclusters"),
    );
    assert!(
        osc.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "CAPI created the infrastructure while BeforeClusterCreate held it"
    );
    phases.push(w.end(phase).await);

    let phase = w.begin("create: fixed → first server ACTIVE").await;
    let applied = Instant::now();
    w.set_topology(
        &ns,
        name,
        "/spec/topology/variables/1/value/flavor",
        json!("m1.medium"),
    )
    .await;
    w.wait_cluster(
        &ns,
        name,
        Duration::from_secs(60),
        "TopologyReconciled",
        |c| condition_true(c, "TopologyReconciled"),
    )
    .await;
    // The cloud is asked only once an OpenStackMachine has a server being built:
    // Nova's answer, not the controller's report, times the step.
    let first_active = poll(Duration::from_secs(120), async || {
        !w.infra_machines_in(&ns, name, &["BUILD", "ACTIVE"])
            .await
            .is_empty()
    })
    .await
        && poll(Duration::from_secs(120), async || {
            w.servers(name).await.iter().any(|(_, s)| s == "ACTIVE")
        })
        .await;
    if !first_active {
        w.dump(&ns).await;
    }
    assert!(first_active, "no ACTIVE server for {name}");
    let to_server = applied.elapsed();
    w.step(&format!(
        "first server ACTIVE, {:.1} s after the valid topology was applied",
        to_server.as_secs_f64()
    ));
    let create = w.end(phase).await;
    // The access logs see stackhook by its User-Agent: a create writes.
    assert!(create.cloud_writes > 10, "{create}");
    phases.push(create);

    let phase = w.begin("control plane initialized → workers").await;
    w.wait_cluster(
        &ns,
        name,
        Duration::from_secs(120),
        "ControlPlaneInitialized",
        |c| condition_true(c, "ControlPlaneInitialized"),
    )
    .await;
    let acpi = poll(Duration::from_secs(60), async || {
        w.hook_calls()
            .await
            .get("AfterControlPlaneInitialized/success")
            .is_some_and(|n| *n >= 1)
    })
    .await;
    assert!(acpi, "CAPI never called AfterControlPlaneInitialized");
    let vars: Api<Secret> = Api::namespaced(w.client().await, &ns);
    assert!(
        vars.get_opt(&format!("{name}-bootstrap-vars"))
            .await
            .expect("get")
            .is_some(),
        "no {name}-bootstrap-vars after AfterControlPlaneInitialized"
    );
    w.step("AfterControlPlaneInitialized called; bootstrap-vars written");
    // The worker of md-0 gets its server once the control plane is initialized.
    w.wait_workers(&ns, name, 1).await;
    phases.push(w.end(phase).await);

    let phase = w.begin("addons applied by CAPI's ClusterResourceSet").await;
    let addons_hash = assert_addons_applied(&w, &ns, name, ":v1.33.1").await;
    phases.push(w.end(phase).await);

    // Steady state: nothing changes, so nothing is written to the cloud.
    let phase = w.begin("steady state (30 s)").await;
    let addon_versions = async || {
        let secrets: Api<Secret> = Api::namespaced(w.client().await, &ns);
        secrets
            .list(&ListParams::default().labels(stackhook::kubernetes::resource_set::SECRET_LABEL))
            .await
            .expect("addons Secrets")
            .items
            .into_iter()
            .map(|s| {
                (
                    s.metadata.name.unwrap_or_default(),
                    s.metadata.resource_version.unwrap_or_default(),
                )
            })
            .collect::<BTreeMap<String, String>>()
    };
    let addons_before = addon_versions().await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let steady = w.end(phase).await;
    // CAPI adds its ClusterResourceSet as an owner of each resource Secret; the
    // controller keeps it, so neither side writes again.
    assert_eq!(addons_before.len(), 4, "{addons_before:?}");
    assert_eq!(
        addon_versions().await,
        addons_before,
        "addons Secrets rewritten in the steady state"
    );
    assert_eq!(
        steady.cloud_writes, 0,
        "OpenStack writes in the steady state: {steady:?}"
    );
    phases.push(steady);

    // Scale up, then down: servers are created, then one deleted.
    let phase = w.begin("scale md-0 1 → 2").await;
    w.set_topology(
        &ns,
        name,
        "/spec/topology/workers/machineDeployments/0/replicas",
        json!(2),
    )
    .await;
    w.wait_workers(&ns, name, 2).await;
    phases.push(w.end(phase).await);
    let phase = w.begin("scale md-0 2 → 1").await;
    w.set_topology(
        &ns,
        name,
        "/spec/topology/workers/machineDeployments/0/replicas",
        json!(1),
    )
    .await;
    w.wait_workers(&ns, name, 1).await;
    phases.push(w.end(phase).await);

    // On a running cluster a misspelled flavor is stopped by ValidateTopology, which
    // asks the cloud, and nothing changes; set right, the MachineDeployment rolls.
    let phase = w.begin("refused: misspelled worker flavor").await;
    w.set_topology(
        &ns,
        name,
        "/spec/topology/variables/2/value/flavor",
        json!("m1.smalll"),
    )
    .await;
    // CAPI 1.11+ writes only "got failure response" into the condition and logs the
    // message; stackhook's Warning Event on the Cluster carries it where `kubectl
    // describe cluster` shows it.
    let refused = w
        .wait_cluster(
            &ns,
            name,
            Duration::from_secs(60),
            "misspelled flavor refused",
            |c| {
                condition(c, "TopologyReconciled").is_some_and(|t| {
                    t["status"] == "False"
                        && t["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("validation of patch \"openstack\" failed"))
                })
            },
        )
        .await;
    println!(
        "refused: {}",
        condition(&refused, "TopologyReconciled").unwrap_or_default()
    );
    let flavor_named = "OpenStackMachineTemplate spec.flavor: flavor \"m1.smalll\" not found";
    let events: Api<Event> = Api::namespaced(w.client().await, &ns);
    let uid = refused["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let evented = poll(Duration::from_secs(30), async || {
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("CloudResourcesMissing")
                    && e.involved_object.uid.as_deref() == Some(uid.as_str())
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains(flavor_named))
            })
        })
    })
    .await;
    assert!(evented, "no Warning Event naming the flavor on the Cluster");
    // klog escapes the quotes.
    assert!(
        w.bed.log_lines("CAPI_LOG", "m1.smalll").iter().any(|l| l
            .contains("OpenStackMachineTemplate spec.flavor: flavor")
            && l.contains("not found")),
        "CAPI did not log stackhook's message"
    );
    let md_servers = w.servers(&format!("{name}-md-0-")).await;
    assert_eq!(md_servers.len(), 1, "{md_servers:?}");
    phases.push(w.end(phase).await);

    // A worker variable rotates the worker template: the MachineDeployment rolls,
    // a new server boots with the new flavor and the old one goes.
    let phase = w.begin("worker flavor m1.medium → m1.small: roll").await;
    let before: Vec<String> = w
        .servers(&format!("{name}-md-0-"))
        .await
        .into_iter()
        .map(|s| s.0)
        .collect();
    w.set_topology(
        &ns,
        name,
        "/spec/topology/variables/2/value/flavor",
        json!("m1.small"),
    )
    .await;
    let rolled = poll(Duration::from_secs(180), async || {
        let prefix = format!("{name}-md-0-");
        let reported = w.infra_machines_in(&ns, &prefix, &["ACTIVE"]).await;
        if !reported.iter().any(|n| !before.contains(n)) {
            return false;
        }
        let now = w.servers(&prefix).await;
        now.len() == 1
            && now
                .iter()
                .all(|(n, s)| s == "ACTIVE" && !before.contains(n))
    })
    .await;
    if !rolled {
        w.dump(&ns).await;
    }
    assert!(
        rolled,
        "md-0 did not roll to a new server: {:?}",
        w.servers(name).await
    );
    w.wait_workers(&ns, name, 1).await;
    phases.push(w.end(phase).await);

    let member = cloud::entry(cloud::MEMBER).expect("member");
    if chained {
        chained_upgrade(
            &w,
            &member,
            &ns,
            name,
            (&mid, &top),
            &mut phases,
            &addons_hash,
        )
        .await;
    } else {
        // An upgrade to a version Glance has no image for is held by the preflight,
        // with its message in the Cluster's conditions.
        let phase = w.begin("upgrade held until the image exists").await;
        // A patch release no image exists for, also in a cloud that outlived other runs.
        // One per release: the test process runs every release's life against one cloud.
        let target = &mid;
        // Left by an earlier run that stopped before its clean-up.
        capi::delete_images(&member, target).await;
        w.set_topology(&ns, name, "/spec/topology/version", json!(target))
            .await;
        w.wait_upgrade_held(
            &ns,
            name,
            "upgrade held by BeforeClusterUpgrade",
            &format!("no active Glance image for Kubernetes {target}"),
        )
        .await;
        let kcp_version = async || w.kcp_field(&ns, "/spec/version").await;
        assert_eq!(
            kcp_version().await,
            "v1.33.1",
            "the control plane moved while the hook held it"
        );
        capi::create_image(&member, &format!("ubuntu-2404-kube-{target}"), target).await;
        let upgraded = poll(Duration::from_secs(120), async || {
            kcp_version().await == *target
        })
        .await;
        assert!(
            upgraded,
            "CAPI did not move the control plane to {target} once the image existed"
        );
        w.step("image added: CAPI upgrades the control plane");
        // KCP's rollout stops at its preflight checks: a stand-in has no etcd member
        // to report healthy, so KCP never creates the new control-plane machine and
        // CAPI holds the workers until the control plane is upgraded.
        let stopped = poll(Duration::from_secs(60), async || {
            w.bed
                .log_lines(
                    "CONTROLPLANE_LOG",
                    "Waiting for control plane to pass preflight checks",
                )
                .iter()
                .any(|l| l.contains("EtcdMemberHealthy"))
        })
        .await;
        assert!(
            stopped,
            "KCP's rollout did not stop where a stand-in makes it stop"
        );
        w.step("KCP waits for its etcd preflight check, as a stand-in must make it");
        assert_eq!(capi::delete_images(&member, target).await, 1);
        phases.push(w.end(phase).await);
    }

    // Delete: BeforeClusterDelete, then nothing of the cluster in the cloud.
    let phase = w.begin("delete").await;
    w.delete_cluster(&ns, name).await;
    phases.push(w.end(phase).await);
    let calls = w.hook_calls().await;
    assert!(
        calls
            .get("BeforeClusterDelete/success")
            .is_some_and(|n| *n >= 1),
        "{calls:?}"
    );
    w.assert_nothing_left(&ns, name).await;
    // The addons went with the OpenStackCluster (no garbage collector runs here:
    // the controller removed them before its finalizer).
    let (sets, secrets) = w.addons_objects(&ns).await;
    assert!(sets.is_empty(), "ClusterResourceSets left: {sets:?}");
    assert!(secrets.is_empty(), "addons Secrets left: {secrets:?}");
    w.step("the ClusterResourceSet and addons Secrets went with the cluster");
    println!("\nphases under CAPI {}:", release.capi);
    for p in &phases {
        println!("  {p}");
    }
    println!(
        "create goal: first server ACTIVE {:.1} s after the topology was applied (goal ≤ 30 s)",
        to_server.as_secs_f64()
    );
    w.bed.assert_loopback_only();
}

/// v1.33 → v1.35 in one edit of the Cluster's version, as CAPI 1.12+ runs it: stackhook
/// plans one control-plane step per minor, its preflight holds the step whose image
/// is missing, KCP replaces the control-plane machine at each step (etcd external, so
/// the stand-in passes KCP's checks), then the workers follow, each on a new server.
async fn chained_upgrade(
    w: &World,
    member: &cloud::CloudEntry,
    ns: &str,
    name: &str,
    (mid, top): (&str, &str),
    phases: &mut Vec<PhaseReport>,
    addons_hash: &str,
) {
    let phase = w
        .begin("chained upgrade: held for the middle version's image")
        .await;
    // Left by an earlier run that stopped before its clean-up.
    capi::delete_images(member, mid).await;
    capi::delete_images(member, top).await;
    capi::create_image(member, &format!("ubuntu-2404-kube-{top}"), top).await;
    let before: BTreeSet<String> = w.servers(name).await.into_iter().map(|s| s.0).collect();
    let machines_before = machine_names(w, ns).await;
    w.set_topology(ns, name, "/spec/topology/version", json!(top))
        .await;
    w.wait_upgrade_held(
        ns,
        name,
        "chained upgrade held for the middle version's image",
        &format!("no active Glance image for Kubernetes {mid}"),
    )
    .await;
    assert_eq!(
        w.kcp_field(ns, "/spec/version").await,
        "v1.33.1",
        "the control plane moved while the preflight held it"
    );
    // The Cluster asks for the new version, but the control plane is not there: the
    // addons stay at its minor.
    assert_eq!(
        assert_addons_applied(w, ns, name, ":v1.33.1").await,
        addons_hash,
        "the CCM moved before the control plane did"
    );
    phases.push(w.end(phase).await);

    let phase = w
        .begin("chained upgrade: control plane v1.34, v1.35; workers v1.35")
        .await;
    capi::create_image(member, &format!("ubuntu-2404-kube-{mid}"), mid).await;
    let started = Instant::now();
    // KCP's status.version is its oldest machine's: a step is done when the old
    // control-plane machine is gone.
    for step in [mid, top] {
        let reached = poll(Duration::from_secs(300), async || {
            w.kcp_field(ns, "/status/version").await == step
        })
        .await;
        if !reached {
            w.dump(ns).await;
        }
        assert!(
            reached,
            "the control plane did not reach {step}: KCP spec {:?}, status {:?}",
            w.kcp_field(ns, "/spec/version").await,
            w.kcp_field(ns, "/status/version").await
        );
        w.step(&format!(
            "control plane at {step}, {:.1} s after the middle image appeared",
            started.elapsed().as_secs_f64()
        ));
    }
    // Then every Machine is at the target with a node (none still being deleted),
    // and the cloud holds exactly their servers, none of them from before.
    let done = poll(Duration::from_secs(300), async || {
        let all = w.machines(ns).await;
        if all.len() != 2
            || !all.iter().all(|m| {
                m.metadata.deletion_timestamp.is_none()
                    && m.data["spec"]["version"] == top
                    && !m.data["status"]["nodeRef"].is_null()
            })
        {
            return false;
        }
        let servers = w.servers(name).await;
        servers.len() == 2
            && servers
                .iter()
                .all(|(n, s)| s == "ACTIVE" && !before.contains(n))
    })
    .await;
    if !done {
        w.dump(ns).await;
    }
    assert!(
        done,
        "the machines did not all reach {top} on new servers: {:?}",
        w.servers(name).await
    );
    let machines_after = machine_names(w, ns).await;
    assert!(
        machines_after.is_disjoint(&machines_before),
        "a machine of {machines_before:?} outlived the upgrade: {machines_after:?}"
    );
    w.step(&format!(
        "every machine at {top} on a new server, {:.1} s after the middle image appeared",
        started.elapsed().as_secs_f64()
    ));
    // CAPI's per-step hooks, in the order it called them.
    let finished = poll(Duration::from_secs(60), async || {
        !w.lifecycle_order(name, &["AfterClusterUpgrade"]).is_empty()
    })
    .await;
    assert!(finished, "CAPI never called AfterClusterUpgrade");
    let order = w.lifecycle_order(
        name,
        &[
            "BeforeClusterUpgrade",
            "BeforeControlPlaneUpgrade",
            "AfterControlPlaneUpgrade",
            "BeforeWorkersUpgrade",
            "AfterWorkersUpgrade",
            "AfterClusterUpgrade",
        ],
    );
    assert_eq!(
        order,
        [
            "BeforeClusterUpgrade",
            "BeforeControlPlaneUpgrade",
            "AfterControlPlaneUpgrade",
            "BeforeControlPlaneUpgrade",
            "AfterControlPlaneUpgrade",
            "BeforeWorkersUpgrade",
            "AfterWorkersUpgrade",
            "AfterClusterUpgrade",
        ],
        "CAPI's hook calls for a two-step upgrade"
    );
    let calls = w.hook_calls().await;
    assert!(
        calls
            .get("GenerateUpgradePlan/success")
            .is_some_and(|n| *n >= 1),
        "{calls:?}"
    );
    assert_eq!(calls.get("GenerateUpgradePlan/failure"), None, "{calls:?}");
    // AfterControlPlaneUpgrade moved the CCM and CSI with the control plane and
    // held until CAPI had applied them.
    let upgraded = assert_addons_applied(w, ns, name, ":v1.35.0").await;
    assert_ne!(upgraded, addons_hash);
    let moved = w
        .stackhook_logs()
        .iter()
        .filter(|l| l["message"] == "addons moved to the control plane's version")
        .count();
    assert!(moved >= 1, "the upgrade hook never moved the addons");
    assert_eq!(capi::delete_images(member, mid).await, 1);
    assert_eq!(capi::delete_images(member, top).await, 1);
    phases.push(w.end(phase).await);
}

/// One shipped ClusterClass with its templates, and the example Clusters that use it.
struct Shipped {
    /// Class and templates: repository files, or a kustomization (`kustomize:` prefix).
    sources: &'static [&'static str],
    class: &'static str,
    examples: &'static [&'static str],
    /// The namespace the files name, if they fix one.
    namespace: Option<&'static str>,
    /// Written in cluster.x-k8s.io/v1beta2 only.
    v1beta2_only: bool,
    /// What CAPI 1.11+ gets instead of `sources`, if anything else.
    sources_v1beta2: Option<&'static [&'static str]>,
    /// Its kubeadm references stay v1beta1 on purpose (RefVersionsUpToDate False
    /// from CAPI 1.11; see clusterclasses/kustomization.yaml).
    kubeadm_refs_v1beta1: bool,
}

const SHIPPED: &[Shipped] = &[
    Shipped {
        sources: &["kustomize:clusterclasses/openstack-kubeadm/overlays/OVERLAY"],
        class: "openstack-kubeadm",
        examples: &[
            "openstack-kubeadm-minimal.yaml",
            "openstack-kubeadm-ha.yaml",
            "openstack-kubeadm-keepalived.yaml",
        ],
        namespace: None,
        v1beta2_only: false,
        sources_v1beta2: None,
        kubeadm_refs_v1beta1: false,
    },
    Shipped {
        sources: &[
            "clusterclasses/openstack-kubeadm-bootstrap-vars.yaml",
            "templates/openstack-kubeadm-bootstrap-vars.yaml",
        ],
        class: "openstack-kubeadm-bootstrap-vars",
        examples: &["openstack-kubeadm-bootstrap-vars-cluster.yaml"],
        namespace: None,
        v1beta2_only: false,
        sources_v1beta2: Some(&[
            "kustomize:clusterclasses",
            "templates/openstack-kubeadm-bootstrap-vars.yaml",
        ]),
        kubeadm_refs_v1beta1: false,
    },
    Shipped {
        sources: &[
            "clusterclasses/magnum-compatible.yaml",
            "templates/magnum-compatible.yaml",
        ],
        class: "magnum-compatible-v1",
        examples: &["magnum-cluster.yaml"],
        namespace: Some("magnum-system"),
        v1beta2_only: false,
        sources_v1beta2: Some(&[
            "clusterclasses/magnum-compatible-capi-1.11.yaml",
            "templates/magnum-compatible.yaml",
        ]),
        kubeadm_refs_v1beta1: false,
    },
    Shipped {
        sources: &["clusterclasses/dev-test.yaml", "templates/dev-test.yaml"],
        class: "dev-test",
        examples: &["dev-test-cluster.yaml"],
        namespace: None,
        v1beta2_only: true,
        sources_v1beta2: None,
        kubeadm_refs_v1beta1: false,
    },
];

/// Every shipped class reaches VariablesReady (and RefVersionsUpToDate where the
/// release has it) and every example Cluster TopologyReconciled, filled with the
/// loopback cloud's values. The controllers watch another namespace: no example gets
/// cloud resources or an endpoint, while ValidateTopology still asks the cloud.
async fn shipped_classes(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let Some(w) = World::start(
        release,
        "classes",
        &["--watch-namespace", "capi-nothing-here"],
    )
    .await
    else {
        return;
    };
    let c = &w.os;
    let image = loopback_image(c).await;
    let suffix = format!("{:x}", std::process::id() & 0xfffff);
    let groups = server_groups(
        c,
        &[
            format!("examples-cp-{suffix}"),
            format!("examples-md-{suffix}"),
        ],
    )
    .await;
    for s in SHIPPED {
        if s.v1beta2_only && !release.is_v1beta2() {
            continue;
        }
        let names: Vec<String> = s
            .examples
            .iter()
            .map(|e| {
                format!(
                    "{}-{suffix}",
                    e.trim_end_matches(".yaml")
                        .replace("openstack-kubeadm-", "ok-")
                )
            })
            .map(|n| {
                n.chars()
                    .take(30)
                    .collect::<String>()
                    .trim_end_matches('-')
                    .to_string()
            })
            .collect();
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let ns = match s.namespace {
            Some(ns) => {
                let client = w.client().await;
                let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
                let _ = api
                    .create(
                        &Default::default(),
                        &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
                    )
                    .await;
                for n in &name_refs {
                    kube_server::identity_secret(
                        &client,
                        ns,
                        &format!("{n}-cloud-config"),
                        &w.clouds_yaml,
                    )
                    .await;
                }
                ns.to_string()
            }
            None => w.namespace("capi-classes", &name_refs).await,
        };
        let sources = match s.sources_v1beta2 {
            Some(v1beta2) if release.is_v1beta2() => v1beta2,
            _ => s.sources,
        };
        for src in sources {
            let text = match src.strip_prefix("kustomize:") {
                Some(dir) => capi::kustomize(&dir.replace("OVERLAY", release.overlay)),
                None => std::fs::read_to_string(capi::repo().join(src)).expect("source"),
            };
            w.bed.apply(&ns, &text);
        }
        w.wait_class(&ns, s.class, !s.kubeadm_refs_v1beta1).await;
        for (example, name) in s.examples.iter().zip(&names) {
            let text =
                std::fs::read_to_string(capi::repo().join("clusterclasses/examples").join(example))
                    .expect("example");
            let env = BTreeMap::from([
                ("CLUSTER_NAME", name.as_str()),
                ("NAMESPACE", ns.as_str()),
                ("OPENSTACK_EXTERNAL_NETWORK_ID", w.external_network.as_str()),
                ("EXTERNAL_NETWORK_ID", w.external_network.as_str()),
                ("CLUSTER_UUID", "9b6fd0a4-35f6-4a8b-9c4e-5a1e2d3c4b5a"),
                ("KUBERNETES_VERSION", "v1.33.1"),
                ("CONTROL_PLANE_FLAVOR", "m1.medium"),
                ("WORKER_FLAVOR", "m1.small"),
                ("IMAGE_ID", image.as_str()),
                ("CONTROL_PLANE_SERVER_GROUP_ID", groups[0].as_str()),
                ("WORKER_SERVER_GROUP_ID", groups[1].as_str()),
                // The HA example's GPU workers, with what the loopback cloud has.
                ("OPENSTACK_GPU_FLAVOR", "m1.large"),
                ("OPENSTACK_GPU_IMAGE_NAME", "ubuntu-2404-kube-v1.33.1"),
            ]);
            let mut yaml = envsubst(&text, &env);
            // Examples that fix their name and namespace get the test's.
            let mut docs = kube_server::yaml_documents(&yaml);
            for d in &mut docs {
                if d["kind"] == "Cluster" {
                    d["metadata"]["name"] = json!(name);
                }
            }
            yaml = docs
                .iter()
                .map(|d| serde_json::to_string(d).expect("json"))
                .collect::<Vec<_>>()
                .join("\n---\n");
            w.bed.apply(&ns, &yaml);
            let c = w
                .wait_cluster(
                    &ns,
                    name,
                    Duration::from_secs(90),
                    &format!("{example}: TopologyReconciled"),
                    |c| condition_true(c, "TopologyReconciled"),
                )
                .await;
            assert_eq!(c["spec"]["topology"]["version"], "v1.33.1", "{example}");
        }
    }
    for g in groups {
        let _ = c.compute.delete_server_group(&g).await;
    }
    every_pack_accepted(&w).await;
    w.bed.assert_loopback_only();
}

/// Each pack stackhook serves, alone as the external patch of a class, has its
/// DiscoverVariables answer accepted by CAPI: the class reaches VariablesReady.
async fn every_pack_accepted(w: &World) {
    let ar = capi::extension_configs(w.bed.release);
    let ec = Api::<DynamicObject>::all_with(w.client().await, &ar)
        .get(EXTENSION)
        .await
        .expect("ExtensionConfig");
    let packs: Vec<String> = ec.data["status"]["handlers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["name"].as_str())
        .filter_map(|n| n.strip_suffix(&format!("-discover-variables.{EXTENSION}")))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    assert!(packs.len() >= 5, "packs served: {packs:?}");
    let ns = w.namespace("capi-packs", &[]).await;
    let base = capi::kustomize(&format!(
        "clusterclasses/openstack-kubeadm/overlays/{}",
        w.bed.release.overlay
    ));
    let mut docs = kube_server::yaml_documents(&base);
    let class = docs
        .iter()
        .position(|d| d["kind"] == "ClusterClass")
        .map(|i| docs.remove(i))
        .expect("class");
    let (generate, validate) = if w.bed.release.is_v1beta2() {
        ("generatePatchesExtension", "validateTopologyExtension")
    } else {
        ("generateExtension", "validateExtension")
    };
    for pack in &packs {
        let mut c = class.clone();
        c["metadata"]["name"] = json!(format!("pack-{pack}"));
        c["spec"]["patches"] = json!([{"name": pack, "external": {
            generate: format!("{pack}-generate-patches.{EXTENSION}"),
            validate: format!("{pack}-validate-topology.{EXTENSION}"),
            "discoverVariablesExtension": format!("{pack}-discover-variables.{EXTENSION}"),
        }}]);
        docs.push(c);
    }
    let yaml = docs
        .iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    w.bed.apply(&ns, &yaml);
    for pack in &packs {
        w.wait_class_ready(&ns, &format!("pack-{pack}")).await;
    }
}

/// `stackhook plan`'s prediction for each row of a table of changes agrees with what
/// CAPI then does (see tests/capi/plan.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plan_predictions_under_capi_v1_13() {
    plan_vs_capi::plan_predictions(capi::V1_13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shipped_classes_under_capi_v1_10() {
    shipped_classes(capi::V1_10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shipped_classes_under_capi_v1_11() {
    shipped_classes(capi::V1_11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shipped_classes_under_capi_v1_13() {
    shipped_classes(capi::V1_13).await;
}

/// The Magnum shape under CAPI v1.10, the Magnum management cluster's generation:
/// `clusterclasses/magnum-compatible.yaml` in `magnum-system`, the example Cluster as
/// the driver creates it, and the identity Secret exactly as the driver writes it (an
/// application credential without `auth_type`, `verify: true`, the CA bundle under
/// `cacert`): machines get servers in the loopback cloud, and deleting the Cluster
/// leaves nothing there.
async fn magnum_shape(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let Some(w) = World::start(release, "magnum", &[]).await else {
        return;
    };
    let ns = "magnum-system";
    let name = &format!("kube-{:05x}", std::process::id() & 0xfffff);
    let uuid = "3f1c9a52-8d47-4b6e-9a0f-2c5d7e8b1a34";
    let client = w.client().await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
        )
        .await
        .expect("namespace");
    // The driver's Secret: PyYAML's dump of cloud `default` (sorted keys, no
    // auth_type) and a CA bundle of the size of certifi's.
    let appcred = cloud::entry(cloud::MEMBER_APPCRED).expect("application credential entry");
    let clouds_yaml = format!(
        "clouds:\n  default:\n    auth:\n      application_credential_id: {}\n      application_credential_secret: {}\n      auth_url: {}\n    endpoint_type: public\n    identity_api_version: 3\n    region_name: {}\n    verify: true\n",
        appcred.application_credential_id, appcred.application_credential_secret, appcred.auth_url, appcred.region_name
    );
    let bundle =
        std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_else(|_| {
            // Machines without Debian's bundle: one certificate, repeated to the size.
            let one = std::fs::read_to_string(
                capi::repo().join("tests/fixtures/magnum/secret.cloud-config.yaml"),
            )
            .expect("fixture");
            one.repeat(200)
        });
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-cloud-config"), "namespace": ns,
                             "labels": {"cluster-uuid": uuid}},
                "stringData": {"clouds.yaml": clouds_yaml, "cacert": bundle},
            }))
            .expect("secret"),
        )
        .await
        .expect("identity Secret");
    let c = &w.os;
    let image = loopback_image(c).await;
    let groups = server_groups(c, &[name.to_string(), format!("{name}-default-worker")]).await;
    for src in [
        "clusterclasses/magnum-compatible.yaml",
        "templates/magnum-compatible.yaml",
    ] {
        w.bed.apply(
            ns,
            &std::fs::read_to_string(capi::repo().join(src)).expect("source"),
        );
    }
    w.wait_class_ready(ns, "magnum-compatible-v1").await;
    w.bed.point_at_standin(ns, name).await;
    let _kubelet =
        StandInKubelet::start(w.client().await, w.bed.standin_client().await, release, ns);
    let text =
        std::fs::read_to_string(capi::repo().join("clusterclasses/examples/magnum-cluster.yaml"))
            .expect("example");
    let env = BTreeMap::from([
        ("CLUSTER_NAME", name.as_str()),
        ("CLUSTER_UUID", uuid),
        ("KUBERNETES_VERSION", "v1.33.1"),
        ("CONTROL_PLANE_FLAVOR", "m1.medium"),
        ("WORKER_FLAVOR", "m1.small"),
        ("IMAGE_ID", image.as_str()),
        ("EXTERNAL_NETWORK_ID", w.external_network.as_str()),
        ("CONTROL_PLANE_SERVER_GROUP_ID", groups[0].as_str()),
        ("WORKER_SERVER_GROUP_ID", groups[1].as_str()),
    ]);
    let phase = w.begin("magnum: create → servers").await;
    w.bed.apply(ns, &envsubst(&text, &env));
    w.wait_cluster(
        ns,
        name,
        Duration::from_secs(90),
        "magnum: TopologyReconciled",
        |c| condition_true(c, "TopologyReconciled"),
    )
    .await;
    // One control-plane and one worker machine, each with an ACTIVE server.
    let ok = poll(Duration::from_secs(240), async || {
        let machines = w.machines(ns).await;
        if machines.len() != 2
            || machines
                .iter()
                .any(|m| m.data["status"]["nodeRef"].is_null())
        {
            return false;
        }
        let servers = w.servers(name).await;
        servers.len() == 2 && servers.iter().all(|(_, s)| s == "ACTIVE")
    })
    .await;
    if !ok {
        w.dump(ns).await;
    }
    assert!(
        ok,
        "the Magnum cluster's machines did not get servers: {:?}",
        w.servers(name).await
    );
    w.step("magnum: control plane and worker servers ACTIVE, Nodes matched");
    // The driver installs its own CCM and CSI: two would fight over the nodes.
    let (sets, secrets) = w.addons_objects(ns).await;
    assert!(sets.is_empty(), "addons for a Magnum cluster: {sets:?}");
    assert!(
        secrets.is_empty(),
        "addons Secrets for a Magnum cluster: {secrets:?}"
    );
    println!("  {}", w.end(phase).await);
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(w.client().await, ns, &capi::clusters(release));
    clusters
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete cluster");
    let gone = poll(Duration::from_secs(240), async || {
        matches!(clusters.get_opt(name).await, Ok(None))
    })
    .await;
    if !gone {
        w.dump(ns).await;
    }
    assert!(gone, "Cluster {name} was not deleted");
    assert_eq!(
        w.servers(name).await,
        Vec::<(String, String)>::new(),
        "servers left"
    );
    w.step("magnum: deleted, no server left");
    for g in groups {
        let _ = c.compute.delete_server_group(&g).await;
    }
    w.bed.assert_loopback_only();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn magnum_shape_under_capi_v1_10() {
    magnum_shape(capi::V1_10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_life_under_capi_v1_10() {
    whole_life(capi::V1_10).await;
}

/// The release `clusterctl` installs in the move test, and the one it upgrades to.
const RELEASE: &str = "v0.1.0";
const NEXT: &str = "v0.1.1";

async fn machine_names(w: &World, ns: &str) -> BTreeSet<String> {
    w.machines(ns)
        .await
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect()
}

/// Every `…Ref` name in the specs of the KubeadmControlPlanes and MachineDeployments of
/// `ns`: a rotated template shows as a new name.
async fn template_refs(w: &World, ns: &str) -> BTreeSet<String> {
    fn refs(v: &Value, path: &str, out: &mut BTreeSet<String>) {
        if let Value::Object(m) = v {
            for (k, child) in m {
                if k.ends_with("Ref") {
                    if let Some(n) = child["name"].as_str() {
                        out.insert(format!("{path}.{k}={n}"));
                    }
                }
                refs(child, &format!("{path}.{k}"), out);
            }
        }
    }
    let mut out = BTreeSet::new();
    for ar in [
        capi::kcps(w.bed.release),
        capi::machine_deployments(w.bed.release),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(w.client().await, ns, &ar);
        for o in api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let prefix = format!("{}/{}", ar.kind, o.metadata.name.unwrap_or_default());
            refs(&o.data["spec"], &prefix, &mut out);
        }
    }
    out
}

/// Every `id`/`…ID` string under `v`, with its path: what the cloud decided.
fn cloud_ids(v: &Value, path: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{path}.{k}");
                match child {
                    Value::String(s) if k == "id" || k.ends_with("ID") => {
                        out.insert(format!("{p}={s}"));
                    }
                    _ => cloud_ids(child, &p, out),
                }
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                cloud_ids(child, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// OpenStackCluster and OpenStackMachines of `ns`: name → (ready, the cloud's IDs in
/// spec.providerID and status).
async fn infra_state(client: &Client, ns: &str) -> BTreeMap<String, (bool, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    for ar in [
        capi::infra("OpenStackCluster", "openstackclusters"),
        capi::infra("OpenStackMachine", "openstackmachines"),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        for o in api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let mut ids = BTreeSet::new();
            cloud_ids(&o.data["status"], "status", &mut ids);
            if let Some(p) = o.data["spec"]["providerID"].as_str() {
                ids.insert(format!("spec.providerID={p}"));
            }
            let ready = o.data["status"]["ready"] == true;
            out.insert(
                format!("{}/{}", ar.kind, o.metadata.name.unwrap_or_default()),
                (ready, ids),
            );
        }
    }
    out
}

/// Installed by `clusterctl init` from the release `deploy/release.sh` writes, on two
/// management clusters: a cluster whose machines stackhook made in the loopback cloud
/// moves with `clusterctl move` from the first to the second. The status `move` does
/// not carry is rebuilt by stackhook on the target with the same IDs and no OpenStack
/// write; stackhook on the source changes nothing in the cloud while the objects are
/// deleted there; the Secrets the cluster needs go along; deleted on the target,
/// nothing is left.
async fn clusterctl_move(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let repo = match clusterctl::Repo::new(
        &capi::repo(),
        &capi::capi_dir(),
        &kube_server::kube_dir(),
        &[
            (RELEASE, &[]),
            (
                NEXT,
                &[(
                    "STACKHOOK_RELEASE_IMAGE",
                    "registry.example.com/stackhook:v0.1.1",
                )],
            ),
        ],
    ) {
        Ok(r) => Arc::new(r),
        Err(why) => {
            println!("skipping clusterctl move: {why}");
            return;
        }
    };
    let Some(mut a) =
        World::start_with(release, "move-from", &[], Some((repo.clone(), RELEASE))).await
    else {
        return;
    };
    let name = &format!("mv-{:x}", std::process::id() & 0xfffff);
    let ns = kube_server::namespace(&a.client().await, "capi-move").await;

    // `clusterctl generate cluster` with the release's default template: the Cluster,
    // its identity Secret, and the ClusterClass with its templates.
    let b64 = data_encoding::BASE64.encode(a.clouds_yaml.as_bytes());
    let infra = format!("openstack:{RELEASE}");
    let yaml = repo
        .run(
            Some(&a.bed.mgmt.kubeconfig),
            &[
                "generate",
                "cluster",
                name,
                "--infrastructure",
                &infra,
                "--target-namespace",
                &ns,
                "--kubernetes-version",
                "v1.33.1",
                "--control-plane-machine-count",
                "1",
                "--worker-machine-count",
                "1",
            ],
            &[
                ("OPENSTACK_CLOUD_YAML_B64", &b64),
                ("OPENSTACK_EXTERNAL_NETWORK_ID", &a.external_network),
            ],
        )
        .unwrap_or_else(|e| panic!("clusterctl generate cluster: {e}"));
    assert!(
        yaml.contains("kind: ClusterClass"),
        "the class comes with the template"
    );
    a.bed.point_at_standin(&ns, name).await;
    let kubelet_a =
        StandInKubelet::start(a.client().await, a.bed.standin_client().await, release, &ns);
    a.bed.apply(&ns, &yaml);
    a.wait_class_ready(&ns, "openstack-kubeadm").await;
    a.wait_cluster(
        &ns,
        name,
        Duration::from_secs(180),
        "ControlPlaneInitialized",
        |c| condition_true(c, "ControlPlaneInitialized"),
    )
    .await;
    a.wait_workers(&ns, name, 1).await;
    let before = infra_state(&a.client().await, &ns).await;
    assert_eq!(
        before.len(),
        3,
        "one OpenStackCluster and two OpenStackMachines: {before:?}"
    );
    assert!(before.values().all(|(ready, _)| *ready), "{before:?}");
    let servers = a.servers(name).await;
    let secrets_a: BTreeSet<String> = Api::<Secret>::namespaced(a.client().await, &ns)
        .list(&ListParams::default())
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(
        secrets_a.contains(&format!("{name}-bootstrap-vars")),
        "{secrets_a:?}"
    );
    // stackhook itself upgraded before the move: `clusterctl upgrade apply` to the
    // changed release, and a binary that serves one more pack version beside the ones
    // the class names (openstack-v2, with a changed default). Nothing rolls.
    let machines_before = machine_names(&a, &ns).await;
    let refs_before = template_refs(&a, &ns).await;
    // The components' ExtensionConfig comes back with the upgrade (naming the Service
    // of the Deployment, which cannot run here); the restart below registers the
    // host's binary again.
    capi::kubectl(
        &a.bed.mgmt.kubeconfig,
        &["delete", "extensionconfig", EXTENSION],
        None,
    );
    let upgraded = repo
        .run(
            Some(&a.bed.mgmt.kubeconfig),
            &[
                "upgrade",
                "apply",
                "--infrastructure",
                &format!("stackhook-system/openstack:{NEXT}"),
            ],
            &[],
        )
        .unwrap_or_else(|e| panic!("clusterctl upgrade apply: {e}"));
    println!("{upgraded}");
    let packs = tempfile::tempdir().expect("packs dir");
    for e in std::fs::read_dir(capi::repo().join("extensions"))
        .expect("extensions")
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "yaml") {
            std::fs::copy(e.path(), packs.path().join(e.file_name())).expect("copy pack");
        }
    }
    let v1 =
        std::fs::read_to_string(capi::repo().join("extensions/openstack-v1.yaml")).expect("pack");
    assert!(v1.contains("\nversion: 1\n") && v1.contains("default: 10.6.0.0/24"));
    let v2 = v1
        .replace("\nversion: 1\n", "\nversion: 2\n")
        .replace("default: 10.6.0.0/24", "default: 10.7.0.0/24");
    std::fs::write(packs.path().join("openstack-v2.yaml"), v2).expect("v2 pack");
    a.restart(&["--extensions", &packs.path().display().to_string()])
        .await;
    let served = poll(Duration::from_secs(60), async || {
        a.hook_calls()
            .await
            .iter()
            .any(|(k, n)| k.starts_with("GeneratePatches/") && *n > 0)
    })
    .await;
    assert!(served, "CAPI never called the upgraded stackhook");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        machine_names(&a, &ns).await,
        machines_before,
        "Machines rolled after the upgrade"
    );
    assert_eq!(
        template_refs(&a, &ns).await,
        refs_before,
        "templates rotated after the upgrade"
    );
    assert_eq!(
        a.servers(name).await,
        servers,
        "servers changed after the upgrade"
    );
    a.step("stackhook upgraded (components and packs): no template rotated, no Machine rolled");

    capi::drop_dangling_secret_owners(
        &a.client().await,
        &ns,
        &[
            capi::kcps(release),
            capi::infra("OpenStackCluster", "openstackclusters"),
        ],
    )
    .await;

    // The target: its own API server, CAPI managers and stackhook, installed the same way.
    let Some(b) = World::start_with(release, "move-to", &[], Some((repo.clone(), NEXT))).await
    else {
        return;
    };
    // Nodes stay where they are (the stand-in workload cluster of the source bed).
    drop(kubelet_a);
    let mark = cloud::access_mark();
    let moved = Instant::now();
    let out = tokio::task::spawn_blocking({
        let repo = repo.clone();
        let from = a.bed.mgmt.kubeconfig.clone();
        let to = b.bed.mgmt.kubeconfig.clone();
        let ns = ns.clone();
        move || {
            repo.run(
                Some(&from),
                &[
                    "move",
                    "--to-kubeconfig",
                    &to.display().to_string(),
                    "-n",
                    &ns,
                ],
                &[],
            )
        }
    })
    .await
    .expect("move")
    .unwrap_or_else(|e| panic!("clusterctl move: {e}"));
    println!("{out}");
    b.step(&format!(
        "clusterctl move done in {:.1} s",
        moved.elapsed().as_secs_f64()
    ));
    let _kubelet_b =
        StandInKubelet::start(b.client().await, a.bed.standin_client().await, release, &ns);

    // Gone from the source, whole on the target.
    let clusters_a: Api<DynamicObject> =
        Api::namespaced_with(a.client().await, &ns, &capi::clusters(release));
    assert!(
        matches!(clusters_a.get_opt(name).await, Ok(None)),
        "the Cluster is still on the source"
    );
    let secrets_b: BTreeSet<String> = Api::<Secret>::namespaced(b.client().await, &ns)
        .list(&ListParams::default())
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    for s in [
        format!("{name}-cloud-config"),
        format!("{name}-bootstrap-vars"),
    ] {
        assert!(secrets_b.contains(&s), "{s} did not move: {secrets_b:?}");
    }

    // stackhook on the target rebuilds the status `move` dropped: the same IDs, Ready.
    let mut last = BTreeMap::new();
    let rebuilt = poll(Duration::from_secs(120), async || {
        last = infra_state(&b.client().await, &ns).await;
        last == before
    })
    .await;
    if !rebuilt {
        b.dump(&ns).await;
    }
    assert!(
        rebuilt,
        "status on the target\n{last:#?}\nis not the source's\n{before:#?}"
    );
    b.step("OpenStackCluster and OpenStackMachines Ready on the target, with the source's IDs");
    b.wait_cluster(
        &ns,
        name,
        Duration::from_secs(120),
        "TopologyReconciled on the target",
        |c| condition_true(c, "TopologyReconciled"),
    )
    .await;
    // A while of steady state on both sides.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let from_source = cloud::requests_since(&mark, Some(&a.agent));
    let from_target = cloud::requests_since(&mark, Some(&b.agent));
    let total = |r: &BTreeMap<String, u64>| r.values().sum::<u64>();
    println!(
        "after the move: source {} requests ({} writes), target {} requests ({} writes): {:?}",
        total(&from_source),
        cloud::writes(&from_source),
        total(&from_target),
        cloud::writes(&from_target),
        from_target
    );
    assert_eq!(
        cloud::writes(&from_source),
        0,
        "the source wrote to the cloud: {from_source:#?}"
    );
    assert_eq!(
        cloud::writes(&from_target),
        0,
        "the target wrote to the cloud: {from_target:#?}"
    );
    assert_eq!(b.servers(name).await, servers, "servers changed");

    // Deleted on the target: nothing left in the cloud.
    b.delete_cluster(&ns, name).await;
    b.assert_nothing_left(&ns, name).await;
    a.bed.assert_loopback_only();
    b.bed.assert_loopback_only();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusterctl_move_under_capi_v1_13() {
    clusterctl_move(capi::V1_13).await;
}

/// Deletes the ExtensionConfig a `clusterctl init` installed, before CAPI's manager
/// starts. It names the in-cluster Service of a Deployment that cannot run here (no
/// kubelet), and its CA comes from cert-manager's Secret, which nothing issues here; CAPI
/// retries discovering every ExtensionConfig for 60 s after it starts and then stops
/// itself, so it would stop in the middle of a test that outlasts that minute. The tests
/// that need the extension register the same binary, run on the host
/// ([`World::register`]).
fn without_installed_extension_config(kubeconfig: &std::path::Path) -> Result<(), String> {
    capi::try_kubectl(
        kubeconfig,
        &["delete", "extensionconfig", EXTENSION, "--ignore-not-found"],
        None,
    )
    .map(|_| ())
}

/// `clusterctl generate cluster --flavor F` for every flavor of the release, each into a
/// namespace of its own, applied to an API server with the real CAPI managers and their
/// webhooks: every object is accepted, and the Cluster and its ClusterClass exist.
async fn every_flavor_generated(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let repo = match clusterctl::Repo::new(
        &capi::repo(),
        &capi::capi_dir(),
        &kube_server::kube_dir(),
        &[(RELEASE, &[])],
    ) {
        Ok(r) => Arc::new(r),
        Err(why) => {
            println!("skipping clusterctl flavors: {why}");
            return;
        }
    };
    let installer = repo.clone();
    let bed = match tokio::task::spawn_blocking(move || {
        Bed::start_with(release, &|kubeconfig| {
            installer.init(&capi::repo(), kubeconfig, RELEASE)?;
            without_installed_extension_config(kubeconfig)
        })
    })
    .await
    .expect("bed")
    {
        Ok(b) => b,
        Err(why) => {
            println!("skipping clusterctl flavors: {why}");
            return;
        }
    };
    let client = bed.client().await;
    let clouds = "clouds:\n  openstack:\n    auth: {auth_url: http://127.0.0.1:5000/v3}\n";
    let b64 = data_encoding::BASE64.encode(clouds.as_bytes());
    let uuid = "4b0e5c7e-6f2b-4d3a-9a51-0c2f7d9e8a11";
    let env = [
        ("OPENSTACK_CLOUD_YAML_B64", b64.as_str()),
        ("OPENSTACK_EXTERNAL_NETWORK_ID", uuid),
        ("EXTERNAL_NETWORK_ID", uuid),
        ("CLUSTER_UUID", uuid),
        ("IMAGE_ID", uuid),
        ("CONTROL_PLANE_FLAVOR", "m1.medium"),
        ("WORKER_FLAVOR", "m1.medium"),
        ("CONTROL_PLANE_SERVER_GROUP_ID", uuid),
        ("WORKER_SERVER_GROUP_ID", uuid),
    ];
    let infra = format!("openstack:{RELEASE}");
    for flavor in ["", "ha", "keepalived", "bootstrap-vars", "magnum"] {
        let ns = kube_server::namespace(
            &client,
            &format!(
                "flavor-{}",
                if flavor.is_empty() { "default" } else { flavor }
            ),
        )
        .await;
        let name = "c1";
        let mut args = vec![
            "generate",
            "cluster",
            name,
            "--infrastructure",
            &infra,
            "--target-namespace",
            &ns,
            "--kubernetes-version",
            "v1.33.1",
        ];
        if !flavor.is_empty() {
            args.extend_from_slice(&["--flavor", flavor]);
        }
        let yaml = repo
            .run(Some(&bed.mgmt.kubeconfig), &args, &env)
            .unwrap_or_else(|e| panic!("generate cluster --flavor {flavor:?}: {e}"));
        let applied = bed
            .try_apply(&ns, &yaml)
            .unwrap_or_else(|e| panic!("flavor {flavor:?} refused by the API server: {e}"));
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &capi::clusters(release));
        let cluster = clusters
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("flavor {flavor:?}: no Cluster: {e}"));
        let class = cluster.data["spec"]["topology"]["class"]
            .as_str()
            .or_else(|| cluster.data["spec"]["topology"]["classRef"]["name"].as_str())
            .unwrap_or_default()
            .to_string();
        let classes: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &capi::cluster_classes(release));
        classes
            .get(&class)
            .await
            .unwrap_or_else(|e| panic!("flavor {flavor:?}: no ClusterClass {class}: {e}"));
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        secrets
            .get(&format!("{name}-cloud-config"))
            .await
            .unwrap_or_else(|e| panic!("flavor {flavor:?}: no identity Secret: {e}"));
        println!(
            "flavor {:?}: {} objects accepted, class {class}",
            flavor,
            applied.lines().filter(|l| !l.trim().is_empty()).count()
        );
    }
    bed.assert_loopback_only();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_flavor_generated_under_capi_v1_13() {
    every_flavor_generated(capi::V1_13).await;
}

//! End to end against a real Kubernetes API server (see tests/support/kube.rs for
//! where it comes from), once per Cluster API generation: CAPI v1.10's CRDs
//! (Cluster `v1beta1`), then CAPI v1.13's (Cluster `v1beta2`), each with the CRDs of
//! `stackhook crds`. The generations run one after the other on one server, as CRDs
//! are cluster-scoped; every case works in a namespace of its own.
//!
//! Per generation:
//! - CRDs: the CAPO-shaped fixtures (Magnum's templates among them) are stored as
//!   our Rust types would write them, the invalid ones are refused with the messages
//!   in tests/fixtures/capo/apiserver-rejections.txt, and a status with
//!   `status.extensions` comes back unchanged through the status subresource.
//! - With the test cloud (see tests/support/cloud.rs), the `stackhook` binary with
//!   `--controllers`, two replicas on one Lease: Cluster, identity Secret and
//!   OpenStackCluster become Ready with the endpoint and `status.extensions` while
//!   only the leader reconciles; once Ready, a quiet window without status writes;
//!   `kill -9` of the leader and the other replica takes over after the lease
//!   expires, finding nothing to write; SIGTERM of that one releases the Lease and a
//!   third replica takes over at once; deleting the object removes everything
//!   tagged or named for the cluster from the cloud, then the finalizer, then the
//!   object.
//!
//! `cargo test --test with_cloud e2e:: -- --nocapture` prints how long each step took.

use crate::cloud;
use crate::crd_schema;
use crate::infra;
use crate::kube_server;
use crate::server;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use kube_server::{wait_for, wait_up_to};
use stackhook::infra::api::cluster::{ApiServerLoadBalancer, ManagedSecurityGroups, SubnetSpec};
use stackhook::infra::api::extensions::{
    ClusterSpecExtensions, IngressVipSpec, LoadBalancersSpec, NetworkingSpec,
};
use stackhook::infra::api::names::ClusterNames;
use stackhook::infra::api::types::OpenStackIdentityReference;
use stackhook::infra::api::{
    OpenStackCluster, OpenStackClusterSpec, OpenStackClusterTemplate, OpenStackMachine,
    OpenStackMachineTemplate,
};
use stackhook::infra::cluster::{OpenStackClusterInfra, PlatformConfig};
use stackhook::infra::conditions::is_true as is_condition_true;
use stackhook_openstack::compute::Compute;

const FINALIZER: &str = "openstackcluster.infrastructure.cluster.x-k8s.io";
const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
const LEASE: &str = "stackhook-e2e";
const NTP: &str = "192.0.2.123";
const MANAGEMENT_VIP: &str = "192.0.2.10";
/// Lease timing of the replicas, in seconds (lease, renew deadline, retry period).
const LEASE_SECS: u64 = 8;
const RENEW_SECS: u64 = 6;
const RETRY_SECS: u64 = 1;
/// How long a Ready cluster is watched for writes and reconciles.
const QUIET_WINDOW: Duration = Duration::from_secs(15);
/// The controller's resync period (`Timing::default().resync`).
const RESYNC: Duration = Duration::from_secs(600);

struct Generation {
    /// Folder of CAPI's CRDs under `crds/`.
    release: &'static str,
    /// `--capi-version` of the server.
    capi_version: &'static str,
    /// The `cluster.x-k8s.io` version the API server prefers with those CRDs.
    cluster_version: &'static str,
    /// CIDR of the cluster network created in the cloud.
    cidr: &'static str,
}

/// In this order: v1.13's CRDs may replace v1.10's, not the other way round
/// (objects stored as v1beta2 would lose their storage version).
const GENERATIONS: [Generation; 2] = [
    Generation {
        release: "cluster-api-v1.10.10",
        capi_version: "1.10",
        cluster_version: "v1beta1",
        cidr: "10.91.0.0/24",
    },
    Generation {
        release: "cluster-api-v1.13.5",
        capi_version: "1.13",
        cluster_version: "v1beta2",
        cidr: "10.92.0.0/24",
    },
];

fn step(g: &Generation, what: &str, since: Instant) {
    println!(
        "e2e {}: {what} ({:.1} s)",
        g.cluster_version,
        since.elapsed().as_secs_f64()
    );
}

#[test]
fn stackhook_against_a_real_api_server_per_capi_generation() {
    let api = match kube_server::api_server_alone() {
        Ok(api) => api,
        Err(why) => {
            println!("skipping e2e: {why}");
            return;
        }
    };
    let clouds = cloud::clouds_yaml();
    if clouds.is_none() {
        println!("e2e: no test cloud; only the CRD cases run");
    }
    infra::runtime().block_on(async {
        let client = api.client().await;
        let started = Instant::now();
        for g in &GENERATIONS {
            let t = Instant::now();
            kube_server::apply_crds(&client, &api.capi_crds(g.release)).await;
            kube_server::apply_crds(&client, &our_crds()).await;
            kube_server::wait_for_preferred_version(&client, "cluster.x-k8s.io", g.cluster_version)
                .await;
            step(g, &format!("CAPI {} and our CRDs applied", g.release), t);

            let t = Instant::now();
            crd_cases(&client).await;
            step(g, "CRD cases", t);

            let t = Instant::now();
            class_cases(&client, g).await;
            step(g, "shipped ClusterClasses applied", t);

            if let Some(path) = &clouds {
                let t = Instant::now();
                lifecycle(&client, &api.kubeconfig, g, path).await;
                step(g, "controller cases", t);
            }
        }
        println!("e2e: done in {:.1} s", started.elapsed().as_secs_f64());
    });
}

/// The CRDs `stackhook crds` prints.
fn our_crds() -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .expect("running stackhook crds");
    assert!(out.status.success(), "stackhook crds: {}", out.status);
    let docs = kube_server::yaml_documents(&String::from_utf8(out.stdout).expect("UTF-8"));
    // The four CAPO-compatible kinds and the cluster-scoped OpenStackClusterIdentity.
    assert_eq!(docs.len(), 5, "five CRDs");
    docs
}

/// The API of a CAPO kind, from an object's `apiVersion` and `kind`.
fn dynamic_api(client: &Client, ns: &str, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The object as our Rust type reads and writes it back.
fn through_rust_type(object: &Value) -> Value {
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Value {
        serde_json::to_value(serde_json::from_value::<T>(v.clone()).expect("deserializes"))
            .expect("serializes")
    }
    match object["kind"].as_str().expect("kind") {
        "OpenStackCluster" => via::<OpenStackCluster>(object),
        "OpenStackClusterTemplate" => via::<OpenStackClusterTemplate>(object),
        "OpenStackMachine" => via::<OpenStackMachine>(object),
        "OpenStackMachineTemplate" => via::<OpenStackMachineTemplate>(object),
        other => panic!("unexpected kind {other}"),
    }
}

/// The shipped ClusterClasses and their templates, in the shape for this CAPI
/// generation (the v1beta2 overlay's moves applied for CAPI 1.11+, as kustomize does),
/// are accepted by the real API server with CAPI's CRDs, patch references intact.
async fn class_cases(client: &Client, g: &Generation) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ns = kube_server::namespace(client, &format!("e2e-classes-{}", g.cluster_version)).await;
    let read = |rel: &str| {
        kube_server::yaml_documents(&std::fs::read_to_string(root.join(rel)).expect(rel))
    };
    let mut class = read("clusterclasses/openstack-kubeadm/base/clusterclass.yaml").remove(0);
    if g.cluster_version == "v1beta2" {
        let ops =
            read("clusterclasses/openstack-kubeadm/overlays/capi-1.11/v1beta2.yaml").remove(0);
        let ops: json_patch::Patch = serde_json::from_value(ops).expect("JSON patch");
        json_patch::patch(&mut class, &ops).expect("the overlay applies to the base");
    }
    let mut objects = read("templates/openstack-kubeadm/templates.yaml");
    objects.push(class);
    // The Magnum-compatible class, as the driver's namespace would hold it (moved to
    // this test's namespace). It is a v1beta1 ClusterClass, for CAPI 1.10 as Magnum
    // runs it; on later releases CAPI's conversion webhook turns it into v1beta2.
    let mut magnum = read("templates/magnum-compatible.yaml");
    magnum.extend(read("clusterclasses/magnum-compatible.yaml"));
    for object in &mut magnum {
        in_namespace(object, "magnum-system", &ns);
    }
    let magnum_from = objects.len();
    objects.extend(magnum);
    for (i, object) in objects.iter().enumerate() {
        let kind = object["kind"].as_str().expect("kind");
        let (group, version) = object["apiVersion"]
            .as_str()
            .and_then(|v| v.split_once('/'))
            .expect("apiVersion");
        let plural = match kind {
            "ClusterClass" => "clusterclasses".to_string(),
            k => format!("{}s", k.to_lowercase()),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let obj: DynamicObject = serde_json::from_value(object.clone()).expect("object");
        let name = object["metadata"]["name"].as_str().expect("name");
        let created = api
            .create(&kube::api::PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{kind} {name} refused by the API server ({}): {e}",
                    g.release
                )
            });
        let back = serde_json::to_value(&created).expect("encodes");
        // This API server has no conversion webhook: a v1beta1 class stored as
        // v1beta2 loses the references v1beta2 renamed, which CAPI's webhook would move.
        let converted = i >= magnum_from && g.cluster_version != "v1beta1";
        if kind == "ClusterClass" && !converted {
            // No field was pruned: the external patch references CAPI will call.
            assert_eq!(
                back["spec"]["patches"], object["spec"]["patches"],
                "{}",
                g.release
            );
        }
    }
}

/// Every string `from` in `object` (its namespace and its references') becomes `to`.
fn in_namespace(object: &mut Value, from: &str, to: &str) {
    match object {
        Value::String(s) if s == from => *s = to.to_string(),
        Value::Array(items) => items.iter_mut().for_each(|v| in_namespace(v, from, to)),
        Value::Object(m) => m.values_mut().for_each(|v| in_namespace(v, from, to)),
        _ => {}
    }
}

async fn crd_cases(client: &Client) {
    let ns = kube_server::namespace(client, "e2e-crds").await;

    // CAPO v0.14's examples and Magnum's templates: accepted, stored with CAPO's
    // defaults exactly as our types would have written them, status intact.
    let valid = crd_schema::yaml_files(&crd_schema::fixture_dir());
    assert!(valid.len() >= 7, "{valid:?}");
    let mut with_extensions = 0;
    for path in &valid {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let (_, mut object) = crd_schema::load(path);
        object["metadata"]["namespace"] = json!(ns);
        let api = dynamic_api(client, &ns, &object);
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let created = api
            .create(
                &PostParams::default(),
                &serde_json::from_value(object.clone()).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("{file} refused: {e}"));
        let created = serde_json::to_value(&created).unwrap();
        assert_eq!(
            created["spec"],
            through_rust_type(&object)["spec"],
            "{file}: the server's defaults differ from our types'"
        );
        let Some(status) = object.get("status").cloned() else {
            continue;
        };
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap_or_else(|e| panic!("{file}: status refused: {e}"));
        let stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
        if status.get("extensions").is_some() {
            with_extensions += 1;
            assert_eq!(
                stored["status"]["extensions"], status["extensions"],
                "{file}: status.extensions changed on the way through the server"
            );
        }
        assert_eq!(stored["status"], status, "{file}: status changed");
    }
    assert!(
        with_extensions >= 2,
        "fixtures with status.extensions: {with_extensions}"
    );

    // Broken objects: refused, with the messages recorded for each.
    let expected =
        std::fs::read_to_string(crd_schema::fixture_dir().join("apiserver-rejections.txt"))
            .unwrap();
    let expected: Vec<&str> = expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let mut got = Vec::new();
    for path in crd_schema::yaml_files(&crd_schema::fixture_dir().join("invalid")) {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let (text, mut object) = crd_schema::load(&path);
        object["metadata"]["namespace"] = json!(ns);
        let err = dynamic_api(client, &ns, &object)
            .create(
                &PostParams::default(),
                &serde_json::from_value(object.clone()).unwrap(),
            )
            .await
            .err()
            .unwrap_or_else(|| panic!("{file} was accepted"));
        let kube::Error::Api(status) = err else {
            panic!("{file}: {err}");
        };
        assert_eq!(
            (status.code, status.reason.as_str()),
            (422, "Invalid"),
            "{file}"
        );
        let causes: Vec<(String, String)> = status
            .details
            .iter()
            .flat_map(|d| d.causes.iter())
            .filter(|c| c.field != "<nil>" && !c.field.is_empty())
            .map(|c| (c.field.clone(), c.message.clone()))
            .collect();
        // The cause names the place (or holds the rule's message) that the
        // fixture's `# rejects:` line names for the in-process validators.
        let header = text.lines().next().unwrap();
        let (engine, needle) = header
            .strip_prefix("# rejects: ")
            .and_then(|h| h.split_once(' '))
            .unwrap_or_else(|| panic!("{file}: header {header:?}"));
        let matches = |(field, message): &(String, String)| match engine {
            "schema" => {
                let place = field_path(needle);
                field == &place
                    || field.starts_with(&format!("{place}."))
                    || field.starts_with(&format!("{place}["))
            }
            _ => message.contains(needle),
        };
        assert!(
            causes.iter().any(matches),
            "{file}: no cause for {header:?} in {causes:?}"
        );
        got.extend(
            causes
                .iter()
                .map(|(field, message)| format!("{file}: {field}: {message}")),
        );
    }
    assert_eq!(got, expected, "the server's messages");
    kube_server::delete_namespace(client, &ns).await;
}

/// `/spec/a/0/b` as the server names the field: `spec.a[0].b`.
fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.trim_start_matches('/').split('/') {
        if part.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

/// Counters of one replica from its `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counters {
    leader: f64,
    reconciles: f64,
    status_writes: f64,
    successes: f64,
}

/// The sum of the samples of `name` whose labels include `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, label_text) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (metric == name
                && labels
                    .iter()
                    .all(|(k, v)| label_text.split(',').any(|p| p == format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

/// One `stackhook serve --controllers` process.
struct Replica {
    name: &'static str,
    srv: server::Server,
    logs: Vec<Value>,
    http: reqwest::Client,
}

impl Replica {
    fn start(name: &'static str, kubeconfig: &Path, ns: &str, g: &Generation) -> Replica {
        let kubeconfig = kubeconfig.to_str().expect("UTF-8 path");
        let lease = LEASE_SECS.to_string();
        let renew = RENEW_SECS.to_string();
        let retry = RETRY_SECS.to_string();
        let srv = server::Server::start_with_env(
            &[
                "--controllers",
                "--kubeconfig",
                kubeconfig,
                "--watch-namespace",
                ns,
                "--leader-election-namespace",
                ns,
                "--leader-election-id",
                LEASE,
                "--leader-election-lease-duration-seconds",
                &lease,
                "--leader-election-renew-deadline-seconds",
                &renew,
                "--leader-election-retry-period-seconds",
                &retry,
                "--capi-version",
                g.capi_version,
                "--ntp-server",
                NTP,
                "--management-vip",
                MANAGEMENT_VIP,
            ],
            &[("RUST_LOG", Some("info"))],
        );
        Replica {
            name,
            srv,
            logs: Vec::new(),
            http: reqwest::Client::new(),
        }
    }

    async fn counters(&self) -> Counters {
        self.counters_of("openstackcluster").await
    }

    /// The reconcile and status-write counts of one controller.
    async fn counters_of(&self, controller: &str) -> Counters {
        let text = self
            .http
            .get(format!("{}/metrics", self.srv.admin))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("{}: /metrics: {e}", self.name))
            .text()
            .await
            .expect("metrics text");
        let ctl = [("controller", controller)];
        Counters {
            leader: sample(&text, "stackhook_controller_leader", &[]),
            reconciles: sample(&text, "stackhook_controller_reconciles_total", &ctl),
            status_writes: sample(&text, "stackhook_controller_status_writes_total", &ctl),
            successes: sample(
                &text,
                "stackhook_controller_reconciles_total",
                &[("controller", controller), ("outcome", "success")],
            ),
        }
    }

    /// Waits for a log line whose message starts with `prefix`; returns it.
    async fn log_line(&mut self, prefix: &str) -> Value {
        let mut found = None;
        wait_for(
            &format!("{}: a log line {prefix:?}", self.name),
            async || {
                self.logs.extend(self.srv.drain_logs());
                found = self
                    .logs
                    .iter()
                    .find(|l| l["message"].as_str().is_some_and(|m| m.starts_with(prefix)))
                    .cloned();
                found.is_some()
            },
        )
        .await;
        found.unwrap()
    }

    /// The Lease identity it campaigns with.
    async fn identity(&mut self) -> String {
        let line = self.log_line("campaigning for the controller lease").await;
        line["identity"].as_str().expect("identity").to_owned()
    }
}

async fn lease_holder(client: &Client, ns: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get_opt(LEASE)
        .await
        .expect("reading the Lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

fn cluster_spec(g: &Generation, secret: &str) -> OpenStackClusterSpec {
    OpenStackClusterSpec {
        managed_subnets: vec![SubnetSpec {
            cidr: g.cidr.into(),
            dns_nameservers: vec!["192.0.2.53".into()],
            allocation_pools: vec![],
        }],
        managed_security_groups: Some(ManagedSecurityGroups::default()),
        api_server_load_balancer: Some(Box::new(ApiServerLoadBalancer::default())),
        tags: vec!["stackhook-e2e".into()],
        identity_ref: OpenStackIdentityReference {
            name: secret.into(),
            cloud_name: cloud::MEMBER.into(),
            ..Default::default()
        },
        extensions: Some(Box::new(ClusterSpecExtensions {
            networking: Some(NetworkingSpec {
                kube_network_plugin: Some("cilium".into()),
                ..Default::default()
            }),
            load_balancers: Some(LoadBalancersSpec {
                ingress: Some(IngressVipSpec {
                    enabled: Some(true),
                }),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

async fn lifecycle(client: &Client, kubeconfig: &Path, g: &Generation, clouds: &Path) {
    let yaml = std::fs::read(clouds).expect("clouds.yaml");
    let ns = kube_server::namespace(client, &format!("e2e-{}", g.cluster_version)).await;
    let name = "e2e";
    let names = ClusterNames::new(&ns, name);
    let check = infra::checker(&yaml, cloud::MEMBER);
    infra::expect_none(&infra::inventory(&check, &names).await);
    // A machine a killed run left behind keeps its name; it would be counted as ours.
    leftover_machine(&check).await;

    let outcome = AssertUnwindSafe(controller_cases(client, kubeconfig, g, &ns, &yaml, &check))
        .catch_unwind()
        .await;
    if let Err(panic) = outcome {
        // Leave neither cloud resources nor a stuck finalizer behind: the machine's
        // server and port first, or the network cannot go.
        leftover_machine(&check).await;
        let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), &ns);
        if let Ok(Some(osc)) = oscs.get_opt(name).await {
            let id = infra::identity(&ns, "cloud-creds", yaml.clone(), cloud::MEMBER);
            let infra_ = OpenStackClusterInfra::new(PlatformConfig::default());
            let scope = infra::scope(&ns, name);
            infra::delete(&infra_, &scope, &osc, &id).await;
            let _ = oscs
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
        kube_server::delete_namespace(client, &ns).await;
        std::panic::resume_unwind(panic);
    }
    kube_server::delete_namespace(client, &ns).await;
}

async fn controller_cases(
    client: &Client,
    kubeconfig: &Path,
    g: &Generation,
    ns: &str,
    clouds_yaml: &[u8],
    check: &stackhook_openstack::Clients,
) {
    let name = "e2e";
    let names = ClusterNames::new(ns, name);

    // Two replicas on one Lease; exactly one leads.
    let t = Instant::now();
    let mut a = Replica::start("a", kubeconfig, ns, g);
    let mut b = Replica::start("b", kubeconfig, ns, g);
    let ids = [a.identity().await, b.identity().await];
    let mut counters = [Counters::default(); 2];
    wait_for("a leader", async || {
        counters = [a.counters().await, b.counters().await];
        counters[0].leader + counters[1].leader == 1.0
    })
    .await;
    let holder = lease_holder(client, ns).await.expect("Lease held");
    let (mut leader, mut follower) = if counters[0].leader == 1.0 {
        (a, b)
    } else {
        (b, a)
    };
    let leader_id = if leader.name == "a" { &ids[0] } else { &ids[1] };
    assert_eq!(&holder, leader_id, "the Lease names the replica that leads");
    step(g, &format!("replica {} leads", leader.name), t);

    // Identity Secret, Cluster, OpenStackCluster.
    let t = Instant::now();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "cloud-creds"},
                "stringData": {"clouds.yaml": String::from_utf8(clouds_yaml.to_vec()).unwrap()}
            }))
            .unwrap(),
        )
        .await
        .expect("creating the Secret");
    let cluster_api =
        json!({"apiVersion": format!("cluster.x-k8s.io/{}", g.cluster_version), "kind": "Cluster"});
    let infra_ref = if g.cluster_version == "v1beta1" {
        json!({"apiVersion": format!("{INFRA_GROUP}/v1beta1"), "kind": "OpenStackCluster", "name": name, "namespace": ns})
    } else {
        json!({"apiGroup": INFRA_GROUP, "kind": "OpenStackCluster", "name": name})
    };
    let clusters = dynamic_api(client, ns, &cluster_api);
    let cluster = clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": cluster_api["apiVersion"], "kind": "Cluster",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"infrastructureRef": infra_ref}
            }))
            .unwrap(),
        )
        .await
        .expect("creating the Cluster");
    let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), ns);
    let mut osc = OpenStackCluster::new(name, cluster_spec(g, "cloud-creds"));
    osc.metadata.namespace = Some(ns.into());
    osc.metadata.labels = Some(
        [(
            "cluster.x-k8s.io/cluster-name".to_string(),
            name.to_string(),
        )]
        .into_iter()
        .collect(),
    );
    osc.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": cluster_api["apiVersion"], "kind": "Cluster", "name": name,
        "uid": cluster.uid().expect("Cluster uid"), "controller": true, "blockOwnerDeletion": true
    }))
    .unwrap()]);
    oscs.create(&PostParams::default(), &osc)
        .await
        .expect("creating the OpenStackCluster");

    // Ready, with the endpoint and the extensions.
    let mut ready = None;
    wait_up_to(
        Duration::from_secs(300),
        "the OpenStackCluster to be Ready",
        async || {
            ready = oscs.get(name).await.ok().filter(|o| {
                o.status.as_ref().is_some_and(|s| s.ready)
                    && o.finalizers().iter().any(|f| f == FINALIZER)
                    && o.spec.control_plane_endpoint.is_some()
            });
            ready.is_some()
        },
    )
    .await;
    let ready = ready.unwrap();
    let at_ready = leader.counters().await;
    step(
        g,
        &format!(
            "Ready after {} reconciles and {} status writes",
            at_ready.reconciles, at_ready.status_writes
        ),
        t,
    );
    let status = ready.status.clone().unwrap();
    assert!(
        is_condition_true(&status.conditions, "Ready"),
        "{:?}",
        status.conditions
    );
    let lb = status
        .api_server_load_balancer
        .clone()
        .expect("load balancer");
    let endpoint = ready.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        (lb.ip.as_str(), 6443)
    );
    let ext = status.extensions.clone().expect("status.extensions");
    let platform = ext.platform.clone().expect("platform");
    assert_eq!(platform.ntp.unwrap().server.as_deref(), Some(NTP));
    assert_eq!(
        platform.management.unwrap().vip.as_deref(),
        Some(MANAGEMENT_VIP)
    );
    assert_eq!(
        ext.load_balancers
            .as_ref()
            .and_then(|l| l.control_plane.as_ref())
            .and_then(|c| c.vip.as_deref()),
        Some(lb.internal_ip.as_str())
    );
    let ingress = ext
        .load_balancers
        .as_ref()
        .and_then(|l| l.ingress.as_ref())
        .and_then(|i| i.vip.clone())
        .expect("ingress VIP");
    assert!(
        ingress.starts_with(g.cidr.trim_end_matches("0/24")),
        "{ingress}"
    );
    let cilium = ext.networking.and_then(|n| n.cilium).expect("cilium");
    assert_eq!(
        cilium.security_group_ids.len(),
        2,
        "control plane and worker groups"
    );
    let openstack = ext.open_stack.expect("openStack");
    assert_eq!(openstack.region.as_deref(), Some("RegionOne"));
    assert_eq!(openstack.mgmt.as_deref(), Some(lb.ip.as_str()));
    infra::expect_one_each(&infra::inventory(check, &names).await);

    // Steady state: no status writes, at most one reconcile per resync period;
    // the follower never reconciled.
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = leader.counters().await;
    tokio::time::sleep(QUIET_WINDOW).await;
    let after = leader.counters().await;
    // The pass that wrote Ready comes back as a watch event: one more pass, no write.
    println!(
        "e2e {}: after Ready: {} more reconciles, {} more status writes",
        g.cluster_version,
        before.reconciles - at_ready.reconciles,
        before.status_writes - at_ready.status_writes
    );
    let periods = QUIET_WINDOW.as_secs_f64() / RESYNC.as_secs_f64();
    assert_eq!(
        after.status_writes - before.status_writes,
        0.0,
        "status writes by a Ready cluster's controller: {before:?} → {after:?}"
    );
    assert!(
        after.reconciles - before.reconciles <= periods.ceil(),
        "reconciles of a Ready cluster in {QUIET_WINDOW:?}: {before:?} → {after:?}"
    );
    let f = follower.counters().await;
    assert_eq!((f.leader, f.reconciles, f.status_writes), (0.0, 0.0, 0.0));
    assert_eq!(after.leader, 1.0);
    step(
        g,
        &format!(
            "quiet for {QUIET_WINDOW:?}: {} reconciles, {} status writes",
            after.reconciles - before.reconciles,
            after.status_writes - before.status_writes
        ),
        t,
    );

    // kill -9 of the leader: the follower takes over once the lease expired,
    // and finds the cluster converged.
    let killed = Instant::now();
    leader.srv.child.kill().expect("kill -9");
    leader.srv.child.wait().expect("wait");
    wait_up_to(
        Duration::from_secs(30),
        "the follower to take over",
        async || follower.counters().await.leader == 1.0,
    )
    .await;
    let took = killed.elapsed();
    let lease = Duration::from_secs(LEASE_SECS);
    let retry = Duration::from_secs(RETRY_SECS);
    assert!(
        took >= lease - retry - Duration::from_millis(500),
        "took over after {took:?}, before the {lease:?} lease expired"
    );
    assert!(
        took <= lease + retry.mul_f64(2.4) + Duration::from_secs(1),
        "took over only after {took:?} (lease {lease:?})"
    );
    step(
        g,
        &format!("kill -9: {} took over after {took:?}", follower.name),
        killed,
    );
    let t = Instant::now();
    wait_up_to(
        Duration::from_secs(60),
        "the new leader's first reconcile",
        async || follower.counters().await.successes >= 1.0,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let f = follower.counters().await;
    assert_eq!(
        f.status_writes, 0.0,
        "a new leader rewrote the converged status: {f:?}"
    );
    step(
        g,
        &format!("new leader: {} reconciles, no status write", f.reconciles),
        t,
    );

    // SIGTERM of the leader releases the Lease; a waiting replica takes over at once.
    let mut c = Replica::start("c", kubeconfig, ns, g);
    c.log_line("lease held by another replica").await;
    let follower_id = if follower.name == "a" {
        &ids[0]
    } else {
        &ids[1]
    };
    assert_eq!(lease_holder(client, ns).await.as_ref(), Some(follower_id));
    // The Lease goes at SIGTERM, while the hook listener still serves out its
    // shutdown grace period (the process exits after it).
    let term = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &follower.srv.child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(kill.success());
    wait_up_to(lease, "the waiting replica to take over", async || {
        c.counters().await.leader == 1.0
    })
    .await;
    let took = term.elapsed();
    assert!(
        took < lease / 2,
        "took over after {took:?}: the Lease was not released"
    );
    let exit = follower.srv.child.wait().expect("wait");
    assert!(exit.success(), "{exit:?}");
    let holder = lease_holder(client, ns).await;
    assert_ne!(
        holder.as_ref(),
        Some(follower_id),
        "the Lease still names the stopped replica"
    );
    step(g, &format!("SIGTERM: c took over after {took:?}"), term);

    let t = Instant::now();
    machine_case(client, g, ns, &clusters, clouds_yaml, check, &c).await;
    step(g, "a Machine got its server and gave it back", t);

    // Deletion: cloud resources, then the finalizer, then the object.
    let t = Instant::now();
    oscs.delete(name, &DeleteParams::default())
        .await
        .expect("deleting the OpenStackCluster");
    let mut seen_deleting = false;
    wait_up_to(
        Duration::from_secs(240),
        "the OpenStackCluster to go",
        async || match oscs.get_opt(name).await {
            Ok(Some(o)) => {
                seen_deleting |= o.metadata.deletion_timestamp.is_some();
                false
            }
            Ok(None) => true,
            Err(_) => false,
        },
    )
    .await;
    assert!(
        seen_deleting,
        "the finalizer held the object while deleting"
    );
    infra::expect_none(&infra::inventory(check, &names).await);
    let cc = c.counters().await;
    assert!(cc.successes >= 1.0, "{cc:?}");
    step(g, "deleted; nothing left in the cloud", t);

    clusters
        .delete(name, &DeleteParams::default())
        .await
        .expect("deleting the Cluster");
    assert!(c.srv.sigterm().success());
}

/// A CAPI Machine with bootstrap data and its OpenStackMachine: a server ACTIVE in
/// Nova with the data as user_data, `spec.providerID` and addresses set; deleting the
/// OpenStackMachine removes the server and its port, then the finalizer.
async fn machine_case(
    client: &Client,
    g: &Generation,
    ns: &str,
    clusters: &Api<DynamicObject>,
    clouds_yaml: &[u8],
    check: &stackhook_openstack::Clients,
    leader: &Replica,
) {
    let counted = async || leader.counters_of("openstackmachine").await;
    let name = "e2e";
    let admin = infra::checker(clouds_yaml, cloud::ADMIN);
    // No CAPI controller runs here: mark the Cluster's infrastructure provisioned as
    // CAPI would once the OpenStackCluster is ready.
    let provisioned = if g.cluster_version == "v1beta1" {
        json!({"status": {"infrastructureReady": true}})
    } else {
        json!({"status": {"initialization": {"infrastructureProvisioned": true}}})
    };
    clusters
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&provisioned))
        .await
        .expect("marking the Cluster provisioned");
    let data = "#cloud-config\nruncmd: [echo e2e]\n";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "e2e-md-0-boot"},
                "stringData": {"value": data, "format": "cloud-config"}
            }))
            .unwrap(),
        )
        .await
        .expect("creating the bootstrap Secret");
    let machine_api =
        json!({"apiVersion": format!("cluster.x-k8s.io/{}", g.cluster_version), "kind": "Machine"});
    let infra_ref = if g.cluster_version == "v1beta1" {
        json!({"apiVersion": format!("{INFRA_GROUP}/v1beta1"), "kind": "OpenStackMachine", "name": "e2e-md-0-a"})
    } else {
        json!({"apiGroup": INFRA_GROUP, "kind": "OpenStackMachine", "name": "e2e-md-0-a"})
    };
    let machines = dynamic_api(client, ns, &machine_api);
    let machine = machines
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": machine_api["apiVersion"], "kind": "Machine",
                "metadata": {"name": "e2e-md-0-a", "namespace": ns,
                    "labels": {"cluster.x-k8s.io/cluster-name": name,
                               "cluster.x-k8s.io/deployment-name": "md-0"}},
                "spec": {"clusterName": name, "bootstrap": {"dataSecretName": "e2e-md-0-boot"},
                         "infrastructureRef": infra_ref, "failureDomain": "az1"}
            }))
            .unwrap(),
        )
        .await
        .expect("creating the Machine");
    let osms: Api<OpenStackMachine> = Api::namespaced(client.clone(), ns);
    let mut osm: OpenStackMachine = serde_json::from_value(json!({
        "apiVersion": format!("{INFRA_GROUP}/v1beta1"), "kind": "OpenStackMachine",
        "metadata": {"name": "e2e-md-0-a", "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "spec": {"flavor": "m1.tiny", "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}}
    }))
    .unwrap();
    osm.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": machine_api["apiVersion"], "kind": "Machine", "name": "e2e-md-0-a",
        "uid": machine.uid().expect("Machine uid"), "controller": true, "blockOwnerDeletion": true
    }))
    .unwrap()]);
    let t = Instant::now();
    let at_start = counted().await;
    osms.create(&PostParams::default(), &osm)
        .await
        .expect("creating the OpenStackMachine");
    let deadline = Instant::now() + Duration::from_secs(180);
    let ready = loop {
        let seen = osms.get("e2e-md-0-a").await.ok();
        if let Some(o) = seen.as_ref().filter(|o| {
            o.status.as_ref().and_then(|s| s.ready) == Some(true) && o.spec.provider_id.is_some()
        }) {
            break o.clone();
        }
        if Instant::now() > deadline {
            // What the leader said about the machine, for a failed run to show why.
            for line in leader.srv.drain_logs() {
                if line.to_string().contains("e2e-md-0-a") {
                    println!("{}: {line}", leader.name);
                }
            }
            panic!(
                "timed out after 180 s waiting for the OpenStackMachine to be ready: {}",
                serde_json::to_string(&seen.map(|o| (o.spec, o.status))).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The pass that set `spec.providerID` comes back once as a watch event (a spec
    // change) and finds nothing to do; status writes start no reconcile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let at_ready = counted().await;
    step(
        g,
        &format!(
            "machine: ready after {} reconciles and {} status writes",
            at_ready.reconciles - at_start.reconciles,
            at_ready.status_writes - at_start.status_writes
        ),
        t,
    );
    let t = Instant::now();
    tokio::time::sleep(QUIET_WINDOW).await;
    let quiet = counted().await;
    step(
        g,
        &format!(
            "machine: ready for {QUIET_WINDOW:?}: {} reconciles, {} status writes",
            quiet.reconciles - at_ready.reconciles,
            quiet.status_writes - at_ready.status_writes
        ),
        t,
    );
    assert_eq!(
        (
            quiet.reconciles - at_ready.reconciles,
            quiet.status_writes - at_ready.status_writes
        ),
        (0.0, 0.0),
        "a ready machine in {QUIET_WINDOW:?}: {at_ready:?} → {quiet:?}"
    );
    let status = ready.status.clone().unwrap();
    let server_id = status.instance_id.clone().expect("instance ID");
    assert_eq!(
        ready.spec.provider_id.as_deref(),
        Some(format!("openstack:///{server_id}").as_str())
    );
    assert!(
        status
            .addresses
            .iter()
            .any(|a| a.type_ == "InternalIP"
                && a.address.starts_with(g.cidr.trim_end_matches("0/24"))),
        "{:?}",
        status.addresses
    );
    assert!(is_condition_true(&status.conditions, "Ready"));
    assert_eq!(
        status.initialization.as_ref().and_then(|i| i.provisioned),
        Some(true)
    );
    let server = admin.compute.server(&server_id).await.expect("the server");
    assert_eq!(server.status, "ACTIVE");
    assert_eq!(server.availability_zone.as_deref(), Some("az1"));
    assert_eq!(
        data_encoding::BASE64
            .decode(
                server
                    .user_data
                    .as_ref()
                    .map(|u| u.expose())
                    .unwrap_or_default()
                    .as_bytes()
            )
            .unwrap(),
        data.as_bytes()
    );

    let t = Instant::now();
    let before_delete = counted().await;
    osms.delete("e2e-md-0-a", &DeleteParams::default())
        .await
        .expect("deleting the OpenStackMachine");
    wait_up_to(
        Duration::from_secs(120),
        "the OpenStackMachine to go",
        async || matches!(osms.get_opt("e2e-md-0-a").await, Ok(None)),
    )
    .await;
    let deleted = counted().await;
    step(
        g,
        &format!(
            "machine: deleted after {} reconciles and {} status writes",
            deleted.reconciles - before_delete.reconciles,
            deleted.status_writes - before_delete.status_writes
        ),
        t,
    );
    match check.compute.server(&server_id).await {
        Err(e) => assert!(e.is_not_found(), "{e}"),
        Ok(s) => panic!("the server is still there: {} {}", s.id, s.status),
    }
    // This cluster's ports only: the cloud may outlive other runs' leftovers.
    let ports: Vec<stackhook_openstack::networking::Port> = {
        use stackhook_openstack::networking::Networking;
        check
            .network
            .list(&[
                ("name", "e2e-md-0-a-0".to_string()),
                ("tags", ClusterNames::new(ns, name).network_name()),
            ])
            .await
            .expect("ports")
    };
    assert!(ports.is_empty(), "{ports:?}");
    machines
        .delete("e2e-md-0-a", &DeleteParams::default())
        .await
        .expect("deleting the Machine");
}

/// Deletes the e2e machine's server and port, if a failed run left them.
async fn leftover_machine(check: &stackhook_openstack::Clients) {
    use stackhook_openstack::networking::{Networking, Port};
    if let Ok(servers) = check.compute.servers_named("^e2e-md-0-a$").await {
        for s in servers {
            let _ = check.compute.delete_server(&s.id).await;
        }
    }
    for _ in 0..30 {
        match check.compute.servers_named("^e2e-md-0-a$").await {
            Ok(s) if s.is_empty() => break,
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    if let Ok(ports) = check
        .network
        .list::<Port>(&[("name", "e2e-md-0-a-0".to_string())])
        .await
    {
        for p in ports {
            let _ = check.network.delete::<Port>(&p.id).await;
        }
    }
}

//! Magnum: a Cluster as OpenStack Magnum's Cluster API driver (magnum-cluster-api
//! 0.38.2) creates it renders to the same objects with the driver's own ClusterClass
//! (inline patches, tests/fixtures/magnum/driver-class.yaml) as with
//! magnum-compatible-v1 (the embedded magnum pack as its one external patch); each
//! variable changes the fields the driver's class changes, and only those; values the
//! driver cannot mean are refused with their field paths; the example Cluster renders.
//!
//! Expected fields come from the driver's documented patches (paths, values, order of
//! list entries), never from a render of the pack.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{json, Value};
use stackhook::engine::clusterclass::{Cluster, ClusterClass};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::render::{self, Inputs, Templates};
use stackhook::sdk::topology::ValidateTopologyRequest;
use stackhook::sdk::CapiVersion;

const DRIVER_CLASS: &str = "magnum-v0.38.2";
const OUR_CLASS: &str = "magnum-compatible-v1";
const CLONED_FROM: &str = "cluster.x-k8s.io/cloned-from-name";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docs(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    render::yaml_documents(&text).unwrap()
}

fn engine() -> &'static PackEngine {
    static ENGINE: OnceLock<PackEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PackEngine::embedded().unwrap_or_else(|e| panic!("{e}")))
}

/// The driver's class and ours, and the templates of both.
struct Classes {
    driver: ClusterClass,
    ours: ClusterClass,
    templates: Templates,
}

fn classes() -> &'static Classes {
    static CLASSES: OnceLock<Classes> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let class = |rel: &str| ClusterClass::from_value(&docs(rel)[0]).unwrap();
        let mut templates = Vec::new();
        for rel in [
            "tests/fixtures/magnum/driver-templates.yaml",
            "templates/magnum-compatible.yaml",
        ] {
            templates.extend(docs(rel).into_iter().map(|d| (rel.to_string(), d)));
        }
        Classes {
            driver: class("tests/fixtures/magnum/driver-class.yaml"),
            ours: class("clusterclasses/magnum-compatible.yaml"),
            templates: Templates::from_documents("magnum templates", templates).unwrap(),
        }
    })
}

/// The driver's Clusters: defaults, most features, Flatcar.
fn fixture_clusters() -> Vec<Value> {
    docs("tests/fixtures/magnum/cluster.yaml")
}

fn default_cluster() -> Value {
    fixture_clusters().remove(0)
}

/// Magnum's management clusters run CAPI 1.10 (ClusterClass v1beta1).
fn inputs(cluster: &Value, class: &str) -> Inputs {
    inputs_at(cluster, class, CapiVersion::OLDEST)
}

fn inputs_at(cluster: &Value, class: &str, capi: CapiVersion) -> Inputs {
    let c = classes();
    let mut cluster = cluster.clone();
    cluster["spec"]["topology"]["class"] = json!(class);
    Inputs {
        cluster: Cluster::from_value(&cluster).unwrap(),
        class: if class == DRIVER_CLASS {
            c.driver.clone()
        } else {
            c.ours.clone()
        },
        templates: c.templates.clone(),
        capi,
    }
}

/// The objects, with the cloned-from annotation (the only trace of the class's
/// template names) checked and taken out.
fn render_with(cluster: &Value, class: &str) -> Vec<Value> {
    render_at(cluster, class, CapiVersion::OLDEST)
}

fn render_at(cluster: &Value, class: &str, capi: CapiVersion) -> Vec<Value> {
    let mut objs = render::render(&inputs_at(cluster, class, capi), engine())
        .unwrap_or_else(|e| panic!("{class}: {e}"));
    for o in &mut objs {
        let ann = o["metadata"]["annotations"].as_object_mut().unwrap();
        assert_eq!(ann.remove(CLONED_FROM), Some(json!(class)), "{class}");
    }
    objs
}

/// Where two values first differ, for readable failures.
fn difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let here = format!("{at}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => {
                        if let Some(d) = difference(v, w, &here) {
                            return Some(d);
                        }
                    }
                    (v, w) => return Some(format!("{here}: {v:?} vs {w:?}")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                if let Some(d) = difference(v, w, &format!("{at}/{i}")) {
                    return Some(d);
                }
            }
            (x.len() != y.len()).then(|| format!("{at}: {} vs {} entries", x.len(), y.len()))
        }
        _ => (a != b).then(|| format!("{at}: {a} vs {b}")),
    }
}

fn assert_same_objects(driver: &[Value], ours: &[Value], what: &str) {
    assert_eq!(driver.len(), ours.len(), "{what}");
    for (d, o) in driver.iter().zip(ours) {
        if let Some(diff) = difference(d, o, d["kind"].as_str().unwrap()) {
            panic!("{what}: the driver's class and the pack differ at {diff}");
        }
    }
}

#[test]
fn the_driver_s_clusters_render_the_same_with_its_class_and_with_the_pack() {
    // Magnum runs on CAPI 1.10; the driver's tests use 1.13: every release agrees.
    for (cluster, capi) in fixture_clusters()
        .into_iter()
        .flat_map(|c| CapiVersion::supported().map(move |v| (c.clone(), v)))
    {
        let name = format!(
            "{} (CAPI {capi:?})",
            cluster["metadata"]["name"].as_str().unwrap()
        );
        let driver = render_at(&cluster, DRIVER_CLASS, capi);
        let ours = render_at(&cluster, OUR_CLASS, capi);
        let mds = cluster["spec"]["topology"]["workers"]["machineDeployments"]
            .as_array()
            .unwrap()
            .len();
        // InfrastructureCluster, ControlPlane, its machine template, and two
        // templates per MachineDeployment.
        assert_eq!(driver.len(), 3 + 2 * mds, "{name}");
        assert_same_objects(&driver, &ours, &name);
    }
}

// ---- the default Cluster against the driver's documented shapes -------------------

/// The rendered objects by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Obj {
    /// OpenStackCluster.
    Osc,
    /// KubeadmControlPlane.
    Kcp,
    /// The control plane's OpenStackMachineTemplate.
    CpOsmt,
    /// The default-worker MachineDeployment's OpenStackMachineTemplate.
    MdOsmt,
    /// Its KubeadmConfigTemplate.
    MdKct,
}

fn index_of(objs: &[Value], which: Obj) -> usize {
    let md = |o: &Value| {
        o["metadata"]["labels"]
            .get("topology.cluster.x-k8s.io/deployment-name")
            .is_some()
    };
    let found: Vec<usize> = objs
        .iter()
        .enumerate()
        .filter(|(_, o)| match which {
            Obj::Osc => o["kind"] == "OpenStackCluster",
            Obj::Kcp => o["kind"] == "KubeadmControlPlane",
            Obj::CpOsmt => o["kind"] == "OpenStackMachineTemplate" && !md(o),
            Obj::MdOsmt => o["kind"] == "OpenStackMachineTemplate" && md(o),
            Obj::MdKct => o["kind"] == "KubeadmConfigTemplate",
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(found.len(), 1, "{which:?}");
    found[0]
}

fn get(objs: &[Value], which: Obj, pointer: &str) -> Value {
    objs[index_of(objs, which)]
        .pointer(pointer)
        .cloned()
        .unwrap_or(Value::Null)
}

const KCS: &str = "/spec/kubeadmConfigSpec";
const API_ARGS: &str = "/spec/kubeadmConfigSpec/clusterConfiguration/apiServer/extraArgs";
const SPEC: &str = "/spec/template/spec";

const API_CIPHERS: &str = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305";
const KUBELET_CIPHERS: &str = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305";

fn paths_of(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect()
}

#[test]
fn a_cluster_with_the_driver_s_defaults_has_the_documented_objects() {
    let objs = render_with(&default_cluster(), OUR_CLASS);
    let g = |w, p: &str| get(&objs, w, p);

    // OpenStackCluster: identity in cloud `default`, a new network, the load balancer,
    // no floating IP settings and no zones (`[""]`).
    assert_eq!(
        g(Obj::Osc, "/spec/identityRef"),
        json!({"name": "kube-7x2kq-cloud-config", "cloudName": "default"})
    );
    assert_eq!(
        g(Obj::Osc, "/spec/externalNetwork"),
        json!({"id": "0b6f3e1a-7c2d-4a58-9e4f-5d1c8a2b7e63"})
    );
    assert_eq!(
        g(Obj::Osc, "/spec/managedSubnets"),
        json!([{"cidr": "10.0.0.0/24", "dnsNameservers": ["8.8.8.8"]}])
    );
    assert_eq!(
        g(Obj::Osc, "/spec/apiServerLoadBalancer"),
        json!({"enabled": true})
    );
    for absent in [
        "disableAPIServerFloatingIP",
        "apiServerFloatingIP",
        "controlPlaneAvailabilityZones",
        "network",
        "subnets",
    ] {
        assert_eq!(g(Obj::Osc, &format!("/spec/{absent}")), Value::Null);
    }
    let sg = g(Obj::Osc, "/spec/managedSecurityGroups");
    assert_eq!(sg["allowAllInClusterTraffic"], true);
    let node_ports: Vec<(&str, i64, i64)> = sg["allNodesSecurityGroupRules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["protocol"].as_str().unwrap(),
                r["portRangeMin"].as_i64().unwrap(),
                r["portRangeMax"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(node_ports, [("udp", 30000, 32767), ("tcp", 30000, 32767)]);

    // Servers: flavors, image, empty SSH key, server group and hint, no root volume.
    for (w, flavor, group) in [
        (
            Obj::CpOsmt,
            "m1.medium",
            "2c7a9e1f-4b6d-4f80-a3c5-7e9b1d3f5a20",
        ),
        (
            Obj::MdOsmt,
            "m1.large",
            "6a8e2c4f-1b3d-4e5f-9a7c-8d0b2e4f6a18",
        ),
    ] {
        assert_eq!(
            g(w, SPEC),
            json!({
                "flavor": flavor,
                "identityRef": {"name": "kube-7x2kq-cloud-config", "cloudName": "default"},
                "image": {"id": "9d3c5b1e-2f4a-4c7e-8b6d-1a0f3e5c7d92"},
                "sshKeyName": "",
                "serverGroup": {"id": group},
                "schedulerHintAdditionalProperties": [
                    {"name": "different_failure_domain", "value": {"type": "Bool", "bool": false}}
                ],
            }),
            "{w:?}"
        );
    }

    // Control plane: API server flags (cloud-provider below 1.33), SANs, kubelet
    // ciphers, the files and commands in the driver's order (Keystone on).
    assert_eq!(
        g(Obj::Kcp, API_ARGS),
        json!({"profiling": "false", "enable-admission-plugins": "NodeRestriction",
               "tls-cipher-suites": API_CIPHERS, "cloud-provider": "external"})
    );
    assert_eq!(
        g(
            Obj::Kcp,
            &format!("{KCS}/clusterConfiguration/apiServer/certSANs")
        ),
        json!([
            "kube-7x2kq",
            "kube-7x2kq.magnum-system",
            "kube-7x2kq.magnum-system.svc",
            "kube-7x2kq.magnum-system.svc.cluster.local"
        ])
    );
    for reg in ["initConfiguration", "joinConfiguration"] {
        assert_eq!(
            g(Obj::Kcp, &format!("{KCS}/{reg}/nodeRegistration")),
            json!({"name": "{{ local_hostname }}", "kubeletExtraArgs":
                   {"cloud-provider": "external", "tls-cipher-suites": KUBELET_CIPHERS}})
        );
    }
    assert_eq!(
        paths_of(&g(Obj::Kcp, &format!("{KCS}/files"))),
        [
            "/etc/kubernetes/audit-policy/apiserver-audit-policy.yaml",
            "/etc/kubernetes/webhooks/webhookconfig.yaml",
            "/run/kubeadm/configure-kube-proxy.sh",
            "/etc/kubernetes/keystone-kustomization/kustomization.yml",
            "/etc/containerd/config.toml",
        ]
    );
    assert_eq!(
        g(Obj::Kcp, &format!("{KCS}/preKubeadmCommands")),
        json!([
            "rm /var/lib/etcd/lost+found -rf",
            "bash /run/kubeadm/configure-kube-proxy.sh",
            "mkdir -p /etc/kubernetes/keystone-kustomization",
            "systemctl daemon-reload && systemctl restart containerd"
        ])
    );
    let post = g(Obj::Kcp, &format!("{KCS}/postKubeadmCommands"));
    assert_eq!(post[0], "echo PLACEHOLDER");
    assert!(post[2]
        .as_str()
        .unwrap()
        .starts_with("kubectl kustomize /etc/kubernetes/keystone-kustomization"));
    assert_eq!(g(Obj::Kcp, &format!("{KCS}/format")), "cloud-config");
    assert_eq!(g(Obj::Kcp, &format!("{KCS}/diskSetup")), json!({}));
    assert_eq!(
        g(Obj::Kcp, "/spec/rolloutBefore"),
        json!({"certificatesExpiryDays": 21})
    );
    // Keystone's kustomization adds three kube-apiserver flags.
    let kustomization = g(Obj::Kcp, &format!("{KCS}/files/3/content"));
    let k = render::yaml_documents(kustomization.as_str().unwrap()).unwrap();
    let patch = render::yaml_documents(k[0]["patches"][0]["patch"].as_str().unwrap()).unwrap();
    let flags: Vec<&str> = patch[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["value"].as_str().unwrap())
        .collect();
    assert_eq!(
        flags,
        [
            "--authentication-token-webhook-config-file=/etc/kubernetes/webhooks/webhookconfig.yaml",
            "--authorization-webhook-config-file=/etc/kubernetes/webhooks/webhookconfig.yaml",
            "--authorization-mode=Webhook"
        ]
    );

    // Workers: the placeholder and containerd files, the restart commands.
    assert_eq!(
        paths_of(&g(Obj::MdKct, &format!("{SPEC}/files"))),
        [
            "/etc/kubernetes/.placeholder",
            "/etc/containerd/config.toml"
        ]
    );
    assert_eq!(
        g(Obj::MdKct, &format!("{SPEC}/preKubeadmCommands")),
        json!(["systemctl daemon-reload", "systemctl restart containerd"])
    );
    assert_eq!(
        g(
            Obj::MdKct,
            &format!("{SPEC}/joinConfiguration/nodeRegistration/kubeletExtraArgs")
        ),
        json!({"cloud-provider": "external", "tls-cipher-suites": KUBELET_CIPHERS})
    );
    assert_eq!(g(Obj::MdKct, &format!("{SPEC}/diskSetup")), json!({}));
    assert_eq!(
        g(Obj::MdKct, &format!("{SPEC}/clusterConfiguration")),
        Value::Null
    );
}

// ---- one variable at a time ------------------------------------------------------------

/// An expected value: written out, or taken from the render of the driver's class
/// (for long literal blocks of the driver's, such as Flatcar's Ignition config).
enum Want {
    Set(Value),
    FromDriver,
    Removed,
}

struct Case {
    what: &'static str,
    /// Cluster-level variables to change.
    cluster: Vec<(&'static str, Value)>,
    /// Overrides of the default-worker MachineDeployment to change.
    worker: Vec<(&'static str, Value)>,
    version: Option<&'static str>,
    /// The changes against the default Cluster's objects, in order; a list index equal
    /// to the list's length appends.
    want: Vec<(Obj, String, Want)>,
}

fn case(what: &'static str) -> Case {
    Case {
        what,
        cluster: Vec::new(),
        worker: Vec::new(),
        version: None,
        want: Vec::new(),
    }
}

impl Case {
    fn set(mut self, name: &'static str, value: Value) -> Case {
        self.cluster.push((name, value));
        self
    }
    fn worker(mut self, name: &'static str, value: Value) -> Case {
        self.worker.push((name, value));
        self
    }
    fn version(mut self, v: &'static str) -> Case {
        self.version = Some(v);
        self
    }
    fn want(mut self, obj: Obj, pointer: impl Into<String>, value: Value) -> Case {
        self.want.push((obj, pointer.into(), Want::Set(value)));
        self
    }
    fn want_driver_s(mut self, obj: Obj, pointer: impl Into<String>) -> Case {
        self.want.push((obj, pointer.into(), Want::FromDriver));
        self
    }
    fn removed(mut self, obj: Obj, pointer: impl Into<String>) -> Case {
        self.want.push((obj, pointer.into(), Want::Removed));
        self
    }

    fn cluster_yaml(&self) -> Value {
        let mut c = default_cluster();
        let set = |list: &mut Value, name: &str, value: &Value| {
            let v = list
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("no variable {name}"));
            v["value"] = value.clone();
        };
        for (name, value) in &self.cluster {
            set(&mut c["spec"]["topology"]["variables"], name, value);
        }
        for (name, value) in &self.worker {
            set(
                &mut c["spec"]["topology"]["workers"]["machineDeployments"][0]["variables"]
                    ["overrides"],
                name,
                value,
            );
        }
        if let Some(v) = self.version {
            c["spec"]["topology"]["version"] = json!(v);
        }
        c
    }
}

/// Sets (or with `None` removes) the value at a JSON pointer, creating missing objects.
fn edit(doc: &mut Value, pointer: &str, value: Option<Value>) {
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last().unwrap();
    let mut cur = doc;
    for t in parents {
        cur = match cur {
            Value::Array(a) => &mut a[t.parse::<usize>().unwrap()],
            Value::Object(m) => m.entry(t.clone()).or_insert_with(|| json!({})),
            other => panic!("{pointer}: {other} has no {t}"),
        };
    }
    match (cur, value) {
        (Value::Array(a), Some(v)) => {
            let i: usize = last.parse().unwrap();
            if i == a.len() {
                a.push(v);
            } else {
                a[i] = v;
            }
        }
        (Value::Array(a), None) => {
            a.remove(last.parse::<usize>().unwrap());
        }
        (Value::Object(m), Some(v)) => {
            m.insert(last.clone(), v);
        }
        (Value::Object(m), None) => {
            assert!(m.remove(last).is_some(), "{pointer} is not there to remove");
        }
        (other, _) => panic!("{pointer}: cannot edit inside {other}"),
    }
}

fn file(path: &str, content: &str) -> Value {
    json!({"path": path, "owner": "root:root", "permissions": "0644",
           "encoding": "base64", "content": content})
}

fn partition(device: &str) -> Value {
    json!({"device": device, "layout": true, "overwrite": false, "tableType": "gpt"})
}

fn filesystem(device: &str, label: &str) -> Value {
    json!({"device": device, "filesystem": "ext4", "label": label,
           "extraOpts": ["-F", "-E", "lazy_itable_init=1,lazy_journal_init=1"]})
}

fn volume(name: &str, size: i64, kind: &str) -> Value {
    json!({"name": name, "sizeGiB": size,
           "storage": {"type": "Volume", "volume": {"type": kind}}})
}

const PROXY: &str = "W1NlcnZpY2VdCkVudmlyb25tZW50PSJIVFRQX1BST1hZPWh0dHA6Ly9wcm94eTozMTI4Igo=";
const UUID_A: &str = "11111111-2222-4333-8444-555555555555";
const UUID_B: &str = "66666666-7777-4888-9999-aaaaaaaaaaaa";

fn cases() -> Vec<Case> {
    let kcs = |p: &str| format!("{KCS}{p}");
    let arg = |a: &str| format!("{API_ARGS}/{a}");
    let spec = |p: &str| format!("{SPEC}{p}");
    let flatcar_command = "bash -c \"sed -i 's/__REPLACE_NODE_NAME__/$(hostname -s)/g' /etc/kubeadm.yml\"\nbash -c \"test -f /tmp/containerd-bootstrap || (touch /tmp/containerd-bootstrap && systemctl daemon-reload && systemctl restart containerd)\"\n";
    vec![
        case("apiServerLoadBalancer: copied whole")
            .set("apiServerLoadBalancer", json!({"enabled": false, "provider": "ovn", "flavor": "lb-small", "availabilityZone": "az-lb"}))
            .want(Obj::Osc, "/spec/apiServerLoadBalancer", json!({"enabled": false, "provider": "ovn", "flavor": "lb-small", "availabilityZone": "az-lb"})),
        case("apiServerTLSCipherSuites")
            .set("apiServerTLSCipherSuites", json!("TLS_AES_128_GCM_SHA256"))
            .want(Obj::Kcp, arg("tls-cipher-suites"), json!("TLS_AES_128_GCM_SHA256")),
        case("apiServerFloatingIP")
            .set("apiServerFloatingIP", json!("203.0.113.5"))
            .want(Obj::Osc, "/spec/apiServerFloatingIP", json!("203.0.113.5")),
        case("openidConnect with an issuer")
            .set("openidConnect", json!({"issuerUrl": "https://id.example.com", "clientId": "k8s", "usernameClaim": "email", "usernamePrefix": "oidc:", "groupsClaim": "groups", "groupsPrefix": ""}))
            .want(Obj::Kcp, arg("oidc-issuer-url"), json!("https://id.example.com"))
            .want(Obj::Kcp, arg("oidc-client-id"), json!("k8s"))
            .want(Obj::Kcp, arg("oidc-username-claim"), json!("email"))
            .want(Obj::Kcp, arg("oidc-username-prefix"), json!("oidc:"))
            .want(Obj::Kcp, arg("oidc-groups-claim"), json!("groups"))
            .want(Obj::Kcp, arg("oidc-groups-prefix"), json!("")),
        case("openidConnect without an issuer")
            .set("openidConnect", json!({"issuerUrl": "", "clientId": "k8s", "usernameClaim": "email", "usernamePrefix": "", "groupsClaim": "g", "groupsPrefix": ""})),
        case("auditLog enabled")
            .set("auditLog", json!({"enabled": true, "maxAge": "7", "maxBackup": "3", "maxSize": "20"}))
            .want(Obj::Kcp, arg("audit-log-path"), json!("/var/log/audit/kube-apiserver-audit.log"))
            .want(Obj::Kcp, arg("audit-log-maxage"), json!("7"))
            .want(Obj::Kcp, arg("audit-log-maxbackup"), json!("3"))
            .want(Obj::Kcp, arg("audit-log-maxsize"), json!("20"))
            .want(Obj::Kcp, arg("audit-policy-file"), json!("/etc/kubernetes/audit-policy/apiserver-audit-policy.yaml"))
            .want(Obj::Kcp, kcs("/clusterConfiguration/apiServer/extraVolumes/1"), json!({"name": "audit-policy", "hostPath": "/etc/kubernetes/audit-policy", "mountPath": "/etc/kubernetes/audit-policy"}))
            .want(Obj::Kcp, kcs("/clusterConfiguration/apiServer/extraVolumes/2"), json!({"name": "audit-logs", "hostPath": "/var/log/kubernetes/audit", "mountPath": "/var/log/audit"})),
        case("auditLog limits while disabled")
            .set("auditLog", json!({"enabled": false, "maxAge": "1", "maxBackup": "1", "maxSize": "1"})),
        case("bootVolume of the Cluster: the control plane boots from a volume")
            .set("bootVolume", json!({"size": 25, "type": "ssd"}))
            .want(Obj::CpOsmt, spec("/rootVolume"), json!({"type": "ssd", "sizeGiB": 25})),
        case("bootVolume of a MachineDeployment, with the zone")
            .worker("bootVolume", json!({"size": 40, "type": "hdd"}))
            .set("bootVolumeAvailabilityZone", json!("az2"))
            .want(Obj::MdOsmt, spec("/rootVolume"), json!({"type": "hdd", "sizeGiB": 40, "availabilityZone": {"name": "az2"}})),
        case("bootVolumeAvailabilityZone without a boot volume")
            .set("bootVolumeAvailabilityZone", json!("az2")),
        case("clusterIdentityRefName")
            .set("clusterIdentityRefName", json!("other-cloud-config"))
            .want(Obj::Osc, "/spec/identityRef/name", json!("other-cloud-config"))
            .want(Obj::CpOsmt, spec("/identityRef/name"), json!("other-cloud-config"))
            .want(Obj::MdOsmt, spec("/identityRef/name"), json!("other-cloud-config")),
        case("systemdProxyConfig")
            .set("systemdProxyConfig", json!(PROXY))
            .want(Obj::Kcp, kcs("/files/5"), file("/etc/systemd/system/containerd.service.d/proxy.conf", PROXY))
            .want(Obj::MdKct, spec("/files/2"), file("/etc/systemd/system/containerd.service.d/proxy.conf", PROXY)),
        case("aptProxyConfig on Ubuntu")
            .set("aptProxyConfig", json!(PROXY))
            .want(Obj::Kcp, kcs("/files/5"), file("/etc/apt/apt.conf.d/90proxy", PROXY))
            .want(Obj::MdKct, spec("/files/2"), file("/etc/apt/apt.conf.d/90proxy", PROXY)),
        case("aptProxyConfig on Debian")
            .set("operatingSystem", json!("debian"))
            .set("aptProxyConfig", json!(PROXY))
            .want(Obj::Kcp, kcs("/files/5"), file("/etc/apt/apt.conf.d/90proxy", PROXY))
            .want(Obj::MdKct, spec("/files/2"), file("/etc/apt/apt.conf.d/90proxy", PROXY)),
        case("aptProxyConfig on Rocky Linux")
            .set("operatingSystem", json!("rockylinux"))
            .set("aptProxyConfig", json!(PROXY)),
        case("containerdConfig")
            .set("containerdConfig", json!(PROXY))
            .want(Obj::Kcp, kcs("/files/4/content"), json!(PROXY))
            .want(Obj::MdKct, spec("/files/1/content"), json!(PROXY)),
        case("controlPlaneFlavor")
            .set("controlPlaneFlavor", json!("m1.xlarge"))
            .want(Obj::CpOsmt, spec("/flavor"), json!("m1.xlarge")),
        case("flavor of the Cluster: every MachineDeployment overrides it")
            .set("flavor", json!("m1.small")),
        case("flavor of a MachineDeployment")
            .worker("flavor", json!("g1.xlarge"))
            .want(Obj::MdOsmt, spec("/flavor"), json!("g1.xlarge")),
        case("disableAPIServerFloatingIP while not managed")
            .set("disableAPIServerFloatingIP", json!(true)),
        case("disableAPIServerFloatingIP managed")
            .set("disableAPIServerFloatingIP", json!(true))
            .set("disableAPIServerFloatingIPManaged", json!(true))
            .want(Obj::Osc, "/spec/disableAPIServerFloatingIP", json!(true)),
        case("disableAPIServerFloatingIPManaged alone writes false")
            .set("disableAPIServerFloatingIPManaged", json!(true))
            .want(Obj::Osc, "/spec/disableAPIServerFloatingIP", json!(false)),
        case("dnsNameservers")
            .set("dnsNameservers", json!(["1.1.1.1", "9.9.9.9"]))
            .want(Obj::Osc, "/spec/managedSubnets/0/dnsNameservers", json!(["1.1.1.1", "9.9.9.9"])),
        case("externalNetworkId")
            .set("externalNetworkId", json!(UUID_A))
            .want(Obj::Osc, "/spec/externalNetwork/id", json!(UUID_A)),
        case("fixedNetworkId: no managed subnet")
            .set("fixedNetworkId", json!(UUID_A))
            .want(Obj::Osc, "/spec/network", json!({"id": UUID_A}))
            .removed(Obj::Osc, "/spec/managedSubnets"),
        case("fixedSubnetId")
            .set("fixedSubnetId", json!(UUID_B))
            .want(Obj::Osc, "/spec/subnets", json!([{"id": UUID_B}])),
        case("nodeCidr")
            .set("nodeCidr", json!("10.20.0.0/22"))
            .want(Obj::Osc, "/spec/managedSubnets/0/cidr", json!("10.20.0.0/22")),
        case("imageRepository of the Cluster: the control plane")
            .set("imageRepository", json!("registry.example.com/k8s"))
            .want(Obj::Kcp, kcs("/clusterConfiguration/imageRepository"), json!("registry.example.com/k8s")),
        case("imageRepository of a MachineDeployment")
            .worker("imageRepository", json!("registry.example.com/k8s"))
            .want(Obj::MdKct, spec("/clusterConfiguration"), json!({"imageRepository": "registry.example.com/k8s"})),
        case("imageUUID of the Cluster: the control plane")
            .set("imageUUID", json!(UUID_A))
            .want(Obj::CpOsmt, spec("/image/id"), json!(UUID_A)),
        case("imageUUID of a MachineDeployment")
            .worker("imageUUID", json!(UUID_B))
            .want(Obj::MdOsmt, spec("/image/id"), json!(UUID_B)),
        case("hardwareDiskBus without volumes")
            .set("hardwareDiskBus", json!("scsi"))
            .worker("hardwareDiskBus", json!("scsi")),
        case("kubeletTLSCipherSuites")
            .set("kubeletTLSCipherSuites", json!("TLS_AES_256_GCM_SHA384"))
            .want(Obj::Kcp, kcs("/initConfiguration/nodeRegistration/kubeletExtraArgs/tls-cipher-suites"), json!("TLS_AES_256_GCM_SHA384"))
            .want(Obj::Kcp, kcs("/joinConfiguration/nodeRegistration/kubeletExtraArgs/tls-cipher-suites"), json!("TLS_AES_256_GCM_SHA384"))
            .want(Obj::MdKct, spec("/joinConfiguration/nodeRegistration/kubeletExtraArgs/tls-cipher-suites"), json!("TLS_AES_256_GCM_SHA384")),
        case("apiServerSANs")
            .set("apiServerSANs", json!("- api.example.com\n- 192.0.2.10"))
            .want(Obj::Kcp, kcs("/clusterConfiguration/apiServer/certSANs/4"), json!("api.example.com"))
            .want(Obj::Kcp, kcs("/clusterConfiguration/apiServer/certSANs/5"), json!("192.0.2.10")),
        case("sshKeyName")
            .set("sshKeyName", json!("ops"))
            .want(Obj::CpOsmt, spec("/sshKeyName"), json!("ops"))
            .want(Obj::MdOsmt, spec("/sshKeyName"), json!("ops")),
        case("operatingSystem flatcar")
            .set("operatingSystem", json!("flatcar"))
            .want(Obj::Kcp, kcs("/preKubeadmCommands/4"), json!(flatcar_command))
            .want(Obj::Kcp, kcs("/format"), json!("ignition"))
            .want_driver_s(Obj::Kcp, kcs("/ignition"))
            .want(Obj::Kcp, kcs("/initConfiguration/nodeRegistration/name"), json!("__REPLACE_NODE_NAME__"))
            .want(Obj::Kcp, kcs("/joinConfiguration/nodeRegistration/name"), json!("__REPLACE_NODE_NAME__"))
            .want(Obj::MdKct, spec("/preKubeadmCommands"), json!([flatcar_command]))
            .want(Obj::MdKct, spec("/format"), json!("ignition"))
            .want_driver_s(Obj::MdKct, spec("/ignition"))
            .want(Obj::MdKct, spec("/joinConfiguration/nodeRegistration/name"), json!("__REPLACE_NODE_NAME__")),
        case("enableEtcdVolume: a second disk on the control plane, empty lists elsewhere")
            .set("enableEtcdVolume", json!(true))
            .set("etcdVolumeSize", json!(10))
            .set("etcdVolumeType", json!("ssd"))
            .want(Obj::CpOsmt, spec("/additionalBlockDevices"), json!([volume("etcd", 10, "ssd")]))
            .want(Obj::MdOsmt, spec("/additionalBlockDevices"), json!([]))
            .want(Obj::Kcp, kcs("/diskSetup"), json!({"partitions": [partition("/dev/vdb")], "filesystems": [filesystem("/dev/vdb", "etcd_disk")]}))
            .want(Obj::Kcp, kcs("/mounts"), json!([["LABEL=etcd_disk", "/var/lib/etcd"]]))
            .want(Obj::MdKct, spec("/diskSetup"), json!({"partitions": [], "filesystems": []}))
            .want(Obj::MdKct, spec("/mounts"), json!([])),
        case("enableEtcdVolume on SCSI disks in a zone")
            .set("enableEtcdVolume", json!(true))
            .set("etcdVolumeSize", json!(10))
            .set("etcdVolumeType", json!("ssd"))
            .set("availabilityZone", json!("az1"))
            .set("hardwareDiskBus", json!("scsi"))
            .want(Obj::CpOsmt, spec("/additionalBlockDevices"), json!([{"name": "etcd", "sizeGiB": 10, "storage": {"type": "Volume", "volume": {"type": "ssd", "availabilityZone": {"name": "az1"}}}}]))
            .want(Obj::MdOsmt, spec("/additionalBlockDevices"), json!([]))
            .want(Obj::Kcp, kcs("/diskSetup"), json!({"partitions": [partition("/dev/sdb")], "filesystems": [filesystem("/dev/sdb", "etcd_disk")]}))
            .want(Obj::Kcp, kcs("/mounts"), json!([["LABEL=etcd_disk", "/var/lib/etcd"]]))
            .want(Obj::MdKct, spec("/diskSetup"), json!({"partitions": [], "filesystems": []}))
            .want(Obj::MdKct, spec("/mounts"), json!([])),
        case("enableDockerVolume: containerd on the second disk everywhere")
            .set("enableDockerVolume", json!(true))
            .set("dockerVolumeSize", json!(50))
            .set("dockerVolumeType", json!("hdd"))
            .want(Obj::CpOsmt, spec("/additionalBlockDevices"), json!([volume("docker", 50, "hdd")]))
            .want(Obj::MdOsmt, spec("/additionalBlockDevices"), json!([volume("docker", 50, "hdd")]))
            .want(Obj::Kcp, kcs("/diskSetup"), json!({"partitions": [partition("/dev/vdb")], "filesystems": [filesystem("/dev/vdb", "docker_disk")]}))
            .want(Obj::Kcp, kcs("/mounts"), json!([["LABEL=docker_disk", "/var/lib/containerd"]]))
            .want(Obj::MdKct, spec("/diskSetup"), json!({"partitions": [partition("/dev/vdb")], "filesystems": [filesystem("/dev/vdb", "docker_disk")]}))
            .want(Obj::MdKct, spec("/mounts"), json!([["LABEL=docker_disk", "/var/lib/containerd"]])),
        case("both volumes: containerd on the control plane's third disk")
            .set("enableEtcdVolume", json!(true))
            .set("etcdVolumeSize", json!(10))
            .set("etcdVolumeType", json!("ssd"))
            .set("enableDockerVolume", json!(true))
            .set("dockerVolumeSize", json!(50))
            .set("dockerVolumeType", json!("hdd"))
            .worker("hardwareDiskBus", json!("scsi"))
            .want(Obj::CpOsmt, spec("/additionalBlockDevices"), json!([volume("etcd", 10, "ssd"), volume("docker", 50, "hdd")]))
            .want(Obj::MdOsmt, spec("/additionalBlockDevices"), json!([volume("docker", 50, "hdd")]))
            .want(Obj::Kcp, kcs("/diskSetup"), json!({"partitions": [partition("/dev/vdb"), partition("/dev/vdc")],
                "filesystems": [filesystem("/dev/vdb", "etcd_disk"), filesystem("/dev/vdc", "docker_disk")]}))
            .want(Obj::Kcp, kcs("/mounts"), json!([["LABEL=etcd_disk", "/var/lib/etcd"], ["LABEL=docker_disk", "/var/lib/containerd"]]))
            .want(Obj::MdKct, spec("/diskSetup"), json!({"partitions": [partition("/dev/sdb")], "filesystems": [filesystem("/dev/sdb", "docker_disk")]}))
            .want(Obj::MdKct, spec("/mounts"), json!([["LABEL=docker_disk", "/var/lib/containerd"]])),
        case("volume sizes and types while disabled")
            .set("dockerVolumeSize", json!(50))
            .set("etcdVolumeSize", json!(10))
            .set("etcdVolumeType", json!("ssd"))
            .set("availabilityZone", json!("az1")),
        case("controlPlaneAvailabilityZones")
            .set("controlPlaneAvailabilityZones", json!(["az1", "az2"]))
            .want(Obj::Osc, "/spec/controlPlaneAvailabilityZones", json!(["az1", "az2"])),
        case("enableKeystoneAuth off")
            .set("enableKeystoneAuth", json!(false))
            .removed(Obj::Kcp, kcs("/files/3"))
            .removed(Obj::Kcp, kcs("/preKubeadmCommands/2"))
            .removed(Obj::Kcp, kcs("/postKubeadmCommands/2"))
            .removed(Obj::Kcp, kcs("/postKubeadmCommands/1")),
        case("serverGroupId of the Cluster: the control plane")
            .set("serverGroupId", json!(UUID_A))
            .want(Obj::CpOsmt, spec("/serverGroup/id"), json!(UUID_A)),
        case("serverGroupId of a MachineDeployment")
            .worker("serverGroupId", json!(UUID_B))
            .want(Obj::MdOsmt, spec("/serverGroup/id"), json!(UUID_B)),
        case("isServerGroupDiffFailureDomain of the Cluster and a MachineDeployment")
            .set("isServerGroupDiffFailureDomain", json!(true))
            .worker("isServerGroupDiffFailureDomain", json!(true))
            .want(Obj::CpOsmt, spec("/schedulerHintAdditionalProperties/0/value/bool"), json!(true))
            .want(Obj::MdOsmt, spec("/schedulerHintAdditionalProperties/0/value/bool"), json!(true)),
        case("admissionControlList")
            .set("admissionControlList", json!("NodeRestriction,AlwaysPullImages"))
            .want(Obj::Kcp, arg("enable-admission-plugins"), json!("NodeRestriction,AlwaysPullImages")),
        case("admissionControlList empty")
            .set("admissionControlList", json!(""))
            .removed(Obj::Kcp, arg("enable-admission-plugins")),
        case("Kubernetes 1.33: no --cloud-provider on the API server")
            .version("v1.33.1")
            .want(Obj::Kcp, "/spec/version", json!("v1.33.1"))
            .removed(Obj::Kcp, arg("cloud-provider")),
    ]
}

#[test]
fn each_variable_changes_the_fields_the_driver_s_class_changes_and_no_others() {
    let base = render_with(&default_cluster(), OUR_CLASS);
    let all = cases();
    // Every variable of the pack is exercised by at least one case.
    let pack = engine()
        .pack_for_handler("magnum-v1-generate-patches")
        .unwrap();
    for v in &pack.variables {
        assert!(
            all.iter()
                .any(|c| c.cluster.iter().chain(&c.worker).any(|(n, _)| *n == v.name)),
            "no case changes {}",
            v.name
        );
    }
    for c in &all {
        let cluster = c.cluster_yaml();
        let ours = render_with(&cluster, OUR_CLASS);
        let driver = render_with(&cluster, DRIVER_CLASS);
        assert_same_objects(&driver, &ours, c.what);

        let mut want = base.clone();
        for (obj, pointer, value) in &c.want {
            let i = index_of(&want, *obj);
            let value = match value {
                Want::Set(v) => Some(v.clone()),
                Want::FromDriver => Some(get(&driver, *obj, pointer)),
                Want::Removed => None,
            };
            edit(&mut want[i], pointer, value);
        }
        for (w, o) in want.iter().zip(&ours) {
            if let Some(diff) = difference(w, o, w["kind"].as_str().unwrap()) {
                panic!("{}: expected vs rendered differ at {diff}", c.what);
            }
        }
    }
}

/// Where the pack knowingly differs. The driver pastes apiServerSANs into a YAML
/// template unquoted, so a wildcard name (`*` starts a YAML alias) breaks its render;
/// the pack quotes each name. A boot volume without a type: the driver writes
/// `type: null`, which the API server prunes; the pack leaves it out.
#[test]
fn where_the_pack_knowingly_differs_from_the_driver_s_class() {
    let cluster = case("wildcard")
        .set(
            "apiServerSANs",
            json!("- *.apps.example.com\n- api.example.com"),
        )
        .cluster_yaml();
    let err = render::render(&inputs(&cluster, DRIVER_CLASS), engine())
        .unwrap_err()
        .to_string();
    assert!(err.contains("TLSCipherSuites"), "{err}");
    let ours = render_with(&cluster, OUR_CLASS);
    assert_eq!(
        get(
            &ours,
            Obj::Kcp,
            &format!("{KCS}/clusterConfiguration/apiServer/certSANs")
        )
        .as_array()
        .unwrap()[4..],
        [json!("*.apps.example.com"), json!("api.example.com")]
    );

    let cluster = case("untyped boot volume")
        .set("bootVolume", json!({"size": 10, "type": ""}))
        .cluster_yaml();
    let driver = render_with(&cluster, DRIVER_CLASS);
    let ours = render_with(&cluster, OUR_CLASS);
    let root_volume = format!("{SPEC}/rootVolume");
    assert_eq!(
        get(&driver, Obj::CpOsmt, &root_volume),
        json!({"type": null, "sizeGiB": 10})
    );
    assert_eq!(
        get(&ours, Obj::CpOsmt, &root_volume),
        json!({"sizeGiB": 10})
    );
    let mut pruned = driver.clone();
    let i = index_of(&pruned, Obj::CpOsmt);
    edit(&mut pruned[i], &format!("{root_volume}/type"), None);
    assert_same_objects(&pruned, &ours, "untyped boot volume");
}

// ---- refusals ------------------------------------------------------------------------

#[test]
fn values_the_driver_cannot_mean_are_refused_with_their_field_paths() {
    // What the driver sends by default passes, `[""]` zones and empty strings included.
    assert_eq!(
        render::validate(&inputs(&default_cluster(), OUR_CLASS), engine()),
        Vec::<String>::new()
    );
    let bad = case("bad values")
        .set("apiServerFloatingIP", json!("not-an-ip"))
        .set("openidConnect", json!({"issuerUrl": "http://id.example.com", "clientId": "", "usernameClaim": "sub", "usernamePrefix": "-", "groupsClaim": "", "groupsPrefix": ""}))
        .set("auditLog", json!({"enabled": true, "maxAge": "30d", "maxBackup": "10", "maxSize": "100"}))
        .set("bootVolume", json!({"size": -1, "type": "ssd"}))
        .set("operatingSystem", json!("centos"))
        .set("nodeCidr", json!("10.0.0.0"))
        .set("fixedNetworkId", json!("private"))
        .set("externalNetworkId", json!("public"))
        .set("apiServerSANs", json!("api.example.com"))
        .set("containerdConfig", json!("version = 2"))
        .set("clusterIdentityRefName", json!("Cloud Config"))
        .set("dockerVolumeSize", json!(-5))
        .set("dnsNameservers", json!(["8.8.8.8", ""]))
        .worker("imageUUID", json!("ubuntu-22.04"))
        .worker("bootVolume", json!({"size": 10}));
    let problems = render::validate(&inputs(&bad.cluster_yaml(), OUR_CLASS), engine());
    let text = problems.join("\n");
    for want in [
        r#"spec.topology.variables[apiServerFloatingIP].value: Invalid value: "not-an-ip": must be empty or an IP address"#,
        r#"spec.topology.variables[openidConnect].value.issuerUrl: Invalid value: kube-apiserver accepts only an https:// issuer URL"#,
        r#"spec.topology.variables[openidConnect].value.clientId: Required value: kube-apiserver needs a client ID when an issuer URL is set"#,
        r#"spec.topology.variables[auditLog].value.maxAge: "30d" does not match"#,
        "spec.topology.variables[bootVolume].value.size: -1 is less than the minimum of 0",
        r#"spec.topology.variables[operatingSystem].value: "centos" is not one of"#,
        r#"spec.topology.variables[nodeCidr].value: "10.0.0.0" is not a "cidr""#,
        r#"spec.topology.variables[fixedNetworkId].value: "private" does not match"#,
        r#"spec.topology.variables[externalNetworkId].value: "public" is not a "uuid""#,
        r#"spec.topology.variables[apiServerSANs].value: Invalid value: "api.example.com": must be empty or lines of the form "- <name>""#,
        r#"spec.topology.variables[containerdConfig].value: "version = 2" does not match"#,
        r#"spec.topology.variables[clusterIdentityRefName].value: "Cloud Config" does not match"#,
        "spec.topology.variables[dockerVolumeSize].value: -5 is less than the minimum of 0",
        r#"spec.topology.variables[dnsNameservers].value[1]: "" is shorter than 1 character"#,
        r#"spec.topology.workers.machineDeployments[0].variables.overrides[imageUUID].value: "ubuntu-22.04" is not a "uuid""#,
        r#"spec.topology.workers.machineDeployments[0].variables.overrides[bootVolume].value: "type" is a required property"#,
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert_eq!(problems.len(), 16, "{text}");

    // Combinations no single variable's schema can refuse: the pack's ValidateTopology.
    let contradictory = case("contradictions")
        .set("apiServerFloatingIP", json!("203.0.113.9"))
        .set("disableAPIServerFloatingIP", json!(true))
        .set("enableEtcdVolume", json!(true))
        .set("enableDockerVolume", json!(true))
        .set("dockerVolumeSize", json!(20));
    let problems = render::validate(&inputs(&contradictory.cluster_yaml(), OUR_CLASS), engine());
    assert_eq!(
        problems,
        [concat!(
            "ClusterClass magnum-compatible-v1: spec.patches[0] (magnum): validation of patch \"magnum\" failed: ",
            "pack \"magnum-v1\": 2 invalid variable value(s): ",
            "variables[apiServerFloatingIP]: Forbidden: a fixed floating IP cannot be given while disableAPIServerFloatingIP is true; ",
            "variables[etcdVolumeSize]: Invalid value: the etcd volume needs a size of at least 1 GiB"
        )]
    );

    // A missing variable: the driver always sends all 39, and so must any Cluster.
    let mut missing = default_cluster();
    missing["spec"]["topology"]["variables"]
        .as_array_mut()
        .unwrap()
        .retain(|v| v["name"] != "serverGroupId");
    let problems = render::validate(&inputs(&missing, OUR_CLASS), engine());
    assert_eq!(
        problems,
        ["spec.topology.variables: required variable \"serverGroupId\" is not set"]
    );
}

#[test]
fn the_validate_topology_handler_names_the_variable_and_the_field() {
    let cluster = default_cluster();
    let vars = cluster["spec"]["topology"]["variables"].clone();
    let mut vars = vars.as_array().unwrap().clone();
    for v in &mut vars {
        if v["name"] == "enableDockerVolume" {
            v["value"] = json!(true);
        }
    }
    let req: ValidateTopologyRequest = serde_json::from_value(json!({
        "variables": vars,
        "items": [{
            "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
                                "namespace": "magnum-system", "name": "kube-7x2kq-default-worker",
                                "fieldPath": "spec.template.spec.infrastructureRef"},
            "object": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                       "kind": "OpenStackMachineTemplate", "spec": {"template": {"spec": {}}}},
            "variables": [{"name": "bootVolume", "value": {"size": 10, "type": 3}}]
        }]
    }))
    .unwrap();
    let resp =
        serde_json::to_value(engine().validate_topology("magnum-v1-validate-topology", &req))
            .unwrap();
    assert_eq!(resp["status"], "Failure", "{resp}");
    let message = resp["message"].as_str().unwrap();
    // The contradiction is the Cluster's, reported once, not again per template.
    assert_eq!(message.matches("dockerVolumeSize").count(), 1, "{message}");
    for want in [
        "MachineDeployment kube-7x2kq-default-worker: variables[bootVolume].type: 3 is not of type \"string\"",
        "variables[dockerVolumeSize]: Invalid value: the containerd volume needs a size of at least 1 GiB",
    ] {
        assert!(message.contains(want), "missing {want:?} in {message}");
    }
}

// ---- the example Cluster ------------------------------------------------------------------

/// `${NAME}` and `${NAME:=default}` as clusterctl substitutes them.
fn substitute(text: &str, values: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let expr = &rest[start + 2..end];
        let (name, default) = match expr.split_once(":=") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        let value = values
            .get(name)
            .copied()
            .or(default)
            .unwrap_or_else(|| panic!("${{{name}}} has no default and no value"));
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_example_cluster_renders_and_validates_with_its_defaults() {
    let text = std::fs::read_to_string(root().join("clusterclasses/examples/magnum-cluster.yaml"))
        .unwrap();
    let values = BTreeMap::from([
        ("CLUSTER_NAME", "kube-ex4mp"),
        ("CLUSTER_UUID", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"),
        ("KUBERNETES_VERSION", "v1.31.4"),
        ("CONTROL_PLANE_MACHINE_COUNT", "3"),
        ("CONTROL_PLANE_FLAVOR", "m1.medium"),
        ("WORKER_FLAVOR", "m1.large"),
        ("IMAGE_ID", "9d3c5b1e-2f4a-4c7e-8b6d-1a0f3e5c7d92"),
        (
            "EXTERNAL_NETWORK_ID",
            "0b6f3e1a-7c2d-4a58-9e4f-5d1c8a2b7e63",
        ),
        (
            "CONTROL_PLANE_SERVER_GROUP_ID",
            "2c7a9e1f-4b6d-4f80-a3c5-7e9b1d3f5a20",
        ),
        (
            "WORKER_SERVER_GROUP_ID",
            "6a8e2c4f-1b3d-4e5f-9a7c-8d0b2e4f6a18",
        ),
    ]);
    let cluster = render::yaml_documents(&substitute(&text, &values))
        .unwrap()
        .remove(0);
    assert_eq!(cluster["spec"]["topology"]["class"], OUR_CLASS);
    assert_eq!(cluster["metadata"]["namespace"], "magnum-system");
    let names: Vec<&str> = cluster["spec"]["topology"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 39);

    let i = inputs(&cluster, OUR_CLASS);
    assert_eq!(render::validate(&i, engine()), Vec::<String>::new());
    let objs = render_with(&cluster, OUR_CLASS);
    assert_eq!(objs.len(), 5);

    // With the defaults it is the driver's default Cluster under another name: the
    // same objects as the fixture's, field for field, once the names agree.
    let rename = |objs: Vec<Value>, from: &str| -> Value {
        let text = serde_json::to_string(&objs).unwrap();
        let mut v: Value = serde_json::from_str(&text.replace(from, "NAME")).unwrap();
        for o in v.as_array_mut().unwrap() {
            o["metadata"].as_object_mut().unwrap().remove("name");
            if let Some(r) = o.pointer_mut("/spec/machineTemplate/infrastructureRef") {
                r.as_object_mut().unwrap().remove("name");
            }
        }
        v
    };
    let fixture = render_with(&default_cluster(), OUR_CLASS);
    let (a, b) = (rename(objs, "kube-ex4mp"), rename(fixture, "kube-7x2kq"));
    if let Some(diff) = difference(&a, &b, "") {
        panic!("example and fixture differ at {diff}");
    }
}

/// `extraArgs` and `kubeletExtraArgs` maps as kubeadm v1beta2 writes them: name/value
/// lists, sorted by name (CAPI's conversion).
fn args_to_lists(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if (k == "extraArgs" || k == "kubeletExtraArgs") && child.is_object() {
                    let list: Vec<Value> = child
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(n, v)| json!({"name": n, "value": v}))
                        .collect();
                    *child = Value::Array(list);
                } else {
                    args_to_lists(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(args_to_lists),
        _ => {}
    }
}

/// The other way, for comparing: a name given twice fails the test (kubeadm would
/// get the flag twice).
fn args_to_maps(v: &mut Value, at: &str) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                let here = format!("{at}/{k}");
                if (k == "extraArgs" || k == "kubeletExtraArgs") && child.is_array() {
                    let mut map = serde_json::Map::new();
                    for e in child.as_array().unwrap() {
                        let name = e["name"].as_str().unwrap().to_string();
                        assert!(
                            map.insert(name.clone(), e["value"].clone()).is_none(),
                            "{here}: {name} twice"
                        );
                    }
                    *child = Value::Object(map);
                } else {
                    args_to_maps(child, &here);
                }
            }
        }
        Value::Array(a) => {
            for (i, e) in a.iter_mut().enumerate() {
                args_to_maps(e, &format!("{at}/{i}"));
            }
        }
        _ => {}
    }
}

/// Under CAPI 1.11 and later (clusterclasses/magnum-compatible-capi-1.11.yaml) CAPI
/// hands the magnum pack the kubeadm templates in v1beta2, where `extraArgs` are
/// name/value lists. For every case of the variable table, the kubeadm settings come
/// out the same as from the v1beta1 templates. The CAPI 1.11 file is the v1beta1 one
/// with only its two kubeadm references moved to v1beta2.
#[test]
fn the_v1beta2_kubeadm_templates_get_the_same_settings_as_the_v1beta1_ones() {
    let v1beta1 = docs("clusterclasses/magnum-compatible.yaml").remove(0);
    let v1beta2 = docs("clusterclasses/magnum-compatible-capi-1.11.yaml").remove(0);
    let mut moved = v1beta1.clone();
    moved["spec"]["controlPlane"]["ref"]["apiVersion"] =
        json!("controlplane.cluster.x-k8s.io/v1beta2");
    moved["spec"]["workers"]["machineDeployments"][0]["template"]["bootstrap"]["ref"]
        ["apiVersion"] = json!("bootstrap.cluster.x-k8s.io/v1beta2");
    assert_eq!(
        moved, v1beta2,
        "the two files differ in more than the kubeadm references"
    );
    let class = ClusterClass::from_value(&v1beta2).unwrap();

    let converted: Vec<(String, Value)> = docs("templates/magnum-compatible.yaml")
        .into_iter()
        .map(|mut d| {
            let api = d["apiVersion"].as_str().unwrap().to_string();
            if let Some(group) = api.strip_suffix("/v1beta1").filter(|g| {
                *g == "controlplane.cluster.x-k8s.io" || *g == "bootstrap.cluster.x-k8s.io"
            }) {
                d["apiVersion"] = json!(format!("{group}/v1beta2"));
                args_to_lists(&mut d["spec"]);
                let spec = &mut d["spec"]["template"]["spec"];
                if let Some(before) = spec.as_object_mut().and_then(|s| s.remove("rolloutBefore")) {
                    spec["rollout"] = json!({"before": before});
                }
            }
            ("converted".to_string(), d)
        })
        .collect();
    let templates = Templates::from_documents("v1beta2 templates", converted).unwrap();

    let kubeadm = |objs: &[Value]| -> Vec<Value> {
        objs.iter()
            .filter_map(|o| match o["kind"].as_str() {
                Some("KubeadmControlPlane") => Some(o["spec"]["kubeadmConfigSpec"].clone()),
                Some("KubeadmConfigTemplate") => Some(o["spec"]["template"]["spec"].clone()),
                _ => None,
            })
            .collect()
    };
    let mut seen_lists = 0;
    for c in cases() {
        let cluster = c.cluster_yaml();
        let old = render_at(&cluster, OUR_CLASS, CapiVersion::NEWEST);
        let mut inputs = inputs_at(&cluster, OUR_CLASS, CapiVersion::NEWEST);
        inputs.class = class.clone();
        inputs.templates = templates.clone();
        let new = render::render(&inputs, engine()).unwrap_or_else(|e| panic!("{}: {e}", c.what));
        let (want, mut got) = (kubeadm(&old), kubeadm(&new));
        assert_eq!(want.len(), 2, "{}", c.what);
        assert_eq!(got.len(), 2, "{}", c.what);
        for g in &mut got {
            if g.to_string().contains("\"extraArgs\":[") {
                seen_lists += 1;
            }
            args_to_maps(g, c.what);
        }
        for (w, g) in want.iter().zip(&got) {
            if let Some(diff) = difference(w, g, "kubeadm") {
                panic!("{}: v1beta1 vs v1beta2 differ at {diff}", c.what);
            }
        }
    }
    assert!(
        seen_lists > 0,
        "no v1beta2 template was rendered with lists"
    );
}

//! `stackhook plan` held against what the real CAPI does. A Cluster of the shipped
//! openstack-kubeadm class (the overlay of this CAPI release) runs under CAPI with
//! stackhook's controllers and the loopback cloud. Each row of the table changes the
//! files a GitOps repository would hold (the Cluster, the class, its templates), asks
//! `stackhook plan --kubeconfig` (the "from" side read live from the management
//! cluster) what the change will do, applies the files, and compares the prediction
//! with what CAPI did: which template references moved to new names, which
//! MachineDeployments got a new MachineSet, whether the control plane's machines
//! stopped being up to date, what changed in place and which MachineDeployments
//! appeared. A disagreement fails the row.

use super::*;

use std::path::{Path, PathBuf};
use std::process::Command;

fn packs() -> PathBuf {
    capi::repo().join("tests/fixtures/plan/packs")
}

/// The files of the repository: the class with its templates, and the Cluster.
#[derive(Clone)]
struct Side {
    docs: Vec<Value>,
}

impl Side {
    fn of_kind(&mut self, kind: &str) -> &mut Value {
        self.docs
            .iter_mut()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in the side"))
    }

    fn cluster(&mut self) -> &mut Value {
        self.of_kind("Cluster")
    }

    fn class(&mut self) -> &mut Value {
        self.of_kind("ClusterClass")
    }

    /// The value of a Cluster-wide variable.
    fn variable(&mut self, name: &str) -> &mut Value {
        self.cluster()["spec"]["topology"]["variables"]
            .as_array_mut()
            .expect("variables")
            .iter_mut()
            .find(|v| v["name"] == name)
            .map(|v| &mut v["value"])
            .unwrap_or_else(|| panic!("no variable {name}"))
    }

    /// The class's patch `name`.
    fn patch(&mut self, name: &str) -> &mut Value {
        self.class()["spec"]["patches"]
            .as_array_mut()
            .expect("patches")
            .iter_mut()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no patch {name}"))
    }

    fn machine_deployments(&mut self) -> &mut Vec<Value> {
        self.cluster()["spec"]["topology"]["workers"]["machineDeployments"]
            .as_array_mut()
            .expect("machineDeployments")
    }

    fn md(&mut self, name: &str) -> &mut Value {
        self.machine_deployments()
            .iter_mut()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no MachineDeployment {name}"))
    }

    fn yaml(&self) -> String {
        self.docs
            .iter()
            .map(|d| serde_json::to_string(d).expect("json"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// Writes the side as a repository would hold it: one file per object.
    fn write(&self, dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("dir");
        for (i, d) in self.docs.iter().enumerate() {
            let kind = d["kind"].as_str().unwrap_or("object").to_lowercase();
            std::fs::write(
                dir.join(format!("{i:02}-{kind}.yaml")),
                serde_json::to_string_pretty(d).expect("json"),
            )
            .expect("write");
        }
    }
}

/// What CAPI's objects say at one moment, by the plan's names for things.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// Role (`controlPlane/machineInfrastructure`, `machineDeployment/md-0/bootstrap`,
    /// …) → the template the reference names.
    refs: BTreeMap<String, String>,
    /// MachineDeployment topology name → its object's name.
    mds: BTreeMap<String, String>,
    /// MachineDeployment topology name → its MachineSets.
    sets: BTreeMap<String, BTreeSet<String>>,
    /// `controlPlane/` or `machineDeployment/<name>` → spec.replicas.
    replicas: BTreeMap<String, Value>,
    /// The same keys → the machine template's labels and annotations.
    metadata: BTreeMap<String, Value>,
    /// The KubeadmControlPlane's and the OpenStackCluster's specs, replicas and
    /// machine-template metadata left out.
    specs: BTreeMap<String, Value>,
    /// Control-plane Machines CAPI says are not up to date.
    cp_behind: BTreeSet<String>,
    /// TopologyReconciled's message.
    topology_message: String,
}

/// What a change did (or, from a plan, will do), as comparable lines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Effects {
    rotated: BTreeSet<String>,
    patched: BTreeSet<String>,
    rolled: BTreeSet<String>,
    in_place: BTreeSet<String>,
    created: BTreeSet<String>,
    deleted: BTreeSet<String>,
}

impl Effects {
    fn from_plan(c: &Value) -> Effects {
        let list = |k: &str| c[k].as_array().cloned().unwrap_or_default();
        let mut e = Effects::default();
        for t in list("templates") {
            let role = t["role"].as_str().unwrap_or_default().to_string();
            match t["action"].as_str() {
                Some("rotate") => {
                    e.rotated.insert(role);
                }
                // CAPI patches the control plane and the infrastructure cluster; the
                // metadata of a template is not seen on CAPI's objects.
                Some("patch") => {
                    e.patched.insert(role);
                }
                _ => {}
            }
        }
        for r in list("rollouts") {
            e.rolled.insert(target(&r));
        }
        for i in list("inPlace") {
            e.in_place.insert(format!(
                "{} {}",
                target(&i),
                i["effect"].as_str().unwrap_or("")
            ));
        }
        for (k, set) in [("created", &mut e.created), ("deleted", &mut e.deleted)] {
            for o in list(k) {
                set.insert(format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["name"].as_str().unwrap_or_default()
                ));
            }
        }
        e
    }

    /// What CAPI did between two looks.
    fn observed(before: &Seen, after: &Seen) -> Effects {
        let mut e = Effects::default();
        for (role, name) in &after.refs {
            if before.refs.get(role).is_some_and(|old| old != name) {
                e.rotated.insert(role.clone());
            }
        }
        for (role, spec) in &after.specs {
            if before.specs.get(role).is_some_and(|old| old != spec) {
                e.patched.insert(role.clone());
            }
        }
        for (md, sets) in &after.sets {
            if let Some(old) = before.sets.get(md) {
                if sets.difference(old).next().is_some() {
                    e.rolled.insert(format!("machineDeployment/{md}"));
                }
            }
        }
        // An upgrade CAPI holds until the control plane has one: TopologyReconciled
        // names the MachineDeployments that wait for it ("… pending upgrade to
        // version …" from 1.13, "… upgrade to version … on hold." before).
        let held = |s: &Seen, object: &str| {
            s.topology_message.lines().any(|l| {
                l.contains("MachineDeployment")
                    && (l.contains("pending upgrade")
                        || l.contains("on hold")
                        || l.contains("upgrading to version"))
                    && l.contains(object)
            })
        };
        for (md, object) in &after.mds {
            if before.mds.contains_key(md) && held(after, object) && !held(before, object) {
                e.rolled.insert(format!("machineDeployment/{md}"));
            }
        }
        if after
            .cp_behind
            .difference(&before.cp_behind)
            .next()
            .is_some()
        {
            e.rolled.insert("controlPlane/".into());
        }
        for (t, n) in &after.replicas {
            if before.replicas.get(t).is_some_and(|old| old != n) {
                e.in_place.insert(format!("{t} scale"));
            }
        }
        for (t, m) in &after.metadata {
            if before.metadata.get(t).is_some_and(|old| old != m) {
                e.in_place.insert(format!("{t} inPlace"));
            }
        }
        for md in after.mds.keys().filter(|m| !before.mds.contains_key(*m)) {
            e.created.insert(format!("MachineDeployment/{md}"));
        }
        for md in before.mds.keys().filter(|m| !after.mds.contains_key(*m)) {
            e.deleted.insert(format!("MachineDeployment/{md}"));
        }
        e
    }
}

fn target(v: &Value) -> String {
    format!(
        "{}/{}",
        v["target"].as_str().unwrap_or_default(),
        v["name"].as_str().unwrap_or_default()
    )
}

async fn list(w: &World, ns: &str, ar: &kube::discovery::ApiResource) -> Vec<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(w.client().await, ns, ar);
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("json"))
        .collect()
}

fn metadata_of(template: &Value) -> Value {
    json!({
        "labels": template["metadata"]["labels"],
        "annotations": template["metadata"]["annotations"],
    })
}

async fn look(w: &World, ns: &str, cluster: &str) -> Seen {
    let release = w.bed.release;
    let mut s = Seen::default();
    for kcp in list(w, ns, &capi::kcps(release)).await {
        let spec = &kcp["spec"];
        if let Some(n) = spec
            .pointer("/machineTemplate/spec/infrastructureRef/name")
            .or_else(|| spec.pointer("/machineTemplate/infrastructureRef/name"))
            .and_then(Value::as_str)
        {
            s.refs
                .insert("controlPlane/machineInfrastructure".into(), n.into());
        }
        s.replicas
            .insert("controlPlane/".into(), spec["replicas"].clone());
        s.metadata.insert(
            "controlPlane/".into(),
            metadata_of(&spec["machineTemplate"]),
        );
        let mut rest = spec.clone();
        if let Some(o) = rest.as_object_mut() {
            o.remove("replicas");
        }
        if let Some(o) = rest["machineTemplate"].as_object_mut() {
            o.remove("metadata");
        }
        s.specs.insert("controlPlane".into(), rest);
    }
    for osc in list(w, ns, &capi::infra("OpenStackCluster", "openstackclusters")).await {
        s.specs
            .insert("infrastructureCluster".into(), osc["spec"].clone());
    }
    let topology_label = "topology.cluster.x-k8s.io/deployment-name";
    for md in list(w, ns, &capi::machine_deployments(release)).await {
        let Some(name) = md["metadata"]["labels"][topology_label].as_str() else {
            continue;
        };
        let object = md["metadata"]["name"].as_str().unwrap_or_default();
        s.mds.insert(name.into(), object.into());
        let spec = &md["spec"]["template"]["spec"];
        if let Some(n) = spec
            .pointer("/bootstrap/configRef/name")
            .and_then(Value::as_str)
        {
            s.refs
                .insert(format!("machineDeployment/{name}/bootstrap"), n.into());
        }
        if let Some(n) = spec
            .pointer("/infrastructureRef/name")
            .and_then(Value::as_str)
        {
            s.refs
                .insert(format!("machineDeployment/{name}/infrastructure"), n.into());
        }
        s.replicas.insert(
            format!("machineDeployment/{name}"),
            md["spec"]["replicas"].clone(),
        );
        s.metadata.insert(
            format!("machineDeployment/{name}"),
            metadata_of(&md["spec"]["template"]),
        );
        s.sets.entry(name.into()).or_default();
    }
    let sets = capi::capi_resource(release, "cluster.x-k8s.io", "MachineSet", "machinesets");
    for ms in list(w, ns, &sets).await {
        if let Some(name) = ms["metadata"]["labels"][topology_label].as_str() {
            s.sets
                .entry(name.into())
                .or_default()
                .insert(ms["metadata"]["name"].as_str().unwrap_or_default().into());
        }
    }
    for m in list(w, ns, &capi::machines(release)).await {
        let control_plane = m["metadata"]["labels"]
            .get("cluster.x-k8s.io/control-plane")
            .is_some();
        let behind = condition(&m, "UpToDate").is_some_and(|c| c["status"] == "False");
        if control_plane && behind {
            s.cp_behind
                .insert(m["metadata"]["name"].as_str().unwrap_or_default().into());
        }
    }
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(w.client().await, ns, &capi::clusters(release));
    if let Ok(c) = clusters.get(cluster).await {
        let c = serde_json::to_value(c).expect("json");
        s.topology_message = condition(&c, "TopologyReconciled")
            .and_then(|t| t["message"].as_str().map(String::from))
            .unwrap_or_default();
    }
    s
}

/// `stackhook plan --kubeconfig … --to DIR -o json`: the Cluster's plan and the exit
/// status.
fn plan(w: &World, to: &Path, key: &str) -> (Value, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("plan")
        .arg("--kubeconfig")
        .arg(&w.bed.mgmt.kubeconfig)
        .arg("--to")
        .arg(to)
        .arg("--extensions")
        .arg(packs())
        .args(["--capi-version", w.bed.release.flag, "--cluster", key])
        .args(["-o", "json"])
        .output()
        .expect("stackhook plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "plan answered no JSON ({e}): {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let code = out.status.code().expect("exit status");
    let c = json["clusters"]
        .as_array()
        .and_then(|cs| cs.first())
        .cloned()
        .unwrap_or_else(|| panic!("no Cluster in the plan: {json:#}{stderr}"));
    (c, code)
}

struct Row {
    what: &'static str,
    change: fn(&mut Side),
}

const ROWS: &[Row] = &[
    Row {
        what: "a pack variable of the worker OpenStackMachineTemplate (openstackWorker.flavor)",
        change: |s| s.variable("openstackWorker")["flavor"] = json!("m1.large"),
    },
    Row {
        what: "a pack variable only the KubeadmConfigTemplate reads (kubernetes, md-0 override)",
        change: |s| {
            s.md("md-0")["variables"] = json!({"overrides": [{
                "name": "kubernetes",
                "value": {"tlsCipherSuites": ["TLS_AES_128_GCM_SHA256"]},
            }]})
        },
    },
    Row {
        what: "md-0's replicas",
        change: |s| s.md("md-0")["replicas"] = json!(2),
    },
    Row {
        what: "a label on md-0's machines",
        change: |s| s.md("md-0")["metadata"] = json!({"labels": {"team": "payments"}}),
    },
    Row {
        what: "an inline patch added to the class (a kubelet node label of the workers)",
        change: |s| {
            let patch = json!({
                "name": "node-pool-label",
                "definitions": [{
                    "selector": {
                        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                        "kind": "KubeadmConfigTemplate",
                        "matchResources": {"machineDeploymentClass": {"names": ["default-worker"]}},
                    },
                    "jsonPatches": [{
                        "op": "add",
                        "path": "/spec/template/spec/joinConfiguration/nodeRegistration/kubeletExtraArgs/-",
                        "valueFrom": {"template": "{name: node-labels, value: 'stackhook.io/pool={{ .builtin.machineDeployment.topologyName }}'}"},
                    }],
                }],
            });
            s.class()["spec"]["patches"]
                .as_array_mut()
                .expect("patches")
                .push(patch);
        },
    },
    Row {
        what: "that inline patch edited (another label key)",
        change: |s| {
            let p = s.patch("node-pool-label");
            p["definitions"][0]["jsonPatches"][0]["valueFrom"]["template"] = json!(
                "{name: node-labels, value: 'stackhook.io/machine-deployment={{ .builtin.machineDeployment.topologyName }}'}"
            );
        },
    },
    Row {
        what: "a new version of the openstack pack referenced by the class (v1 → v2)",
        change: |s| {
            let p = s.patch("openstack");
            for (_, v) in p["external"].as_object_mut().expect("external").iter_mut() {
                if let Some(ext) = v.as_str() {
                    *v = json!(ext.replace("openstack-v1-", "openstack-v2-"));
                }
            }
        },
    },
    Row {
        what: "a MachineDeployment added (md-1)",
        change: |s| {
            s.machine_deployments().push(json!({
                "class": "default-worker", "name": "md-1", "replicas": 1,
            }))
        },
    },
    Row {
        what: "a variable that fails validation (openstackControlPlane.flavor: 42)",
        change: |s| s.variable("openstackControlPlane")["flavor"] = json!(42),
    },
    Row {
        what: "a Kubernetes upgrade (v1.33.1 → v1.34.0)",
        change: |s| s.cluster()["spec"]["topology"]["version"] = json!("v1.34.0"),
    },
];

pub async fn plan_predictions(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let packs = packs().display().to_string();
    let Some(w) = World::start(release, "plan", &["--extensions", &packs]).await else {
        return;
    };
    let name = &format!("plan-{:x}", std::process::id() & 0xfffff);
    let ns = w.namespace("capi-plan", &[name]).await;
    let key = format!("{ns}/{name}");

    // The repository's first commit: the overlay's class and templates and the plan
    // fixtures' prod1 Cluster, sized for a stand-in (one control-plane machine: KCP
    // cannot scale up past its etcd checks) and pointed at the loopback cloud.
    let mut side = Side {
        docs: kube_server::yaml_documents(&capi::kustomize(&format!(
            "clusterclasses/openstack-kubeadm/overlays/{}",
            release.overlay
        ))),
    };
    let mut cluster = kube_server::yaml_documents(
        &std::fs::read_to_string(capi::repo().join("tests/fixtures/plan/base/cluster-prod1.yaml"))
            .expect("prod1"),
    )
    .remove(0);
    cluster["metadata"]["name"] = json!(name);
    cluster["spec"]["topology"]["controlPlane"]["replicas"] = json!(1);
    side.docs.push(cluster);
    side.md("md-0")["replicas"] = json!(1);
    side.variable("openstackCluster")["externalNetworkID"] = json!(w.external_network);
    for d in &mut side.docs {
        d["metadata"]["namespace"] = json!(ns);
    }
    w.bed.apply(&ns, &side.yaml());
    w.wait_class_ready(&ns, "openstack-kubeadm").await;
    w.bed.point_at_standin(&ns, name).await;
    let _kubelet =
        StandInKubelet::start(w.client().await, w.bed.standin_client().await, release, &ns);
    w.wait_cluster(
        &ns,
        name,
        Duration::from_secs(180),
        "ControlPlaneInitialized",
        |c| condition_true(c, "ControlPlaneInitialized"),
    )
    .await;
    // The upgrade row needs an image for the new version, or BeforeClusterUpgrade
    // holds it (the whole-life test shows that part).
    let image = "ubuntu-2404-kube-v1.34.0";
    let have =
        w.os.image
            .list(&[("name", image.to_string())])
            .await
            .expect("images");
    if !have.iter().any(|i| i.status == "active") {
        let member = cloud::entry(cloud::MEMBER).expect("member");
        capi::create_image(&member, image, "v1.34.0").await;
    }
    let settled = poll(Duration::from_secs(120), async || {
        let s = look(&w, &ns, name).await;
        s.sets.get("md-0").is_some_and(|m| !m.is_empty())
    })
    .await;
    assert!(settled, "md-0 never got a MachineSet");
    w.step("base: control plane initialized, md-0 has its MachineSet");

    let dir = tempfile::tempdir().expect("tempdir");
    // The files as applied against the live objects CAPI defaulted, converted and
    // owns: nothing to do.
    let to = dir.path().join("to");
    side.write(&to);
    let (c, code) = plan(&w, &to, &key);
    assert_eq!(
        (code, c["status"].as_str()),
        (0, Some("unchanged")),
        "the applied files against the live objects: {c:#}"
    );
    let mut report = vec!["the applied files again: exit 0, unchanged".to_string()];
    for row in ROWS {
        let mut next = side.clone();
        (row.change)(&mut next);
        let to = dir.path().join("to");
        next.write(&to);
        let before = look(&w, &ns, name).await;
        let (c, code) = plan(&w, &to, &key);
        if c["status"] == "invalid" {
            // CAPI refuses it too: the Cluster's webhook names the same variable, and
            // nothing moves.
            assert_eq!(code, 1, "{}: {c:#}", row.what);
            let problem = c["problems"][0].as_str().unwrap_or_default().to_string();
            let refused = w
                .bed
                .try_apply(&ns, &next.yaml())
                .expect_err("CAPI accepted what the plan calls invalid");
            let variable = problem
                .split(['[', ']'])
                .nth(1)
                .unwrap_or_default()
                .to_string();
            assert!(
                !variable.is_empty() && refused.contains(&variable),
                "{}: plan says {problem:?}, CAPI says {refused}",
                row.what
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
            let seen = Effects::observed(&before, &look(&w, &ns, name).await);
            assert_eq!(seen, Effects::default(), "{}: CAPI moved", row.what);
            report.push(format!(
                "{}: plan invalid ({problem}); CAPI refused it",
                row.what
            ));
            continue;
        }
        let predicted = Effects::from_plan(&c);
        assert_eq!(
            code,
            if predicted.rolled.is_empty() { 3 } else { 2 },
            "{}: exit status against {c:#}",
            row.what
        );
        assert_ne!(
            predicted,
            Effects::default(),
            "{}: plan saw nothing: {c:#}",
            row.what
        );
        w.bed.apply(&ns, &next.yaml());
        side = next;
        let mut seen = Effects::default();
        poll(Duration::from_secs(90), async || {
            seen = Effects::observed(&before, &look(&w, &ns, name).await);
            seen == predicted
        })
        .await;
        // What CAPI does a little later counts too.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let after = look(&w, &ns, name).await;
        let seen_late = Effects::observed(&before, &after);
        if seen_late != predicted {
            w.dump(&ns).await;
        }
        assert_eq!(
            seen_late, predicted,
            "{}: CAPI did (left) what the plan did not predict (right); first look {seen:?}; plan {c:#}; topology: {}",
            row.what, after.topology_message
        );
        w.step(&format!("agreed: {}", row.what));
        report.push(format!(
            "{}: exit {code}; rotated {:?}; rolled {:?}; in place {:?}; created {:?}",
            row.what, predicted.rotated, predicted.rolled, predicted.in_place, predicted.created
        ));
    }
    println!("\nplan against CAPI {}:", release.capi);
    for r in &report {
        println!("  {r}");
    }
    w.delete_cluster(&ns, name).await;
    w.assert_nothing_left(&ns, name).await;
    w.bed.assert_loopback_only();
}

//! Rendering the dev-test ClusterClass: inline patches and the same patches served as
//! an external pack by the running server must give identical objects; the objects
//! follow CAPI's documented naming, labelling and patch rules; the CLI is
//! deterministic and `validate` reports field paths.

use crate::server;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use server::{client, post_json, Proto, Server, API, PREFIX};
use stackhook::engine::template;
use stackhook::engine::{EngineHandlers, PackEngine, PatchEngine};
use stackhook::render::{self, Inputs, Templates};
use stackhook::sdk::common::CommonResponse;
use stackhook::sdk::topology::{
    DiscoverVariablesRequest, DiscoverVariablesResponse, GeneratePatchesRequest,
    GeneratePatchesResponse, ValidateTopologyRequest,
};
use stackhook::sdk::CapiVersion;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cluster_yaml() -> String {
    std::fs::read_to_string(root().join("clusterclasses/examples/dev-test-cluster.yaml")).unwrap()
}

/// The example Cluster pointed at the external copy of the class.
fn external_cluster_yaml() -> String {
    cluster_yaml().replace("name: dev-test\n", "name: dev-test-external\n")
}

fn inputs(cluster: &str, class_file: &str) -> Inputs {
    let cluster = render::yaml_documents(cluster).unwrap();
    let class = docs(class_file);
    inputs_from(&cluster[0], &class[0], &docs("templates/dev-test.yaml"))
}

/// The example Cluster's documents and name, and the dev-test class, to edit.
fn dev_test_documents() -> (Vec<Value>, String, Value) {
    let cluster_docs = render::yaml_documents(&cluster_yaml()).unwrap();
    let name = cluster_docs[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    (
        cluster_docs,
        name,
        docs("clusterclasses/dev-test.yaml").remove(0),
    )
}

/// The YAML documents of a file of the repository.
fn docs(rel: &str) -> Vec<Value> {
    render::yaml_documents(&std::fs::read_to_string(root().join(rel)).unwrap()).unwrap()
}

/// Inputs from already-read (and possibly edited) documents.
fn inputs_from(cluster: &Value, class: &Value, templates: &[Value]) -> Inputs {
    Inputs {
        capi: CapiVersion::NEWEST,
        cluster: stackhook::engine::clusterclass::Cluster::from_value(cluster).unwrap(),
        class: stackhook::engine::clusterclass::ClusterClass::from_value(class).unwrap(),
        templates: Templates::from_documents(
            "templates",
            templates
                .iter()
                .map(|t| ("dev-test.yaml".to_string(), t.clone()))
                .collect(),
        )
        .unwrap(),
    }
}

fn packs() -> PackEngine {
    PackEngine::from_dir(root().join("tests/fixtures/packs")).unwrap()
}

/// A [`PatchEngine`] that asks the running server over HTTPS, as CAPI would.
/// Rendering is synchronous, so each call blocks on the test's runtime.
struct Remote {
    client: reqwest::Client,
    base: String,
    rt: tokio::runtime::Handle,
}

impl Remote {
    fn call<T: serde::de::DeserializeOwned>(
        &self,
        hook: &str,
        handler: &str,
        kind: &str,
        req: Value,
    ) -> T {
        let mut body = req;
        body["apiVersion"] = json!(API);
        body["kind"] = json!(kind);
        let url = format!("{}{PREFIX}/{hook}/{handler}", self.base);
        let (st, _, resp) = self.rt.block_on(post_json(&self.client, &url, &body));
        assert_eq!(st, 200, "{url}: {resp}");
        serde_json::from_value(resp).unwrap()
    }
}

impl PatchEngine for Remote {
    fn handlers(&self) -> EngineHandlers {
        unreachable!("rendering asks no handler list")
    }
    fn generate_patches(
        &self,
        handler: &str,
        req: &GeneratePatchesRequest,
    ) -> GeneratePatchesResponse {
        self.call(
            "generatepatches",
            handler,
            "GeneratePatchesRequest",
            serde_json::to_value(req).unwrap(),
        )
    }
    fn discover_variables(
        &self,
        handler: &str,
        req: &DiscoverVariablesRequest,
        _: CapiVersion,
    ) -> DiscoverVariablesResponse {
        self.call(
            "discovervariables",
            handler,
            "DiscoverVariablesRequest",
            serde_json::to_value(req).unwrap(),
        )
    }
    fn validate_topology(&self, handler: &str, req: &ValidateTopologyRequest) -> CommonResponse {
        self.call(
            "validatetopology",
            handler,
            "ValidateTopologyRequest",
            serde_json::to_value(req).unwrap(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_and_served_external_patches_give_identical_objects() {
    let inline = render::render(
        &inputs(&cluster_yaml(), "clusterclasses/dev-test.yaml"),
        &packs(),
    )
    .unwrap();

    let srv = Server::start_with_env(
        &[
            "--capi-version",
            "1.14",
            "--extensions",
            root().join("tests/fixtures/packs").to_str().unwrap(),
        ],
        // Successful topology calls are logged at debug.
        &[("RUST_LOG", Some("info,stackhook::server::app=debug"))],
    );
    let remote = Remote {
        client: client(srv.ca_pem.as_ref().unwrap(), Proto::H2),
        base: srv.https.clone(),
        rt: tokio::runtime::Handle::current(),
    };
    let external = tokio::task::spawn_blocking(move || {
        render::render(
            &inputs(
                &external_cluster_yaml(),
                "tests/fixtures/classes/dev-test-external.yaml",
            ),
            &remote,
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(inline.len(), 9);
    assert_eq!(inline, external);

    // The server really answered: every external call is in its log.
    let mut logs = Vec::new();
    for _ in 0..50 {
        logs.extend(srv.drain_logs());
        if logs
            .iter()
            .any(|l| l["handler"] == "dev-test-validate-topology")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for h in [
        "dev-test-discover-variables",
        "dev-test-generate-patches",
        "dev-test-validate-topology",
    ] {
        assert!(
            logs.iter()
                .any(|l| l["handler"] == h && l["outcome"] == "success"),
            "no successful {h} call: {logs:?}"
        );
    }
}

fn by_kind_name<'a>(objs: &'a [Value], kind: &str, name_prefix: &str) -> Vec<&'a Value> {
    objs.iter()
        .filter(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name_prefix))
        })
        .collect()
}

/// `<prefix><5 characters of Kubernetes' random-suffix alphabet>`.
fn assert_generated(name: &Value, prefix: &str) {
    let n = name.as_str().unwrap();
    let suffix = n
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{n} lacks {prefix}"));
    assert_eq!(suffix.len(), 5, "{n}");
    assert!(
        suffix
            .bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
        "{n}"
    );
}

#[test]
fn objects_follow_capi_naming_labels_and_patches() {
    let objs = render::render(
        &inputs(&cluster_yaml(), "clusterclasses/dev-test.yaml"),
        &packs(),
    )
    .unwrap();
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "OpenStackCluster",
            "KubeadmControlPlane",
            "OpenStackMachineTemplate",
            "KubeadmConfigTemplate",
            "OpenStackMachineTemplate",
            "KubeadmConfigTemplate",
            "OpenStackMachineTemplate",
            "KubeadmConfigTemplate",
            "OpenStackMachineTemplate",
        ]
    );
    let owned = |o: &Value| {
        assert_eq!(o["metadata"]["namespace"], "default");
        assert_eq!(
            o["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "dev1",
            "{o}"
        );
        assert_eq!(
            o["metadata"]["labels"]["topology.cluster.x-k8s.io/owned"], "",
            "{o}"
        );
    };
    objs.iter().for_each(owned);

    // InfrastructureCluster: the template's spec.template.spec, patched.
    let oc = &objs[0];
    assert_eq!(oc["apiVersion"], "infrastructure.cluster.x-k8s.io/v1beta1");
    assert_generated(&oc["metadata"]["name"], "dev1-");
    assert_eq!(
        oc["metadata"]["annotations"],
        json!({"cluster.x-k8s.io/cloned-from-name": "dev-test-openstackcluster",
               "cluster.x-k8s.io/cloned-from-groupkind": "OpenStackClusterTemplate.infrastructure.cluster.x-k8s.io"})
    );
    let spec = &oc["spec"];
    assert_eq!(
        spec["identityRef"],
        json!({"type": "Secret", "name": "dev-test-cloud-config", "cloudName": "openstack"})
    );
    assert_eq!(
        spec["externalNetwork"],
        json!({"id": "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e"})
    );
    assert_eq!(
        spec["managedSubnets"],
        json!([{"cidr": "10.6.0.0/24", "dnsNameservers": ["10.0.0.2", "10.0.0.3"]}])
    );
    assert_eq!(spec["apiServerLoadBalancer"], json!({"enabled": true}));
    // An empty list of zones leaves the field out (enabledIf renders "").
    assert!(
        spec.get("controlPlaneAvailabilityZones").is_none(),
        "{spec}"
    );
    assert_eq!(
        spec["managedSecurityGroups"]["allowAllInClusterTraffic"],
        true
    );

    // ControlPlane: version, replicas and the machine template reference are CAPI's.
    let kcp = &objs[1];
    assert_generated(&kcp["metadata"]["name"], "dev1-");
    assert_eq!(kcp["spec"]["version"], "v1.33.1");
    assert_eq!(kcp["spec"]["replicas"], 3);
    let cp_mt = &objs[2];
    assert_generated(&cp_mt["metadata"]["name"], "dev1-");
    assert_eq!(
        kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"],
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachineTemplate",
               "name": cp_mt["metadata"]["name"]})
    );
    assert_eq!(
        kcp["spec"]["machineTemplate"]["metadata"]["labels"],
        json!({"cluster.x-k8s.io/cluster-name": "dev1", "topology.cluster.x-k8s.io/owned": ""})
    );
    assert_eq!(
        cp_mt["spec"]["template"]["spec"],
        json!({"flavor": "m1.medium", "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}, "sshKeyName": "ops"})
    );
    assert!(cp_mt["metadata"]["labels"]
        .get("topology.cluster.x-k8s.io/deployment-name")
        .is_none());

    // MachineDeployment templates: named after the topology, labelled with it;
    // md-1's override wins over the Cluster-wide default.
    for (md, flavor) in [
        ("md-0", "m1.small"),
        ("md-1", "m1.xlarge"),
        ("md-2", "m1.small"),
    ] {
        let prefix = format!("dev1-{md}-");
        let infra = by_kind_name(&objs, "OpenStackMachineTemplate", &prefix);
        let boot = by_kind_name(&objs, "KubeadmConfigTemplate", &prefix);
        assert_eq!((infra.len(), boot.len()), (1, 1), "{md}");
        for o in [infra[0], boot[0]] {
            assert_generated(&o["metadata"]["name"], &prefix);
            assert_eq!(
                o["metadata"]["labels"]["topology.cluster.x-k8s.io/deployment-name"],
                md
            );
        }
        assert_ne!(infra[0]["metadata"]["name"], boot[0]["metadata"]["name"]);
        assert_eq!(
            infra[0]["spec"]["template"]["spec"]["flavor"], flavor,
            "{md}"
        );
        assert_eq!(
            boot[0]["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
                ["kubeletExtraArgs"][2],
            json!({"name": "node-labels", "value": format!("stackhook.io/pool={md}")})
        );
    }
}

#[test]
fn enabled_if_switches_follow_the_template_engine() {
    // The fixtures' enabledIf templates, evaluated directly: on only for `true`.
    let on = |src: &str, data: Value| {
        template::enabled(
            &template::parse(src).unwrap(),
            &data,
            &template::Prepared::new(),
        )
        .unwrap()
    };
    let lb = "{{ .apiServerLoadBalancerEnabled }}";
    assert!(on(lb, json!({"apiServerLoadBalancerEnabled": true})));
    assert!(!on(lb, json!({"apiServerLoadBalancerEnabled": false})));
    assert!(!on(lb, json!({"apiServerLoadBalancerEnabled": "false"})));
    assert!(!on(lb, json!({"apiServerLoadBalancerEnabled": 1})));
    // A missing key prints `<no value>`: not true.
    assert!(!on(lb, json!({})));
    let ssh = "{{ if .sshKeyName }}true{{ end }}";
    assert!(on(ssh, json!({"sshKeyName": "ops"})));
    assert!(!on(ssh, json!({"sshKeyName": ""})));
    let no_lb = "{{ not .apiServerLoadBalancerEnabled }}";
    assert!(on(no_lb, json!({"apiServerLoadBalancerEnabled": false})));

    // And through a render: load balancer off, no SSH key, zones given.
    let cluster = cluster_yaml()
        .replace("    - name: sshKeyName\n      value: ops\n", "")
        .replace(
            "    variables:\n    - name: imageName",
            "    variables:\n    - name: apiServerLoadBalancerEnabled\n      value: false\n    - name: controlPlaneAvailabilityZones\n      value: [az1, az2]\n    - name: imageName",
        );
    let objs = render::render(&inputs(&cluster, "clusterclasses/dev-test.yaml"), &packs()).unwrap();
    assert_eq!(
        objs[0]["spec"]["apiServerLoadBalancer"],
        json!({"enabled": false})
    );
    assert_eq!(
        objs[0]["spec"]["controlPlaneAvailabilityZones"],
        json!(["az1", "az2"])
    );
    for o in objs
        .iter()
        .filter(|o| o["kind"] == "OpenStackMachineTemplate")
    {
        assert!(
            o["spec"]["template"]["spec"].get("sshKeyName").is_none(),
            "{o}"
        );
    }
}

fn stackhook(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap()
}

fn path(p: &str) -> String {
    root().join(p).display().to_string()
}

#[test]
fn render_cli_yaml_and_json_are_the_same_objects_and_deterministic() {
    let cluster = path("clusterclasses/examples/dev-test-cluster.yaml");
    let class = path("clusterclasses/dev-test.yaml");
    let templates = path("templates");
    let args = [
        "render",
        "--cluster",
        &cluster,
        "--clusterclass",
        &class,
        "--templates",
        &templates,
    ];
    let a = stackhook(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = stackhook(&args);
    assert_eq!(a.stdout, b.stdout, "two runs differ");
    let yaml = String::from_utf8(a.stdout).unwrap();
    assert!(yaml.starts_with("---\n"));
    let from_yaml = render::yaml_documents(&yaml).unwrap();

    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let j = stackhook(&json_args);
    assert!(j.status.success());
    let from_json: Vec<Value> = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(from_yaml, from_json);
    assert_eq!(
        from_json,
        render::render(
            &inputs(&cluster_yaml(), "clusterclasses/dev-test.yaml"),
            &packs()
        )
        .unwrap()
    );
}

#[test]
fn validate_cli_exit_codes_and_field_paths() {
    let class = path("clusterclasses/dev-test.yaml");
    let templates = path("templates");
    let dir = tempfile::tempdir().unwrap();
    let run = |cluster: &str| {
        let f = dir.path().join("cluster.yaml");
        std::fs::write(&f, cluster).unwrap();
        stackhook(&[
            "validate",
            "--cluster",
            f.to_str().unwrap(),
            "--clusterclass",
            &class,
            "--templates",
            &templates,
        ])
    };
    let ok = run(&cluster_yaml());
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("Cluster default/dev1: valid"));

    let bad = cluster_yaml()
        .replace("0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e", "not-a-uuid")
        .replace(
            "value: [10.0.0.2, 10.0.0.3]",
            "value: [10.0.0.2, dns.example]",
        )
        .replace(
            "    - name: imageName\n      value: ubuntu-2404-kube-v1.33.1\n",
            "    - name: colour\n      value: blue\n",
        )
        .replace("value: m1.xlarge", "value: \"\"");
    let out = run(&bad);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "spec.topology.variables[externalNetworkID].value: ",
        "spec.topology.variables[dnsNameservers].value[1]: ",
        "spec.topology.variables[colour]: variable \"colour\" is not defined in ClusterClass dev-test",
        "spec.topology.variables: required variable \"imageName\" is not set",
        "spec.topology.workers.machineDeployments[1].variables.overrides[workerFlavor].value: ",
        "Cluster default/dev1: 5 problem(s)",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }

    // A patch that cannot apply is reported with the patch and template named.
    let broken_templates = tempfile::tempdir().unwrap();
    let t = std::fs::read_to_string(root().join("templates/dev-test.yaml"))
        .unwrap()
        .replacen(
            "      image:\n        filter:\n          name: placeholder\n",
            "",
            1,
        );
    std::fs::write(broken_templates.path().join("t.yaml"), t).unwrap();
    let f = dir.path().join("cluster.yaml");
    std::fs::write(&f, cluster_yaml()).unwrap();
    let out = stackhook(&[
        "validate",
        "--cluster",
        f.to_str().unwrap(),
        "--clusterclass",
        &class,
        "--templates",
        broken_templates.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.patches[6] (image)")
            && err.contains("/spec/template/spec/image/filter/name"),
        "{err}"
    );
}

#[test]
fn missing_template_names_the_reference() {
    let mut i = inputs(&cluster_yaml(), "clusterclasses/dev-test.yaml");
    i.templates = Templates::from_documents("nowhere", vec![]).unwrap();
    let err = render::render(&i, &packs()).unwrap_err().to_string();
    assert!(
        err.contains("ClusterClass dev-test: spec.infrastructure.templateRef: OpenStackClusterTemplate \"dev-test-openstackcluster\" not found in nowhere"),
        "{err}"
    );
}

/// Manifests are read as kubectl reads them (YAML 1.1 scalars): an unquoted `off` is the
/// boolean false CAPI would store, a quoted one stays a string.
#[test]
fn cluster_yaml_is_read_as_kubectl_reads_it() {
    let with = |value: &str| {
        cluster_yaml().replace(
            "    variables:\n    - name: imageName",
            &format!("    variables:\n    - name: apiServerLoadBalancerEnabled\n      value: {value}\n    - name: imageName"),
        )
    };
    let plain_false = render::render(
        &inputs(&with("false"), "clusterclasses/dev-test.yaml"),
        &packs(),
    )
    .unwrap();
    let off = render::render(
        &inputs(&with("off"), "clusterclasses/dev-test.yaml"),
        &packs(),
    )
    .unwrap();
    assert_eq!(off, plain_false);
    assert_eq!(
        off[0]["spec"]["apiServerLoadBalancer"],
        json!({"enabled": false})
    );
    let docs = render::yaml_documents(&with("'off'")).unwrap();
    let vars = &docs[0]["spec"]["topology"]["variables"];
    assert_eq!(vars[0]["value"], json!("off"), "{vars}");
}

/// What CAPI up to 1.13 takes from where: metadata from the ClusterClass's templates as
/// written (patches to it are dropped), only `spec.template.spec` from the patched templates,
/// the control plane's own machine-template metadata kept under the topology's, the
/// cloned-from annotations written last, kubectl's last-applied record not copied, and
/// no machine template on a control plane without machines.
#[test]
fn metadata_comes_from_the_class_templates_and_only_the_spec_from_patches() {
    let (cluster_docs, cluster_name, mut class) = dev_test_documents();
    let mut templates = docs("templates/dev-test.yaml");
    for t in &mut templates {
        match (
            t["kind"].as_str().unwrap(),
            t["metadata"]["name"].as_str().unwrap(),
        ) {
            ("KubeadmControlPlaneTemplate", _) => {
                t["spec"]["template"]["spec"]["machineTemplate"] = json!({"metadata": {
                    "labels": {"team": "storage", "cluster.x-k8s.io/cluster-name": "wrong"}}});
            }
            ("OpenStackMachineTemplate", "dev-test-default-worker") => {
                t["metadata"]["annotations"] = json!({
                    "note": "kept",
                    "cluster.x-k8s.io/cloned-from-name": "bogus",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"});
            }
            _ => {}
        }
    }
    class["spec"]["patches"].as_array_mut().unwrap().push(json!({
        "name": "metadata-by-patch",
        "definitions": [{
            "selector": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                         "kind": "OpenStackMachineTemplate",
                         "matchResources": {"machineDeploymentClass": {"names": ["default-worker"]}}},
            "jsonPatches": [{"op": "add", "path": "/spec/template/metadata",
                             "value": {"labels": {"patched": "yes"}}}]}]}));
    let build = |class: &Value, templates: &[Value]| {
        inputs_from(&cluster_docs[0], class, templates).with_capi(CapiVersion::new(13))
    };
    let objs = render::render(&build(&class, &templates), &packs()).unwrap();

    let cp = &by_kind_name(&objs, "KubeadmControlPlane", "")[0];
    assert_eq!(
        cp["spec"]["machineTemplate"]["metadata"]["labels"],
        json!({"team": "storage", "cluster.x-k8s.io/cluster-name": cluster_name,
               "topology.cluster.x-k8s.io/owned": ""}),
        "{cp}"
    );
    let workers: Vec<&Value> = objs
        .iter()
        .filter(|o| {
            o["kind"] == "OpenStackMachineTemplate"
                && o["metadata"]["labels"]
                    .get("topology.cluster.x-k8s.io/deployment-name")
                    .is_some()
        })
        .collect();
    assert!(!workers.is_empty());
    for w in workers {
        let ann = &w["metadata"]["annotations"];
        assert_eq!(ann["note"], "kept", "{w}");
        assert_eq!(
            ann["cluster.x-k8s.io/cloned-from-name"],
            "dev-test-default-worker"
        );
        assert!(ann
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_none());
        assert!(w["metadata"]["labels"].get("patched").is_none(), "{w}");
        assert!(w["spec"]["template"].get("metadata").is_none(), "{w}");
        // The patched spec is there: the flavor patch of the class still applies.
        assert!(w["spec"]["template"]["spec"]["flavor"].is_string(), "{w}");
    }

    // A control plane without machines gets no machine template.
    let mut no_machines = class.clone();
    no_machines["spec"]["controlPlane"]
        .as_object_mut()
        .unwrap()
        .remove("machineInfrastructure");
    let plain_templates = docs("templates/dev-test.yaml");
    let objs = render::render(&build(&no_machines, &plain_templates), &packs()).unwrap();
    let cp = &by_kind_name(&objs, "KubeadmControlPlane", "")[0];
    assert!(cp["spec"].get("machineTemplate").is_none(), "{cp}");
    assert!(cp["spec"]["version"].is_string());
}

/// ClusterClass naming templates (v1beta2 `naming.template`, v1beta1
/// `*NamingStrategy.template`) name the InfrastructureCluster, the ControlPlane and the
/// MachineDeployments, as CAPI's name generator does; the builtin names follow.
#[test]
fn naming_templates_name_the_objects() {
    let (cluster_docs, cluster_name, mut class) = dev_test_documents();
    class["spec"]["infrastructure"]["naming"] =
        json!({"template": "{{ .cluster.name }}-infra-{{ .random }}"});
    class["spec"]["controlPlane"]["naming"] = json!({"template": "{{ .cluster.name }}-cp"});
    class["spec"]["workers"]["machineDeployments"][0]["naming"] =
        json!({"template": "{{ .machineDeployment.topologyName }}-of-{{ .cluster.name }}"});
    class["spec"]["patches"].as_array_mut().unwrap().push(json!({
        "name": "md-name",
        "definitions": [{
            "selector": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                         "kind": "OpenStackMachineTemplate",
                         "matchResources": {"machineDeploymentClass": {"names": ["default-worker"]}}},
            "jsonPatches": [{"op": "add", "path": "/spec/template/spec/mdName",
                             "valueFrom": {"variable": "builtin.machineDeployment.name"}}]}]}));
    let templates = docs("templates/dev-test.yaml");
    let inputs = |class: &Value| inputs_from(&cluster_docs[0], class, &templates);
    let objs = render::render(&inputs(&class), &packs()).unwrap();
    let infra = objs
        .iter()
        .find(|o| o["kind"] == "OpenStackCluster")
        .unwrap();
    let name = infra["metadata"]["name"].as_str().unwrap();
    let prefix = format!("{cluster_name}-infra-");
    assert!(
        name.starts_with(&prefix) && name.len() == prefix.len() + 5,
        "{name}"
    );
    let cp = objs
        .iter()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .unwrap();
    assert_eq!(cp["metadata"]["name"], json!(format!("{cluster_name}-cp")));
    let md_names: BTreeSet<String> = objs
        .iter()
        .filter_map(|o| o["spec"]["template"]["spec"]["mdName"].as_str())
        .map(str::to_string)
        .collect();
    let topology_names: Vec<&str> = cluster_docs[0]["spec"]["topology"]["workers"]
        ["machineDeployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let want: BTreeSet<String> = topology_names
        .iter()
        .map(|n| format!("{n}-of-{cluster_name}"))
        .collect();
    assert_eq!(md_names, want);

    // A template reading a key CAPI does not set stops the render, naming it.
    class["spec"]["controlPlane"]["naming"] = json!({"template": "{{ .cluster.namespace }}"});
    let err = render::render(&inputs(&class), &packs())
        .unwrap_err()
        .to_string();
    assert!(err.contains("{{ .cluster.namespace }}"), "{err}");

    // The v1beta1 spellings.
    let v1beta1 = docs("tests/fixtures/classes/openstack-cilium-v1beta1.yaml").remove(0);
    let mut c = v1beta1.clone();
    c["spec"]["infrastructureNamingStrategy"] = json!({"template": "i-{{ .random }}"});
    c["spec"]["controlPlane"]["namingStrategy"] = json!({"template": "cp-{{ .random }}"});
    c["spec"]["workers"]["machineDeployments"][0]["namingStrategy"] =
        json!({"template": "md-{{ .random }}"});
    let parsed = stackhook::engine::clusterclass::ClusterClass::from_value(&c).unwrap();
    assert_eq!(
        parsed.infrastructure_naming.as_deref(),
        Some("i-{{ .random }}")
    );
    assert_eq!(
        parsed.control_plane_naming.as_deref(),
        Some("cp-{{ .random }}")
    );
    assert_eq!(
        parsed.machine_deployments[0].naming.as_deref(),
        Some("md-{{ .random }}")
    );
}

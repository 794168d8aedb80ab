//! What `stackhook render` does per target CAPI release: MachinePools (a bootstrap
//! config and an infrastructure machine pool per pool, `builtin.machinePool`, the
//! `machinePoolClass` selector), and patches to labels and annotations, which reach the
//! objects from CAPI 1.14.0 (kubernetes-sigs/cluster-api#13924) and are dropped before.
//!
//! Expectations come from CAPI's source: `computeMachinePool` and `templateToObject` in
//! exp/topology/desiredstate/desired_state.go, `createRequest`, `applyPatchToRequest`
//! and `updateDesiredState` in core/reconcilers/topology/cluster/patches/engine.go
//! (internal/controllers/... before 1.11), `variables.MachinePool` in patches/variables.

use serde_json::{json, Value};
use stackhook::engine::clusterclass::{Cluster, ClusterClass};
use stackhook::engine::{EngineHandlers, PackEngine, PatchEngine};
use stackhook::render::{self, Inputs, Templates};
use stackhook::sdk::common::{Base64Bytes, CommonResponse, PatchType};
use stackhook::sdk::topology::{
    DiscoverVariablesRequest, DiscoverVariablesResponse, GeneratePatchesRequest,
    GeneratePatchesResponse, GeneratePatchesResponseItem, ValidateTopologyRequest,
};
use stackhook::sdk::{CapiVersion, Hook, ResponseStatus};

const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const BOOT: &str = "bootstrap.cluster.x-k8s.io/v1beta2";

fn templates() -> Vec<Value> {
    vec![
        json!({"apiVersion": INFRA, "kind": "OpenStackClusterTemplate",
               "metadata": {"name": "oc", "namespace": "default"},
               "spec": {"template": {"spec": {"identityRef": {"type": "Secret", "name": "cloud", "cloudName": "openstack"}}}}}),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
               "metadata": {"name": "cp", "namespace": "default"},
               "spec": {"template": {"spec": {"kubeadmConfigSpec": {"format": "cloud-config"}}}}}),
        json!({"apiVersion": BOOT, "kind": "KubeadmConfigTemplate",
               "metadata": {"name": "md-boot", "namespace": "default",
                            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
               "spec": {"template": {"spec": {"format": "cloud-config"}}}}),
        json!({"apiVersion": INFRA, "kind": "OpenStackMachineTemplate",
               "metadata": {"name": "md-infra", "namespace": "default", "labels": {"own": "md"}},
               "spec": {"template": {"spec": {"flavor": "m1.small"}}}}),
        json!({"apiVersion": BOOT, "kind": "KubeadmConfigTemplate",
               "metadata": {"name": "mp-boot", "namespace": "default", "labels": {"on-the-template": "only"}},
               "spec": {"template": {
                   "metadata": {"labels": {"from-template": "yes"}, "annotations": {"note": "kept"}},
                   "spec": {"format": "ignition"}}}}),
        json!({"apiVersion": INFRA, "kind": "DockerMachinePoolTemplate",
               "metadata": {"name": "mp-infra", "namespace": "default"},
               "spec": {"template": {"spec": {"template": {"image": "kindest"}}}}}),
    ]
}

/// Patches using the MachinePool builtins and both worker selectors.
fn inline_patches() -> Value {
    json!([{
    "name": "workers",
    "definitions": [
        {"selector": {"apiVersion": INFRA, "kind": "DockerMachinePoolTemplate",
                      "matchResources": {"machinePoolClass": {"names": ["pool-*"]}}},
         "jsonPatches": [{"op": "add", "path": "/spec/template/spec/template/customImage",
                          "valueFrom": {"template": "{{ .builtin.machinePool.topologyName }}/{{ .builtin.machinePool.class }}/{{ .builtin.machinePool.replicas }}"}},
                         {"op": "add", "path": "/spec/template/spec/names",
                          "valueFrom": {"template": "{{ .builtin.machinePool.name }} {{ .builtin.machinePool.bootstrap.configRef.name }} {{ .builtin.machinePool.infrastructureRef.name }}"}}]},
        {"selector": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate",
                      "matchResources": {"machineDeploymentClass": {"names": ["*"]}}},
         "jsonPatches": [{"op": "add", "path": "/spec/template/spec/preKubeadmCommands",
                          "value": ["deployments only"]}]},
        {"selector": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate",
                      "matchResources": {"machinePoolClass": {"names": ["pool-small"]}}},
         "jsonPatches": [{"op": "add", "path": "/spec/template/spec/postKubeadmCommands",
                          "valueFrom": {"template": "[\"echo {{ .builtin.machinePool.version }}\"]"}}]},
    ]}])
}

fn class_v1beta2() -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
        "metadata": {"name": "pools", "namespace": "default"},
        "spec": {
            "infrastructure": {"templateRef": {"apiVersion": INFRA, "kind": "OpenStackClusterTemplate", "name": "oc"}},
            "controlPlane": {"templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                                             "kind": "KubeadmControlPlaneTemplate", "name": "cp"},
                             "metadata": {"labels": {"team": "class"}}},
            "workers": {
                "machineDeployments": [{"class": "default-worker",
                    "bootstrap": {"templateRef": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate", "name": "md-boot"}},
                    "infrastructure": {"templateRef": {"apiVersion": INFRA, "kind": "OpenStackMachineTemplate", "name": "md-infra"}}}],
                "machinePools": [{"class": "pool-small",
                    "metadata": {"labels": {"pool-class": "not-on-the-objects"}},
                    "bootstrap": {"templateRef": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate", "name": "mp-boot"}},
                    "infrastructure": {"templateRef": {"apiVersion": INFRA, "kind": "DockerMachinePoolTemplate", "name": "mp-infra"}}}]},
            "patches": inline_patches()}})
}

/// The same class in the CAPI 1.10 spelling.
fn class_v1beta1() -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "ClusterClass",
        "metadata": {"name": "pools", "namespace": "default"},
        "spec": {
            "infrastructure": {"ref": {"apiVersion": INFRA, "kind": "OpenStackClusterTemplate", "name": "oc"}},
            "controlPlane": {"ref": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                                     "kind": "KubeadmControlPlaneTemplate", "name": "cp"},
                             "metadata": {"labels": {"team": "class"}}},
            "workers": {
                "machineDeployments": [{"class": "default-worker", "template": {
                    "bootstrap": {"ref": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate", "name": "md-boot"}},
                    "infrastructure": {"ref": {"apiVersion": INFRA, "kind": "OpenStackMachineTemplate", "name": "md-infra"}}}}],
                "machinePools": [{"class": "pool-small", "template": {
                    "metadata": {"labels": {"pool-class": "not-on-the-objects"}},
                    "bootstrap": {"ref": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate", "name": "mp-boot"}},
                    "infrastructure": {"ref": {"apiVersion": INFRA, "kind": "DockerMachinePoolTemplate", "name": "mp-infra"}}}}]},
            "patches": inline_patches()}})
}

fn cluster(api: &str) -> Value {
    let class_ref = if api.ends_with("v1beta2") {
        json!({"classRef": {"name": "pools"}})
    } else {
        json!({"class": "pools"})
    };
    let mut topology = json!({
        "version": "v1.33.1",
        "controlPlane": {"replicas": 1, "metadata": {"labels": {"team": "topology"}}},
        "workers": {
            "machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 1}],
            "machinePools": [
                {"class": "pool-small", "name": "pool-a", "replicas": 2,
                 "metadata": {"labels": {"pool-topology": "not-on-the-objects"}}},
                {"class": "pool-small", "name": "pool-b"}]}});
    for (k, v) in class_ref.as_object().unwrap() {
        topology[k] = v.clone();
    }
    json!({"apiVersion": api, "kind": "Cluster",
           "metadata": {"name": "c1", "namespace": "default"},
           "spec": {"topology": topology}})
}

fn inputs(cluster: &Value, class: &Value, capi: u16) -> Inputs {
    Inputs {
        cluster: Cluster::from_value(cluster).unwrap(),
        class: ClusterClass::from_value(class).unwrap(),
        templates: Templates::from_documents(
            "templates",
            templates()
                .into_iter()
                .map(|t| ("t.yaml".to_string(), t))
                .collect(),
        )
        .unwrap(),
        capi: CapiVersion::new(capi),
    }
}

fn v1beta2_inputs() -> Inputs {
    inputs(&cluster("cluster.x-k8s.io/v1beta2"), &class_v1beta2(), 14)
}

/// The class has no external patch: no pack is asked.
fn no_packs() -> PackEngine {
    PackEngine::embedded().unwrap()
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
fn machine_pools_become_a_bootstrap_config_and_an_infrastructure_machine_pool() {
    let objs = render::render(&v1beta2_inputs(), &no_packs()).unwrap();
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "OpenStackCluster",
            "KubeadmControlPlane",
            "KubeadmConfigTemplate",
            "OpenStackMachineTemplate",
            "KubeadmConfig",
            "DockerMachinePool",
            "KubeadmConfig",
            "DockerMachinePool",
        ]
    );
    let (boot, infra) = (&objs[4], &objs[5]);
    // Objects, not templates: `spec` is the template's spec.template.spec.
    assert_eq!(boot["apiVersion"], BOOT);
    assert_eq!(infra["apiVersion"], INFRA);
    assert_generated(&boot["metadata"]["name"], "c1-pool-a-");
    assert_generated(&infra["metadata"]["name"], "c1-pool-a-");
    assert_ne!(boot["metadata"]["name"], infra["metadata"]["name"]);
    assert_eq!(boot["metadata"]["namespace"], "default");
    // The template's spec.template.metadata, then the ownership and pool-name labels;
    // neither the class's nor the topology's MachinePool metadata (those go to the
    // MachinePool object), nor the template's own metadata.
    assert_eq!(
        boot["metadata"]["labels"],
        json!({"from-template": "yes", "cluster.x-k8s.io/cluster-name": "c1",
               "topology.cluster.x-k8s.io/owned": "", "topology.cluster.x-k8s.io/pool-name": "pool-a"})
    );
    assert_eq!(
        boot["metadata"]["annotations"],
        json!({"note": "kept", "cluster.x-k8s.io/cloned-from-name": "mp-boot",
               "cluster.x-k8s.io/cloned-from-groupkind": "KubeadmConfigTemplate.bootstrap.cluster.x-k8s.io"})
    );
    assert_eq!(
        infra["metadata"]["labels"],
        json!({"cluster.x-k8s.io/cluster-name": "c1", "topology.cluster.x-k8s.io/owned": "",
               "topology.cluster.x-k8s.io/pool-name": "pool-a"})
    );
    assert_eq!(
        infra["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-groupkind"],
        "DockerMachinePoolTemplate.infrastructure.cluster.x-k8s.io"
    );
    // The machinePoolClass selectors and builtin.machinePool; the
    // machineDeploymentClass selector leaves the pool's KubeadmConfigTemplate alone.
    assert_eq!(
        boot["spec"],
        json!({"format": "ignition", "postKubeadmCommands": ["echo v1.33.1"]})
    );
    assert_eq!(
        infra["spec"]["template"]["customImage"],
        "pool-a/pool-small/2"
    );
    let names: Vec<&str> = infra["spec"]["names"]
        .as_str()
        .unwrap()
        .split(' ')
        .collect();
    assert_generated(&json!(names[0]), "c1-pool-a-");
    assert_eq!(names[1], boot["metadata"]["name"]);
    assert_eq!(names[2], infra["metadata"]["name"]);
    // A pool without replicas has none in builtin (the template prints Go's <no value>).
    assert_eq!(
        objs[7]["spec"]["template"]["customImage"],
        "pool-b/pool-small/<no value>"
    );
    assert_eq!(
        objs[6]["metadata"]["labels"]["topology.cluster.x-k8s.io/pool-name"],
        "pool-b"
    );
    // The MachineDeployment's bootstrap template got its own patch, not the pool's.
    assert_eq!(
        objs[2]["spec"]["template"]["spec"],
        json!({"format": "cloud-config", "preKubeadmCommands": ["deployments only"]})
    );
}

#[test]
fn machine_pool_items_carry_capi_s_holders_and_builtins() {
    for (capi, api, class) in [
        (14, "cluster.x-k8s.io/v1beta2", class_v1beta2()),
        (10, "cluster.x-k8s.io/v1beta1", class_v1beta1()),
    ] {
        let i = inputs(&cluster(api), &class, capi);
        let req = render::first_request(&i, &no_packs(), "workers").unwrap();
        let pool_items: Vec<_> = req
            .items
            .iter()
            .filter(|it| it.holder_reference.kind == "MachinePool")
            .collect();
        assert_eq!(pool_items.len(), 4, "CAPI 1.{capi}");
        let h = &pool_items[0].holder_reference;
        // CAPI 1.10 names the exp API's cluster.x-k8s.io/v1beta1; 1.11 on, v1beta2.
        assert_eq!(h.api_version, api);
        assert_eq!(h.namespace, "default");
        assert_eq!(h.field_path, "spec.template.spec.bootstrap.configRef");
        assert_eq!(
            pool_items[1].holder_reference.field_path,
            "spec.template.spec.infrastructureRef"
        );
        assert_generated(&json!(h.name), "c1-pool-a-");
        let b = &pool_items[0].variables[0];
        assert_eq!(b.name, "builtin");
        let mp = &b.value["machinePool"];
        assert_eq!(mp["class"], "pool-small");
        assert_eq!(mp["topologyName"], "pool-a");
        assert_eq!(mp["version"], "v1.33.1");
        assert_eq!(mp["replicas"], 2);
        assert_eq!(mp["name"], json!(h.name));
        assert!(mp["bootstrap"]["configRef"]["name"].is_string());
        assert!(mp["infrastructureRef"]["name"].is_string());
        assert_eq!(pool_items[1].variables, pool_items[0].variables);
        // The request holds the class templates, not the objects.
        assert_eq!(pool_items[0].object["kind"], "KubeadmConfigTemplate");
        assert_eq!(pool_items[1].object["kind"], "DockerMachinePoolTemplate");
    }
}

#[test]
fn both_api_versions_render_the_same_pools() {
    let v2 = render::render(&v1beta2_inputs(), &no_packs()).unwrap();
    let v1 = render::render(
        &inputs(&cluster("cluster.x-k8s.io/v1beta1"), &class_v1beta1(), 10),
        &no_packs(),
    )
    .unwrap();
    assert_eq!(v1, v2);
}

#[test]
fn machine_pool_topology_errors_name_their_field() {
    let mut c = cluster("cluster.x-k8s.io/v1beta2");
    c["spec"]["topology"]["workers"]["machinePools"][1]["class"] = json!("pool-large");
    c["spec"]["topology"]["workers"]["machinePools"][1]["name"] = json!("pool-a");
    let problems = render::validate(&inputs(&c, &class_v1beta2(), 14), &no_packs());
    assert_eq!(
        problems,
        [
            "spec.topology.workers.machinePools[1].name: \"pool-a\" is used twice",
            "spec.topology.workers.machinePools[1].class: \"pool-large\" is not a MachinePool class of ClusterClass pools",
        ]
    );
}

#[test]
fn v1beta2_inputs_need_capi_1_11() {
    let problems = render::validate(
        &inputs(&cluster("cluster.x-k8s.io/v1beta2"), &class_v1beta2(), 10),
        &no_packs(),
    );
    assert_eq!(
        problems,
        [
            "Cluster c1: apiVersion cluster.x-k8s.io/v1beta2 is served from CAPI 1.11 on, not by CAPI 1.10",
            "ClusterClass pools: apiVersion cluster.x-k8s.io/v1beta2 is served from CAPI 1.11 on, not by CAPI 1.10",
        ]
    );
}

/// An external patch answering with JSON merge patches to labels and annotations: on
/// the objects' `spec.template.metadata` (InfrastructureCluster, ControlPlane, pools)
/// and on the cloned templates' `metadata` and `spec.template.metadata`. Each also tries
/// to change a label CAPI keeps.
struct MetadataPatcher;

impl PatchEngine for MetadataPatcher {
    fn handlers(&self) -> EngineHandlers {
        EngineHandlers {
            generate_patches: vec!["meta".into()],
            discover_variables: vec![],
            validate_topology: vec![],
        }
    }
    fn generate_patches(&self, _: &str, req: &GeneratePatchesRequest) -> GeneratePatchesResponse {
        let items = req
            .items
            .iter()
            .map(|it| {
                let h = &it.holder_reference;
                let cloned = h.kind == "MachineDeployment" || h.field_path.contains("machineTemplate");
                let patch = if cloned {
                    json!({"metadata": {"labels": {"patched": "outer",
                                                   "topology.cluster.x-k8s.io/deployment-name": "changed"}},
                           "spec": {"template": {"metadata": {"labels": {"patched": "inner"}}}}})
                } else {
                    json!({"spec": {"template": {"metadata": {
                        "labels": {"patched": "object", "team": "patch",
                                   "cluster.x-k8s.io/cluster-name": "changed"},
                        "annotations": {"patched": "object"}}}}})
                };
                GeneratePatchesResponseItem {
                    uid: it.uid.clone(),
                    patch_type: PatchType::JSONMergePatch,
                    patch: Base64Bytes(serde_json::to_vec(&patch).unwrap()),
                }
            })
            .collect();
        GeneratePatchesResponse {
            items,
            ..GeneratePatchesResponse::success()
        }
    }
    fn discover_variables(
        &self,
        _: &str,
        _: &DiscoverVariablesRequest,
        _: CapiVersion,
    ) -> DiscoverVariablesResponse {
        unreachable!("the class discovers no variables")
    }
    fn validate_topology(&self, _: &str, _: &ValidateTopologyRequest) -> CommonResponse {
        CommonResponse::new(Hook::ValidateTopology, ResponseStatus::Success, "")
    }
}

fn with_metadata_patch(capi: u16) -> Inputs {
    let mut class = class_v1beta2();
    class["spec"]["patches"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "meta", "external": {"generatePatchesExtension": "meta.ext"}}));
    inputs(&cluster("cluster.x-k8s.io/v1beta2"), &class, capi)
}

fn find<'a>(objs: &'a [Value], kind: &str, name_prefix: &str) -> &'a Value {
    objs.iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name_prefix))
        })
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}*"))
}

#[test]
fn metadata_patches_reach_the_objects_from_capi_1_14() {
    let objs = render::render(&with_metadata_patch(14), &MetadataPatcher).unwrap();

    // Objects: the patched spec.template.metadata becomes their metadata, over the
    // class's and the topology's control-plane labels; CAPI's own labels stay.
    let kcp = find(&objs, "KubeadmControlPlane", "c1-");
    assert_eq!(
        kcp["metadata"]["labels"],
        json!({"patched": "object", "team": "patch", "cluster.x-k8s.io/cluster-name": "c1",
               "topology.cluster.x-k8s.io/owned": ""})
    );
    assert_eq!(kcp["metadata"]["annotations"]["patched"], "object");
    assert_eq!(
        kcp["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"],
        "cp"
    );
    for (kind, prefix) in [
        ("OpenStackCluster", "c1-"),
        ("KubeadmConfig", "c1-pool-a-"),
        ("DockerMachinePool", "c1-pool-b-"),
    ] {
        let o = find(&objs, kind, prefix);
        assert_eq!(o["metadata"]["labels"]["patched"], "object", "{o}");
        assert_eq!(
            o["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "c1",
            "{o}"
        );
        assert_eq!(o["metadata"]["annotations"]["patched"], "object", "{o}");
    }
    let pool = find(&objs, "KubeadmConfig", "c1-pool-a-");
    assert_eq!(pool["metadata"]["labels"]["from-template"], "yes");
    assert_eq!(
        pool["metadata"]["labels"]["topology.cluster.x-k8s.io/pool-name"],
        "pool-a"
    );
    // Objects have no spec.template: nothing else changes.
    assert!(pool["spec"].get("template").is_none(), "{pool}");

    // Cloned templates: metadata and spec.template.metadata both take the patch.
    for kind in ["KubeadmConfigTemplate", "OpenStackMachineTemplate"] {
        let t = find(&objs, kind, "c1-md-0-");
        let labels = &t["metadata"]["labels"];
        assert_eq!(labels["patched"], "outer", "{t}");
        assert_eq!(labels["topology.cluster.x-k8s.io/deployment-name"], "md-0");
        assert_eq!(
            t["spec"]["template"]["metadata"]["labels"],
            json!({"patched": "inner"})
        );
    }
    assert_eq!(
        find(&objs, "OpenStackMachineTemplate", "c1-md-0-")["metadata"]["labels"]["own"],
        "md"
    );
}

#[test]
fn metadata_patches_are_dropped_up_to_capi_1_13() {
    let objs = render::render(&with_metadata_patch(13), &MetadataPatcher).unwrap();
    let kcp = find(&objs, "KubeadmControlPlane", "c1-");
    // The topology's control-plane labels over the class's, and nothing of the patch.
    assert_eq!(
        kcp["metadata"]["labels"],
        json!({"team": "topology", "cluster.x-k8s.io/cluster-name": "c1",
               "topology.cluster.x-k8s.io/owned": ""})
    );
    assert!(kcp["metadata"]["annotations"].get("patched").is_none());
    for o in &objs {
        assert!(o["metadata"]["labels"].get("patched").is_none(), "{o}");
        assert!(o["metadata"]["annotations"].get("patched").is_none(), "{o}");
    }
    let t = find(&objs, "OpenStackMachineTemplate", "c1-md-0-");
    assert!(t["spec"]["template"].get("metadata").is_none(), "{t}");
    // And everything else is as 1.14 renders it without the metadata patch.
    let plain = render::render(&v1beta2_inputs(), &no_packs()).unwrap();
    assert_eq!(objs, plain);
}

#[test]
fn request_templates_carry_the_objects_metadata_from_capi_1_14() {
    let at = |capi: u16| {
        let i = if capi >= 11 {
            inputs(&cluster("cluster.x-k8s.io/v1beta2"), &class_v1beta2(), capi)
        } else {
            inputs(&cluster("cluster.x-k8s.io/v1beta1"), &class_v1beta1(), capi)
        };
        render::first_request(&i, &no_packs(), "workers").unwrap()
    };
    let new = at(14);
    let old = at(13);
    let oldest = at(10);
    // An object's template: at spec.template.metadata.
    let oc = &new.items[0].object;
    assert_eq!(
        oc["spec"]["template"]["metadata"]["labels"],
        json!({"cluster.x-k8s.io/cluster-name": "c1", "topology.cluster.x-k8s.io/owned": ""})
    );
    assert_eq!(
        oc["spec"]["template"]["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"],
        "oc"
    );
    assert!(old.items[0].object["spec"]["template"]
        .get("metadata")
        .is_none());
    // The ControlPlane's carries the class's and the topology's labels.
    assert_eq!(
        new.items[1].object["spec"]["template"]["metadata"]["labels"]["team"],
        "topology"
    );
    // A cloned template: at metadata, with the deployment's name label.
    let md_boot = new
        .items
        .iter()
        .find(|i| {
            i.holder_reference.kind == "MachineDeployment"
                && i.holder_reference.field_path.contains("bootstrap")
        })
        .unwrap();
    assert_eq!(
        md_boot.object["metadata"]["labels"],
        json!({"cluster.x-k8s.io/cluster-name": "c1", "topology.cluster.x-k8s.io/owned": "",
               "topology.cluster.x-k8s.io/deployment-name": "md-0"})
    );
    // kubectl's record goes from 1.11 on; 1.10 sends the template as stored.
    let last_applied = |req: &GeneratePatchesRequest| {
        req.items
            .iter()
            .find(|i| i.object["metadata"]["name"] == "md-boot")
            .unwrap()
            .object["metadata"]
            .get("annotations")
            .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
            .is_some()
    };
    assert!(last_applied(&oldest));
    assert!(!last_applied(&old));
    assert!(!last_applied(&new));
    // 1.13 keeps the emptied map, 1.14 drops it.
    let md_boot_old = old
        .items
        .iter()
        .find(|i| i.object["metadata"]["name"] == "md-boot")
        .unwrap();
    assert_eq!(md_boot_old.object["metadata"]["annotations"], json!({}));
}

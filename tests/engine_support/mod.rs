//! Request builders and response decoding shared by the engine tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde_json::{json, Value};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::GeneratePatchesRequest;

pub fn engine(yaml: &str) -> PackEngine {
    match PackEngine::from_sources(vec![("test.yaml".to_string(), yaml.to_string())]) {
        Ok(e) => e,
        Err(e) => panic!("pack did not load:\n{e}"),
    }
}

/// One request item; `vars` are the item's own variables (`[{name, value}]`).
pub fn item(
    uid: &str,
    holder: (&str, &str, &str),
    gvk: (&str, &str),
    spec: Value,
    vars: Value,
) -> Value {
    json!({
        "uid": uid,
        "holderReference": {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": holder.0, "namespace": "ns1", "name": holder.1, "fieldPath": holder.2
        },
        "object": {
            "apiVersion": gvk.0, "kind": gvk.1,
            "metadata": {"name": format!("tmpl-{uid}"), "namespace": "ns1"},
            "spec": {"template": {"spec": spec}}
        },
        "variables": vars
    })
}

pub fn md_vars(class: &str, topology_name: &str) -> Value {
    json!([{"name": "builtin", "value": {"machineDeployment": {
        "class": class, "topologyName": topology_name, "name": format!("c1-{topology_name}-abcde"),
        "version": "v1.33.1", "replicas": 2
    }}}])
}

pub fn mp_vars(class: &str, topology_name: &str) -> Value {
    json!([{"name": "builtin", "value": {"machinePool": {
        "class": class, "topologyName": topology_name, "name": format!("c1-{topology_name}-xyz12")
    }}}])
}

pub fn request(global_vars: Value, items: Vec<Value>) -> GeneratePatchesRequest {
    let mut vars = global_vars.as_array().cloned().unwrap_or_default();
    if !vars.iter().any(|v| v["name"] == "builtin") {
        vars.push(json!({"name": "builtin", "value": {"cluster": {
            "name": "c1", "namespace": "ns1",
            "topology": {"version": "v1.33.1", "classRef": {"name": "cc", "namespace": "ns1"}}
        }}}));
    }
    let raw = json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "GeneratePatchesRequest",
        "variables": vars,
        "items": items,
    });
    serde_json::from_value(raw).expect("request fixture decodes")
}

/// Calls GeneratePatches and returns the raw response JSON as CAPI would read it.
pub fn generate_json(e: &PackEngine, handler: &str, req: &GeneratePatchesRequest) -> Value {
    serde_json::to_value(e.generate_patches(handler, req)).expect("response encodes")
}

/// uid → decoded JSON patch, asserting the wire format: Success, JSONPatch, standard
/// padded base64 of a JSON array, at most one item per uid.
pub fn patches(resp: &Value) -> BTreeMap<String, Value> {
    assert_eq!(resp["status"], "Success", "response: {resp}");
    let mut out = BTreeMap::new();
    for it in resp["items"].as_array().cloned().unwrap_or_default() {
        assert_eq!(it["patchType"], "JSONPatch");
        let b64 = it["patch"].as_str().expect("patch is a string");
        let bytes = data_encoding::BASE64
            .decode(b64.as_bytes())
            .expect("standard padded base64");
        let patch: Value = serde_json::from_slice(&bytes).expect("patch is JSON");
        assert!(patch.is_array());
        let uid = it["uid"].as_str().unwrap().to_string();
        assert!(
            out.insert(uid.clone(), patch).is_none(),
            "two items for uid {uid}"
        );
    }
    out
}

pub fn failure(resp: &Value) -> String {
    assert_eq!(resp["status"], "Failure", "expected a Failure: {resp}");
    assert!(resp
        .get("items")
        .is_none_or(|i| i.as_array().is_none_or(Vec::is_empty)));
    resp["message"].as_str().unwrap_or_default().to_string()
}

/// The template kinds a CAPI v1beta1/v1beta2 kubeadm + CAPO class hands to external
/// patches, as minimal objects (an empty `spec.template.spec`), with the holder CAPI
/// sends for each: (uid, holder, (apiVersion, kind), item variables).
pub fn minimal_items(worker_vars: Value) -> Vec<Value> {
    let osct = (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackClusterTemplate",
    );
    let osmt = (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
    );
    let mut md = md_vars("default-worker", "md-0")
        .as_array()
        .cloned()
        .unwrap();
    md.extend(worker_vars.as_array().cloned().unwrap_or_default());
    let md = Value::Array(md);
    vec![
        item(
            "osct",
            ("Cluster", "c1", "spec.infrastructureRef"),
            osct,
            json!({}),
            json!([]),
        ),
        item(
            "osmt-cp",
            (
                "KubeadmControlPlane",
                "c1-cp",
                "spec.machineTemplate.spec.infrastructureRef",
            ),
            osmt,
            json!({}),
            json!([]),
        ),
        item(
            "osmt-md",
            (
                "MachineDeployment",
                "c1-md-0",
                "spec.template.spec.infrastructureRef",
            ),
            osmt,
            json!({}),
            md.clone(),
        ),
        item(
            "kcpt-v1beta1",
            ("Cluster", "c1", "spec.controlPlaneRef"),
            (
                "controlplane.cluster.x-k8s.io/v1beta1",
                "KubeadmControlPlaneTemplate",
            ),
            json!({"kubeadmConfigSpec": {}}),
            json!([]),
        ),
        item(
            "kcpt-v1beta2",
            ("Cluster", "c1", "spec.controlPlaneRef"),
            (
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlaneTemplate",
            ),
            json!({}),
            json!([]),
        ),
        item(
            "kct-v1beta1",
            (
                "MachineDeployment",
                "c1-md-0",
                "spec.template.spec.bootstrap.configRef",
            ),
            (
                "bootstrap.cluster.x-k8s.io/v1beta1",
                "KubeadmConfigTemplate",
            ),
            json!({}),
            md.clone(),
        ),
        item(
            "kct-v1beta2",
            (
                "MachineDeployment",
                "c1-md-0",
                "spec.template.spec.bootstrap.configRef",
            ),
            (
                "bootstrap.cluster.x-k8s.io/v1beta2",
                "KubeadmConfigTemplate",
            ),
            json!({}),
            md,
        ),
    ]
}

/// GeneratePatches of `handler` over `items`, each item's object with its patch
/// applied (strictly, as CAPI applies it): uid → patched object. Panics with the
/// response on Failure.
pub fn patched_objects(
    e: &PackEngine,
    handler: &str,
    globals: Value,
    items: Vec<Value>,
) -> BTreeMap<String, Value> {
    let objects: BTreeMap<String, Value> = items
        .iter()
        .map(|i| (i["uid"].as_str().unwrap().to_string(), i["object"].clone()))
        .collect();
    let req = request(globals, items);
    let resp = generate_json(e, handler, &req);
    let mut by_uid = patches(&resp);
    objects
        .into_iter()
        .map(|(uid, mut obj)| {
            if let Some(p) = by_uid.remove(&uid) {
                let patch: json_patch::Patch = serde_json::from_value(p).unwrap();
                json_patch::patch(&mut obj, &patch)
                    .unwrap_or_else(|e| panic!("{uid}: CAPI could not apply the patch: {e}"));
            }
            (uid, obj)
        })
        .collect()
}

/// `{name, value}` list of Cluster variables from a JSON object.
pub fn vars(obj: Value) -> Value {
    Value::Array(
        obj.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

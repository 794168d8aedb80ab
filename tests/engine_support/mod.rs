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

//! The shipped packs against a CAPI 1.14-shaped request for an OpenStack + Cilium
//! ClusterClass; expected patches are written by hand in tests/fixtures/engine.

use crate::engine_support;

use engine_support::patches;
use serde_json::{json, Value};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::{GeneratePatchesRequest, ValidateTopologyRequest};

fn fixture(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/engine")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn check(pack: &str, expected_file: &str) {
    let e = PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"));
    let req: GeneratePatchesRequest =
        serde_json::from_value(fixture("topology-request.json")).unwrap();
    let resp = serde_json::to_value(e.generate_patches(pack, &req)).unwrap();
    let expected = fixture(expected_file);
    let order: Vec<&str> = resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uid"].as_str().unwrap())
        .collect();
    let want_order: Vec<&str> = expected["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    assert_eq!(order, want_order);
    let got = patches(&resp);
    for (uid, want) in expected["patches"].as_object().unwrap() {
        assert_eq!(&got[uid], want, "{pack}: patch for {uid}");
    }
    assert_eq!(got.len(), expected["patches"].as_object().unwrap().len());

    // Same request, reversed items and new uids: same patches in the same order.
    let mut shuffled = req.clone();
    shuffled.items.reverse();
    for it in &mut shuffled.items {
        it.uid = format!("new-{}", it.uid);
    }
    let resp2 = serde_json::to_value(e.generate_patches(pack, &shuffled)).unwrap();
    let order2: Vec<String> = resp2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["uid"]
                .as_str()
                .unwrap()
                .trim_start_matches("new-")
                .to_string()
        })
        .collect();
    assert_eq!(order2, want_order);
    for (i, it) in resp2["items"].as_array().unwrap().iter().enumerate() {
        assert_eq!(it["patch"], resp["items"][i]["patch"]);
    }
}

#[test]
fn openstack_pack_golden() {
    check("openstack", "expected-openstack.json");
}

#[test]
fn cilium_pack_golden_with_defaults() {
    check("cilium", "expected-cilium.json");
}

#[test]
fn cilium_without_kube_proxy_replacement_keeps_kube_proxy() {
    let e = PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"));
    let mut raw = fixture("topology-request.json");
    raw["variables"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "cilium", "value": {"kubeProxyReplacement": false}}));
    let req: GeneratePatchesRequest = serde_json::from_value(raw).unwrap();
    let got = patches(&serde_json::to_value(e.generate_patches("cilium", &req)).unwrap());
    let cp = got["d1a4e5f6-4444-4444-8444-444444444444"]
        .as_array()
        .unwrap();
    assert!(
        cp.iter()
            .all(|op| !op["path"].as_str().unwrap().ends_with("skipPhases")),
        "{cp:?}"
    );
    assert_eq!(cp.len(), 2);
    assert!(cp[1]["value"]["content"]
        .as_str()
        .unwrap()
        .contains("kubeProxyReplacement: false"));
}

#[test]
fn openstack_values_of_the_fixture_validate_and_bad_ones_do_not() {
    let e = PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"));
    let mut raw = fixture("topology-request.json");
    for it in raw["items"].as_array_mut().unwrap() {
        it.as_object_mut().unwrap().remove("uid");
    }
    let req: ValidateTopologyRequest = serde_json::from_value(raw.clone()).unwrap();
    let ok = e.validate_topology("openstack", &req);
    assert_eq!(
        serde_json::to_value(&ok).unwrap()["status"],
        "Success",
        "{ok:?}"
    );

    raw["variables"][0]["value"]["externalNetworkID"] = json!("public");
    raw["variables"][0]["value"]["nodeNetwork"]["cidr"] = json!("10.6.0.0");
    let req: ValidateTopologyRequest = serde_json::from_value(raw).unwrap();
    let bad = serde_json::to_value(e.validate_topology("openstack", &req)).unwrap();
    assert_eq!(bad["status"], "Failure");
    let msg = bad["message"].as_str().unwrap();
    assert!(
        msg.contains("variables[openstack].externalNetworkID: "),
        "{msg}"
    );
    assert!(
        msg.contains(r#"variables[openstack].nodeNetwork.cidr: "10.6.0.0" is not a "cidr""#),
        "{msg}"
    );
}

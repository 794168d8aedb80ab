//! The `networking` and `vip` packs (v1) on minimal templates: each setting reaches
//! the spec.extensions field the controller reads, or the kubeadm / CAPO field that
//! carries it; cloud-decided values stay out of the templates.

use crate::engine_support;

use std::collections::BTreeMap;

use engine_support::{minimal_items, patched_objects, vars};
use serde_json::{json, Value};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::ValidateTopologyRequest;

fn engine() -> PackEngine {
    PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"))
}

fn spec(objs: &BTreeMap<String, Value>, uid: &str) -> Value {
    objs[uid]["spec"]["template"]["spec"].clone()
}

fn files(s: &Value) -> Vec<String> {
    s["files"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| f["path"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn cilium_by_default_on_minimal_templates() {
    let objs = patched_objects(
        &engine(),
        "networking-v1-generate-patches",
        json!([]),
        minimal_items(json!([])),
    );
    assert_eq!(
        spec(&objs, "osct")["extensions"],
        json!({
            "networking": {"kubeNetworkPlugin": "cilium", "cilium": {
                "kubeProxyReplacement": true, "routingMode": "tunnel",
                "tunnelProtocol": "vxlan", "ipam": {"mode": "kubernetes"},
                "hubble": false, "webhookEnable": false}},
            "networkInterfaces": {}
        })
    );
    // A KubeadmControlPlaneTemplate with no initConfiguration and no files: both
    // created, kube-proxy skipped, the values read from the bootstrap-vars Secret.
    for uid in ["kcpt-v1beta1", "kcpt-v1beta2"] {
        let s = &spec(&objs, uid)["kubeadmConfigSpec"];
        assert_eq!(
            s["initConfiguration"]["skipPhases"],
            json!(["addon/kube-proxy"]),
            "{uid}"
        );
        assert_eq!(
            files(s),
            [
                "/etc/sysctl.d/90-cilium.conf",
                "/etc/kubernetes/cilium-values.yaml"
            ],
            "{uid}"
        );
        assert_eq!(
            s["files"][1]["contentFrom"],
            json!({"secret": {"name": "c1-bootstrap-vars", "key": "cilium-values.yaml"}})
        );
        assert!(s["files"][1].get("content").is_none());
    }
    for uid in ["kct-v1beta1", "kct-v1beta2"] {
        assert_eq!(
            files(&spec(&objs, uid)),
            ["/etc/sysctl.d/90-cilium.conf"],
            "{uid}"
        );
    }
    // Nothing on the machines.
    assert_eq!(spec(&objs, "osmt-cp"), json!({}));
}

#[test]
fn user_skip_phases_and_files_are_kept() {
    let mut items = minimal_items(json!([]));
    items[3]["object"]["spec"]["template"]["spec"]["kubeadmConfigSpec"] = json!({
        "initConfiguration": {"skipPhases": ["addon/coredns"]},
        "files": [{"path": "/etc/mine", "content": "x"}],
        "clusterConfiguration": {}
    });
    let objs = patched_objects(
        &engine(),
        "networking-v1-generate-patches",
        json!([]),
        items,
    );
    let s = &spec(&objs, "kcpt-v1beta1")["kubeadmConfigSpec"];
    assert_eq!(
        s["initConfiguration"]["skipPhases"],
        json!(["addon/coredns", "addon/kube-proxy"])
    );
    assert_eq!(files(s)[0], "/etc/mine");
    assert_eq!(files(s).len(), 3);
}

#[test]
fn flannel_and_interfaces() {
    let objs = patched_objects(
        &engine(),
        "networking-v1-generate-patches",
        vars(
            json!({"networking": {"kubeNetworkPlugin": "flannel", "interfaces": {"flannel": "ens4", "keepalived": "ens3"}}}),
        ),
        minimal_items(json!([])),
    );
    assert_eq!(
        spec(&objs, "osct")["extensions"],
        json!({"networking": {"kubeNetworkPlugin": "flannel"},
               "networkInterfaces": {"keepalived": "ens3", "flannel": "ens4"}})
    );
    // No Cilium: kube-proxy stays, no sysctl, no values file.
    assert_eq!(
        spec(&objs, "kcpt-v1beta1"),
        json!({"kubeadmConfigSpec": {}})
    );
    assert_eq!(spec(&objs, "kct-v1beta2"), json!({}));

    // Cilium keeping kube-proxy: no skip phase.
    let objs = patched_objects(
        &engine(),
        "networking-v1-generate-patches",
        vars(
            json!({"networking": {"cilium": {"kubeProxyReplacement": false, "routingMode": "native", "nativeRoutingCIDR": "10.0.0.0/8", "webhookEnable": true}}}),
        ),
        minimal_items(json!([])),
    );
    let s = &spec(&objs, "kcpt-v1beta2")["kubeadmConfigSpec"];
    assert!(s.get("initConfiguration").is_none(), "{s}");
    let c = &spec(&objs, "osct")["extensions"]["networking"]["cilium"];
    assert_eq!(
        (c["routingMode"].as_str(), c["webhookEnable"].as_bool()),
        (Some("native"), Some(true))
    );
}

#[test]
fn vip_modes() {
    let e = engine();
    let h = "vip-v1-generate-patches";
    let objs = patched_objects(&e, h, json!([]), minimal_items(json!([])));
    assert_eq!(
        spec(&objs, "osct"),
        json!({"apiServerLoadBalancer": {"enabled": true},
               "extensions": {"loadBalancers": {"ingress": {"enabled": false}}}})
    );
    assert_eq!(spec(&objs, "osmt-cp"), json!({}));

    let objs = patched_objects(
        &e,
        h,
        vars(
            json!({"vip": {"mode": "keepalived", "keepalived": {"address": "10.6.0.5", "interface": "ens3", "virtualRouterID": 7}, "ingress": {"enabled": true}}}),
        ),
        minimal_items(json!([])),
    );
    assert_eq!(
        spec(&objs, "osct"),
        json!({"apiServerLoadBalancer": {"enabled": false},
               "apiServerFixedIP": "10.6.0.5",
               "disableAPIServerFloatingIP": true,
               "extensions": {"loadBalancers": {"ingress": {"enabled": true}},
                              "networkInterfaces": {"keepalived": "ens3"}}})
    );
    assert_eq!(
        spec(&objs, "osmt-cp"),
        json!({"ports": [{"allowedAddressPairs": [{"ipAddress": "10.6.0.5"}]}]})
    );
    assert_eq!(spec(&objs, "osmt-md"), json!({}));
    for uid in ["kcpt-v1beta1", "kcpt-v1beta2"] {
        let s = &spec(&objs, uid)["kubeadmConfigSpec"];
        assert_eq!(
            files(s),
            [
                "/etc/keepalived/keepalived.conf",
                "/etc/kubernetes/manifests/keepalived.yaml"
            ]
        );
        let conf = s["files"][0]["content"].as_str().unwrap();
        assert!(conf.contains("interface ens3"), "{conf}");
        assert!(conf.contains("virtual_router_id 7"), "{conf}");
        assert!(conf.contains("    10.6.0.5\n"), "{conf}");
        let pod: Value = serde_json::to_value(
            serde_saphyr::from_str::<serde_json::Value>(s["files"][1]["content"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["spec"]["hostNetwork"], true);
    }

    let objs = patched_objects(
        &e,
        h,
        vars(json!({"vip": {"mode": "floatingIP"}})),
        minimal_items(json!([])),
    );
    assert_eq!(
        spec(&objs, "osct")["apiServerLoadBalancer"],
        json!({"enabled": false})
    );
    assert_eq!(spec(&objs, "osct")["disableAPIServerFloatingIP"], false);
}

#[test]
fn dependent_settings_are_refused() {
    let validate = |handler: &str, values: Value| -> String {
        let req: ValidateTopologyRequest = serde_json::from_value(json!({
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "kind": "ValidateTopologyRequest",
            "variables": vars(values),
            "items": [],
        }))
        .unwrap();
        let r = serde_json::to_value(engine().validate_topology(handler, &req)).unwrap();
        r["message"].as_str().unwrap_or_default().to_string()
    };
    let net = "networking-v1-validate-topology";
    for (value, expect) in [
        (
            json!({"cilium": {"routingMode": "native"}}),
            "native routing needs nativeRoutingCIDR",
        ),
        (
            json!({"cilium": {"ipam": {"mode": "cluster-pool"}}}),
            "cluster-pool IPAM needs ipam.poolCIDR",
        ),
        (
            json!({"kubeNetworkPlugin": "weave"}),
            "variables[networking].kubeNetworkPlugin",
        ),
        (
            json!({"interfaces": {"flannel": "eth0; rm"}}),
            "variables[networking].interfaces.flannel",
        ),
    ] {
        let msg = validate(net, json!({"networking": value}));
        assert!(msg.contains(expect), "{expect:?} in {msg:?}");
    }
    let msg = validate(
        "vip-v1-validate-topology",
        json!({"vip": {"mode": "keepalived"}}),
    );
    assert!(
        msg.contains("a keepalived endpoint needs keepalived.address"),
        "{msg}"
    );
    let msg = validate(
        "vip-v1-validate-topology",
        json!({"vip": {"mode": "keepalived", "keepalived": {"address": "10.0.0.300x"}}}),
    );
    assert!(msg.contains("variables[vip].keepalived.address"), "{msg}");
    assert_eq!(validate("vip-v1-validate-topology", json!({"vip": {}})), "");
}

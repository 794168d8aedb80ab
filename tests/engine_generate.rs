//! GeneratePatches: CAPI's inline patch semantics, checked against hand-written
//! expectations (request in, decoded JSON patch out).

use crate::engine_support;

use engine_support::*;
use serde_json::{json, Value};

const T: (&str, &str) = ("infra.example/v1", "Thing");
const INFRA: (&str, &str, &str) = ("Cluster", "c1", "spec.infrastructureRef");
const CP: (&str, &str, &str) = ("Cluster", "c1", "spec.controlPlaneRef");
const CP_MACHINE_V1B1: (&str, &str, &str) = (
    "KubeadmControlPlane",
    "c1-cp",
    "spec.machineTemplate.infrastructureRef",
);
const CP_MACHINE_V1B2: (&str, &str, &str) = (
    "KubeadmControlPlane",
    "c1-cp",
    "spec.machineTemplate.spec.infrastructureRef",
);

fn md_infra(name: &str) -> (&str, &str, &str) {
    (
        "MachineDeployment",
        name,
        "spec.template.spec.infrastructureRef",
    )
}

/// A pack with one patch per matcher, each writing its own marker.
fn marker_pack(matchers: &[(&str, &str)]) -> String {
    let mut s = String::from("name: test\nvariables: []\npatches:\n");
    for (name, matcher) in matchers {
        s.push_str(&format!(
            "- name: {name}\n  definitions:\n  - selector:\n      apiVersion: infra.example/v1\n      kind: Thing\n      matchResources: {matcher}\n    jsonPatches:\n    - op: add\n      path: /spec/template/spec/{name}\n      value: true\n"
        ));
    }
    s
}

fn markers(patch: Option<&Value>) -> Vec<String> {
    patch
        .and_then(Value::as_array)
        .map(|ops| {
            ops.iter()
                .map(|o| {
                    o["path"]
                        .as_str()
                        .unwrap()
                        .trim_start_matches("/spec/template/spec/")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn add_replace_remove_with_literal_and_variable_values() {
    let e = engine(
        r#"
name: test
variables:
- name: flavor
  required: true
  schema: {openAPIV3Schema: {type: string}}
patches:
- name: p
  definitions:
  - selector:
      apiVersion: infra.example/v1
      kind: Thing
      matchResources: {infrastructureCluster: true}
    jsonPatches:
    - {op: add, path: /spec/template/spec/extra, value: {x: 1, ys: [a]}}
    - {op: replace, path: /spec/template/spec/flavor, valueFrom: {variable: flavor}}
    - {op: remove, path: /spec/template/spec/old}
"#,
    );
    let req = request(
        json!([{"name": "flavor", "value": "m1.large"}]),
        vec![item(
            "u1",
            INFRA,
            T,
            json!({"flavor": "m1.small", "old": 1}),
            json!([]),
        )],
    );
    let got = patches(&generate_json(&e, "test", &req));
    assert_eq!(
        got["u1"],
        json!([
            {"op": "add", "path": "/spec/template/spec/extra", "value": {"x": 1, "ys": ["a"]}},
            {"op": "replace", "path": "/spec/template/spec/flavor", "value": "m1.large"},
            {"op": "remove", "path": "/spec/template/spec/old"}
        ])
    );
}

#[test]
fn each_match_resources_kind_selects_only_its_templates() {
    let e = engine(&marker_pack(&[
        ("infra", "{infrastructureCluster: true}"),
        ("cp", "{controlPlane: true}"),
        ("md", "{machineDeploymentClass: {names: [default-worker]}}"),
        ("mp", "{machinePoolClass: {names: [pool]}}"),
    ]));
    let md_boot = (
        "MachineDeployment",
        "c1-md-0",
        "spec.template.spec.bootstrap.configRef",
    );
    let mp_boot = (
        "MachinePool",
        "c1-mp-0",
        "spec.template.spec.bootstrap.configRef",
    );
    let mp_infra = (
        "MachinePool",
        "c1-mp-0",
        "spec.template.spec.infrastructureRef",
    );
    let req = request(
        json!([]),
        vec![
            item("infra", INFRA, T, json!({}), json!([])),
            item("cp", CP, T, json!({}), json!([])),
            item("cpm", CP_MACHINE_V1B2, T, json!({}), json!([])),
            item(
                "mdb",
                md_boot,
                T,
                json!({}),
                md_vars("default-worker", "md-0"),
            ),
            item(
                "mdi",
                md_infra("c1-md-0"),
                T,
                json!({}),
                md_vars("default-worker", "md-0"),
            ),
            item("mpb", mp_boot, T, json!({}), mp_vars("pool", "mp-0")),
            item("mpi", mp_infra, T, json!({}), mp_vars("pool", "mp-0")),
            // Same holder as a matching item, but another template kind: never selected.
            item(
                "other",
                INFRA,
                ("infra.example/v1", "Other"),
                json!({}),
                json!([]),
            ),
            // Same kind, wrong version: the selector's apiVersion is an exact match.
            item(
                "oldver",
                INFRA,
                ("infra.example/v0", "Thing"),
                json!({}),
                json!([]),
            ),
        ],
    );
    let got = patches(&generate_json(&e, "test", &req));
    assert_eq!(markers(got.get("infra")), ["infra"]);
    assert_eq!(markers(got.get("cp")), ["cp"]);
    assert_eq!(markers(got.get("cpm")), ["cp"]);
    assert_eq!(markers(got.get("mdb")), ["md"]);
    assert_eq!(markers(got.get("mdi")), ["md"]);
    assert_eq!(markers(got.get("mpb")), ["mp"]);
    assert_eq!(markers(got.get("mpi")), ["mp"]);
    assert!(!got.contains_key("other"));
    assert!(!got.contains_key("oldver"));
    assert_eq!(got.len(), 7);
}

#[test]
fn control_plane_machine_template_under_both_contracts() {
    let e = engine(&marker_pack(&[
        ("cp", "{controlPlane: true}"),
        ("infra", "{infrastructureCluster: true}"),
    ]));
    let req = request(
        json!([]),
        vec![
            item("v1beta1", CP_MACHINE_V1B1, T, json!({}), json!([])),
            item("v1beta2", CP_MACHINE_V1B2, T, json!({}), json!([])),
            // A controlPlaneRef held by something else than a Cluster is not the CP.
            item(
                "notcp",
                ("MachineDeployment", "x", "spec.controlPlaneRef"),
                T,
                json!({}),
                json!([]),
            ),
        ],
    );
    let got = patches(&generate_json(&e, "test", &req));
    assert_eq!(markers(got.get("v1beta1")), ["cp"]);
    assert_eq!(markers(got.get("v1beta2")), ["cp"]);
    assert!(!got.contains_key("notcp"));
}

#[test]
fn machine_deployment_class_globs() {
    let e = engine(&marker_pack(&[
        (
            "exact",
            "{machineDeploymentClass: {names: [default-worker]}}",
        ),
        ("prefix", "{machineDeploymentClass: {names: [gpu-*]}}"),
        ("suffix", "{machineDeploymentClass: {names: ['*-large']}}"),
        ("all", "{machineDeploymentClass: {names: ['*']}}"),
    ]));
    let classes = [
        ("a", "default-worker"),
        ("b", "gpu-a100"),
        ("c", "cpu-large"),
        ("d", "gpu-large"),
        ("e", "default-worker-2"),
    ];
    let items = classes
        .iter()
        .map(|(uid, class)| {
            item(
                uid,
                md_infra(&format!("c1-{uid}")),
                T,
                json!({}),
                md_vars(class, uid),
            )
        })
        .collect();
    let got = patches(&generate_json(&e, "test", &request(json!([]), items)));
    assert_eq!(markers(got.get("a")), ["exact", "all"]);
    assert_eq!(markers(got.get("b")), ["prefix", "all"]);
    assert_eq!(markers(got.get("c")), ["suffix", "all"]);
    assert_eq!(markers(got.get("d")), ["prefix", "suffix", "all"]);
    assert_eq!(markers(got.get("e")), ["all"]);
}

const FLAVOR_PACK: &str = r#"
name: test
variables:
- name: flavor
  required: true
  schema: {openAPIV3Schema: {type: string}}
patches:
- name: flavor
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {controlPlane: true, machineDeploymentClass: {names: ['*']}}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/flavor, valueFrom: {variable: flavor}}
"#;

#[test]
fn per_machine_deployment_override_wins_over_global_value() {
    let e = engine(FLAVOR_PACK);
    let mut override_vars = md_vars("w", "md-big");
    override_vars
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "flavor", "value": "m1.xlarge"}));
    let req = request(
        json!([{"name": "flavor", "value": "m1.small"}]),
        vec![
            item("cp", CP_MACHINE_V1B2, T, json!({}), json!([])),
            item(
                "plain",
                md_infra("c1-md-plain"),
                T,
                json!({}),
                md_vars("w", "md-plain"),
            ),
            item("big", md_infra("c1-md-big"), T, json!({}), override_vars),
        ],
    );
    let got = patches(&generate_json(&e, "test", &req));
    let flavor = |uid: &str| got[uid][0]["value"].clone();
    assert_eq!(flavor("cp"), "m1.small");
    assert_eq!(flavor("plain"), "m1.small");
    assert_eq!(flavor("big"), "m1.xlarge");
}

#[test]
fn builtin_values_from_global_and_item_halves() {
    let e = engine(
        r#"
name: test
patches:
- name: names
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {machineDeploymentClass: {names: ['*']}}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/cluster, valueFrom: {variable: builtin.cluster.name}}
    - {op: add, path: /spec/template/spec/md, valueFrom: {variable: builtin.machineDeployment.topologyName}}
    - {op: add, path: /spec/template/spec/replicas, valueFrom: {variable: builtin.machineDeployment.replicas}}
    - {op: add, path: /spec/template/spec/label, valueFrom: {template: "{{ .builtin.cluster.name }}-{{ .builtin.machineDeployment.topologyName }}"}}
"#,
    );
    let req = request(
        json!([]),
        vec![item(
            "u",
            md_infra("c1-md-0-abcde"),
            T,
            json!({}),
            md_vars("w", "md-0"),
        )],
    );
    let got = patches(&generate_json(&e, "test", &req));
    assert_eq!(
        got["u"],
        json!([
            {"op": "add", "path": "/spec/template/spec/cluster", "value": "c1"},
            {"op": "add", "path": "/spec/template/spec/md", "value": "md-0"},
            {"op": "add", "path": "/spec/template/spec/replicas", "value": 2},
            {"op": "add", "path": "/spec/template/spec/label", "value": "c1-md-0"}
        ])
    );
}

#[test]
fn enabled_if_true_and_false() {
    let e = engine(
        r#"
name: test
variables:
- name: flag
  required: true
  schema: {openAPIV3Schema: {type: boolean}}
patches:
- name: gated
  enabledIf: "{{ .flag }}"
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/gated, value: 1}
- name: always
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/always, value: 1}
"#,
    );
    let run = |on: bool| {
        let req = request(
            json!([{"name": "flag", "value": on}]),
            vec![item("u", INFRA, T, json!({}), json!([]))],
        );
        markers(patches(&generate_json(&e, "test", &req)).get("u"))
    };
    assert_eq!(run(true), ["gated", "always"]);
    assert_eq!(run(false), ["always"]);
}

#[test]
fn missing_variable_is_a_failure_naming_it() {
    let e = engine(FLAVOR_PACK);
    let req = request(
        json!([]),
        vec![item("u", CP_MACHINE_V1B2, T, json!({}), json!([]))],
    );
    let msg = failure(&generate_json(&e, "test", &req));
    assert!(msg.contains(r#"variable "flavor" not found"#), "{msg}");
    assert!(
        msg.contains(r#"pack "test" patch "flavor" definitions[0].jsonPatches[0]"#),
        "{msg}"
    );
    assert!(msg.contains("/spec/template/spec/flavor"), "{msg}");
}

#[test]
fn missing_nested_variable_field_is_a_failure() {
    let e = engine(
        r#"
name: test
variables:
- name: o
  schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
patches:
- name: p
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/z, valueFrom: {variable: "o.zones[1]"}}
"#,
    );
    let ok = request(
        json!([{"name": "o", "value": {"zones": ["a", "b"]}}]),
        vec![item("u", INFRA, T, json!({}), json!([]))],
    );
    assert_eq!(
        patches(&generate_json(&e, "test", &ok))["u"][0]["value"],
        "b"
    );
    let short = request(
        json!([{"name": "o", "value": {"zones": ["a"]}}]),
        vec![item("u", INFRA, T, json!({}), json!([]))],
    );
    let msg = failure(&generate_json(&e, "test", &short));
    assert!(
        msg.contains("o.zones[1]") && msg.contains("out of range"),
        "{msg}"
    );
}

#[test]
fn an_op_capi_could_not_apply_is_a_failure() {
    // RFC 6902: `add` needs a parent that can hold the child (packs create missing
    // parents, never replace a scalar), `replace`/`remove` need the target.
    for (op, path) in [
        ("add", "/spec/template/spec/present/child"),
        ("replace", "/spec/template/spec/absent"),
        ("remove", "/spec/template/spec/absent"),
    ] {
        let value = if op == "remove" { "" } else { ", value: 1" };
        let e = engine(&format!(
            "name: test\npatches:\n- name: p\n  definitions:\n  - selector: {{apiVersion: infra.example/v1, kind: Thing, matchResources: {{infrastructureCluster: true}}}}\n    jsonPatches:\n    - {{op: {op}, path: {path}{value}}}\n"
        ));
        let req = request(
            json!([]),
            vec![item("u", INFRA, T, json!({"present": 1}), json!([]))],
        );
        let msg = failure(&generate_json(&e, "test", &req));
        assert!(msg.contains(&format!("({op} {path})")), "{msg}");
        assert!(msg.contains("could not apply"), "{msg}");
        assert!(msg.contains("Cluster c1 (spec.infrastructureRef)"), "{msg}");
    }
}

#[test]
fn ops_of_all_patches_merge_into_one_item_in_pack_order() {
    // The second patch writes below what the first created: valid only if ops are
    // checked cumulatively, and emitted in pack order in a single item.
    let e = engine(
        r#"
name: test
patches:
- name: first
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/parent, value: {}}
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/parent/a, value: 1}
- name: second
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/parent/b, value: 2}
    - {op: add, path: /spec/template/spec/list/-, value: z}
"#,
    );
    let req = request(
        json!([]),
        vec![item("u", INFRA, T, json!({"list": ["y"]}), json!([]))],
    );
    let got = patches(&generate_json(&e, "test", &req));
    assert_eq!(
        got["u"],
        json!([
            {"op": "add", "path": "/spec/template/spec/parent", "value": {}},
            {"op": "add", "path": "/spec/template/spec/parent/a", "value": 1},
            {"op": "add", "path": "/spec/template/spec/parent/b", "value": 2},
            {"op": "add", "path": "/spec/template/spec/list/-", "value": "z"}
        ])
    );
}

#[test]
fn response_is_independent_of_item_order_and_uids() {
    let e = engine(FLAVOR_PACK);
    let holders: Vec<(String, (&str, &str, &str), Value)> = vec![
        ("cp".into(), CP_MACHINE_V1B2, json!([])),
        ("a".into(), md_infra("c1-md-a"), md_vars("w", "md-a")),
        ("b".into(), md_infra("c1-md-b"), md_vars("w", "md-b")),
        ("c".into(), md_infra("c1-md-c"), md_vars("w", "md-c")),
    ];
    let orders = [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]];
    let mut seen: Option<(Vec<String>, Vec<Value>)> = None;
    for (round, order) in orders.iter().enumerate() {
        // Fresh uids per call, as CAPI generates them on every reconcile.
        let items = order
            .iter()
            .map(|&i| {
                let (name, holder, vars) = &holders[i];
                item(
                    &format!("{name}-{round}"),
                    *holder,
                    T,
                    json!({}),
                    vars.clone(),
                )
            })
            .collect();
        let req = request(json!([{"name": "flavor", "value": "m1"}]), items);
        let resp = generate_json(&e, "test", &req);
        let ids: Vec<String> = resp["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                i["uid"]
                    .as_str()
                    .unwrap()
                    .trim_end_matches(&format!("-{round}"))
                    .to_string()
            })
            .collect();
        let bodies: Vec<Value> = resp["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["patch"].clone())
            .collect();
        match &seen {
            None => seen = Some((ids, bodies)),
            Some(first) => assert_eq!(first, &(ids, bodies), "order {order:?}"),
        }
    }
    // Sorted by holder kind then name: KubeadmControlPlane before MachineDeployments.
    assert_eq!(seen.unwrap().0, ["cp", "a", "b", "c"]);
}

#[test]
fn failure_message_is_independent_of_item_order() {
    let e = engine(FLAVOR_PACK);
    let a = item("ua", md_infra("c1-md-a"), T, json!({}), md_vars("w", "a"));
    let b = item("ub", md_infra("c1-md-b"), T, json!({}), md_vars("w", "b"));
    let m1 = failure(&generate_json(
        &e,
        "test",
        &request(json!([]), vec![a.clone(), b.clone()]),
    ));
    let m2 = failure(&generate_json(&e, "test", &request(json!([]), vec![b, a])));
    assert_eq!(m1, m2);
    assert!(m1.contains("MachineDeployment c1-md-a"), "{m1}");
}

#[test]
fn unknown_handler_is_a_failure() {
    let e = engine(FLAVOR_PACK);
    let msg = failure(&generate_json(&e, "nope", &request(json!([]), vec![])));
    assert!(msg.contains("\"nope\"") && msg.contains("test"), "{msg}");
}

#[test]
fn no_matching_template_gives_no_items() {
    let e = engine(FLAVOR_PACK);
    let req = request(json!([]), vec![item("u", INFRA, T, json!({}), json!([]))]);
    let resp = generate_json(&e, "test", &req);
    assert_eq!(resp["status"], "Success");
    assert!(patches(&resp).is_empty());
}

#[test]
fn odd_input_is_answered_not_panicked_on() {
    let e = engine(FLAVOR_PACK);
    let raw = json!({
        "variables": [{"name": "builtin", "value": "not an object"}, {"name": "flavor", "value": {"deep": [1, 2]}}],
        "items": [
            {"uid": "a", "holderReference": {"apiVersion": "", "kind": "", "namespace": "", "name": "", "fieldPath": ""}, "object": "text"},
            {"uid": "b", "holderReference": {"apiVersion": "x", "kind": "MachineDeployment", "namespace": "n", "name": "m", "fieldPath": "spec.template.spec.infrastructureRef"},
             "object": {"apiVersion": "infra.example/v1", "kind": "Thing", "spec": []},
             "variables": [{"name": "builtin", "value": {"machineDeployment": {"class": 7}}}]},
            {"uid": "c", "holderReference": {"apiVersion": "x", "kind": "KubeadmControlPlane", "namespace": "n", "name": "cp", "fieldPath": "spec.machineTemplate.infrastructureRef"},
             "object": {"apiVersion": "infra.example/v1", "kind": "Thing", "spec": "scalar"}}
        ]
    });
    let req = serde_json::from_value(raw).unwrap();
    let resp = generate_json(&e, "test", &req);
    // The CP template's spec is not an object, so `add` has no parent: a Failure.
    let msg = failure(&resp);
    assert!(msg.contains("KubeadmControlPlane cp"), "{msg}");
}

#[test]
fn add_creates_missing_parents_and_keeps_existing_ones() {
    let e = engine(
        r#"
name: test
patches:
- name: p
  definitions:
  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}
    jsonPatches:
    - {op: add, path: /spec/template/spec/kubeadm/files/-, value: {path: /etc/a}}
    - {op: add, path: /spec/template/spec/kubeadm/files/-, value: {path: /etc/b}}
    - {op: add, path: /spec/template/spec/init/skipPhases, value: [addon/kube-proxy]}
    - {op: add, path: /spec/template/spec/present/extra, value: 2}
    - {op: add, path: /spec/template/spec/list/0, value: first}
"#,
    );
    let req = request(
        json!([]),
        vec![item(
            "u",
            INFRA,
            T,
            json!({"present": {"kept": 1}}),
            json!([]),
        )],
    );
    let items = patches(&generate_json(&e, "test", &req));
    let spec = "/spec/template/spec";
    assert_eq!(
        items["u"],
        json!([
            {"op": "add", "path": format!("{spec}/kubeadm"), "value": {}},
            {"op": "add", "path": format!("{spec}/kubeadm/files"), "value": []},
            {"op": "add", "path": format!("{spec}/kubeadm/files/-"), "value": {"path": "/etc/a"}},
            {"op": "add", "path": format!("{spec}/kubeadm/files/-"), "value": {"path": "/etc/b"}},
            {"op": "add", "path": format!("{spec}/init"), "value": {}},
            {"op": "add", "path": format!("{spec}/init/skipPhases"), "value": ["addon/kube-proxy"]},
            {"op": "add", "path": format!("{spec}/present/extra"), "value": 2},
            {"op": "add", "path": format!("{spec}/list"), "value": []},
            {"op": "add", "path": format!("{spec}/list/0"), "value": "first"},
        ])
    );
}

/// The server gives each decoded request away to the engine, which then moves the
/// templates and variables instead of copying them: the answer, failures included,
/// must be the one a lent request gets.
#[test]
fn a_request_given_away_gets_the_answer_a_lent_one_gets() {
    use stackhook::engine::{PackEngine, PatchEngine};
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/bodies/generate-patches-12.json"
    ))
    .expect("body");
    let req: stackhook::sdk::topology::GeneratePatchesRequest =
        serde_json::from_slice(&body).expect("request");
    let packs = PackEngine::embedded().expect("packs");
    let mut compared = 0;
    for pack in packs.packs() {
        let handler = format!("{}-generate-patches", pack.name);
        let lent = packs.generate_patches(&handler, &req);
        let mut given = req.clone();
        let taken = packs.generate_patches_consuming(&handler, &mut given, None);
        assert_eq!(
            serde_json::to_value(&lent).expect("json"),
            serde_json::to_value(&taken).expect("json"),
            "{handler}"
        );
        compared += usize::from(!lent.items.is_empty());
    }
    assert!(compared >= 2, "the bench body is patched by the packs");

    let failing = engine(
        "name: test\npatches:\n- name: p\n  definitions:\n  - selector: {apiVersion: infra.example/v1, kind: Thing, matchResources: {infrastructureCluster: true}}\n    jsonPatches:\n    - {op: add, path: /spec/template/spec/ok, value: 1}\n    - {op: replace, path: /spec/template/spec/absent, value: 1}\n",
    );
    let req = request(
        json!([]),
        vec![item("u", INFRA, T, json!({"present": 1}), json!([]))],
    );
    let lent = failing.generate_patches("test-generate-patches", &req);
    let taken = failing.generate_patches_consuming("test-generate-patches", &mut req.clone(), None);
    assert!(
        lent.message.contains("replace /spec/template/spec/absent"),
        "{}",
        lent.message
    );
    assert!(
        lent.message.contains("Thing of Cluster c1"),
        "{}",
        lent.message
    );
    assert_eq!(lent.message, taken.message);
    assert_eq!(lent.status, taken.status);
}

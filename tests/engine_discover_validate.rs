//! DiscoverVariables element shapes per CAPI version, and ValidateTopology checks.

use serde_json::{json, Value};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::{DiscoverVariablesRequest, ValidateTopologyRequest};
use stackhook::sdk::CapiVersion;

const PACK: &str = r#"
name: net
variables:
- name: net
  required: true
  metadata:
    labels: {tier: basic}
  schema:
    openAPIV3Schema:
      type: object
      x-metadata:
        annotations: {ui: network}
      required: [cidr]
      properties:
        cidr:
          type: string
          pattern: '^[0-9./]+$'
        mode:
          type: string
          enum: [tunnel, native]
          default: tunnel
        mtu:
          type: integer
          minimum: 1280
          maximum: 9000
        dns:
          type: array
          items: {type: string, format: ipv4}
        zones:
          type: array
          maxItems: 2
          items: {type: string}
          x-kubernetes-validations:
          - rule: self.all(z, z != 'nova')
            message: the default zone "nova" cannot be listed
- name: debug
  schema:
    openAPIV3Schema: {type: boolean}
"#;

fn engine() -> PackEngine {
    PackEngine::from_sources(vec![("net.yaml".into(), PACK.into())])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn discover(capi: u16) -> Value {
    serde_json::to_value(engine().discover_variables(
        "net",
        &DiscoverVariablesRequest::default(),
        CapiVersion::new(capi),
    ))
    .unwrap()
}

#[test]
fn v1beta1_shape_up_to_capi_1_12() {
    for capi in [10, 11, 12] {
        let r = discover(capi);
        assert_eq!(r["status"], "Success");
        let vars = r["variables"].as_array().unwrap();
        // Sorted by name, required always written.
        assert_eq!(vars[0]["name"], "debug");
        assert_eq!(vars[0]["required"], false);
        assert_eq!(vars[1]["name"], "net");
        assert_eq!(vars[1]["required"], true);
        assert_eq!(vars[1]["metadata"], json!({"labels": {"tier": "basic"}}));
        assert!(vars[1].get("deprecatedV1Beta1Metadata").is_none());
        assert_eq!(
            vars[1]["schema"]["openAPIV3Schema"]["x-metadata"],
            json!({"annotations": {"ui": "network"}})
        );
    }
}

#[test]
fn v1beta2_shape_from_capi_1_13() {
    for capi in [13, 14] {
        let r = discover(capi);
        let net = &r["variables"][1];
        assert_eq!(
            net["deprecatedV1Beta1Metadata"],
            json!({"labels": {"tier": "basic"}})
        );
        assert!(net.get("metadata").is_none());
        assert_eq!(r["variables"][0]["required"], false);
        assert_eq!(
            net["schema"]["openAPIV3Schema"]["properties"]["mode"]["default"],
            "tunnel"
        );
    }
}

fn validate(global: Value, items: Value) -> (String, String) {
    let req: ValidateTopologyRequest = serde_json::from_value(json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "ValidateTopologyRequest",
        "variables": global,
        "items": items,
    }))
    .unwrap();
    let r = serde_json::to_value(engine().validate_topology("net", &req)).unwrap();
    (
        r["status"].as_str().unwrap().to_string(),
        r["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn valid_values_pass_with_defaults_applied() {
    let (status, msg) = validate(
        json!([{"name": "net", "value": {"cidr": "10.0.0.0/24", "dns": ["8.8.8.8"], "zones": ["az1"]}},
               {"name": "debug", "value": true}]),
        json!([]),
    );
    assert_eq!((status.as_str(), msg.as_str()), ("Success", ""));
}

#[test]
fn absent_variables_are_not_reported() {
    // ValidateTopology carries the last ClusterClass patch's variables, maybe not ours.
    let (status, _) = validate(json!([]), json!([]));
    assert_eq!(status, "Success");
}

#[test]
fn each_failure_is_listed_with_its_field_path_sorted() {
    let (status, msg) = validate(
        json!([{"name": "net", "value": {"mode": "bgp", "mtu": 100, "dns": ["8.8.8.8", "not-an-ip"], "zones": ["a", "b", "c"], "extra": 1}},
               {"name": "debug", "value": "yes"}]),
        json!([]),
    );
    assert_eq!(status, "Failure");
    let body = msg.split_once(": ").map(|x| x.1).unwrap_or_default();
    let paths: Vec<&str> = body
        .split_once(": ")
        .map(|x| x.1)
        .unwrap_or_default()
        .split("; ")
        .map(|f| f.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "variables[debug]",
            "variables[net]",
            "variables[net]",
            "variables[net].dns[1]",
            "variables[net].mode",
            "variables[net].mtu",
            "variables[net].zones",
        ],
        "{msg}"
    );
    assert!(
        msg.starts_with(r#"pack "net": 7 invalid variable value(s): "#),
        "{msg}"
    );
    // The two root failures: the missing required `cidr` and the unknown `extra`.
    assert!(msg.contains("cidr"), "{msg}");
    assert!(msg.contains("extra"), "{msg}");
}

#[test]
fn pattern_and_cel_rules() {
    let (status, msg) = validate(
        json!([{"name": "net", "value": {"cidr": "ten/8", "zones": ["nova"]}}]),
        json!([]),
    );
    assert_eq!(status, "Failure");
    assert!(msg.contains("variables[net].cidr: "), "{msg}");
    // CEL runs only once the value is structurally valid, like the API server.
    assert!(!msg.contains("nova"), "{msg}");
    let (_, msg) = validate(
        json!([{"name": "net", "value": {"cidr": "10.0.0.0/8", "zones": ["nova"]}}]),
        json!([]),
    );
    assert_eq!(
        msg,
        r#"pack "net": 1 invalid variable value(s): variables[net].zones: Invalid value: the default zone "nova" cannot be listed"#
    );
}

#[test]
fn per_machine_deployment_overrides_are_checked_once_per_deployment() {
    let md = |fp: &str, kind: &str| {
        json!({
            "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "namespace": "ns", "name": "c1-md-0", "fieldPath": fp},
            "object": {"apiVersion": "x/v1", "kind": kind, "spec": {}},
            "variables": [{"name": "net", "value": {"cidr": "10.0.0.0/8", "mtu": 1}}]
        })
    };
    let (status, msg) = validate(
        json!([{"name": "net", "value": {"cidr": "10.0.0.0/8"}}]),
        json!([
            md("spec.template.spec.infrastructureRef", "I"),
            md("spec.template.spec.bootstrap.configRef", "B")
        ]),
    );
    assert_eq!(status, "Failure");
    assert!(msg.starts_with(r#"pack "net": 1 invalid variable value(s): MachineDeployment c1-md-0: variables[net].mtu: "#), "{msg}");
}

/// A second pack, whose variables may share a ValidateTopology request with `net`'s:
/// CAPI sends every validating patch the variables of the last patch of the class.
const DNS_PACK: &str = r#"
name: dns
variables:
- name: dnsServers
  required: true
  schema:
    openAPIV3Schema:
      type: array
      items: {type: string, format: ipv4}
"#;

fn two_packs() -> PackEngine {
    PackEngine::from_sources(vec![
        ("net.yaml".into(), PACK.into()),
        ("dns.yaml".into(), DNS_PACK.into()),
    ])
    .unwrap_or_else(|e| panic!("{e}"))
}

fn validate_with(handler: &str, global: Value, items: Value) -> (String, String) {
    let req: ValidateTopologyRequest = serde_json::from_value(json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "ValidateTopologyRequest",
        "variables": global,
        "items": items,
    }))
    .unwrap();
    let r = serde_json::to_value(two_packs().validate_topology(handler, &req)).unwrap();
    (
        r["status"].as_str().unwrap().to_string(),
        r["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn each_pack_checks_only_its_own_variables_in_a_shared_request() {
    // Both packs' values in one request, each with a problem, globally and as
    // MachineDeployment overrides.
    let global = json!([
        {"name": "net", "value": {"cidr": "10.0.0.0/8", "mtu": 1}},
        {"name": "dnsServers", "value": ["10.0.0.2", "dns.example"]},
        {"name": "builtin", "value": {"cluster": {"name": "c1"}}}
    ]);
    let items = json!([{
        "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                            "namespace": "ns", "name": "c1-md-0",
                            "fieldPath": "spec.template.spec.infrastructureRef"},
        "object": {"apiVersion": "x/v1", "kind": "I", "spec": {}},
        "variables": [{"name": "dnsServers", "value": [5]},
                      {"name": "builtin", "value": {"machineDeployment": {"class": "w"}}}]
    }]);
    let (status, msg) = validate_with("net-validate-topology", global.clone(), items.clone());
    assert_eq!(status, "Failure");
    assert_eq!(
        msg,
        r#"pack "net": 1 invalid variable value(s): variables[net].mtu: 1 is less than the minimum of 1280"#
    );
    let (status, msg) = validate_with("dns-validate-topology", global, items);
    assert_eq!(status, "Failure");
    assert!(
        msg.starts_with(r#"pack "dns": 2 invalid variable value(s): "#),
        "{msg}"
    );
    assert!(msg.contains("variables[dnsServers][1]: "), "{msg}");
    assert!(
        msg.contains(
            r#"MachineDeployment c1-md-0: variables[dnsServers][0]: 5 is not of type "string""#
        ),
        "{msg}"
    );
    assert!(!msg.contains("net"), "{msg}");

    // The request of a class whose last patch is `dns`: `net`'s validator gets none of
    // its own variables and so has nothing to check, and does not call them missing.
    let only_dns = json!([{"name": "dnsServers", "value": ["10.0.0.2"]}]);
    assert_eq!(
        validate_with("net-validate-topology", only_dns.clone(), json!([])),
        ("Success".to_string(), String::new())
    );
    assert_eq!(
        validate_with("dns-validate-topology", only_dns, json!([])),
        ("Success".to_string(), String::new())
    );
}

/// A pack's `validations`: rules over several variables, `self` holding one field per
/// variable; a rule's `fieldPath` names the variable the failure is reported on.
const LB_PACK: &str = r#"
name: lb
variables:
- name: floatingIP
  required: true
  schema: {openAPIV3Schema: {type: string}}
- name: noFloatingIP
  required: true
  schema: {openAPIV3Schema: {type: boolean}}
- name: size
  schema: {openAPIV3Schema: {type: integer, default: 1}}
validations:
- rule: "!self.noFloatingIP || self.floatingIP == ''"
  message: no floating IP address without a floating IP
  reason: FieldValueForbidden
  fieldPath: .floatingIP
- rule: "self.size < 10 || self.floatingIP != ''"
  message: large ones need a floating IP
"#;

fn validate_lb(global: Value, items: Value) -> String {
    let e = PackEngine::from_sources(vec![("lb.yaml".into(), LB_PACK.into())])
        .unwrap_or_else(|e| panic!("{e}"));
    let req: ValidateTopologyRequest =
        serde_json::from_value(json!({"variables": global, "items": items})).unwrap();
    let r = serde_json::to_value(e.validate_topology("lb-validate-topology", &req)).unwrap();
    r["message"].as_str().unwrap_or_default().to_string()
}

#[test]
fn pack_validations_see_every_variable_at_once() {
    let vars = |ip: &str, off: bool| json!([{"name": "floatingIP", "value": ip}, {"name": "noFloatingIP", "value": off}]);
    assert_eq!(validate_lb(vars("", true), json!([])), "");
    assert_eq!(validate_lb(vars("192.0.2.1", false), json!([])), "");
    assert_eq!(
        validate_lb(vars("192.0.2.1", true), json!([])),
        r#"pack "lb": 1 invalid variable value(s): variables[floatingIP]: Forbidden: no floating IP address without a floating IP"#
    );
    // Without a required variable (the request may carry another patch's variables)
    // the rules do not run; defaults are applied before they do.
    assert_eq!(
        validate_lb(json!([{"name": "noFloatingIP", "value": true}]), json!([])),
        ""
    );
    // An override of one MachineDeployment is checked with the Cluster's values; a
    // failure the Cluster's values already have is reported once.
    let md = json!({
        "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                            "namespace": "ns", "name": "c1-md-0", "fieldPath": "spec.template.spec.infrastructureRef"},
        "object": {"apiVersion": "x/v1", "kind": "I", "spec": {}},
        "variables": [{"name": "size", "value": 20}]
    });
    assert_eq!(
        validate_lb(vars("", false), json!([md])),
        r#"pack "lb": 1 invalid variable value(s): MachineDeployment c1-md-0: variables: Invalid value: large ones need a floating IP"#
    );
    assert_eq!(
        validate_lb(vars("192.0.2.1", true), json!([md])),
        r#"pack "lb": 1 invalid variable value(s): variables[floatingIP]: Forbidden: no floating IP address without a floating IP"#
    );
}

#[test]
fn pack_validations_are_checked_when_the_pack_loads() {
    let broken = LB_PACK
        .replace("fieldPath: .floatingIP", "fieldPath: .floatingAddress")
        .replace("self.size < 10", "isSmall(self.size)");
    let err = PackEngine::from_sources(vec![("lb.yaml".into(), broken)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "validations[0].fieldPath: fieldPath does not refer to a field of this schema"
        ),
        "{err}"
    );
    assert!(
        err.contains("validations[1].rule: CEL rule does not compile"),
        "{err}"
    );
}

//! CEL rules of pack variables (`x-kubernetes-validations`): Kubernetes' CEL libraries,
//! rules checked when the pack loads, `messageExpression`, `reason` and `fieldPath`.
//! Every case goes through ValidateTopology or the pack loader, as CAPI reaches them.

use serde_json::{json, Value};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::render::{self, Inputs};
use stackhook::sdk::topology::ValidateTopologyRequest;

/// A pack `t` with one variable `v` of schema `schema`.
fn pack(schema: Value) -> String {
    json!({
        "name": "t",
        "variables": [{"name": "v", "schema": {"openAPIV3Schema": schema}}]
    })
    .to_string()
}

fn load(schema: Value) -> PackEngine {
    PackEngine::from_sources(vec![("cel.yaml".into(), pack(schema))])
        .unwrap_or_else(|e| panic!("pack did not load:\n{e}"))
}

/// ValidateTopology of `v = value`: `None` on Success, else the message.
fn verdict(engine: &PackEngine, value: Value) -> Option<String> {
    let req: ValidateTopologyRequest = serde_json::from_value(json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "ValidateTopologyRequest",
        "variables": [{"name": "v", "value": value}],
        "items": [],
    }))
    .unwrap();
    let r = serde_json::to_value(engine.validate_topology("t-validate-topology", &req)).unwrap();
    match r["status"].as_str() {
        Some("Success") => None,
        _ => Some(r["message"].as_str().unwrap_or_default().to_string()),
    }
}

/// The message of one failure of `v`.
fn one(failure: &str) -> Option<String> {
    Some(format!(
        "pack \"t\": 1 invalid variable value(s): variables[v]{failure}"
    ))
}

/// Object `{f: <field>}` whose field `f` carries `rule` with `message`.
fn field_rule(field: Value, rule: &str, message: &str) -> PackEngine {
    let mut field = field;
    field["x-kubernetes-validations"] = json!([{"rule": rule, "message": message}]);
    load(json!({"type": "object", "properties": {"f": field}}))
}

/// A rule on a string field: `pass` holds, `fail` fails with `message`.
fn string_case(rule: &str, pass: &str, fail: &str) {
    let e = field_rule(json!({"type": "string"}), rule, "no");
    assert_eq!(verdict(&e, json!({"f": pass})), None, "{rule} on {pass:?}");
    assert_eq!(
        verdict(&e, json!({"f": fail})),
        one(&format!(".f: Invalid value: {}: no", json!(fail))),
        "{rule} on {fail:?}"
    );
}

/// A rule on a list field (items `items`): `pass` holds, `fail` fails; lists are not
/// shown in the message, as Kubernetes does.
fn list_case(items: Value, rule: &str, pass: Value, fail: Value) {
    list_case_with(json!({"type": "array", "items": items}), rule, pass, fail);
}

/// `list_case` on a list field of schema `field`: rules whose cost grows with the
/// list and its items need `maxItems` and `maxLength`, as Kubernetes' cost budget does.
fn list_case_with(field: Value, rule: &str, pass: Value, fail: Value) {
    let e = field_rule(field, rule, "no");
    assert_eq!(verdict(&e, json!({"f": pass})), None, "{rule} on {pass}");
    assert_eq!(
        verdict(&e, json!({"f": fail})),
        one(".f: Invalid value: no"),
        "{rule} on {fail}"
    );
}

// ---- the original report: Kubernetes functions in a pack --------------------------

#[test]
fn kubernetes_functions_load_and_accept_valid_values() {
    let e = load(json!({"type": "object", "properties": {
        "cidr": {"type": "string", "x-kubernetes-validations": [
            {"rule": "isCIDR(self)", "message": "must be a CIDR"}]},
        "name": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.find('[0-9]+') != ''", "message": "must contain a number"}]}
    }}));
    assert_eq!(
        verdict(&e, json!({"cidr": "10.0.0.0/24", "name": "node1"})),
        None
    );
    assert_eq!(
        verdict(&e, json!({"cidr": "10.0.0.0/33", "name": "node"})),
        Some(
            "pack \"t\": 2 invalid variable value(s): \
             variables[v].cidr: Invalid value: \"10.0.0.0/33\": must be a CIDR; \
             variables[v].name: Invalid value: \"node\": must contain a number"
                .into()
        )
    );
}

// ---- IP and CIDR ----------------------------------------------------------------------

#[test]
fn is_cidr() {
    string_case("isCIDR(self)", "fd00::/64", "10.0.0.0/33");
}

#[test]
fn cidr_contains_ip() {
    string_case(
        "cidr('10.0.0.0/8').containsIP(self)",
        "10.1.2.3",
        "192.168.0.1",
    );
}

#[test]
fn ip_family() {
    string_case("ip(self).family() == 4", "10.0.0.1", "fd00::1");
}

#[test]
fn is_ip() {
    string_case("isIP(self)", "fd00::1", "10.0.0.300");
}

// ---- regex ----------------------------------------------------------------------------

#[test]
fn find() {
    string_case("self.find('[0-9]+') == '42'", "ab42cd", "ab7cd");
}

#[test]
fn find_all() {
    string_case("self.findAll('[0-9]+').size() == 2", "a1b22", "a1b");
}

#[test]
fn matches() {
    string_case("self.matches('^[a-z]+$')", "abc", "aBc");
}

// ---- quantity -------------------------------------------------------------------------

#[test]
fn quantity_is_greater_than() {
    string_case(
        "quantity(self).isGreaterThan(quantity('1Gi'))",
        "1536Mi",
        "512Mi",
    );
}

#[test]
fn is_quantity() {
    string_case("isQuantity(self)", "100m", "1.2.3Gi");
}

// ---- URL ------------------------------------------------------------------------------

#[test]
fn url_get_host() {
    string_case(
        "url(self).getHost() == 'example.com'",
        "https://example.com/path",
        "https://example.org/path",
    );
}

#[test]
fn is_url() {
    string_case("isURL(self)", "https://example.com:6443/x", "example.com");
}

// ---- format ---------------------------------------------------------------------------

#[test]
fn format_dns1123_label_validate() {
    string_case(
        "!format.dns1123Label().validate(self).hasValue()",
        "node-1",
        "Node_1",
    );
}

#[test]
fn format_dns1123_subdomain_validate() {
    string_case(
        "!format.dns1123Subdomain().validate(self).hasValue()",
        "api.example.com",
        "api..example.com",
    );
}

#[test]
fn string_format() {
    string_case("'%s-%d'.format([self, 1]) == 'a-1'", "a", "b");
}

// ---- strings extension ----------------------------------------------------------------

#[test]
fn lower_ascii() {
    string_case("self.lowerAscii() == self", "node-a", "Node-A");
}

#[test]
fn split() {
    string_case("self.split(',').size() <= 2", "a,b", "a,b,c");
}

#[test]
fn join() {
    list_case_with(
        json!({"type": "array", "maxItems": 16,
            "items": {"type": "string", "maxLength": 63}}),
        "self.join('.') == 'a.b'",
        json!(["a", "b"]),
        json!(["a", "c"]),
    );
}

#[test]
fn trim_and_replace() {
    string_case("self.trim().replace(' ', '-') == 'a-b'", " a b ", "a  b");
}

// ---- sets -----------------------------------------------------------------------------

#[test]
fn sets_contains() {
    list_case(
        json!({"type": "string"}),
        "sets.contains(['a', 'b', 'c'], self)",
        json!(["a", "c"]),
        json!(["a", "d"]),
    );
}

#[test]
fn sets_intersects() {
    list_case(
        json!({"type": "string"}),
        "sets.intersects(self, ['x', 'y'])",
        json!(["a", "y"]),
        json!(["a", "b"]),
    );
}

// ---- lists ----------------------------------------------------------------------------

#[test]
fn list_is_sorted() {
    list_case(
        json!({"type": "integer"}),
        "self.isSorted()",
        json!([1, 2, 3]),
        json!([3, 1]),
    );
}

#[test]
fn list_sum() {
    list_case(
        json!({"type": "integer"}),
        "self.sum() <= 10",
        json!([4, 6]),
        json!([5, 6]),
    );
}

#[test]
fn list_index_of() {
    list_case_with(
        json!({"type": "array", "maxItems": 8,
            "items": {"type": "string", "maxLength": 63}}),
        "self.indexOf('primary') == 0",
        json!(["primary", "backup"]),
        json!(["backup", "primary"]),
    );
}

// ---- semver ---------------------------------------------------------------------------

#[test]
fn semver_is_greater_than() {
    string_case(
        "semver(self).isGreaterThan(semver('1.30.0'))",
        "1.31.2",
        "1.29.9",
    );
}

#[test]
fn is_semver() {
    string_case("isSemver(self)", "1.33.1", "v1.33");
}

// ---- math -----------------------------------------------------------------------------

#[test]
fn math_greatest() {
    list_case(
        json!({"type": "integer"}),
        "math.greatest(self) <= 100",
        json!([1, 100]),
        json!([1, 101]),
    );
}

#[test]
fn math_abs_on_an_integer_shows_the_value() {
    let e = field_rule(json!({"type": "integer"}), "math.abs(self) < 10", "too far");
    assert_eq!(verdict(&e, json!({"f": -9})), None);
    assert_eq!(
        verdict(&e, json!({"f": -10})),
        one(".f: Invalid value: -10: too far")
    );
}

// ---- encoders -------------------------------------------------------------------------

#[test]
fn base64_decode() {
    string_case("base64.decode(self) == b'hello'", "aGVsbG8=", "d29ybGQ=");
}

// ---- how `self` is bound --------------------------------------------------------------

#[test]
fn field_names_are_escaped_as_kubernetes_escapes_them() {
    let e = load(json!({"type": "object",
        "properties": {"node-cidr": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "isCIDR(self.node__dash__cidr)", "message": "bad"}]
    }));
    assert_eq!(verdict(&e, json!({"node-cidr": "10.0.0.0/8"})), None);
    assert_eq!(
        verdict(&e, json!({"node-cidr": "10.0.0.0"})),
        one(": Invalid value: bad")
    );
}

#[test]
fn date_time_fields_are_timestamps() {
    string_case_with(
        json!({"type": "string", "format": "date-time"}),
        "self < timestamp('2030-01-01T00:00:00Z')",
        "2029-12-31T23:59:59Z",
        "2030-01-01T00:00:01Z",
    );
}

fn string_case_with(field: Value, rule: &str, pass: &str, fail: &str) {
    let e = field_rule(field, rule, "no");
    assert_eq!(verdict(&e, json!({"f": pass})), None, "{rule} on {pass:?}");
    assert_eq!(
        verdict(&e, json!({"f": fail})),
        one(&format!(".f: Invalid value: {}: no", json!(fail))),
        "{rule} on {fail:?}"
    );
}

#[test]
fn transition_rules_are_not_evaluated_without_an_old_value() {
    let e = field_rule(json!({"type": "string"}), "self == oldSelf", "immutable");
    assert_eq!(verdict(&e, json!({"f": "anything"})), None);
}

#[test]
fn rules_on_map_values_and_list_items_have_their_own_paths() {
    let e = load(json!({"type": "object", "properties": {
        "flavors": {"type": "object", "maxProperties": 16,
            "additionalProperties": {"type": "string", "maxLength": 255,
            "x-kubernetes-validations": [{"rule": "self.startsWith('m1.')", "message": "not m1"}]}},
        "dns": {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 45,
            "x-kubernetes-validations": [{"rule": "isIP(self)", "message": "not an IP"}]}}
    }}));
    assert_eq!(
        verdict(
            &e,
            json!({"flavors": {"worker": "m2.large"}, "dns": ["10.0.0.2", "dns"]})
        ),
        Some(
            "pack \"t\": 2 invalid variable value(s): \
             variables[v].dns[1]: Invalid value: \"dns\": not an IP; \
             variables[v].flavors.worker: Invalid value: \"m2.large\": not m1"
                .into()
        )
    );
}

#[test]
fn a_rule_that_cannot_be_evaluated_is_reported_at_its_node() {
    let e = load(json!({"type": "object",
        "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.a == 'x'", "message": "a must be x"}]
    }));
    assert_eq!(verdict(&e, json!({"a": "x"})), None);
    assert_eq!(
        verdict(&e, json!({})),
        one(": Invalid value: \"object\": No such key: a evaluating rule: a must be x")
    );
}

// ---- messageExpression ----------------------------------------------------------------

/// Object `{f: <string>}` whose `f` carries `rule`; `f` is bounded (`maxLength` 64) so
/// that message expressions built from it stay within Kubernetes' cost budget.
fn with_rule(rule: Value) -> PackEngine {
    load(json!({"type": "object", "properties": {
        "f": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [rule]}
    }}))
}

#[test]
fn message_expression_is_evaluated() {
    let e = with_rule(json!({
        "rule": "self.size() <= 3",
        "message": "too long",
        "messageExpression": "self + ' is longer than 3 characters'"
    }));
    assert_eq!(verdict(&e, json!({"f": "abc"})), None);
    assert_eq!(
        verdict(&e, json!({"f": "abcde"})),
        one(".f: Invalid value: \"abcde\": abcde is longer than 3 characters")
    );
}

#[test]
fn message_expression_that_fails_falls_back_to_message() {
    let e = with_rule(json!({
        "rule": "self.size() <= 3",
        "message": "too long",
        // Compiles and is cheap, but `substring` past the end fails on "abcde".
        "messageExpression": "'at most 3 characters, not ' + self.substring(10)"
    }));
    assert_eq!(
        verdict(&e, json!({"f": "abcde"})),
        one(".f: Invalid value: \"abcde\": too long")
    );
}

#[test]
fn empty_or_multi_line_message_expression_falls_back_to_the_default_message() {
    for expr in ["'  '", "'two\\nlines'", "42"] {
        let e = with_rule(json!({"rule": "self.size() <= 3", "messageExpression": expr}));
        assert_eq!(
            verdict(&e, json!({"f": "abcde"})),
            one(".f: Invalid value: \"abcde\": failed rule: self.size() <= 3"),
            "{expr}"
        );
    }
}

#[test]
fn message_expression_result_is_trimmed() {
    let e = with_rule(json!({"rule": "self == 'a'", "messageExpression": "'  not a  '"}));
    assert_eq!(
        verdict(&e, json!({"f": "b"})),
        one(".f: Invalid value: \"b\": not a")
    );
}

// ---- reason ---------------------------------------------------------------------------

#[test]
fn reasons_give_kubernetes_error_types() {
    let cases = [
        (None, ".f: Invalid value: \"b\": must be a"),
        (
            Some("FieldValueInvalid"),
            ".f: Invalid value: \"b\": must be a",
        ),
        (Some("FieldValueForbidden"), ".f: Forbidden: must be a"),
        (Some("FieldValueRequired"), ".f: Required value: must be a"),
        // Kubernetes' Duplicate error carries the value, not the message.
        (Some("FieldValueDuplicate"), ".f: Duplicate value: \"b\""),
    ];
    for (reason, want) in cases {
        let mut rule = json!({"rule": "self == 'a'", "message": "must be a"});
        if let Some(r) = reason {
            rule["reason"] = json!(r);
        }
        let e = with_rule(rule);
        assert_eq!(verdict(&e, json!({"f": "a"})), None);
        assert_eq!(verdict(&e, json!({"f": "b"})), one(want), "{reason:?}");
    }
}

#[test]
fn duplicate_on_a_list_shows_neither_value_nor_message() {
    let e = load(json!({"type": "object", "properties": {"f": {
        "type": "array", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "self.distinct().size() == self.size()",
            "message": "entries must be unique", "reason": "FieldValueDuplicate"}]
    }}}));
    assert_eq!(verdict(&e, json!({"f": ["a", "b"]})), None);
    assert_eq!(
        verdict(&e, json!({"f": ["a", "a"]})),
        one(".f: Duplicate value")
    );
}

// ---- fieldPath ------------------------------------------------------------------------

#[test]
fn field_path_moves_the_failure_to_the_field() {
    let e = load(json!({"type": "object",
        "properties": {
            "min": {"type": "integer"},
            "max": {"type": "integer"},
            "labels": {"type": "object", "properties": {"x-y": {"type": "string"}}}
        },
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "max must be at least min",
             "fieldPath": ".max", "reason": "FieldValueForbidden"},
            {"rule": "!has(self.labels) || self.labels.x__dash__y != ''",
             "message": "must not be empty", "fieldPath": ".labels['x-y']"}
        ]
    }));
    assert_eq!(verdict(&e, json!({"min": 1, "max": 2})), None);
    assert_eq!(
        verdict(&e, json!({"min": 3, "max": 2, "labels": {"x-y": ""}})),
        Some(
            "pack \"t\": 2 invalid variable value(s): \
             variables[v].labels.x-y: Invalid value: must not be empty; \
             variables[v].max: Forbidden: max must be at least min"
                .into()
        )
    );
}

// ---- rules are checked when the pack loads --------------------------------------------

const BAD_RULES: &str = r#"name: t
variables:
- name: ok
  schema:
    openAPIV3Schema: {type: string}
- name: net
  schema:
    openAPIV3Schema:
      type: object
      properties:
        cidr:
          type: string
          x-kubernetes-validations:
          - rule: isCIDRx(self)
          - rule: self == other
          - rule: "self.size() >"
          - rule: self != ''
            messageExpression: "'x' +"
          - rule: self != ''
            reason: FieldValueWrong
            fieldPath: .nothing
"#;

#[test]
fn rules_that_do_not_compile_stop_loading_with_file_variable_and_place() {
    let err = PackEngine::from_sources(vec![("bad.yaml".into(), BAD_RULES.into())])
        .unwrap_err()
        .to_string();
    let lines: Vec<&str> = err.lines().collect();
    let place = "variables[1].schema.openAPIV3Schema.properties.cidr.x-kubernetes-validations";
    assert_eq!(lines.len(), 6, "{err}");
    assert_eq!(
        lines[0],
        format!("bad.yaml:14: {place}[0].rule: CEL rule does not compile for variable \"net\": undeclared reference to 'isCIDRx'")
    );
    assert_eq!(
        lines[1],
        format!("bad.yaml:15: {place}[1].rule: CEL rule does not compile for variable \"net\": undeclared reference to 'other'")
    );
    assert!(
        lines[2].starts_with(&format!(
            "bad.yaml:16: {place}[2].rule: CEL rule does not compile for variable \"net\": ERROR: <input>:1:"
        )),
        "{err}"
    );
    assert!(
        lines[3].starts_with(&format!(
            "bad.yaml:18: {place}[3].messageExpression: CEL messageExpression does not compile for variable \"net\": ERROR: <input>:1:"
        )),
        "{err}"
    );
    assert_eq!(
        lines[4],
        format!("bad.yaml:20: {place}[4].reason: unsupported reason for variable \"net\": \"FieldValueWrong\": supported values: \"FieldValueInvalid\", \"FieldValueForbidden\", \"FieldValueRequired\", \"FieldValueDuplicate\"")
    );
    assert_eq!(
        lines[5],
        format!("bad.yaml:21: {place}[4].fieldPath: fieldPath does not refer to a field of this schema for variable \"net\": \".nothing\": \"nothing\": not a field of an object")
    );
}

#[test]
fn unsupported_constructs_stop_loading() {
    for (rule, why) in [
        (
            "cel.bind(x, self, x != '')",
            "undeclared reference to 'cel.bind'",
        ),
        (
            "[1, 2].sortBy(x, -x) == [2, 1]",
            "undeclared reference to 'sortBy'",
        ),
        ("{'a': 1}.all(k, v, v > 0)", "undeclared reference to 'all'"),
        (
            "Foo{a: 1} != self",
            "message construction (Foo{...}) is not supported",
        ),
    ] {
        let src = pack(json!({"type": "string", "x-kubernetes-validations": [{"rule": rule}]}));
        let err = PackEngine::from_sources(vec![("p.yaml".into(), src)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!("p.yaml:1: variables[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: CEL rule does not compile for variable \"v\": {why}")
        );
    }
}

#[test]
fn extensions_directory_is_checked_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.yaml"), BAD_RULES).unwrap();
    let err = PackEngine::from_dir(dir.path()).unwrap_err().to_string();
    let file = dir.path().join("bad.yaml").display().to_string();
    assert!(
        err.starts_with(&format!(
            "{file}:14: variables[1].schema.openAPIV3Schema.properties.cidr.x-kubernetes-validations[0].rule: CEL rule does not compile for variable \"net\""
        )),
        "{err}"
    );
}

// ---- render and validate (CAPI's field paths) ----------------------------------------

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `stackhook validate` of the dev-test Cluster and class, edited by `edit_cluster`
/// and `edit_class`.
fn validate_dev_test(
    edit_cluster: impl Fn(String) -> String,
    edit_class: impl Fn(String) -> String,
) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let read = |rel: &str| std::fs::read_to_string(root().join(rel)).unwrap();
    let cluster = dir.path().join("cluster.yaml");
    let class = dir.path().join("class.yaml");
    std::fs::write(
        &cluster,
        edit_cluster(read("clusterclasses/examples/dev-test-cluster.yaml")),
    )
    .unwrap();
    std::fs::write(&class, edit_class(read("clusterclasses/dev-test.yaml"))).unwrap();
    let packs = PackEngine::from_dir(root().join("tests/fixtures/packs")).unwrap();
    match Inputs::read(&cluster, &class, &root().join("templates")) {
        Ok(inputs) => render::validate(&inputs, &packs),
        Err(e) => vec![e.to_string()],
    }
}

#[test]
fn validate_prints_rule_failures_as_capi_does() {
    let problems = validate_dev_test(
        |c| {
            c.replace(
                "    - name: sshKeyName\n",
                "    - name: nodeCIDR\n      value: 10.6.0/24\n    - name: sshKeyName\n",
            )
        },
        |c| c,
    );
    assert_eq!(
        problems,
        [
            r#"spec.topology.variables[nodeCIDR].value: Invalid value: "10.6.0/24": must be an IPv4 CIDR such as 10.6.0.0/24"#
        ]
    );
}

#[test]
fn validate_refuses_a_class_whose_inline_rule_does_not_compile() {
    let problems = validate_dev_test(
        |c| c,
        |c| {
            c.replace(
                "- rule: self.matches(",
                "- rule: isCIDRv5(self) && self.matches(",
            )
        },
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains(
            "x-kubernetes-validations[0].rule: CEL rule does not compile for variable \"nodeCIDR\": undeclared reference to 'isCIDRv5'"
        ),
        "{problems:?}"
    );
}

#[test]
fn the_shipped_openstack_pack_reports_its_rule_as_the_readme_shows() {
    let e = PackEngine::embedded().unwrap();
    let value = |cidr: &str| {
        json!({"externalNetworkID": "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e",
               "image": {"name": "ubuntu"}, "nodeNetwork": {"cidr": cidr}})
    };
    let run = |cidr: &str| {
        let req: ValidateTopologyRequest = serde_json::from_value(json!({
            "variables": [{"name": "openstack", "value": value(cidr)}], "items": []
        }))
        .unwrap();
        let r =
            serde_json::to_value(e.validate_topology("openstack-validate-topology", &req)).unwrap();
        r["message"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(run("10.6.0.0/24"), "");
    assert_eq!(
        run("fd00::/64"),
        r#"pack "openstack": 1 invalid variable value(s): variables[openstack].nodeNetwork.cidr: Invalid value: "fd00::/64": must be an IPv4 CIDR such as 10.6.0.0/24"#
    );
}

// ---- values quoted in messages ----------------------------------------------------------

#[test]
fn long_values_are_quoted_by_a_short_prefix() {
    let e = load(json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 63},
        "token": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.startsWith('ok-')", "message": "must start with ok-"}
        ]}
    }}));
    let huge = "s".repeat(10_000);
    let prefix = "s".repeat(64);

    let msg = verdict(&e, json!({"name": huge})).expect("a failure");
    assert!(msg.len() < 250, "{} bytes: {msg}", msg.len());
    assert_eq!(
        msg,
        format!(
            "pack \"t\": 1 invalid variable value(s): variables[v].name: \
             \"{prefix}\"…(10000 bytes) is longer than 63 characters"
        )
    );

    let msg = verdict(&e, json!({"token": huge})).expect("a failure");
    assert!(msg.len() < 250, "{} bytes: {msg}", msg.len());
    assert_eq!(
        msg,
        format!(
            "pack \"t\": 1 invalid variable value(s): variables[v].token: \
             Invalid value: \"{prefix}\"…(10000 bytes): must start with ok-"
        )
    );

    // Short values are shown whole.
    assert_eq!(
        verdict(&e, json!({"token": "nope"})),
        one(".token: Invalid value: \"nope\": must start with ok-")
    );
    let short = "x".repeat(64);
    assert_eq!(
        verdict(&e, json!({"name": short})),
        one(&format!(".name: \"{short}\" is longer than 63 characters"))
    );
}

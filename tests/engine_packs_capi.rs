//! What CAPI refuses in a variable schema, refused when a pack loads: defaults,
//! examples and enum values against the node's CEL rules, the rules' estimated cost
//! within Kubernetes' budgets, structural rules. Messages carry CAPI's field path
//! (`<pack>.variables[<name>].schema.openAPIV3Schema...`).

use std::path::Path;

use serde_json::Value;
use stackhook::engine::pack::PackError;
use stackhook::engine::schema;
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::DiscoverVariablesRequest;
use stackhook::sdk::CapiVersion;

fn refused(file: &str) -> Vec<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/packs/refused")
        .join(file);
    let src = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    match PackEngine::from_sources(vec![(file.to_string(), src)]) {
        Ok(_) => panic!("{file} loaded, but CAPI refuses it"),
        Err(PackError::Invalid(problems)) => problems.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_default_is_checked_with_the_rules_of_its_node() {
    assert_eq!(
        refused("default-cel.yaml"),
        [
            r#"default-cel.yaml:11: variables[0].schema.openAPIV3Schema.properties.oidc.default: default-cel.variables[kubernetes].schema.openAPIV3Schema.properties[oidc].default: Invalid value: "object": No such key: clientID evaluating rule: an OIDC issuer needs a clientID"#
        ]
    );
}

/// Found by the real CAPI: the magnum pack's `controlPlaneAvailabilityZones` had one.
#[test]
fn a_rule_at_the_root_of_an_array_variable_is_refused() {
    let problems = refused("root-array-rule.yaml");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("root-array-rule.variables[zones].schema.openAPIV3Schema.x-kubernetes-validations: Internal error")
            && problems[0].contains("unable to convert structural schema to CEL declarations"),
        "{problems:?}"
    );
}

#[test]
fn examples_and_enum_values_are_checked_with_the_rules() {
    assert_eq!(
        refused("example-enum.yaml"),
        [
            r#"example-enum.yaml:8: variables[0].schema.openAPIV3Schema.enum[1]: example-enum.variables[os].schema.openAPIV3Schema.enum[1]: Invalid value: "windows": not supported"#,
            r#"example-enum.yaml:9: variables[0].schema.openAPIV3Schema.example: example-enum.variables[os].schema.openAPIV3Schema.example: Invalid value: "windows": not supported"#,
        ]
    );
}

#[test]
fn a_rule_on_the_items_of_an_unbounded_list_is_over_budget() {
    let budget = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
    let rule = "variables[0].schema.openAPIV3Schema.properties.tags.items.x-kubernetes-validations[0].rule";
    let capi_rule = "unbounded-list.variables[cluster].schema.openAPIV3Schema.properties[tags].items.x-kubernetes-validations[0].rule";
    assert_eq!(
        refused("unbounded-list.yaml"),
        [
            format!("unbounded-list.yaml:7: variables[0].schema.openAPIV3Schema: unbounded-list.variables[cluster].schema.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {budget}"),
            format!("unbounded-list.yaml:15: {rule}: {capi_rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {budget}"),
            format!("unbounded-list.yaml:15: {rule}: {capi_rule}: Forbidden: contributed to estimated rule & messageExpression cost total exceeding cost limit for entire OpenAPIv3 schema"),
        ]
    );
}

#[test]
fn rules_within_budget_one_by_one_can_be_over_it_together() {
    let errs = refused("total-cost.yaml");
    // Four rules named as the costliest, then the total.
    assert_eq!(errs.len(), 5, "{errs:#?}");
    assert!(errs[1..].iter().all(|e| e.ends_with(
        "Forbidden: contributed to estimated rule & messageExpression cost total exceeding cost limit for entire OpenAPIv3 schema"
    )), "{errs:#?}");
    assert_eq!(
        errs[0],
        "total-cost.yaml:7: variables[0].schema.openAPIV3Schema: total-cost.variables[ids].schema.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema exceeds budget by factor of 1.321207x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    );
}

#[test]
fn a_node_without_a_type_is_refused() {
    assert_eq!(
        refused("structural.yaml"),
        ["structural.yaml:10: variables[0].schema.openAPIV3Schema.properties.values: type must be set (CAPI: type cannot be empty)"]
    );
}

/// The estimates of known rules, worked out by hand from cel-go's and Kubernetes'
/// cost functions.
#[test]
fn estimated_costs() {
    use stackhook::engine::rules::estimated_cost;
    let unbounded: Value = serde_json::json!({"type": "string"});
    // matches: ceil((3145726 + 1) * 0.1) * ceil(len(regex) * 0.25), plus `self`.
    assert_eq!(
        estimated_cost(
            "self.matches('^[0-9]{1,3}(\\\\.[0-9]{1,3}){3}$')",
            &unbounded
        ),
        314_573 * 8 + 1
    );
    let bounded: Value = serde_json::json!({"type": "string", "maxLength": 64});
    // 64 characters are 256 bytes; `self == ''` costs `self` (the literal is free).
    assert_eq!(
        estimated_cost(
            "self == '' || self.matches('^[0-9]{1,3}(\\\\.[0-9]{1,3}){3}$')",
            &bounded
        ),
        1 + 26 * 8 + 1
    );
    // all(): each of the 1048575 items costs the loop condition (2) and the step.
    let list: Value = serde_json::json!({"type": "array", "items": {"type": "string"}});
    assert_eq!(
        estimated_cost("self.all(z, z != '')", &list),
        1 + 1 + 1_048_575 * (2 + 2)
    );
    // has() is free in Kubernetes; selecting a field costs 1.
    let obj: Value = serde_json::json!({"type": "object", "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}}});
    assert_eq!(estimated_cost("has(self.id) != has(self.name)", &obj), 3);
}

/// Every shipped pack loads, and what its DiscoverVariables answers passes the same
/// checks CAPI runs on it.
#[test]
fn shipped_packs_pass_and_their_discovery_answers_too() {
    let engine = PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"));
    assert!(engine.packs().len() >= 6);
    for pack in engine.packs() {
        let handler = format!("{}-discover-variables", pack.name);
        for capi in [CapiVersion::new(10), CapiVersion::new(13)] {
            let resp =
                engine.discover_variables(&handler, &DiscoverVariablesRequest::default(), capi);
            assert_eq!(resp.variables.len(), pack.variables.len(), "{handler}");
            for v in &resp.variables {
                let s = &v.schema.open_api_v3_schema;
                let mut problems = Vec::new();
                schema::check_structure(s, "", &mut problems);
                schema::check_rules(s, "", &v.name, &mut problems);
                assert_eq!(problems, vec![], "{handler}: {}", v.name);
                schema::CompiledSchema::compile(s)
                    .unwrap_or_else(|e| panic!("{handler}: {}: {e:?}", v.name));
                let capi_path =
                    format!("{}.variables[{}].schema.openAPIV3Schema", pack.name, v.name);
                assert_eq!(
                    schema::capi_checks(s, &capi_path),
                    vec![],
                    "{handler}: {}",
                    v.name
                );
            }
        }
    }
}

//! Shared by the CRD tests: CAPO-shaped fixtures, and judging objects against
//! an openAPIV3Schema the way the apiserver would (OpenAPI part and CEL part).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kube::core::cel::{apply_defaults, Validator};
use serde_json::{json, Value};

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/capo")
}

pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

pub fn load(path: &Path) -> (String, Value) {
    let text = std::fs::read_to_string(path).expect("read fixture");
    let value: Value = serde_saphyr::from_str(&text).expect("fixture is YAML");
    (text, value)
}

/// Instance paths of every OpenAPI violation, formats included.
pub fn schema_errors(schema: &Value, object: &Value) -> Vec<String> {
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .expect("schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{} ({e})", e.instance_path()))
        .collect()
}

pub fn cel_errors(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(schema, object, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

/// An independent walk of the rules the apiserver and CAPI impose, so the
/// crate's own checker is not the only judge.
pub fn walk_rules(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Value::Object(obj) = node else { return };
    for key in [
        "nullable",
        "$ref",
        "$schema",
        "title",
        "definitions",
        "$defs",
        "x-kubernetes-preserve-unknown-fields",
    ] {
        if obj.contains_key(key) {
            problems.push(format!("{path}: has {key}"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    match obj.get("type") {
        Some(Value::String(_)) => {}
        None if int_or_string => {
            assert_eq!(
                obj.get("anyOf"),
                Some(&json!([{"type": "integer"}, {"type": "string"}])),
                "{path}"
            );
        }
        other => problems.push(format!("{path}: type is {other:?}")),
    }
    if obj.get("type") == Some(&json!("integer")) {
        for key in ["minimum", "maximum"] {
            if let Some(n) = obj.get(key).and_then(Value::as_f64) {
                if n.fract() != 0.0 {
                    problems.push(format!("{path}: {key} {n}"));
                }
            }
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            walk_rules(v, &format!("{path}.{k}"), problems);
        }
    }
    if let Some(items) = obj.get("items") {
        walk_rules(items, &format!("{path}[]"), problems);
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(_)) => problems.push(format!("{path}: boolean additionalProperties")),
        Some(ap) => walk_rules(ap, &format!("{path}{{*}}"), problems),
        None => {}
    }
}

/// Checks that an invalid fixture is rejected as its first line,
/// `# rejects: <schema|cel> <needle>`, says: `schema` wants an OpenAPI error
/// at the instance path `<needle>`; `cel` wants the OpenAPI part to accept it
/// and a CEL message containing `<needle>`.
pub fn assert_rejected(path: &Path, schema_for_kind: impl Fn(&str) -> Value) {
    let (text, object) = load(path);
    let expect = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# rejects: "))
        .unwrap_or_else(|| panic!("{}: no `# rejects:` header", path.display()));
    let (engine, needle) = expect.split_once(' ').expect("engine and needle");
    let kind = object["kind"].as_str().expect("kind");
    let schema = schema_for_kind(kind);
    let defaulted = apply_defaults(&schema, &object);
    let errors = schema_errors(&schema, &defaulted);
    match engine {
        "schema" => assert!(
            errors.iter().any(|e| e.starts_with(&format!("{needle} "))),
            "{}: wanted an error at {needle}, got {errors:#?}",
            path.display()
        ),
        "cel" => {
            // The OpenAPI part accepts it: only the CEL rule catches it.
            assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
            let cel = cel_errors(&schema, &defaulted, None);
            assert!(
                cel.iter().any(|e| e.contains(needle)),
                "{}: wanted {needle:?}, got {cel:#?}",
                path.display()
            );
        }
        other => panic!("unknown engine {other}"),
    }
}

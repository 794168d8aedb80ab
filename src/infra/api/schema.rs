//! Post-processing of the schemas schemars generates, so that the apiserver
//! and CAPI accept them: structural, one `type` per property, nothing that
//! Go's `JSONSchemaProps` cannot hold.

use serde_json::{Map, Value};

/// Rewrites a generated openAPIV3Schema in place.
///
/// - `$ref`s are inlined (sibling keywords win over the definition's);
///   `$schema`, `title`, `definitions` and `$defs` are dropped;
/// - `nullable` is removed and `["T","null"]` collapses to `"T"`: `Option`
///   means "may be absent", never "may be null";
/// - null branches of `anyOf`/`oneOf` are removed and a lone survivor merged
///   into its parent, `null` leaves `enum` and `default`;
/// - `uniqueItems` is dropped (lists use `x-kubernetes-list-type`);
/// - integer bounds become integers; integer formats other than `int32`
///   are dropped (CAPO's Go `int` has none);
/// - boolean `additionalProperties` is dropped (Go holds a schema there).
pub fn normalize(schema: &mut Value) {
    let defs = collect_definitions(schema);
    rewrite(schema, &defs, 0);
}

fn collect_definitions(schema: &Value) -> Map<String, Value> {
    let mut defs = Map::new();
    for key in ["definitions", "$defs"] {
        if let Some(Value::Object(d)) = schema.get(key) {
            for (k, v) in d {
                defs.insert(k.clone(), v.clone());
            }
        }
    }
    defs
}

/// Depth guard: CAPO's types are not recursive, so a deep `$ref` chain
/// would be a bug; stop rather than loop.
const MAX_DEPTH: usize = 64;

fn rewrite(node: &mut Value, defs: &Map<String, Value>, depth: usize) {
    let Value::Object(obj) = node else { return };
    if depth > MAX_DEPTH {
        return;
    }
    inline_ref(obj, defs);
    for key in [
        "$schema",
        "title",
        "definitions",
        "$defs",
        "nullable",
        "uniqueItems",
    ] {
        obj.remove(key);
    }
    if obj.get("default").is_some_and(Value::is_null) {
        obj.remove("default");
    }
    collapse_type(obj);
    drop_null_enum(obj);
    collapse_null_branches(obj, defs, depth);
    if matches!(obj.get("additionalProperties"), Some(Value::Bool(_))) {
        obj.remove("additionalProperties");
    }
    fix_integers(obj);
    fix_int_or_string(obj);

    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for v in props.values_mut() {
            rewrite(v, defs, depth + 1);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = obj.get_mut(key) {
            rewrite(v, defs, depth + 1);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = obj.get_mut(key) {
            for v in list {
                rewrite(v, defs, depth + 1);
            }
        }
    }
}

fn inline_ref(obj: &mut Map<String, Value>, defs: &Map<String, Value>) {
    let Some(Value::String(reference)) = obj.remove("$ref") else {
        return;
    };
    let name = reference.rsplit('/').next().unwrap_or_default();
    if let Some(Value::Object(def)) = defs.get(name) {
        for (k, v) in def {
            obj.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

fn collapse_type(obj: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = obj.get("type") {
        let mut non_null = types.iter().filter(|t| t.as_str() != Some("null"));
        let first = non_null.next().cloned();
        // Several real types cannot be expressed; leave them for the
        // structural check to report rather than guess.
        if let (Some(t), None) = (first, non_null.next()) {
            obj.insert("type".into(), t);
        }
    }
}

fn drop_null_enum(obj: &mut Map<String, Value>) {
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
}

fn is_null_schema(v: &Value) -> bool {
    match v {
        Value::Object(o) => {
            o.get("type").and_then(Value::as_str) == Some("null")
                || o.get("enum")
                    .and_then(Value::as_array)
                    .is_some_and(|e| e.iter().all(Value::is_null))
        }
        _ => false,
    }
}

fn collapse_null_branches(obj: &mut Map<String, Value>, defs: &Map<String, Value>, depth: usize) {
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(list)) = obj.get_mut(key) else {
            continue;
        };
        let before = list.len();
        list.retain(|v| !is_null_schema(v));
        if list.len() == before {
            continue;
        }
        if list.len() == 1 {
            if let Some(Value::Array(mut list)) = obj.remove(key) {
                if let Some(mut only) = list.pop() {
                    rewrite(&mut only, defs, depth + 1);
                    if let Value::Object(inner) = only {
                        for (k, v) in inner {
                            obj.entry(k).or_insert(v);
                        }
                    }
                }
            }
        } else if list.is_empty() {
            obj.remove(key);
        }
    }
}

fn fix_integers(obj: &mut Map<String, Value>) {
    if obj.get("type").and_then(Value::as_str) != Some("integer") {
        return;
    }
    for key in ["minimum", "maximum"] {
        if let Some(n) = obj.get(key).and_then(Value::as_f64) {
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                obj.insert(key.into(), Value::from(n as i64));
            }
        }
    }
    if obj
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| f != "int32")
    {
        obj.remove("format");
    }
}

/// schemars' rewriting strips the branch types of int-or-string; put back
/// the form the apiserver's own types use.
fn fix_int_or_string(obj: &mut Map<String, Value>) {
    if obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        obj.remove("type");
        obj.insert(
            "anyOf".into(),
            Value::Array(vec![
                serde_json::json!({"type": "integer"}),
                serde_json::json!({"type": "string"}),
            ]),
        );
    }
}

/// Rewrites integral `minimum`/`maximum` of integer nodes as integers, for
/// output that went through `JSONSchemaProps` (whose bounds are `f64`).
pub fn integer_bounds(node: &mut Value) {
    match node {
        Value::Object(obj) => {
            if obj.get("type").and_then(Value::as_str) == Some("integer") {
                for key in ["minimum", "maximum"] {
                    if let Some(n) = obj.get(key).and_then(Value::as_f64) {
                        if n.fract() == 0.0 && n.abs() < 9.0e15 {
                            obj.insert(key.into(), Value::from(n as i64));
                        }
                    }
                }
            }
            for v in obj.values_mut() {
                integer_bounds(v);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(integer_bounds),
        _ => {}
    }
}

/// A violation found by [`check_structural`], with the JSON path to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaViolation {
    pub path: String,
    pub problem: String,
}

/// Checks the rules the apiserver (structural schemas) and CAPI (Go
/// `JSONSchemaProps`) impose, plus ours: no `x-kubernetes-preserve-unknown-fields`
/// since CAPO's kinds have none.
pub fn check_structural(schema: &Value) -> Vec<SchemaViolation> {
    let mut out = Vec::new();
    check_node(schema, "", true, &mut out);
    out
}

fn check_node(node: &Value, path: &str, needs_type: bool, out: &mut Vec<SchemaViolation>) {
    let mut bad = |problem: &str| {
        out.push(SchemaViolation {
            path: path.to_owned(),
            problem: problem.to_owned(),
        })
    };
    let Value::Object(obj) = node else {
        bad("schema is not an object");
        return;
    };
    for key in [
        "$ref",
        "$schema",
        "title",
        "nullable",
        "definitions",
        "$defs",
        "uniqueItems",
        "x-kubernetes-preserve-unknown-fields",
    ] {
        if obj.contains_key(key) {
            bad(&format!("forbidden keyword {key}"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    match obj.get("type") {
        Some(Value::String(t)) => {
            if !["object", "array", "string", "integer", "number", "boolean"].contains(&t.as_str())
            {
                bad(&format!("unknown type {t}"));
            }
            if t == "array" && !obj.contains_key("items") {
                bad("array without items");
            }
            if t == "object"
                && path != ".metadata"
                && !obj.contains_key("properties")
                && !obj.contains_key("additionalProperties")
            {
                bad("object without properties or additionalProperties");
            }
            if t == "integer" {
                for key in ["minimum", "maximum"] {
                    // `JSONSchemaProps` holds bounds as f64; integral is what matters.
                    if obj
                        .get(key)
                        .is_some_and(|v| v.as_f64().is_none_or(|n| n.fract() != 0.0))
                    {
                        bad(&format!("{key} is not an integer"));
                    }
                }
            }
        }
        Some(_) => bad("type is not a single string"),
        None if int_or_string => {}
        None if needs_type => bad("missing type"),
        None => {}
    }
    if let Some(Value::Bool(_)) = obj.get("additionalProperties") {
        bad("boolean additionalProperties");
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(list) = obj.get(key).and_then(Value::as_array) {
            // Structural schemas allow these only as value-validation inside a
            // node that already has a type, or as int-or-string.
            if !(int_or_string && key == "anyOf") && obj.get("type").is_none() {
                bad(&format!("{key} on an untyped node"));
            }
            for (i, v) in list.iter().enumerate() {
                if let Some(o) = v.as_object() {
                    if !int_or_string && (o.contains_key("type") || o.contains_key("properties")) {
                        bad(&format!("{key}[{i}] declares structure"));
                    }
                }
            }
        }
    }
    if let Some(Value::Array(enums)) = obj.get("enum") {
        if enums.iter().any(Value::is_null) {
            bad("null in enum");
        }
    }
    if obj.get("default").is_some_and(Value::is_null) {
        bad("null default");
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            check_node(v, &format!("{path}.{k}"), true, out);
        }
    }
    if let Some(items) = obj.get("items") {
        check_node(items, &format!("{path}[]"), true, out);
    }
    if let Some(ap @ Value::Object(_)) = obj.get("additionalProperties") {
        check_node(ap, &format!("{path}{{*}}"), true, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collapses_nullable_and_refs() {
        let mut s = json!({
            "$schema": "x", "title": "T", "type": "object",
            "definitions": {"A": {"type": "object", "properties": {"n": {"type": "integer", "format": "uint16", "minimum": 1.0}}}},
            "properties": {
                "a": {"anyOf": [{"$ref": "#/definitions/A"}, {"type": "null"}], "description": "d"},
                "b": {"type": ["string", "null"], "nullable": true, "default": null},
                "c": {"type": "string", "enum": ["x", null], "nullable": true}
            }
        });
        normalize(&mut s);
        assert_eq!(
            s,
            json!({"type": "object", "properties": {
                "a": {"type": "object", "description": "d", "properties": {"n": {"type": "integer", "minimum": 1}}},
                "b": {"type": "string"},
                "c": {"type": "string", "enum": ["x"]}
            }})
        );
        assert!(check_structural(&s).is_empty());
    }

    #[test]
    fn check_reports_violations() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": ["string", "null"]},
            "b": {"nullable": true, "type": "string"},
            "c": {"type": "array"},
            "d": {"properties": {}},
            "e": {"type": "integer", "maximum": 1.5},
            "f": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {}}
        }});
        let paths: Vec<_> = check_structural(&s).into_iter().map(|v| v.path).collect();
        assert_eq!(paths, vec![".a", ".b", ".c", ".d", ".e", ".f"]);
    }
}

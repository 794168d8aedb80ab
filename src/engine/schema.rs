//! Variable schemas: CAPI's load-time rules, defaulting, validation and CEL rules
//! (compiled and evaluated by [`super::rules`]).
//!
//! CAPI accepts only a subset of OpenAPI v3 for variables (§5 of the spec); a pack
//! schema that CAPI would reject must not load, or the ClusterClass using the pack
//! would go `VariablesReady=False`.

use std::collections::BTreeMap;

use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

use super::rules::{self, Rule};
use crate::sdk::clip::{clip, clip_json};

/// How many unexpected field names an `additionalProperties` failure lists.
const SHOWN_FIELDS: usize = 5;

const ALLOWED_KEYS: &[&str] = &[
    "description",
    "example",
    "type",
    "properties",
    "additionalProperties",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "maxItems",
    "minItems",
    "uniqueItems",
    "format",
    "maxLength",
    "minLength",
    "pattern",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "x-kubernetes-preserve-unknown-fields",
    "enum",
    "default",
    "x-kubernetes-validations",
    "x-metadata",
    "x-kubernetes-int-or-string",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
];

const TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];

/// Keys a structural schema forbids inside `allOf`/`anyOf`/`oneOf`/`not`.
const NOT_IN_JUNCTORS: &[&str] = &[
    "type",
    "default",
    "description",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-validations",
    "x-metadata",
];

/// Checks a schema's shape; problems are `(place, problem)`.
pub fn check_structure(schema: &Value, place: &str, out: &mut Vec<(String, String)>) {
    check_node(schema, place, false, out);
}

fn check_node(s: &Value, place: &str, in_junctor: bool, out: &mut Vec<(String, String)>) {
    let Some(obj) = s.as_object() else {
        out.push((place.to_string(), "schema must be an object".into()));
        return;
    };
    for key in obj.keys() {
        if !ALLOWED_KEYS.contains(&key.as_str()) {
            out.push((
                format!("{place}.{key}"),
                "field not allowed in a ClusterClass variable schema".into(),
            ));
        }
        if in_junctor && NOT_IN_JUNCTORS.contains(&key.as_str()) {
            out.push((
                format!("{place}.{key}"),
                "must not be set inside allOf, anyOf, oneOf or not (structural schema)".into(),
            ));
        }
    }
    match obj.get("type") {
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => {}
        Some(Value::String(t)) => out.push((
            format!("{place}.type"),
            format!(
                "unsupported type {t:?}: one of object, array, string, integer, number, boolean"
            ),
        )),
        Some(_) => out.push((
            format!("{place}.type"),
            "type must be a single string (a list of types cannot be decoded by CAPI)".into(),
        )),
        // CAPI's `validateSchema` wants a type on every node of a variable schema, even
        // one that preserves unknown fields or is int-or-string.
        None if !in_junctor => out.push((
            place.to_string(),
            "type must be set (CAPI: type cannot be empty)".into(),
        )),
        None => {}
    }
    for key in [
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
    ] {
        if obj.get(key) == Some(&Value::Bool(false)) {
            out.push((
                format!("{place}.{key}"),
                "must be true or undefined (structural schema)".into(),
            ));
        }
    }
    if obj
        .get("additionalProperties")
        .is_some_and(Value::is_boolean)
    {
        out.push((
            format!("{place}.additionalProperties"),
            "must be a schema: CAPI's JSONSchemaProps cannot decode a boolean additionalProperties"
                .into(),
        ));
    }
    for key in ["maximum", "minimum"] {
        if let Some(v) = obj.get(key) {
            if v.as_i64().is_none() {
                out.push((
                    format!("{place}.{key}"),
                    "must be an integer (int64)".into(),
                ));
            }
        }
    }
    for key in [
        "maxProperties",
        "minProperties",
        "maxItems",
        "minItems",
        "maxLength",
        "minLength",
    ] {
        if let Some(v) = obj.get(key) {
            if v.as_i64().is_none_or(|n| n < 0) {
                out.push((
                    format!("{place}.{key}"),
                    "must be a non-negative integer".into(),
                ));
            }
        }
    }
    for key in [
        "exclusiveMaximum",
        "exclusiveMinimum",
        "uniqueItems",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
    ] {
        if let Some(v) = obj.get(key) {
            if !v.is_boolean() {
                out.push((format!("{place}.{key}"), "must be a boolean".into()));
            }
        }
    }
    if let Some(v) = obj.get("pattern") {
        if !v.is_string() {
            out.push((format!("{place}.pattern"), "must be a string".into()));
        }
    }
    if let Some(e) = obj.get("enum") {
        match e.as_array() {
            Some(a) if a.len() <= 100 => {}
            Some(_) => out.push((format!("{place}.enum"), "at most 100 values".into())),
            None => out.push((format!("{place}.enum"), "must be a list".into())),
        }
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        out.push((
            place.to_string(),
            "properties and additionalProperties are mutually exclusive".into(),
        ));
    }
    if let Some(props) = obj.get("properties") {
        match props.as_object() {
            Some(m) => {
                for (k, v) in m {
                    check_node(v, &format!("{place}.properties.{k}"), in_junctor, out);
                }
            }
            None => out.push((format!("{place}.properties"), "must be a map".into())),
        }
    }
    if let Some(ap) = obj.get("additionalProperties") {
        if !ap.is_boolean() {
            check_node(
                ap,
                &format!("{place}.additionalProperties"),
                in_junctor,
                out,
            );
        }
    }
    if let Some(items) = obj.get("items") {
        check_node(items, &format!("{place}.items"), in_junctor, out);
    } else if obj.get("type") == Some(&Value::String("array".into())) && !in_junctor {
        out.push((
            format!("{place}.items"),
            "items must be set for type array (structural schema)".into(),
        ));
    }
    if let Some(r) = obj.get("required") {
        if !r.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            out.push((
                format!("{place}.required"),
                "must be a list of strings".into(),
            ));
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = obj.get(key) {
            match list.as_array() {
                Some(a) => {
                    for (i, v) in a.iter().enumerate() {
                        check_node(v, &format!("{place}.{key}[{i}]"), true, out);
                    }
                }
                None => out.push((format!("{place}.{key}"), "must be a list".into())),
            }
        }
    }
    if let Some(n) = obj.get("not") {
        check_node(n, &format!("{place}.not"), true, out);
    }
    if let Some(rules) = obj.get("x-kubernetes-validations") {
        // The entries are checked by `check_rules`.
        if !rules.is_array() {
            out.push((
                format!("{place}.x-kubernetes-validations"),
                "must be a list".into(),
            ));
        }
    }
}

/// Checks and compiles every `x-kubernetes-validations` rule of a schema, as CAPI's
/// webhook does: problems are `(place, problem)`, the problem naming `variable`.
pub fn check_rules(schema: &Value, place: &str, variable: &str, out: &mut Vec<(String, String)>) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if let Some(rules) = obj
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, r) in rules.iter().enumerate() {
            if let Err(problems) = Rule::compile(r, schema) {
                for p in problems {
                    out.push((
                        format!("{place}.x-kubernetes-validations[{i}]{}", p.field),
                        p.describe(Some(variable)),
                    ));
                }
            }
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            check_rules(v, &format!("{place}.properties.{k}"), variable, out);
        }
    }
    if let Some(items) = obj.get("items") {
        check_rules(items, &format!("{place}.items"), variable, out);
    }
    if let Some(ap) = obj.get("additionalProperties") {
        check_rules(ap, &format!("{place}.additionalProperties"), variable, out);
    }
}

/// Converts a (checked) CAPI variable schema to the JSON Schema draft 4 the validator
/// reads. Objects with `properties` reject unknown fields, as CAPI does for variable
/// values, unless `x-kubernetes-preserve-unknown-fields` is set.
fn to_json_schema(s: &Value) -> Value {
    let Some(obj) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in obj {
        let converted = match k.as_str() {
            "properties" => Value::Object(
                v.as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), to_json_schema(v)))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            "items" | "not" => to_json_schema(v),
            "additionalProperties" if v.is_object() => to_json_schema(v),
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                v.as_array()
                    .map(|a| a.iter().map(to_json_schema).collect())
                    .unwrap_or_default(),
            ),
            // Not JSON Schema keywords; CEL and metadata are handled elsewhere.
            "default" | "example" | "x-kubernetes-validations" | "x-metadata" => continue,
            _ => v.clone(),
        };
        out.insert(k.clone(), converted);
    }
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if obj.contains_key("properties") && !obj.contains_key("additionalProperties") && !preserve {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    if obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && !obj.contains_key("type")
    {
        out.insert(
            "anyOf".into(),
            serde_json::json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    Value::Object(out)
}

/// CEL rules by schema node, mirroring the schema's tree.
#[derive(Default)]
struct CelNode {
    rules: Vec<Rule>,
    properties: BTreeMap<String, CelNode>,
    items: Option<Box<CelNode>>,
    additional: Option<Box<CelNode>>,
}

impl CelNode {
    fn build(s: &Value) -> Result<CelNode, (String, String)> {
        let mut node = CelNode::default();
        let Some(obj) = s.as_object() else {
            return Ok(node);
        };
        if let Some(rules) = obj
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            for (i, r) in rules.iter().enumerate() {
                let rule = Rule::compile(r, s).map_err(|problems| {
                    let first = problems.into_iter().next();
                    (
                        format!(
                            ".x-kubernetes-validations[{i}]{}",
                            first.as_ref().map(|p| p.field.as_str()).unwrap_or_default()
                        ),
                        first.map(|p| p.describe(None)).unwrap_or_default(),
                    )
                })?;
                node.rules.push(rule);
            }
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let child =
                    CelNode::build(v).map_err(|(p, e)| (format!(".properties.{k}{p}"), e))?;
                if !child.is_empty() {
                    node.properties.insert(k.clone(), child);
                }
            }
        }
        if let Some(items) = obj.get("items") {
            let child = CelNode::build(items).map_err(|(p, e)| (format!(".items{p}"), e))?;
            if !child.is_empty() {
                node.items = Some(Box::new(child));
            }
        }
        if let Some(ap) = obj.get("additionalProperties").filter(|v| v.is_object()) {
            let child =
                CelNode::build(ap).map_err(|(p, e)| (format!(".additionalProperties{p}"), e))?;
            if !child.is_empty() {
                node.additional = Some(Box::new(child));
            }
        }
        Ok(node)
    }

    fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.properties.is_empty()
            && self.items.is_none()
            && self.additional.is_none()
    }

    fn eval(&self, value: &Value, path: &str, out: &mut Vec<(String, String)>) {
        for rule in &self.rules {
            out.extend(rule.evaluate(value, path));
        }
        match value {
            Value::Object(m) => {
                for (k, v) in m {
                    let child = self.properties.get(k).or(self.additional.as_deref());
                    if let Some(child) = child {
                        child.eval(v, &format!("{path}.{}", clip(k)), out);
                    }
                }
            }
            Value::Array(a) => {
                if let Some(items) = &self.items {
                    for (i, v) in a.iter().enumerate() {
                        items.eval(v, &format!("{path}[{i}]"), out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A variable schema ready to default and validate values.
pub struct CompiledSchema {
    schema: Value,
    validator: jsonschema::Validator,
    cel: CelNode,
    defaults: Defaults,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Compiles a schema that passed [`check_structure`] and [`check_rules`]. The error
    /// is the first problem, as `(place suffix, problem)`.
    pub fn compile(schema: &Value) -> Result<CompiledSchema, (String, String)> {
        let validator = validator_for(schema).map_err(|e| (String::new(), e))?;
        let cel = CelNode::build(schema)?;
        let compiled = CompiledSchema {
            schema: schema.clone(),
            validator,
            cel,
            defaults: Defaults::build(schema).unwrap_or_default(),
        };
        compiled.check_defaults(schema, "")?;
        Ok(compiled)
    }

    /// Every `default` must itself be valid for its node, as the API server requires.
    fn check_defaults(&self, s: &Value, place: &str) -> Result<(), (String, String)> {
        let Some(obj) = s.as_object() else {
            return Ok(());
        };
        if let Some(d) = obj.get("default") {
            let node = CompiledSchema {
                schema: s.clone(),
                validator: validator_for(s).map_err(|e| (place.to_string(), e))?,
                cel: CelNode::default(),
                defaults: Defaults::default(),
            };
            let errors = node.validate(d);
            if let Some((p, e)) = errors.first() {
                return Err((
                    format!("{place}.default"),
                    format!(
                        "default is not valid: {}: {e}",
                        if p.is_empty() { "value" } else { p }
                    ),
                ));
            }
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                self.check_defaults(v, &format!("{place}.properties.{k}"))?;
            }
        }
        if let Some(items) = obj.get("items") {
            self.check_defaults(items, &format!("{place}.items"))?;
        }
        if let Some(ap) = obj.get("additionalProperties") {
            self.check_defaults(ap, &format!("{place}.additionalProperties"))?;
        }
        Ok(())
    }

    /// The value with schema defaults filled in, as CAPI does before it sends values.
    pub fn default_value(&self, value: &Value) -> Value {
        let mut v = value.clone();
        self.defaults.apply(&mut v);
        v
    }

    /// [`Self::default_value`] on a value the caller owns.
    pub fn apply_defaults(&self, value: &mut Value) {
        self.defaults.apply(value);
    }

    /// The schema's own top-level `default`, which CAPI adds for an unset variable.
    pub fn top_level_default(&self) -> Option<Value> {
        self.schema.get("default").cloned()
    }

    /// Validation failures as `(field path relative to the value, message)`, sorted.
    /// Paths look like `.flavors.worker` or `.zones[1]`; the value itself is `""`.
    /// Values and field names from `value` are shown [`clip`]ped.
    pub fn validate(&self, value: &Value) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .validator
            .iter_errors(value)
            .map(|e| {
                (
                    pointer_to_path(value, e.instance_path().as_str()),
                    describe_error(&e),
                )
            })
            .collect();
        if out.is_empty() {
            self.cel.eval(value, "", &mut out);
        }
        out.sort();
        out.dedup();
        out
    }
}

/// How many of the costliest rules CAPI names when a schema's total is over budget
/// (apiextensions' `TotalCost.MostExpensive`).
const MOST_EXPENSIVE: usize = 4;

/// The checks CAPI runs on a variable schema after its structure, as CAPI reports
/// them: every `default`, `example` and `enum` value valid against its node with the
/// node's CEL rules and those below it (`ValidateDefaults`, `validateSchema`), and
/// the rules' estimated cost within Kubernetes' budgets, per rule and for the whole
/// schema. `capi` is the schema's field path as CAPI prints it
/// (`<patch>.variables[<name>].schema.openAPIV3Schema`). Problems are `(place suffix,
/// problem)`, the problem starting with CAPI's field path.
pub fn capi_checks(schema: &Value, capi: &str) -> Vec<(String, String)> {
    let mut walk = CapiWalk::default();
    walk.node(schema, "", capi, Some(1));
    let mut out = walk.out;
    // CAPI types a schema's root for CEL as the root of a resource
    // (`SchemaDeclType(s, isResourceRoot=true)`), whose `WithTypeAndObjectMeta` copy
    // keeps the properties but not `items`: rules on a root array cannot be compiled.
    if schema["type"] == "array" && schema.get("x-kubernetes-validations").is_some() {
        out.push((
            ".x-kubernetes-validations".to_string(),
            format!("{capi}.x-kubernetes-validations: Internal error: internal error: failed to construct type information for x-kubernetes-validations rules: unable to convert structural schema to CEL declarations (rules on an array at the root of a variable: put the rule on its items, or make the variable an object)"),
        ));
    }
    if walk.total > rules::STATIC_ESTIMATED_CRD_COST_LIMIT {
        walk.costs.sort_by_key(|c| std::cmp::Reverse(c.0));
        for (_, place, path) in walk.costs.iter().take(MOST_EXPENSIVE) {
            out.push((
                place.clone(),
                format!("{path}: Forbidden: contributed to estimated rule & messageExpression cost total exceeding cost limit for entire OpenAPIv3 schema"),
            ));
        }
        out.push((
            String::new(),
            format!(
                "{capi}: Forbidden: {}",
                rules::cost_error_message(
                    "x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema",
                    walk.total,
                    rules::STATIC_ESTIMATED_CRD_COST_LIMIT
                )
            ),
        ));
    }
    out
}

#[derive(Default)]
struct CapiWalk {
    out: Vec<(String, String)>,
    /// Sum of every rule's cost times its cardinality and of every
    /// messageExpression's cost, saturating (`TotalCost.Total`).
    total: u64,
    /// `(cost, place, CAPI path)` of each rule and messageExpression.
    costs: Vec<(u64, String, String)>,
}

impl CapiWalk {
    /// `card`: how often the node can occur in one value, `None` under an unbounded
    /// list or map (CAPI's `CELSchemaContext.MaxCardinality`).
    fn node(&mut self, s: &Value, place: &str, capi: &str, card: Option<u64>) {
        let Some(obj) = s.as_object() else { return };
        let values: Vec<(String, &Value)> = obj
            .get("default")
            .map(|d| ("default".to_string(), d))
            .into_iter()
            .chain(obj.get("example").map(|e| ("example".to_string(), e)))
            .chain(
                obj.get("enum")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, v)| (format!("enum[{i}]"), v)),
            )
            .collect();
        if !values.is_empty() {
            if let (Ok(validator), Ok(cel)) = (validator_for(s), CelNode::build(s)) {
                let node = CompiledSchema {
                    schema: s.clone(),
                    validator,
                    cel,
                    defaults: Defaults::default(),
                };
                for (key, v) in values {
                    if v.is_null() {
                        continue;
                    }
                    for (p, e) in node.validate(v) {
                        self.out
                            .push((format!("{place}.{key}"), format!("{capi}.{key}{p}: {e}")));
                    }
                }
            }
        }
        if let Some(list) = obj
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            let min_size = rules::min_serialized_size(s);
            for (i, r) in list.iter().enumerate() {
                let rule_place = format!("{place}.x-kubernetes-validations[{i}]");
                let rule_capi = format!("{capi}.x-kubernetes-validations[{i}]");
                if let Some(src) = r.get("rule").and_then(Value::as_str) {
                    let cost = rules::estimated_cost(src, s);
                    let times = card.unwrap_or_else(|| rules::max_cardinality(min_size));
                    let cost = if cost == 0 {
                        0
                    } else {
                        cost.saturating_mul(times)
                    };
                    self.observe(
                        cost,
                        format!("{rule_place}.rule"),
                        format!("{rule_capi}.rule"),
                        "estimated rule cost",
                    );
                }
                if let Some(src) = r.get("messageExpression").and_then(Value::as_str) {
                    // Not multiplied by the cardinality, as in Kubernetes.
                    let cost = rules::estimated_cost(src, s);
                    self.observe(
                        cost,
                        format!("{rule_place}.messageExpression"),
                        format!("{rule_capi}.messageExpression"),
                        "estimated messageExpression cost",
                    );
                }
            }
        }
        // A child's cardinality: the node's times its own count of children
        // (`extractMaxElements`): 1 for an object's fields, `maxItems` or
        // `maxProperties`, unbounded without them.
        let times = |n: Option<u64>| card.zip(n).map(|(c, n)| c.saturating_mul(n));
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                self.node(
                    v,
                    &format!("{place}.properties.{k}"),
                    &format!("{capi}.properties[{k}]"),
                    times(Some(1)),
                );
            }
        }
        if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
            let n = obj.get("maxProperties").and_then(Value::as_u64);
            self.node(
                ap,
                &format!("{place}.additionalProperties"),
                &format!("{capi}.additionalProperties"),
                times(n),
            );
        }
        if let Some(items) = obj.get("items") {
            let n = obj.get("maxItems").and_then(Value::as_u64);
            self.node(
                items,
                &format!("{place}.items"),
                &format!("{capi}.items"),
                times(n),
            );
        }
    }

    fn observe(&mut self, cost: u64, place: String, capi: String, what: &str) {
        if cost > rules::STATIC_ESTIMATED_COST_LIMIT {
            self.out.push((
                place.clone(),
                format!(
                    "{capi}: Forbidden: {}",
                    rules::cost_error_message(what, cost, rules::STATIC_ESTIMATED_COST_LIMIT)
                ),
            ));
        }
        self.total = self.total.saturating_add(cost);
        self.costs.push((cost, place, capi));
    }
}

/// The validator's message for `e`, the value it quotes shown by its [`clip_json`]
/// prefix (the validator's "masked" message with that prefix as the placeholder).
fn describe_error(e: &jsonschema::ValidationError<'_>) -> String {
    if let ValidationErrorKind::AdditionalProperties { unexpected } = e.kind() {
        // The names come from the value: clipped, and only the first few.
        let mut names: Vec<String> = unexpected
            .iter()
            .take(SHOWN_FIELDS)
            .map(|k| format!("'{}'", clip(k)))
            .collect();
        if unexpected.len() > SHOWN_FIELDS {
            names.push(format!("and {} more", unexpected.len() - SHOWN_FIELDS));
        }
        let verb = if unexpected.len() == 1 { "was" } else { "were" };
        return format!(
            "Additional properties are not allowed ({} {verb} unexpected)",
            names.join(", ")
        );
    }
    e.masked_with(clip_json(e.instance())).to_string()
}

/// Draft 4 plus the Kubernetes formats packs use that draft 4 lacks. Formats that
/// are unknown here are not checked, as the API server ignores unknown formats.
fn validator_for(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .should_validate_formats(true)
        .should_ignore_unknown_formats(true)
        .with_format("uuid", is_uuid)
        .with_format("cidr", is_cidr)
        .build(&to_json_schema(schema))
        .map_err(|e| format!("invalid schema: {e}"))
}

/// 8-4-4-4-12 hex digits, either case (Kubernetes' `uuid` format).
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `address/prefix` for IPv4 or IPv6 (Kubernetes' `cidr` format, Go's ParseCIDR).
fn is_cidr(s: &str) -> bool {
    let Some((addr, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    if prefix.to_string().len() != s.len() - addr.len() - 1 {
        return false;
    }
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => prefix <= 32,
        Ok(std::net::IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

/// A schema's `default`s, kept only along the nodes that have one at or below them.
/// Values are defaulted on every GeneratePatches call, and walking the whole schema
/// (most of whose nodes have no default) cost more than the defaults themselves.
#[derive(Debug, Default, Clone, PartialEq)]
struct Defaults {
    /// `(name, its default, the defaults inside it)`, in the schema's order.
    properties: Vec<(String, Option<Value>, Defaults)>,
    additional: Option<Box<Defaults>>,
    items: Option<Box<Defaults>>,
}

impl Defaults {
    /// `None` when no node at or below `s` (other than `s` itself) has a default.
    fn build(s: &Value) -> Option<Defaults> {
        let obj = s.as_object()?;
        let properties: Vec<_> = obj
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, ps)| {
                let default = ps.get("default").cloned();
                let inner = Defaults::build(ps);
                (default.is_some() || inner.is_some())
                    .then(|| (k.clone(), default, inner.unwrap_or_default()))
            })
            .collect();
        let additional = obj
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .and_then(Defaults::build)
            .map(Box::new);
        let items = obj.get("items").and_then(Defaults::build).map(Box::new);
        (!properties.is_empty() || additional.is_some() || items.is_some()).then_some(Defaults {
            properties,
            additional,
            items,
        })
    }

    /// Fills absent properties with their defaults, the defaults' own insides too, as
    /// the API server defaults a structural schema.
    fn apply(&self, v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, default, inner) in &self.properties {
                    if !m.contains_key(k) {
                        if let Some(d) = default {
                            m.insert(k.clone(), d.clone());
                        }
                    }
                    if let Some(child) = m.get_mut(k) {
                        inner.apply(child);
                    }
                }
                if let Some(ap) = &self.additional {
                    for child in m.values_mut() {
                        ap.apply(child);
                    }
                }
            }
            Value::Array(a) => {
                if let Some(items) = &self.items {
                    for child in a {
                        items.apply(child);
                    }
                }
            }
            _ => {}
        }
    }
}

/// `/a/0/b` → `.a[0].b`, reading the value to tell list indexes from map keys.
fn pointer_to_path(value: &Value, pointer: &str) -> String {
    let mut out = String::new();
    let mut cur = Some(value);
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        match cur {
            Some(Value::Array(a)) => {
                out.push_str(&format!("[{}]", clip(&seg)));
                cur = seg.parse::<usize>().ok().and_then(|i| a.get(i));
            }
            Some(Value::Object(m)) => {
                out.push('.');
                out.push_str(&clip(&seg));
                cur = m.get(&seg);
            }
            _ => {
                out.push('.');
                out.push_str(&clip(&seg));
                cur = None;
            }
        }
    }
    out
}

// Compiled rules are shared between request threads through `Arc<Pack>`.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledSchema>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_list_is_rejected() {
        let mut out = Vec::new();
        check_structure(&json!({"type": ["string", "null"]}), "s", &mut out);
        assert_eq!(out[0].0, "s.type");
    }

    #[test]
    fn unknown_fields_and_cel() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": "integer", "minimum": 1, "default": 2},
            "b": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('x')", "message": "must start with x"}]}
        }});
        let c = CompiledSchema::compile(&s).unwrap();
        let v = c.default_value(&json!({"b": "y"}));
        assert_eq!(v["a"], 2);
        assert_eq!(
            c.validate(&v),
            vec![(
                ".b".to_string(),
                r#"Invalid value: "y": must start with x"#.to_string()
            )]
        );
        let errs = c.validate(&json!({"a": 0, "zz": 1}));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs[0].0, "");
        assert_eq!(errs[1].0, ".a");
    }

    #[test]
    fn defaults_reach_inside_defaults_maps_and_lists() {
        let c = CompiledSchema::compile(&json!({"type": "object", "properties": {
            "plain": {"type": "string"},
            "net": {"type": "object", "default": {}, "properties": {
                "mtu": {"type": "integer", "default": 1450},
                "name": {"type": "string"}}},
            "pools": {"type": "object", "additionalProperties": {"type": "object",
                "properties": {"size": {"type": "integer", "default": 3}}}},
            "zones": {"type": "array", "items": {"type": "object",
                "properties": {"weight": {"type": "integer", "default": 1}}}}
        }}))
        .unwrap();
        let v = c.default_value(&json!({"plain": "x", "pools": {"a": {}, "b": {"size": 5}},
            "zones": [{}, {"weight": 2}]}));
        assert_eq!(
            v,
            json!({"plain": "x", "net": {"mtu": 1450},
                "pools": {"a": {"size": 3}, "b": {"size": 5}},
                "zones": [{"weight": 1}, {"weight": 2}]})
        );
        // A given value is kept, and nothing is added where the schema has no default.
        let v = c.default_value(&json!({"net": {"mtu": 9000}}));
        assert_eq!(v, json!({"net": {"mtu": 9000}}));
        // A schema without defaults keeps nothing to walk.
        assert_eq!(
            Defaults::build(
                &json!({"type": "object", "properties": {"a": {"type": "object",
                "properties": {"b": {"type": "string"}}}}})
            ),
            None
        );
    }

    #[test]
    fn kubernetes_formats() {
        let c = CompiledSchema::compile(&json!({"type": "object", "properties": {
            "id": {"type": "string", "format": "uuid"},
            "net": {"type": "string", "format": "cidr"},
            "other": {"type": "string", "format": "made-up"}
        }}))
        .unwrap();
        let ok =
            json!({"id": "6F3C2D1E-9b8a-4c7d-8e6f-5a4b3c2d1e0f", "net": "fd00::/64", "other": "x"});
        assert!(c.validate(&ok).is_empty());
        let bad = json!({"id": "6f3c2d1e-9b8a-4c7d-8e6f", "net": "10.0.0.0/33"});
        let paths: Vec<String> = c.validate(&bad).into_iter().map(|e| e.0).collect();
        assert_eq!(paths, [".id", ".net"]);
        assert!(!is_cidr("10.0.0.0/+8"));
        assert!(is_cidr("10.0.0.0/8"));
    }

    #[test]
    fn quoted_values_and_field_names_are_clipped() {
        let c = CompiledSchema::compile(&json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 63},
            "size": {"type": "integer"},
            "tags": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}
        }}))
        .unwrap();
        let huge = "n".repeat(10_000);
        let errs = c.validate(&json!({"name": huge}));
        assert_eq!(errs.len(), 1, "{errs:?}");
        let (path, msg) = &errs[0];
        assert_eq!(path, ".name");
        assert!(msg.len() < 150, "{msg}");
        assert_eq!(
            msg,
            &format!(
                "\"{}\"…(10000 bytes) is longer than 63 characters",
                "n".repeat(64)
            )
        );

        // A value of the wrong type: objects and lists are clipped as JSON text.
        let errs = c.validate(&json!({"size": {"x": huge}}));
        assert_eq!(errs[0].0, ".size");
        assert!(errs[0].1.len() < 150, "{errs:?}");
        assert!(
            errs[0].1.ends_with(r#" is not of type "integer""#),
            "{errs:?}"
        );

        // Field names from the value, in paths and in additionalProperties failures.
        let key = "k".repeat(10_000);
        let errs = c.validate(&json!({"tags": {key.clone(): "long"}}));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].0.starts_with(".tags.kkk"), "{errs:?}");
        assert!(errs[0].0.len() < 100, "{errs:?}");
        let many: Map<String, Value> = (0..50).map(|i| (format!("{key}{i}"), json!(1))).collect();
        let errs = c.validate(&Value::Object(many));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].1.len() < 600, "{errs:?}");
        assert!(errs[0]
            .1
            .starts_with("Additional properties are not allowed ('kkk"));
        assert!(
            errs[0].1.ends_with("and 45 more were unexpected)"),
            "{errs:?}"
        );

        // Short values read as the validator writes them.
        let errs = c.validate(&json!({"size": "x", "zz": 1}));
        assert_eq!(
            errs,
            vec![
                (
                    String::new(),
                    "Additional properties are not allowed ('zz' was unexpected)".to_string()
                ),
                (
                    ".size".to_string(),
                    r#""x" is not of type "integer""#.to_string()
                ),
            ]
        );
    }

    #[test]
    fn bad_default_is_rejected() {
        let s = json!({"type": "integer", "minimum": 1, "default": 0});
        let err = CompiledSchema::compile(&s).unwrap_err();
        assert_eq!(err.0, ".default");
    }
}

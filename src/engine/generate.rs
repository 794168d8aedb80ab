//! GeneratePatches for one pack: CAPI's inline JSON patch algorithm, with the output
//! shaped for an external patch.
//!
//! Differences from CAPI's inline generator, all on purpose:
//! - one response item per template, holding the ops of every matching definition of
//!   every patch of the pack, in pack order (CAPI emits one item per definition; the
//!   result of applying them is the same);
//! - every op is applied here, in order, to a copy of the template, exactly as CAPI
//!   will (RFC 6902, strict): an op CAPI would fail on becomes a Failure naming it,
//!   instead of a reconcile error far from its cause;
//! - items are processed and returned in an order independent of the request's
//!   (random) item order and uids, so the response and any message are deterministic.

use serde_json::{json, Map, Value};

use super::pack::{Op, Pack, PatchValue};
use super::selector;
use super::variables::{self, VariableError};
use crate::sdk::common::{Base64Bytes, PatchType, Variable};
use crate::sdk::topology::{
    GeneratePatchesRequest, GeneratePatchesRequestItem, GeneratePatchesResponseItem,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GenerateError(pub String);

/// Request items in a stable order: by holder (kind, name, fieldPath), then template
/// GVK and name; the uid only breaks ties that a real request cannot have.
pub fn stable_order<T>(
    items: &[T],
    key: impl Fn(&T) -> (&crate::sdk::topology::HolderReference, &Value),
) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    let sort_key = |i: &usize| {
        let (h, obj) = key(&items[*i]);
        let s = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let name = obj
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        (
            h.kind.clone(),
            h.namespace.clone(),
            h.name.clone(),
            h.field_path.clone(),
            h.api_version.clone(),
            s("apiVersion"),
            s("kind"),
            name,
        )
    };
    idx.sort_by_cached_key(sort_key);
    idx
}

fn describe(item: &GeneratePatchesRequestItem) -> String {
    let h = &item.holder_reference;
    let kind = item
        .object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("template");
    format!("{kind} of {} {} ({})", h.kind, h.name, h.field_path)
}

pub fn generate(
    pack: &Pack,
    req: &GeneratePatchesRequest,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    generate_only(pack, None, req)
}

/// [`generate`] restricted to the pack's patch number `only` when given: a
/// ClusterClass's inline patches are applied one at a time, between external ones.
pub fn generate_only(
    pack: &Pack,
    only: Option<usize>,
    req: &GeneratePatchesRequest,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    let globals = defaulted(pack, &req.variables, true);
    let mut out = Vec::new();
    for i in stable_order(&req.items, |it| (&it.holder_reference, &it.object)) {
        let item = &req.items[i];
        let ops = item_ops(pack, only, &globals, item)?;
        if ops.is_empty() {
            continue;
        }
        let bytes = serde_json::to_vec(&Value::Array(ops))
            .map_err(|e| GenerateError(format!("pack {:?}: encoding patch: {e}", pack.name)))?;
        out.push(GeneratePatchesResponseItem {
            uid: item.uid.clone(),
            patch_type: PatchType::JSONPatch,
            patch: Base64Bytes(bytes),
        });
    }
    Ok(out)
}

/// The JSON patch ops of every patch of the pack for one item, each checked by
/// applying it to the template as changed by the ops before it.
fn item_ops(
    pack: &Pack,
    only: Option<usize>,
    globals: &[Variable],
    item: &GeneratePatchesRequestItem,
) -> Result<Vec<Value>, GenerateError> {
    let item_vars = variables::merge(&[], &item.variables);
    let mut merged: Option<(Map<String, Value>, Value)> = None;
    let mut working: Option<Value> = None;
    let mut ops = Vec::new();
    for (index, patch) in pack.patches.iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let matching: Vec<(usize, &super::pack::Definition)> = patch
            .definitions
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                selector::matches(
                    &d.selector,
                    &item.holder_reference,
                    &item.object,
                    &item_vars,
                )
            })
            .collect();
        if matching.is_empty() {
            continue;
        }
        let (var_map, vars) = &*merged.get_or_insert_with(|| {
            let m = variables::merge(globals, &defaulted(pack, &item.variables, false));
            let v = Value::Object(m.clone());
            (m, v)
        });
        let fail = |place: &str, problem: String| {
            GenerateError(format!(
                "pack {:?} patch {:?}{place} on {}: {problem}",
                pack.name,
                patch.name,
                describe(item)
            ))
        };
        if let Some(cond) = &patch.enabled_if {
            let on = cond
                .render_enabled(vars)
                .map_err(|e| fail(" enabledIf", e.to_string()))?;
            if !on {
                continue;
            }
        }
        for (d, def) in matching {
            for (j, jp) in def.json_patches.iter().enumerate() {
                let place = format!(
                    " definitions[{d}].jsonPatches[{j}] ({} {})",
                    jp.op.as_str(),
                    jp.path
                );
                let op = match (&jp.op, &jp.value) {
                    (Op::Remove, _) => json!({"op": "remove", "path": jp.path}),
                    (op, Some(v)) => {
                        let value = match v {
                            PatchValue::Literal(v) => v.clone(),
                            PatchValue::Variable(name) => variables::lookup(var_map, name)
                                .cloned()
                                .map_err(|e: VariableError| fail(&place, e.to_string()))?,
                            PatchValue::Template(t) => t
                                .render_value(vars)
                                .map_err(|e| fail(&place, e.to_string()))?,
                        };
                        json!({"op": op.as_str(), "path": jp.path, "value": value})
                    }
                    (_, None) => return Err(fail(&place, "no value".into())),
                };
                let doc = working.get_or_insert_with(|| item.object.clone());
                apply_one(doc, &op).map_err(|e| {
                    fail(
                        &place,
                        format!("CAPI could not apply this patch to the template: {e}"),
                    )
                })?;
                ops.push(op);
            }
        }
    }
    Ok(ops)
}

/// The pack's variables with schema defaults applied, as CAPI applies them before
/// calling (so values written before a pack gained a defaulted field still work).
/// With `add_missing`, a variable absent but with a top-level default is added, as
/// CAPI does for Cluster-level values; per-item overrides are never invented.
fn defaulted(pack: &Pack, vars: &[Variable], add_missing: bool) -> Vec<Variable> {
    let mut out: Vec<Variable> = vars
        .iter()
        .map(|v| match pack.variables.iter().find(|p| p.name == v.name) {
            Some(p) => Variable {
                name: v.name.clone(),
                value: p.compiled.default_value(&v.value),
            },
            None => v.clone(),
        })
        .collect();
    if add_missing {
        for p in &pack.variables {
            if out.iter().any(|v| v.name == p.name) {
                continue;
            }
            if let Some(d) = p.schema.get("default") {
                out.push(Variable {
                    name: p.name.clone(),
                    value: p.compiled.default_value(d),
                });
            }
        }
    }
    out
}

/// Applies one op with RFC 6902 semantics (what CAPI's evanphx/json-patch does).
fn apply_one(doc: &mut Value, op: &Value) -> Result<(), String> {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(vec![op.clone()])).map_err(|e| e.to_string())?;
    // On error the document may be half-changed; the whole request fails then anyway.
    json_patch::patch_unsafe(doc, &patch).map_err(|e| e.kind.to_string())
}

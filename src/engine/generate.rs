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
//! - an `add` into a parent the template lacks gets `add` ops creating that parent
//!   first ([`missing_parents`]), so packs need no placeholders in user templates;
//! - items are processed and returned in an order independent of the request's
//!   (random) item order and uids, so the response and any message are deterministic.

use std::borrow::Cow;
use std::cell::OnceCell;

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

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
    // Keys borrow from the items: sorting copies no strings.
    idx.sort_by_cached_key(|i: &usize| {
        let (h, obj) = key(&items[*i]);
        let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
        let name = obj
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        (
            (h.kind.as_str(), h.namespace.as_str(), h.name.as_str()),
            (h.field_path.as_str(), h.api_version.as_str()),
            (s("apiVersion"), s("kind"), name),
        )
    });
    idx
}

fn describe(item: &GeneratePatchesRequestItem, object: &Value) -> String {
    let h = &item.holder_reference;
    let kind = object
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
    let globals = variables::merge_owned(defaulted(pack, &req.variables, true));
    let order = stable_order(&req.items, |it| (&it.holder_reference, &it.object));
    let items = order
        .into_iter()
        .filter_map(|i| req.items.get(i))
        .map(|item| (item, Cow::Borrowed(&item.object)));
    generate_items(pack, only, &globals, items)
}

/// [`generate`] for a request the caller no longer needs whole: the request's
/// variables and each item's template are moved into the engine instead of copied
/// (the template becomes the copy the ops are checked on). The items keep their
/// uids, holders and own variables.
pub fn generate_consuming(
    pack: &Pack,
    req: &mut GeneratePatchesRequest,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    let globals = variables::merge_owned(defaulted_owned(pack, std::mem::take(&mut req.variables)));
    let order = stable_order(&req.items, |it| (&it.holder_reference, &it.object));
    let mut objects: Vec<Option<Value>> = req
        .items
        .iter_mut()
        .map(|it| Some(std::mem::take(&mut it.object)))
        .collect();
    let items = order.into_iter().filter_map(|i| {
        let object = objects.get_mut(i)?.take()?;
        Some((req.items.get(i)?, Cow::Owned(object)))
    });
    generate_items(pack, None, &globals, items)
}

fn generate_items<'r>(
    pack: &Pack,
    only: Option<usize>,
    globals: &Map<String, Value>,
    items: impl Iterator<Item = (&'r GeneratePatchesRequestItem, Cow<'r, Value>)>,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    let mut out = Vec::new();
    for (item, object) in items {
        let ops = item_ops(pack, only, globals, item, object)?;
        if ops.is_empty() {
            continue;
        }
        let bytes = serde_json::to_vec(&ops)
            .map_err(|e| GenerateError(format!("pack {:?}: encoding patch: {e}", pack.name)))?;
        out.push(GeneratePatchesResponseItem {
            uid: item.uid.clone(),
            patch_type: PatchType::JSONPatch,
            patch: Base64Bytes(bytes),
        });
    }
    Ok(out)
}

/// The variables one item's patches see: the request's (shared, never copied) under
/// the item's own, with `builtin` deep-merged. The merged `builtin`, and the whole set
/// as one object for templates, are built only if a patch asks for them.
struct Scope<'a> {
    globals: &'a Map<String, Value>,
    item: Map<String, Value>,
    builtin: OnceCell<Option<Value>>,
    all: OnceCell<Value>,
    /// `all` as templates run on it, converted once for every template of the item.
    prepared: super::template::Prepared,
}

impl<'a> Scope<'a> {
    fn new(
        pack: &Pack,
        globals: &'a Map<String, Value>,
        item: &GeneratePatchesRequestItem,
    ) -> Self {
        Scope {
            globals,
            item: variables::merge_owned(defaulted(pack, &item.variables, false)),
            builtin: OnceCell::new(),
            all: OnceCell::new(),
            prepared: super::template::Prepared::new(),
        }
    }

    fn get(&self, name: &str) -> Option<&Value> {
        if name == variables::BUILTIN {
            if let Some(own) = self.item.get(name) {
                return self
                    .builtin
                    .get_or_init(|| {
                        let mut merged = self.globals.get(name).cloned()?;
                        variables::deep_merge(&mut merged, own);
                        Some(merged)
                    })
                    .as_ref()
                    .or(Some(own));
            }
        }
        self.item.get(name).or_else(|| self.globals.get(name))
    }

    fn all(&self) -> &Value {
        self.all.get_or_init(|| {
            let mut m = self.globals.clone();
            for (k, v) in &self.item {
                if let Some(merged) = self.get(k) {
                    m.insert(k.clone(), merged.clone());
                } else {
                    m.insert(k.clone(), v.clone());
                }
            }
            Value::Object(m)
        })
    }
}

/// The JSON patch ops of every patch of the pack for one item, checked by applying
/// them in order to the template (`object`, copied first if borrowed), as CAPI will.
fn item_ops(
    pack: &Pack,
    only: Option<usize>,
    globals: &Map<String, Value>,
    item: &GeneratePatchesRequestItem,
    object: Cow<'_, Value>,
) -> Result<Vec<PatchOperation>, GenerateError> {
    let own_builtin = item
        .variables
        .iter()
        .rev()
        .find(|v| v.name == variables::BUILTIN)
        .map(|v| &v.value);
    let mut scope: Option<Scope> = None;
    let mut ops = Vec::new();
    // (patch, definition, jsonPatch) of each op, to name the one CAPI would fail on.
    let mut places: Vec<(usize, usize, usize)> = Vec::new();
    // Named before the template may be moved into the copy the ops are checked on.
    let what = describe(item, &object);
    let fail = |index: usize, place: String, problem: String| {
        GenerateError(format!(
            "pack {:?} patch {:?}{place} on {what}: {problem}",
            pack.name,
            pack.patches
                .get(index)
                .map(|p| p.name.as_str())
                .unwrap_or(""),
        ))
    };
    let place = |d: usize, j: usize, jp: &super::pack::JsonPatch| {
        format!(
            " definitions[{d}].jsonPatches[{j}] ({} {})",
            jp.op.as_str(),
            jp.path
        )
    };
    for (index, patch) in pack.patches.iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let mut matching = patch
            .definitions
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                selector::matches(&d.selector, &item.holder_reference, &object, own_builtin)
            })
            .peekable();
        if matching.peek().is_none() {
            continue;
        }
        let scope = &*scope.get_or_insert_with(|| Scope::new(pack, globals, item));
        if let Some(cond) = &patch.enabled_if {
            let on = super::template::enabled(cond, scope.all(), &scope.prepared).map_err(|e| {
                fail(
                    index,
                    " enabledIf".into(),
                    super::template::error_message(&e),
                )
            })?;
            if !on {
                continue;
            }
        }
        for (d, def) in matching {
            for (j, jp) in def.json_patches.iter().enumerate() {
                let value = match &jp.value {
                    _ if jp.op == Op::Remove => None,
                    Some(PatchValue::Literal(v)) => Some(v.clone()),
                    Some(PatchValue::Variable(name)) => Some(
                        variables::lookup_in(|n| scope.get(n), name)
                            .cloned()
                            .map_err(|e: VariableError| {
                                fail(index, place(d, j, jp), e.to_string())
                            })?,
                    ),
                    Some(PatchValue::Template(t)) => Some(
                        t.render_value_prepared(scope.all(), &scope.prepared)
                            .map_err(|e| {
                                fail(index, place(d, j, jp), super::template::error_message(&e))
                            })?,
                    ),
                    None => return Err(fail(index, place(d, j, jp), "no value".into())),
                };
                let path = jp.pointer.clone();
                ops.push(match (jp.op, value) {
                    (Op::Add, Some(value)) => PatchOperation::Add(AddOperation { path, value }),
                    (Op::Replace, Some(value)) => {
                        PatchOperation::Replace(ReplaceOperation { path, value })
                    }
                    _ => PatchOperation::Remove(RemoveOperation { path }),
                });
                places.push((index, d, j));
            }
        }
    }
    if ops.is_empty() {
        return Ok(ops);
    }
    let mut doc = object.into_owned();
    let mut out = Vec::with_capacity(ops.len());
    // On error the copy may be half-changed; the whole request fails then anyway.
    for (op, (index, d, j)) in ops.into_iter().zip(places) {
        let at = || {
            pack.patches
                .get(index)
                .and_then(|p| p.definitions.get(d))
                .and_then(|def| def.json_patches.get(j))
                .map(|jp| place(d, j, jp))
                .unwrap_or_default()
        };
        let start = out.len();
        if pack.creates_parents {
            if let PatchOperation::Add(add) = &op {
                missing_parents(&doc, &add.path, &mut out);
            }
        }
        out.push(op);
        json_patch::patch_unsafe(&mut doc, &out[start..]).map_err(|e| {
            fail(
                index,
                at(),
                format!(
                    "CAPI could not apply this patch to the template: {}",
                    e.kind
                ),
            )
        })?;
    }
    Ok(out)
}

/// The `add` ops that create the missing parents of `path` in `doc`, outermost first.
///
/// The one place packs differ from RFC 6902 (which CAPI applies strictly): a pack
/// cannot know whether a user's template already has `files`, `initConfiguration` or
/// `extraArgs`, and requiring placeholders in every template breaks on ordinary ones.
/// A missing parent becomes `[]` when the next token is `-` or `0` (an append or the
/// first element), `{}` otherwise. Nothing that exists is touched: a parent of the
/// wrong type is left for the patch itself to fail on.
fn missing_parents(
    doc: &Value,
    path: &json_patch::jsonptr::Pointer,
    out: &mut Vec<PatchOperation>,
) {
    let tokens: Vec<_> = path.tokens().collect();
    let Some((_, parents)) = tokens.split_last() else {
        return;
    };
    let mut cur = doc;
    for (i, tok) in parents.iter().enumerate() {
        let next = match cur {
            Value::Object(m) => m.get(tok.decoded().as_ref()),
            Value::Array(a) => match tok.decoded().parse::<usize>() {
                Ok(n) => a.get(n),
                Err(_) => return,
            },
            _ => return,
        };
        match next {
            Some(v) => cur = v,
            None => {
                if !cur.is_object() {
                    return;
                }
                for k in i..parents.len() {
                    let after = tokens[k + 1].decoded();
                    let value = if after == "-" || after == "0" {
                        Value::Array(Vec::new())
                    } else {
                        Value::Object(Map::new())
                    };
                    let parent: json_patch::jsonptr::PointerBuf =
                        json_patch::jsonptr::PointerBuf::from_tokens(tokens[..=k].iter().cloned());
                    out.push(PatchOperation::Add(AddOperation {
                        path: parent,
                        value,
                    }));
                }
                return;
            }
        }
    }
}

/// The pack's variables with schema defaults applied, as CAPI applies them before
/// calling (so values written before a pack gained a defaulted field still work).
/// With `add_missing`, a variable absent but with a top-level default is added, as
/// CAPI does for Cluster-level values; per-item overrides are never invented.
/// [`defaulted`] with `add_missing`, for variables the caller gives away: defaults
/// are applied in place and nothing is copied.
fn defaulted_owned(pack: &Pack, mut vars: Vec<Variable>) -> Vec<Variable> {
    for v in &mut vars {
        if let Some(p) = pack.variables.iter().find(|p| p.name == v.name) {
            p.compiled.apply_defaults(&mut v.value);
        }
    }
    for p in &pack.variables {
        if vars.iter().any(|v| v.name == p.name) {
            continue;
        }
        if let Some(d) = p.schema.get("default") {
            vars.push(Variable {
                name: p.name.clone(),
                value: p.compiled.default_value(d),
            });
        }
    }
    vars
}

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

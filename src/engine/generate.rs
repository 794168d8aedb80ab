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
//!
//! A template or an item's variables may reach the engine as the body's JSON text
//! ([`Part::Raw`]): they are built into trees only for the items a patch of the pack
//! selects, and of a template only what the ops to be checked on it reach
//! ([`super::skeleton`]); the rest of that template is read as strictly, not kept.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::ops::Range;

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::pack::{JsonPatch, Op, Pack, PatchValue};
use super::selector;
use super::variables::{self, VariableError};
use crate::sdk::common::{Base64Bytes, PatchType};
use crate::sdk::topology::{
    GeneratePatchesRequest, GeneratePatchesResponseItem, HolderReference,
    RawGeneratePatchesRequest, RawObject,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GenerateError(pub String);

/// Request items in a stable order: by holder (kind, name, fieldPath), then template
/// GVK and name (`[apiVersion, kind, metadata.name]`, see [`object_key`]); the uid only
/// breaks ties that a real request cannot have.
pub fn stable_order<'k, T>(
    items: &'k [T],
    key: impl Fn(&'k T) -> (&'k HolderReference, [&'k str; 3]),
) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    // Keys borrow from the items: sorting copies no strings.
    idx.sort_by_cached_key(|i: &usize| {
        let (h, [api_version, kind, name]) = key(&items[*i]);
        (
            (h.kind.as_str(), h.namespace.as_str(), h.name.as_str()),
            (h.field_path.as_str(), h.api_version.as_str()),
            (api_version, kind, name),
        )
    });
    idx
}

/// `[apiVersion, kind, metadata.name]` of a template, empty where absent.
pub fn object_key(obj: &Value) -> [&str; 3] {
    header_fields(obj).map(Option::unwrap_or_default)
}

/// `apiVersion`, `kind` and `metadata.name` as a tree holds them: absent unless a string.
fn header_fields(v: &Value) -> [Option<&str>; 3] {
    [
        v.get("apiVersion"),
        v.get("kind"),
        v.get("metadata").and_then(|m| m.get("name")),
    ]
    .map(|f| f.and_then(Value::as_str))
}

/// A template, or a variable's value, as the engine gets it.
#[derive(Debug, Clone)]
pub enum Part<'a> {
    /// JSON text from the body, built into a tree only when a patch needs it.
    Raw(&'a RawValue),
    /// A template's top-level fields as JSON text.
    Fields(&'a RawObject<'a>),
    Ref(&'a Value),
    Own(Value),
}

impl Part<'_> {
    fn build(self) -> Result<Value, serde_json::Error> {
        match self {
            Part::Own(v) => Ok(v),
            other => other.to_value(),
        }
    }

    /// `machineDeployment.class` and `machinePool.class` of a `builtin` value, without
    /// building the rest of it.
    fn classes(&self) -> Classes {
        #[derive(Deserialize)]
        struct Class {
            #[serde(default)]
            class: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Builtin {
            #[serde(default)]
            machine_deployment: Option<Class>,
            #[serde(default)]
            machine_pool: Option<Class>,
        }
        let of_tree = |v: &Value| Classes {
            machine_deployment: selector::class_in(v, "machineDeployment"),
            machine_pool: selector::class_in(v, "machinePool"),
        };
        let r = match self {
            Part::Raw(r) => r,
            Part::Ref(v) => return of_tree(v),
            Part::Own(v) => return of_tree(v),
            Part::Fields(_) => return self.to_value().map(|v| of_tree(&v)).unwrap_or_default(),
        };
        match serde_json::from_str::<Builtin>(r.get()) {
            Ok(b) => Classes {
                machine_deployment: b.machine_deployment.and_then(|c| c.class),
                machine_pool: b.machine_pool.and_then(|c| c.class),
            },
            // Another type somewhere, a duplicate key: read as the tree reads it.
            Err(_) => serde_json::from_str::<Value>(r.get())
                .map(|v| of_tree(&v))
                .unwrap_or_default(),
        }
    }

    /// A template as a tree of what `paths` reach ([`super::skeleton`]); a template
    /// that is a tree already is used whole.
    fn reach(self, paths: &super::skeleton::Paths<'_>) -> Result<Value, serde_json::Error> {
        match self {
            Part::Raw(r) => super::skeleton::build_raw(r, paths),
            Part::Fields(f) => super::skeleton::build_fields(f, paths),
            other => other.build(),
        }
    }

    fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Part::Raw(r) => serde_json::from_str(r.get()),
            Part::Fields(f) => f.build(),
            Part::Ref(v) => Ok((*v).clone()),
            Part::Own(v) => Ok(v.clone()),
        }
    }
}

/// The classes in an item's own `builtin`, which selectors match names against.
#[derive(Debug, Default)]
struct Classes {
    machine_deployment: Option<String>,
    machine_pool: Option<String>,
}

/// One request item as the engine reads it.
#[derive(Debug, Clone)]
pub struct ItemIn<'a> {
    pub uid: &'a str,
    pub holder: &'a HolderReference,
    pub object: Part<'a>,
    pub variables: Vec<(&'a str, Part<'a>)>,
}

/// A JSON string's text, borrowed unless it holds an escape; `None` for another type.
fn json_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    match serde_json::from_str::<&str>(text) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// What the engine reads of a template before it decides to build it.
#[derive(Debug, Default)]
struct Header<'a> {
    api_version: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
}

impl<'a> Header<'a> {
    fn of(part: &Part<'a>) -> Header<'a> {
        #[derive(Deserialize)]
        struct Meta<'a> {
            #[serde(borrow, default)]
            name: Option<Cow<'a, str>>,
        }
        let owned = |v: &Value| {
            let [a, k, n] = header_fields(v).map(|f| f.map(|s| Cow::Owned(s.to_string())));
            Header {
                api_version: a,
                kind: k,
                name: n,
            }
        };
        match part {
            Part::Ref(v) => {
                let [a, k, n] = header_fields(v).map(|f| f.map(Cow::Borrowed));
                Header {
                    api_version: a,
                    kind: k,
                    name: n,
                }
            }
            Part::Own(v) => owned(v),
            Part::Raw(r) => serde_json::from_str::<Value>(r.get())
                .map(|v| owned(&v))
                .unwrap_or_default(),
            Part::Fields(f) => {
                let name = f.get("metadata").and_then(|m| {
                    match serde_json::from_str::<Option<Meta<'a>>>(m.get()) {
                        Ok(meta) => meta?.name,
                        // Another type, a duplicate key: read as a tree reads it.
                        Err(_) => serde_json::from_str::<Value>(m.get())
                            .ok()?
                            .get("name")?
                            .as_str()
                            .map(|s| Cow::Owned(s.to_string())),
                    }
                });
                Header {
                    api_version: f.get("apiVersion").and_then(json_str),
                    kind: f.get("kind").and_then(json_str),
                    name,
                }
            }
        }
    }

    fn key(&self) -> [&str; 3] {
        [&self.api_version, &self.kind, &self.name].map(|f| f.as_deref().unwrap_or_default())
    }
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
    let globals = req
        .variables
        .iter()
        .map(|v| (v.name.as_str(), Part::Ref(&v.value)))
        .collect();
    let items = req
        .items
        .iter()
        .map(|it| ItemIn {
            uid: &it.uid,
            holder: &it.holder_reference,
            object: Part::Ref(&it.object),
            variables: it
                .variables
                .iter()
                .map(|v| (v.name.as_str(), Part::Ref(&v.value)))
                .collect(),
        })
        .collect();
    generate_in(pack, only, globals, items)
}

/// [`generate`] for a request the caller no longer needs whole: its templates are
/// moved into the engine instead of copied (a variable is copied when a patch reads
/// it). The items keep their uids, holders and variable names.
pub fn generate_consuming(
    pack: &Pack,
    req: &mut GeneratePatchesRequest,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    let globals: Vec<Value> = req
        .variables
        .iter_mut()
        .map(|v| std::mem::take(&mut v.value))
        .collect();
    let taken: Vec<(Value, Vec<Value>)> = req
        .items
        .iter_mut()
        .map(|it| {
            let vars = it
                .variables
                .iter_mut()
                .map(|v| std::mem::take(&mut v.value))
                .collect();
            (std::mem::take(&mut it.object), vars)
        })
        .collect();
    let globals = req
        .variables
        .iter()
        .zip(globals)
        .map(|(v, value)| (v.name.as_str(), Part::Own(value)))
        .collect();
    let items = req
        .items
        .iter()
        .zip(taken)
        .map(|(it, (object, values))| ItemIn {
            uid: &it.uid,
            holder: &it.holder_reference,
            object: Part::Own(object),
            variables: it
                .variables
                .iter()
                .zip(values)
                .map(|(v, value)| (v.name.as_str(), Part::Own(value)))
                .collect(),
        })
        .collect();
    generate_in(pack, None, globals, items)
}

/// [`generate`] for a request whose templates and values are still JSON text.
pub fn generate_raw(
    pack: &Pack,
    req: &RawGeneratePatchesRequest<'_>,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    let globals = req
        .variables
        .iter()
        .map(|v| (v.name.as_ref(), Part::Raw(v.value)))
        .collect();
    let items = req
        .items
        .iter()
        .map(|it| ItemIn {
            uid: &it.uid,
            holder: &it.holder_reference,
            object: Part::Fields(&it.object),
            variables: it
                .variables
                .iter()
                .map(|v| (v.name.as_ref(), Part::Raw(v.value)))
                .collect(),
        })
        .collect();
    generate_in(pack, None, globals, items)
}

/// A set of variables (the request's, or one item's), each built from its parts, and
/// given the pack's schema defaults as CAPI gives them before calling, the first time
/// a patch reads it. A request carries every variable of the ClusterClass; a pack reads
/// a few, and the rest are never built.
struct Vars<'p, 'a> {
    pack: &'p Pack,
    parts: Vec<(&'a str, Part<'a>)>,
    /// Distinct names: those of the parts, then (for the request's variables) the
    /// pack's variables absent from it that have a top-level default, as CAPI adds
    /// them for Cluster-level values; per-item overrides are never invented.
    names: Vec<&'p str>,
    built: Vec<OnceCell<Result<Option<Value>, String>>>,
    /// Where the variables come from, for errors.
    whose: Whose<'p>,
}

/// Whose variables a [`Vars`] holds: the request's, or the item with this template
/// kind and holder.
#[derive(Clone, Copy)]
enum Whose<'p> {
    Request,
    Item(Option<&'p str>, &'p HolderReference),
}

impl std::fmt::Display for Whose<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Whose::Request => f.write_str("the request"),
            Whose::Item(kind, h) => write!(
                f,
                "{} of {} {} ({})",
                kind.unwrap_or("template"),
                h.kind,
                h.name,
                h.field_path
            ),
        }
    }
}

impl<'p, 'a: 'p> Vars<'p, 'a> {
    fn new(
        pack: &'p Pack,
        parts: Vec<(&'a str, Part<'a>)>,
        add_missing: bool,
        whose: Whose<'p>,
    ) -> Self {
        let mut names: Vec<&'p str> = Vec::with_capacity(parts.len());
        for (n, _) in &parts {
            if !names.contains(n) {
                names.push(n);
            }
        }
        if add_missing {
            for p in &pack.variables {
                if !names.contains(&p.name.as_str()) && p.schema.get("default").is_some() {
                    names.push(&p.name);
                }
            }
        }
        let built = names.iter().map(|_| OnceCell::new()).collect();
        Vars {
            pack,
            parts,
            names,
            built,
            whose,
        }
    }

    /// The variable `name`: the last part of that name, except `builtin`, whose parts
    /// are deep-merged in order (CAPI's `MergeVariableMaps`).
    fn get(&self, name: &str) -> Result<Option<&Value>, GenerateError> {
        let Some(i) = self.names.iter().position(|n| *n == name) else {
            return Ok(None);
        };
        let Some(cell) = self.built.get(i) else {
            return Ok(None);
        };
        cell.get_or_init(|| self.build(name))
            .as_ref()
            .map(Option::as_ref)
            .map_err(|e| GenerateError(e.clone()))
    }

    fn build(&self, name: &str) -> Result<Option<Value>, String> {
        let def = self.pack.variables.iter().find(|p| p.name == name);
        let mut value: Option<Value> = None;
        for (_, part) in self.parts.iter().filter(|(n, _)| *n == name) {
            let mut v = part.to_value().map_err(|e| {
                format!(
                    "pack {:?}: variable {name:?} of {}: {e}",
                    self.pack.name, self.whose
                )
            })?;
            if let Some(def) = def {
                def.compiled.apply_defaults(&mut v);
            }
            match &mut value {
                Some(existing) if name == variables::BUILTIN => variables::deep_merge(existing, &v),
                _ => value = Some(v),
            }
        }
        if value.is_none() {
            // Only names added for their default get here without parts.
            value = def.and_then(|d| Some(d.compiled.default_value(d.schema.get("default")?)));
        }
        Ok(value)
    }

    fn names(&self) -> &[&'p str] {
        &self.names
    }
}

fn generate_in(
    pack: &Pack,
    only: Option<usize>,
    globals: Vec<(&str, Part<'_>)>,
    items: Vec<ItemIn<'_>>,
) -> Result<Vec<GeneratePatchesResponseItem>, GenerateError> {
    let globals = Vars::new(pack, globals, true, Whose::Request);
    let headers: Vec<Header> = items.iter().map(|it| Header::of(&it.object)).collect();
    let keys: Vec<(&HolderReference, [&str; 3])> = items
        .iter()
        .zip(&headers)
        .map(|(it, h)| (it.holder, h.key()))
        .collect();
    let order = stable_order(&keys, |k| (k.0, k.1));
    let mut slots: Vec<Option<ItemIn>> = items.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for i in order {
        let (Some(item), Some(header)) = (slots.get_mut(i).and_then(Option::take), headers.get(i))
        else {
            continue;
        };
        let uid = item.uid;
        let ops = item_ops(pack, only, &globals, item, header)?;
        if ops.is_empty() {
            continue;
        }
        let wire: Vec<WireOp> = ops.iter().map(WireOp).collect();
        let bytes = serde_json::to_vec(&wire)
            .map_err(|e| GenerateError(format!("pack {:?}: encoding patch: {e}", pack.name)))?;
        out.push(GeneratePatchesResponseItem {
            uid: uid.to_string(),
            patch_type: PatchType::JSONPatch,
            patch: Base64Bytes(bytes),
        });
    }
    Ok(out)
}

/// An op as RFC 6902 writes it, the same bytes as `PatchOperation`'s own `Serialize`.
/// That one is derived as an internally tagged enum, which serde writes through a
/// tagging adapter; every answer's ops are written here, so they are written directly.
struct WireOp<'a>(&'a PatchOperation);

impl serde::Serialize for WireOp<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (op, path, value) = match self.0 {
            PatchOperation::Add(a) => ("add", &a.path, Some(&a.value)),
            PatchOperation::Replace(r) => ("replace", &r.path, Some(&r.value)),
            PatchOperation::Remove(r) => ("remove", &r.path, None),
            other => return other.serialize(s),
        };
        let mut m = s.serialize_map(Some(if value.is_some() { 3 } else { 2 }))?;
        m.serialize_entry("op", op)?;
        m.serialize_entry("path", path.as_str())?;
        if let Some(v) = value {
            m.serialize_entry("value", v)?;
        }
        m.end()
    }
}

/// The variables one item's patches see: the request's (shared, built once) under the
/// item's own, with `builtin` deep-merged. The merged `builtin`, and the whole set as
/// one object for templates, are built only if a patch asks for them.
struct Scope<'g, 'p, 'a> {
    globals: &'g Vars<'p, 'a>,
    item: &'g Vars<'p, 'a>,
    builtin: OnceCell<Option<Value>>,
    all: OnceCell<Value>,
    /// `all` as templates run on it, converted once for every template of the item.
    prepared: super::template::Prepared,
}

impl<'g, 'p, 'a: 'p> Scope<'g, 'p, 'a> {
    fn get(&self, name: &str) -> Result<Option<&Value>, GenerateError> {
        if name == variables::BUILTIN {
            if let Some(own) = self.item.get(name)? {
                let global = self.globals.get(name)?;
                return Ok(self
                    .builtin
                    .get_or_init(|| {
                        let mut merged = global?.clone();
                        variables::deep_merge(&mut merged, own);
                        Some(merged)
                    })
                    .as_ref()
                    .or(Some(own)));
            }
        }
        match self.item.get(name)? {
            Some(v) => Ok(Some(v)),
            None => self.globals.get(name),
        }
    }

    /// [`Self::get`] for [`variables::lookup_in`], which takes an infallible lookup:
    /// a variable that does not build is kept in `err`.
    fn lookup(&self, path: &str) -> Result<Result<&Value, VariableError>, GenerateError> {
        let mut err = None;
        let found = variables::lookup_in(
            |n| match self.get(n) {
                Ok(v) => v,
                Err(e) => {
                    err = Some(e);
                    None
                }
            },
            path,
        );
        match err {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    fn all(&self) -> Result<&Value, GenerateError> {
        if let Some(v) = self.all.get() {
            return Ok(v);
        }
        let mut m = Map::new();
        for name in self.globals.names().iter().chain(self.item.names()) {
            if m.contains_key(*name) {
                continue;
            }
            if let Some(v) = self.get(name)? {
                m.insert(name.to_string(), v.clone());
            }
        }
        Ok(self.all.get_or_init(|| Value::Object(m)))
    }
}

/// The JSON patch ops of every patch of the pack for one item, checked by applying
/// them in order to the template, as CAPI will.
fn item_ops<'p, 'a: 'p>(
    pack: &'p Pack,
    only: Option<usize>,
    globals: &Vars<'p, 'a>,
    item: ItemIn<'a>,
    header: &'p Header<'p>,
) -> Result<Vec<PatchOperation>, GenerateError> {
    let ItemIn {
        holder,
        object,
        variables: item_vars,
        ..
    } = item;
    let whose = Whose::Item(header.kind.as_deref(), holder);
    let item_vars = Vars::new(pack, item_vars, false, whose);
    // `builtin.<which>.class` of the item's own `builtin` (the last one, as merging
    // keeps it), read once, and only if a selector names a class.
    let own_builtin = item_vars
        .parts
        .iter()
        .rev()
        .find(|(n, _)| *n == variables::BUILTIN)
        .map(|(_, p)| p);
    let classes: OnceCell<Classes> = OnceCell::new();
    let builtin = |which: &str| {
        let c = classes.get_or_init(|| own_builtin.map(|p| p.classes()).unwrap_or_default());
        match which {
            "machineDeployment" => c.machine_deployment.as_deref(),
            "machinePool" => c.machine_pool.as_deref(),
            _ => None,
        }
        .map(Cow::Borrowed)
    };
    let what = || whose.to_string();
    let fail = |index: usize, place: String, problem: String| {
        GenerateError(format!(
            "pack {:?} patch {:?}{place} on {}: {problem}",
            pack.name,
            pack.patches
                .get(index)
                .map(|p| p.name.as_str())
                .unwrap_or(""),
            what(),
        ))
    };
    let place = |d: usize, j: usize, jp: &super::pack::JsonPatch| {
        format!(
            " definitions[{d}].jsonPatches[{j}] ({} {})",
            jp.op.as_str(),
            jp.path
        )
    };
    let (api_version, kind) = (header.api_version.as_deref(), header.kind.as_deref());
    let mut scope: Option<Scope> = None;
    let mut ops = Vec::new();
    // (patch, definition, jsonPatch) of each op, to name the one CAPI would fail on,
    // and the jsonPatch itself, whose path is split already.
    let mut places: Vec<(usize, usize, usize, &JsonPatch)> = Vec::new();
    for (index, patch) in pack.patches.iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let mut matching = patch
            .definitions
            .iter()
            .enumerate()
            .filter(|(_, d)| selector::matches(&d.selector, holder, api_version, kind, builtin))
            .peekable();
        if matching.peek().is_none() {
            continue;
        }
        let scope = scope.get_or_insert_with(|| Scope {
            globals,
            item: &item_vars,
            builtin: OnceCell::new(),
            all: OnceCell::new(),
            prepared: super::template::Prepared::new(),
        });
        if let Some(cond) = &patch.enabled_if {
            let on =
                super::template::enabled(cond, scope.all()?, &scope.prepared).map_err(|e| {
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
                    Some(PatchValue::Variable(name)) => {
                        Some(scope.lookup(name)?.cloned().map_err(|e: VariableError| {
                            fail(index, place(d, j, jp), e.to_string())
                        })?)
                    }
                    Some(PatchValue::Template(t)) => Some(
                        t.render_value_prepared(scope.all()?, &scope.prepared)
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
                places.push((index, d, j, jp));
            }
        }
    }
    if ops.is_empty() {
        return Ok(ops);
    }
    // Only what the ops reach is built; the rest of the template is only checked.
    let reached = object.reach(&super::skeleton::Paths::of(
        places.iter().map(|p| p.3.tokens.as_slice()),
    ));
    let mut doc = reached.map_err(|e| {
        GenerateError(format!(
            "pack {:?}: the {} cannot be patched: {e}",
            pack.name,
            what()
        ))
    })?;
    let mut out = Vec::with_capacity(ops.len());
    // On error the copy may be half-changed; the whole request fails then anyway.
    for (op, (index, d, j, jp)) in ops.into_iter().zip(places) {
        let at = || place(d, j, jp);
        let start = out.len();
        let mut created = 0..0;
        if pack.creates_parents && matches!(op, PatchOperation::Add(_)) {
            created = missing_parents(&doc, &jp.tokens, &mut out);
        }
        out.push(op);
        // The created parents' paths are the op's, cut after each new parent.
        let paths = created
            .map(|k| &jp.tokens[..=k])
            .chain([jp.tokens.as_slice()]);
        for (op, tokens) in out[start..].iter().zip(paths) {
            super::apply::apply_at(&mut doc, op, tokens).map_err(|kind| {
                fail(
                    index,
                    at(),
                    format!("CAPI could not apply this patch to the template: {kind}"),
                )
            })?;
        }
    }
    Ok(out)
}

/// The `add` ops that create the missing parents of the path `tokens` in `doc`, outermost
/// first; returns the indexes, in `tokens`, of the parents they create.
///
/// The one place packs differ from RFC 6902 (which CAPI applies strictly): a pack
/// cannot know whether a user's template already has `files`, `initConfiguration` or
/// `extraArgs`, and requiring placeholders in every template breaks on ordinary ones.
/// A missing parent becomes `[]` when the next token is `-` or `0` (an append or the
/// first element), `{}` otherwise. Nothing that exists is touched: a parent of the
/// wrong type is left for the patch itself to fail on.
fn missing_parents(doc: &Value, tokens: &[String], out: &mut Vec<PatchOperation>) -> Range<usize> {
    let Some((_, parents)) = tokens.split_last() else {
        return 0..0;
    };
    let mut cur = doc;
    for (i, tok) in parents.iter().enumerate() {
        let next = match cur {
            Value::Object(m) => m.get(tok.as_str()),
            Value::Array(a) => match tok.parse::<usize>() {
                Ok(n) => a.get(n),
                Err(_) => return 0..0,
            },
            _ => return 0..0,
        };
        match next {
            Some(v) => cur = v,
            None => {
                if !cur.is_object() {
                    return 0..0;
                }
                for k in i..parents.len() {
                    let after = tokens[k + 1].as_str();
                    let value = if after == "-" || after == "0" {
                        Value::Array(Vec::new())
                    } else {
                        Value::Object(Map::new())
                    };
                    let parent = json_patch::jsonptr::PointerBuf::from_tokens(
                        tokens[..=k].iter().map(String::as_str),
                    );
                    out.push(PatchOperation::Add(AddOperation {
                        path: parent,
                        value,
                    }));
                }
                return i..parents.len();
            }
        }
    }
    0..0
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_patch::jsonptr::PointerBuf;
    use serde_json::json;

    #[test]
    fn ops_are_written_as_the_library_writes_them() {
        let path = |s: &str| PointerBuf::parse(s).unwrap();
        let ops = vec![
            PatchOperation::Add(AddOperation {
                path: path("/spec/template/spec/a~1b/c~0d/-"),
                value: json!({"quote\"and\\slash": ["\u{e9}", 1.5, null, {"n": -3}]}),
            }),
            PatchOperation::Replace(ReplaceOperation {
                path: path("/metadata/labels/x"),
                value: json!("line\nbreak\u{1}"),
            }),
            PatchOperation::Remove(RemoveOperation { path: path("") }),
            PatchOperation::Test(json_patch::TestOperation {
                path: path("/kind"),
                value: json!("T"),
            }),
        ];
        let ours = serde_json::to_vec(&ops.iter().map(WireOp).collect::<Vec<_>>()).unwrap();
        let library = serde_json::to_vec(&ops).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            String::from_utf8(library).unwrap()
        );
    }
}

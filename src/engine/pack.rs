//! Packs: declarative patch sets in the shape of a ClusterClass's `spec.variables` and
//! `spec.patches`, so an inline patch moves between a ClusterClass and a pack unchanged.
//!
//! Loading is all-or-nothing and runs every check CAPI's admission webhook would run
//! on the same inline patches and variables: a pack that loads here is one CAPI would
//! have accepted inline.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::cloud_checks::{self, CloudChecks};
use super::rules::Rule;
use super::schema::{self, CompiledSchema};
use super::template::{self, Template};
use super::yaml;
use crate::sdk::topology::VariableMetadata;

/// The packs compiled into the binary.
static EMBEDDED: include_dir::Dir<'static> =
    include_dir::include_dir!("$CARGO_MANIFEST_DIR/extensions");

/// One problem in one pack file, with its place (`patches[2].definitions[0]...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackProblem {
    pub file: String,
    pub place: String,
    pub line: Option<u64>,
    pub problem: String,
}

impl fmt::Display for PackProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if self.place.is_empty() {
            write!(f, ": {}", self.problem)
        } else {
            write!(f, ": {}: {}", self.place, self.problem)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("cannot read packs from {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Every problem found in every file, in file then place order.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<PackProblem>),
}

impl PackError {
    pub fn problems(&self) -> &[PackProblem] {
        match self {
            PackError::Invalid(p) => p,
            PackError::Io { .. } => &[],
        }
    }
}

/// A loaded, checked pack.
#[derive(Debug)]
pub struct Pack {
    /// The name it is served under: `name`, or `name-v<version>` for a versioned pack.
    pub name: String,
    /// A pack's generation. A changed pack is a new file with a new version, and the
    /// old one keeps being served: a running cluster's templates (and so its
    /// machines) change only when its ClusterClass moves to the new handlers.
    pub version: Option<u32>,
    /// An `add` whose parent objects are missing creates them first (see
    /// [`crate::engine::generate`]): packs must work on any valid template of the
    /// kinds they select. Off for a ClusterClass's inline patches, which CAPI applies
    /// strictly.
    pub creates_parents: bool,
    pub description: String,
    /// The file it came from, for messages.
    pub file: String,
    pub variables: Vec<PackVariable>,
    /// Rules over several variables at once (`validations`): `self` is an object with
    /// one field per variable of the pack. CAPI's variable schemas cannot say "this
    /// one only without that one", so these run in the pack's ValidateTopology only.
    pub validations: Vec<Rule>,
    /// The OpenStack resources the variables name, looked up in the cluster's cloud
    /// by ValidateTopology after the schemas and rules passed (`cloudChecks`).
    pub cloud_checks: Option<CloudChecks>,
    pub patches: Vec<PackPatch>,
}

#[derive(Debug)]
pub struct PackVariable {
    pub name: String,
    pub required: bool,
    pub metadata: VariableMetadata,
    /// `schema.openAPIV3Schema` as written, `x-metadata` included.
    pub schema: Value,
    pub compiled: CompiledSchema,
}

#[derive(Debug)]
pub struct PackPatch {
    pub name: String,
    pub description: String,
    pub enabled_if: Option<Arc<Template>>,
    pub definitions: Vec<Definition>,
}

#[derive(Debug, Clone)]
pub struct Definition {
    pub selector: Selector,
    pub json_patches: Vec<JsonPatch>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub match_resources: MatchResources,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchResources {
    #[serde(default)]
    pub infrastructure_cluster: bool,
    #[serde(default)]
    pub control_plane: bool,
    #[serde(default)]
    pub machine_deployment_class: Option<ClassNames>,
    #[serde(default)]
    pub machine_pool_class: Option<ClassNames>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassNames {
    #[serde(default)]
    pub names: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Replace,
    Remove,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Remove => "remove",
        }
    }
}

#[derive(Debug, Clone)]
pub enum PatchValue {
    Literal(Value),
    Variable(String),
    Template(Arc<Template>),
}

#[derive(Debug, Clone)]
pub struct JsonPatch {
    pub op: Op,
    pub path: String,
    /// `path`, parsed once at load.
    pub pointer: json_patch::jsonptr::PointerBuf,
    /// `pointer`'s tokens, decoded once at load: every call that checks ops walks them.
    pub tokens: Vec<String>,
    /// `None` only for `remove`.
    pub value: Option<PatchValue>,
}

// ---- the file shape, as written -------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPack {
    name: String,
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    variables: Vec<RawVariable>,
    #[serde(default)]
    validations: Vec<Value>,
    #[serde(default)]
    cloud_checks: Option<Value>,
    #[serde(default)]
    patches: Vec<RawPatch>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawVariable {
    name: String,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    metadata: VariableMetadata,
    schema: RawSchema,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchema {
    #[serde(rename = "openAPIV3Schema")]
    open_api_v3_schema: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPatch {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    enabled_if: Option<String>,
    #[serde(default)]
    definitions: Vec<RawDefinition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDefinition {
    selector: Selector,
    #[serde(default)]
    json_patches: Vec<RawJsonPatch>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawJsonPatch {
    op: String,
    path: String,
    /// `Some(Value::Null)` for an explicit `value: null`: present, unlike a missing key.
    #[serde(default, deserialize_with = "present")]
    value: Option<Value>,
    #[serde(default)]
    value_from: Option<RawValueFrom>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawValueFrom {
    #[serde(default)]
    variable: Option<String>,
    #[serde(default)]
    template: Option<String>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

// ---- loading ---------------------------------------------------------------------

/// Every `builtin.*` path CAPI's webhook accepts in `valueFrom.variable`.
pub const BUILTIN_VARIABLES: &[&str] = &[
    "builtin",
    "builtin.cluster",
    "builtin.cluster.name",
    "builtin.cluster.namespace",
    "builtin.cluster.uid",
    "builtin.cluster.metadata.labels",
    "builtin.cluster.metadata.annotations",
    "builtin.cluster.topology",
    "builtin.cluster.topology.version",
    "builtin.cluster.topology.class",
    "builtin.cluster.topology.classNamespace",
    "builtin.cluster.topology.classRef.name",
    "builtin.cluster.topology.classRef.namespace",
    "builtin.cluster.network",
    "builtin.cluster.network.serviceDomain",
    "builtin.cluster.network.services",
    "builtin.cluster.network.pods",
    "builtin.controlPlane",
    "builtin.controlPlane.name",
    "builtin.controlPlane.replicas",
    "builtin.controlPlane.version",
    "builtin.controlPlane.metadata.labels",
    "builtin.controlPlane.metadata.annotations",
    "builtin.controlPlane.machineTemplate.infrastructureRef.name",
    "builtin.machineDeployment",
    "builtin.machineDeployment.class",
    "builtin.machineDeployment.name",
    "builtin.machineDeployment.replicas",
    "builtin.machineDeployment.topologyName",
    "builtin.machineDeployment.version",
    "builtin.machineDeployment.metadata.labels",
    "builtin.machineDeployment.metadata.annotations",
    "builtin.machineDeployment.bootstrap.configRef.name",
    "builtin.machineDeployment.infrastructureRef.name",
    "builtin.machinePool",
    "builtin.machinePool.class",
    "builtin.machinePool.name",
    "builtin.machinePool.replicas",
    "builtin.machinePool.topologyName",
    "builtin.machinePool.version",
    "builtin.machinePool.metadata.labels",
    "builtin.machinePool.metadata.annotations",
    "builtin.machinePool.bootstrap.configRef.name",
    "builtin.machinePool.infrastructureRef.name",
];

/// A pack is served as `<name>-discover-variables` (the longest of its three handler
/// names), which must stay a 63-character DNS-1123 label.
pub const MAX_PACK_NAME: usize = 63 - "-discover-variables".len();

/// Collects problems for one file, adding lines from the parsed document.
struct Problems<'a> {
    file: &'a str,
    doc: &'a yaml::Located,
    list: Vec<PackProblem>,
}

impl Problems<'_> {
    fn add(&mut self, place: impl Into<String>, problem: impl Into<String>) {
        let place = place.into();
        self.list.push(PackProblem {
            file: self.file.to_string(),
            line: self.doc.line(&place),
            place,
            problem: problem.into(),
        });
    }
}

/// Parses and checks one pack file. `file` names it in messages.
pub fn parse_pack(file: &str, src: &str) -> Result<Pack, Vec<PackProblem>> {
    let doc = match yaml::parse(src) {
        Ok(d) => d,
        Err(e) => {
            return Err(vec![PackProblem {
                file: file.to_string(),
                place: String::new(),
                line: None,
                problem: format!("not valid YAML: {e}"),
            }])
        }
    };
    let mut problems = Problems {
        file,
        doc: &doc,
        list: Vec::new(),
    };
    let raw: RawPack = match serde_path_to_error::deserialize(&doc.value) {
        Ok(r) => r,
        Err(e) => {
            let place = e.path().to_string();
            let place = if place == "." { String::new() } else { place };
            problems.add(place, e.into_inner().to_string());
            return Err(problems.list);
        }
    };
    let pack = check_pack(file, raw, &mut problems);
    if problems.list.is_empty() {
        Ok(pack)
    } else {
        Err(problems.list)
    }
}

fn check_pack(file: &str, raw: RawPack, p: &mut Problems<'_>) -> Pack {
    let served = match raw.version {
        Some(v) => format!("{}-v{v}", raw.name),
        None => raw.name.clone(),
    };
    if raw.version == Some(0) {
        p.add("version", "versions start at 1");
    }
    if let Err(why) = check_dns_label(&raw.name) {
        p.add("name", why);
    } else if served.len() > MAX_PACK_NAME {
        p.add(
            "name",
            format!(
                "{served:?} is longer than {MAX_PACK_NAME} characters: the handler name {:?} would not be a DNS-1123 label",
                format!("{served}-discover-variables")
            ),
        );
    }

    let mut names = BTreeSet::new();
    let mut variables = Vec::new();
    let declared = raw.variables.len();
    for (i, v) in raw.variables.into_iter().enumerate() {
        let place = format!("variables[{i}]");
        if v.name.is_empty() {
            p.add(format!("{place}.name"), "variable name must not be empty");
        } else if v.name == "builtin" {
            p.add(
                format!("{place}.name"),
                "\"builtin\" is reserved for CAPI's builtin variables",
            );
        } else if v.name.contains('.') {
            p.add(
                format!("{place}.name"),
                "variable name must not contain \".\"",
            );
        }
        if !names.insert(v.name.clone()) {
            p.add(
                format!("{place}.name"),
                format!("duplicate variable {:?}", v.name),
            );
        }
        let schema_place = format!("{place}.schema.openAPIV3Schema");
        let mut schema_problems = Vec::new();
        schema::check_structure(
            &v.schema.open_api_v3_schema,
            &schema_place,
            &mut schema_problems,
        );
        schema::check_rules(
            &v.schema.open_api_v3_schema,
            &schema_place,
            &v.name,
            &mut schema_problems,
        );
        let compiled = if schema_problems.is_empty() {
            match CompiledSchema::compile(&v.schema.open_api_v3_schema) {
                Ok(c) => {
                    // Named as CAPI names them in VariableDiscovery failures.
                    let capi = format!("{served}.variables[{}].schema.openAPIV3Schema", v.name);
                    let refused = schema::capi_checks(&v.schema.open_api_v3_schema, &capi);
                    let ok = refused.is_empty();
                    for (where_, why) in refused {
                        schema_problems.push((format!("{schema_place}{where_}"), why));
                    }
                    ok.then_some(c)
                }
                Err((where_, why)) => {
                    schema_problems.push((format!("{schema_place}{where_}"), why));
                    None
                }
            }
        } else {
            None
        };
        for (pl, why) in schema_problems {
            p.add(pl, why);
        }
        if let Some(compiled) = compiled {
            variables.push(PackVariable {
                name: v.name,
                required: v.required,
                metadata: v.metadata,
                schema: v.schema.open_api_v3_schema,
                compiled,
            });
        }
    }

    let validations = if variables.len() == declared {
        check_validations(&raw.validations, &variables, p)
    } else {
        // A variable that does not compile is reported already; rules over it would
        // only add noise.
        Vec::new()
    };

    let mut patch_names = BTreeSet::new();
    let mut patches = Vec::new();
    for (i, rp) in raw.patches.into_iter().enumerate() {
        let place = format!("patches[{i}]");
        if rp.name.is_empty() {
            p.add(format!("{place}.name"), "patch name must not be empty");
        } else if !patch_names.insert(rp.name.clone()) {
            p.add(
                format!("{place}.name"),
                format!("duplicate patch {:?}", rp.name),
            );
        }
        let enabled_if = match rp.enabled_if.as_deref() {
            None | Some("") => None,
            Some(src) => {
                if src.len() > 256 {
                    p.add(
                        format!("{place}.enabledIf"),
                        "must be at most 256 characters",
                    );
                }
                match template::parse(src) {
                    Ok(t) => Some(Arc::new(t)),
                    Err(e) => {
                        p.add(
                            format!("{place}.enabledIf"),
                            format!("template can not be parsed: {e}"),
                        );
                        None
                    }
                }
            }
        };
        if rp.definitions.is_empty() {
            p.add(
                format!("{place}.definitions"),
                "at least one definition is required",
            );
        }
        if rp.definitions.len() > 100 {
            p.add(
                format!("{place}.definitions"),
                "at most 100 definitions are allowed",
            );
        }
        let mut definitions = Vec::new();
        for (d, rd) in rp.definitions.into_iter().enumerate() {
            let dplace = format!("{place}.definitions[{d}]");
            check_selector(&rd.selector, &format!("{dplace}.selector"), p);
            if rd.json_patches.is_empty() {
                p.add(
                    format!("{dplace}.jsonPatches"),
                    "at least one jsonPatch is required",
                );
            }
            if rd.json_patches.len() > 100 {
                p.add(
                    format!("{dplace}.jsonPatches"),
                    "at most 100 jsonPatches are allowed",
                );
            }
            let mut json_patches = Vec::new();
            for (j, rj) in rd.json_patches.into_iter().enumerate() {
                let jplace = format!("{dplace}.jsonPatches[{j}]");
                if let Some(jp) = check_json_patch(rj, &jplace, &names, p) {
                    json_patches.push(jp);
                }
            }
            definitions.push(Definition {
                selector: rd.selector,
                json_patches,
            });
        }
        patches.push(PackPatch {
            name: rp.name,
            description: rp.description,
            enabled_if,
            definitions,
        });
    }

    let cloud_checks = match &raw.cloud_checks {
        None => None,
        Some(v) if variables.len() == declared => match cloud_checks::parse(v, &variables) {
            Ok(c) => Some(c),
            Err(problems) => {
                for (place, why) in problems {
                    p.add(place, why);
                }
                None
            }
        },
        // The variables' own problems are reported already.
        Some(_) => None,
    };

    Pack {
        name: served,
        version: raw.version,
        creates_parents: true,
        description: raw.description,
        file: file.to_string(),
        variables,
        validations,
        cloud_checks,
        patches,
    }
}

/// The schema `self` has in a pack's `validations`: an object with one field per
/// variable, the required ones required.
pub fn validations_schema(variables: &[PackVariable]) -> Value {
    let properties: serde_json::Map<String, Value> = variables
        .iter()
        .map(|v| (v.name.clone(), v.schema.clone()))
        .collect();
    let required: Vec<Value> = variables
        .iter()
        .filter(|v| v.required)
        .map(|v| Value::String(v.name.clone()))
        .collect();
    serde_json::json!({"type": "object", "properties": properties, "required": required})
}

fn check_validations(
    entries: &[Value],
    variables: &[PackVariable],
    p: &mut Problems<'_>,
) -> Vec<Rule> {
    if entries.is_empty() {
        return Vec::new();
    }
    let node = validations_schema(variables);
    let mut rules = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        match Rule::compile(entry, &node) {
            Ok(rule) => rules.push(rule),
            Err(problems) => {
                for problem in problems {
                    p.add(
                        format!("validations[{i}]{}", problem.field),
                        problem.describe(None),
                    );
                }
            }
        }
    }
    rules
}

/// Handler names end up in URL paths and ExtensionConfig names: DNS-1123 labels.
fn check_dns_label(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a != b'-' && z != b'-');
    if name.is_empty() || name.len() > 63 || !ok_chars || !ok_ends {
        return Err(format!(
            "{name:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

fn check_selector(sel: &Selector, place: &str, p: &mut Problems<'_>) {
    if sel.api_version.is_empty() {
        p.add(format!("{place}.apiVersion"), "must not be empty");
    }
    if sel.kind.is_empty() {
        p.add(format!("{place}.kind"), "must not be empty");
    }
    let m = &sel.match_resources;
    let md = m
        .machine_deployment_class
        .as_ref()
        .is_some_and(|c| !c.names.is_empty());
    let mp = m
        .machine_pool_class
        .as_ref()
        .is_some_and(|c| !c.names.is_empty());
    if !(m.infrastructure_cluster || m.control_plane || md || mp) {
        p.add(format!("{place}.matchResources"), "no selector enabled");
    }
    for (field, class) in [
        ("machineDeploymentClass", &m.machine_deployment_class),
        ("machinePoolClass", &m.machine_pool_class),
    ] {
        let Some(class) = class else { continue };
        for (i, name) in class.names.iter().enumerate() {
            let stars = name.matches('*').count();
            let bad = name.is_empty()
                || stars > 1
                || (stars == 1 && !name.starts_with('*') && !name.ends_with('*'));
            if bad {
                p.add(
                    format!("{place}.matchResources.{field}.names[{i}]"),
                    format!("{name:?} is not a class name or glob: at most one \"*\", only at the start or the end"),
                );
            }
        }
    }
}

fn check_json_patch(
    rj: RawJsonPatch,
    place: &str,
    variables: &BTreeSet<String>,
    p: &mut Problems<'_>,
) -> Option<JsonPatch> {
    let before = p.list.len();
    let op = match rj.op.as_str() {
        "add" => Some(Op::Add),
        "replace" => Some(Op::Replace),
        "remove" => Some(Op::Remove),
        other => {
            p.add(
                format!("{place}.op"),
                format!(
                    "unsupported op {other:?}: supported values: \"add\", \"remove\", \"replace\""
                ),
            );
            None
        }
    };
    let pointer = match json_patch::jsonptr::PointerBuf::parse(rj.path.as_str()) {
        Ok(ptr) => Some(ptr),
        Err(e) => {
            p.add(format!("{place}.path"), format!("not a JSON pointer: {e}"));
            None
        }
    };
    if !rj.path.starts_with("/spec/") {
        p.add(
            format!("{place}.path"),
            "jsonPatch path must start with \"/spec/\"",
        );
    }
    for part in rj.path.split('/') {
        // Go's strconv.Atoi: an optional sign then digits.
        let digits = part.strip_prefix(['+', '-']).unwrap_or(part);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        match op {
            Some(Op::Add) if digits.bytes().any(|b| b != b'0') => p.add(
                format!("{place}.path"),
                "arrays can only be accessed using \"0\" (prepend) or \"-\" (append)",
            ),
            Some(o @ (Op::Replace | Op::Remove)) => p.add(
                format!("{place}.path"),
                format!(
                    "elements in arrays can not be accessed in a {} operation",
                    o.as_str()
                ),
            ),
            _ => {}
        }
    }
    let mut value = None;
    if matches!(op, Some(Op::Add | Op::Replace)) {
        match (rj.value, rj.value_from) {
            (None, None) => p.add(place, "jsonPatch must define one of value or valueFrom"),
            (Some(_), Some(_)) => p.add(place, "jsonPatch can not define both value and valueFrom"),
            (Some(v), None) => value = Some(PatchValue::Literal(v)),
            (None, Some(vf)) => match (vf.variable, vf.template) {
                (None, None) => p.add(
                    format!("{place}.valueFrom"),
                    "valueFrom must set either template or variable",
                ),
                (Some(_), Some(_)) => p.add(
                    format!("{place}.valueFrom"),
                    "valueFrom can not set both template and variable",
                ),
                (Some(var), None) => {
                    if let Err(why) = check_variable_ref(&var, variables) {
                        p.add(format!("{place}.valueFrom.variable"), why);
                    }
                    value = Some(PatchValue::Variable(var));
                }
                (None, Some(t)) => match template::parse(&t) {
                    Ok(t) => value = Some(PatchValue::Template(Arc::new(t))),
                    Err(e) => p.add(
                        format!("{place}.valueFrom.template"),
                        format!("template can not be parsed: {e}"),
                    ),
                },
            },
        }
    }
    if p.list.len() != before {
        return None;
    }
    let pointer = pointer?;
    let tokens = super::apply::decoded_tokens(&pointer)
        .into_iter()
        .map(String::from)
        .collect();
    Some(JsonPatch {
        op: op?,
        path: rj.path,
        pointer,
        tokens,
        value,
    })
}

fn check_variable_ref(var: &str, variables: &BTreeSet<String>) -> Result<(), String> {
    if var == "builtin" || var.starts_with("builtin.") {
        if BUILTIN_VARIABLES.contains(&var) {
            return Ok(());
        }
        return Err(format!("{var:?} is not a defined builtin variable"));
    }
    let name = var.split(['.', '[']).next().unwrap_or_default();
    if name.is_empty() || !variables.contains(name) {
        return Err(format!(
            "variable with name {name:?} cannot be found: the pack declares no such variable"
        ));
    }
    Ok(())
}

/// Loads every pack from `(file name, contents)` pairs, sorted by file name.
/// All-or-nothing: any problem in any file fails the whole set.
pub fn load_all(files: Vec<(String, String)>) -> Result<Vec<Pack>, PackError> {
    let mut files = files;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut packs: Vec<Pack> = Vec::new();
    let mut problems = Vec::new();
    for (file, src) in &files {
        match parse_pack(file, src) {
            Ok(pack) => {
                if let Some(other) = packs.iter().find(|p| p.name == pack.name) {
                    problems.push(PackProblem {
                        file: file.clone(),
                        place: "name".into(),
                        line: yaml::parse(src).ok().and_then(|d| d.line("name")),
                        problem: format!(
                            "pack name {:?} is already used by {}",
                            pack.name, other.file
                        ),
                    });
                } else {
                    packs.push(pack);
                }
            }
            Err(mut p) => {
                // Within a file, report top to bottom.
                p.sort_by_key(|x| x.line);
                problems.append(&mut p)
            }
        }
    }
    if files.is_empty() {
        problems.push(PackProblem {
            file: String::new(),
            place: String::new(),
            line: None,
            problem: "no pack files (*.yaml, *.yml) found".into(),
        });
    }
    if problems.is_empty() {
        Ok(packs)
    } else {
        Err(PackError::Invalid(problems))
    }
}

fn is_pack_file(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// The packs embedded at build time from `extensions/`.
pub fn load_embedded() -> Result<Vec<Pack>, PackError> {
    let mut files = Vec::new();
    for f in EMBEDDED.files() {
        let name = f.path().to_string_lossy().into_owned();
        if !is_pack_file(&name) {
            continue;
        }
        let text = f.contents_utf8().ok_or_else(|| {
            PackError::Invalid(vec![PackProblem {
                file: format!("extensions/{name}"),
                place: String::new(),
                line: None,
                problem: "not UTF-8".into(),
            }])
        })?;
        files.push((format!("extensions/{name}"), text.to_string()));
    }
    load_all(files)
}

/// The packs of one directory (not recursive), e.g. `--extensions DIR`.
pub fn load_dir(dir: &Path) -> Result<Vec<Pack>, PackError> {
    let io = |source| PackError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_pack_file(&name) || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| PackError::Io {
            path: path.display().to_string(),
            source,
        })?;
        files.push((path.display().to_string(), text));
    }
    load_all(files)
}

//! `stackhook render` and `stackhook validate`: a Cluster, its ClusterClass and the
//! class's templates → the objects CAPI's topology controller would create, with the
//! ClusterClass's inline patches and the packs' external patches applied in
//! `spec.patches` order.
//!
//! External patches go through the same [`PatchEngine`] the server answers with, so a
//! rendering sees exactly what CAPI would get from the running extension. Everything
//! the controller derives (names, builtin variables, defaults, labels) is computed
//! here; see the README's "Render and validate" section for the rules.

pub mod crds;
pub mod names;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use crate::engine::clusterclass::{
    ClassPatch, Cluster, ClusterClass, MachineDeploymentClass, Meta, ParseError, TemplateRef,
};
use crate::engine::generate;
use crate::engine::pack::{self, Pack};
use crate::engine::schema::CompiledSchema;
use crate::engine::variables::BUILTIN;
use crate::engine::PatchEngine;
use crate::sdk::common::{PatchType, Settings, Variable};
use crate::sdk::topology::{
    DiscoverVariablesRequest, GeneratePatchesRequest, GeneratePatchesRequestItem,
    GeneratePatchesResponseItem, HolderReference, ValidateTopologyRequest,
    ValidateTopologyRequestItem,
};
use crate::sdk::{CapiVersion, ResponseStatus};

pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const TOPOLOGY_OWNED_LABEL: &str = "topology.cluster.x-k8s.io/owned";
pub const DEPLOYMENT_NAME_LABEL: &str = "topology.cluster.x-k8s.io/deployment-name";
pub const POOL_NAME_LABEL: &str = "topology.cluster.x-k8s.io/pool-name";
pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
pub const CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";

const INLINE: &str = "inline";

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Every problem found, each starting with its field path.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
    #[error("{0}")]
    Patch(String),
}

/// The templates of `--templates DIR`, by kind and name.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    by_kind_name: BTreeMap<(String, String), Value>,
    source: String,
}

impl Templates {
    /// Every object of every `*.yaml`/`*.yml` file of `dir` (multi-document files too).
    pub fn from_dir(dir: &Path) -> Result<Templates, RenderError> {
        let io = |e: std::io::Error| RenderError::Input(format!("{}: {e}", dir.display()));
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            // A kustomize directory of templates is a templates directory too.
            .filter(|p| {
                p.file_stem()
                    .is_none_or(|s| !s.eq_ignore_ascii_case("kustomization"))
            })
            .collect();
        files.sort();
        let mut docs = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| RenderError::Input(format!("{}: {e}", f.display())))?;
            for d in yaml_documents(&text)
                .map_err(|e| RenderError::Input(format!("{}: {e}", f.display())))?
            {
                docs.push((f.display().to_string(), d));
            }
        }
        Templates::from_documents(&dir.display().to_string(), docs)
    }

    /// From `(file, object)` pairs; `source` names the set in messages.
    pub fn from_documents(
        source: &str,
        docs: Vec<(String, Value)>,
    ) -> Result<Templates, RenderError> {
        let mut by_kind_name = BTreeMap::new();
        for (file, d) in docs {
            let kind = d.get("kind").and_then(Value::as_str).unwrap_or_default();
            let name = d
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if kind.is_empty() || name.is_empty() || d.get("apiVersion").is_none() {
                return Err(RenderError::Input(format!(
                    "{file}: every document needs apiVersion, kind and metadata.name"
                )));
            }
            let key = (kind.to_string(), name.to_string());
            if by_kind_name.insert(key, d.clone()).is_some() {
                return Err(RenderError::Input(format!(
                    "{file}: {kind} {name:?} is defined twice"
                )));
            }
        }
        Ok(Templates {
            by_kind_name,
            source: source.to_string(),
        })
    }

    /// The template `kind`/`name`, as read.
    pub fn raw(&self, kind: &str, name: &str) -> Option<&Value> {
        self.by_kind_name.get(&(kind.to_string(), name.to_string()))
    }

    /// Puts (or, with `None`, removes) the template `kind`/`name`: `stackhook plan`
    /// swaps single templates between two sets to find which edit caused a change.
    pub fn set(&mut self, kind: &str, name: &str, template: Option<Value>) {
        let key = (kind.to_string(), name.to_string());
        match template {
            Some(t) => {
                self.by_kind_name.insert(key, t);
            }
            None => {
                self.by_kind_name.remove(&key);
            }
        }
    }

    /// Every template, by kind and name.
    pub fn iter(&self) -> impl Iterator<Item = (&(String, String), &Value)> {
        self.by_kind_name.iter()
    }

    fn get(&self, class: &ClusterClass, r: &TemplateRef) -> Result<Value, String> {
        let at = format!("ClusterClass {}: {}", class.name, r.field);
        let t = self
            .by_kind_name
            .get(&(r.kind.clone(), r.name.clone()))
            .ok_or_else(|| format!("{at}: {} {:?} not found in {}", r.kind, r.name, self.source))?;
        let group = |v: &str| v.split('/').next().unwrap_or_default().to_string();
        let found = t
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if group(found) != group(&r.api_version) {
            return Err(format!(
                "{at}: {} {:?} has apiVersion {found}, the reference asks for {}",
                r.kind, r.name, r.api_version
            ));
        }
        Ok(t.clone())
    }
}

thread_local! {
    /// Compiled variable schemas by their JSON text. Compiling a schema (its CEL rules
    /// above all) costs more than the rest of a render; `stackhook plan` renders the
    /// same class's variables for every Cluster, several times each. Per thread, as
    /// compiled CEL programs are not shared between threads.
    static SCHEMAS: RefCell<HashMap<String, Rc<CompiledSchema>>> = RefCell::new(HashMap::new());
}

/// Schemas kept per thread: past this many, the cache starts over.
const SCHEMA_CACHE_ENTRIES: usize = 256;

/// [`CompiledSchema::compile`], remembered per thread.
fn compiled(schema: &Value) -> Result<Rc<CompiledSchema>, (String, String)> {
    let key = schema.to_string();
    if let Some(hit) = SCHEMAS.with(|c| c.borrow().get(&key).cloned()) {
        return Ok(hit);
    }
    let c = Rc::new(CompiledSchema::compile(schema)?);
    SCHEMAS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.len() >= SCHEMA_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, c.clone());
    });
    Ok(c)
}

/// The documents of a YAML stream, as JSON values, read as kubectl reads them (YAML 1.1
/// scalars: `yes` is `true`, `010` is 8); empty documents are skipped.
pub fn yaml_documents(text: &str) -> Result<Vec<Value>, String> {
    stackhook_gotmpl::yaml11::stream_to_json(text).map_err(|e| e.to_string())
}

/// What one render reads.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub cluster: Cluster,
    pub class: ClusterClass,
    pub templates: Templates,
    /// The CAPI release whose topology controller is imitated: it decides the
    /// DiscoverVariables shape, the holder apiVersions, `builtin.cluster.topology.classRef`
    /// (1.11 on), how request templates are cleaned (1.11 on) and whether patches to
    /// labels and annotations reach the objects (1.14 on).
    pub capi: CapiVersion,
}

impl Inputs {
    /// The Cluster file, the ClusterClass file and the templates directory.
    pub fn read(cluster: &Path, class: &Path, templates: &Path) -> Result<Inputs, RenderError> {
        let one = |p: &Path, kind: &str| -> Result<Value, RenderError> {
            let text = std::fs::read_to_string(p)
                .map_err(|e| RenderError::Input(format!("{}: {e}", p.display())))?;
            let docs = yaml_documents(&text)
                .map_err(|e| RenderError::Input(format!("{}: {e}", p.display())))?;
            docs.into_iter()
                .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
                .ok_or_else(|| {
                    RenderError::Input(format!("{}: no {kind} in the file", p.display()))
                })
        };
        Ok(Inputs {
            cluster: Cluster::from_value(&one(cluster, "Cluster")?)?,
            class: ClusterClass::from_value(&one(class, "ClusterClass")?)?,
            templates: Templates::from_dir(templates)?,
            capi: CapiVersion::NEWEST,
        })
    }

    /// The same inputs rendered as CAPI `capi` would render them.
    pub fn with_capi(mut self, capi: CapiVersion) -> Inputs {
        self.capi = capi;
        self
    }
}

/// One variable definition of the class: inline, or discovered from an external patch.
struct Definition {
    name: String,
    required: bool,
    /// `inline` or the external patch's name (CAPI's `definitions[].from`).
    from: String,
    schema: Rc<CompiledSchema>,
}

/// MachineDeployments and MachinePools: the same topology shape, different objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Worker {
    Deployment,
    Pool,
}

impl Worker {
    /// The holder kind of its items.
    fn kind(self) -> &'static str {
        match self {
            Worker::Deployment => "MachineDeployment",
            Worker::Pool => "MachinePool",
        }
    }

    /// Its key under `builtin` and in naming templates.
    fn key(self) -> &'static str {
        match self {
            Worker::Deployment => "machineDeployment",
            Worker::Pool => "machinePool",
        }
    }

    fn topology_path(self) -> &'static str {
        match self {
            Worker::Deployment => "spec.topology.workers.machineDeployments",
            Worker::Pool => "spec.topology.workers.machinePools",
        }
    }

    fn default_naming(self) -> &'static str {
        match self {
            Worker::Deployment => names::DEFAULT_MD_NAMING,
            Worker::Pool => names::DEFAULT_MP_NAMING,
        }
    }

    /// Prefix of the name seeds; `md/...` is what MachineDeployments always used.
    fn seed(self) -> &'static str {
        match self {
            Worker::Deployment => "md",
            Worker::Pool => "mp",
        }
    }

    /// The label CAPI puts on its bootstrap and infrastructure objects.
    fn name_label(self) -> &'static str {
        match self {
            Worker::Deployment => DEPLOYMENT_NAME_LABEL,
            Worker::Pool => POOL_NAME_LABEL,
        }
    }
}

/// Where a template sits in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    InfrastructureCluster,
    ControlPlane,
    ControlPlaneInfrastructure,
    WorkerBootstrap(Worker, usize),
    WorkerInfrastructure(Worker, usize),
}

impl Role {
    /// Whether CAPI makes an object from the template's `spec.template` (InfrastructureCluster,
    /// ControlPlane, a MachinePool's bootstrap config and infrastructure machine pool)
    /// rather than cloning the template itself (the control plane's machine template and
    /// a MachineDeployment's two templates).
    fn makes_object(self) -> bool {
        matches!(
            self,
            Role::InfrastructureCluster
                | Role::ControlPlane
                | Role::WorkerBootstrap(Worker::Pool, _)
                | Role::WorkerInfrastructure(Worker::Pool, _)
        )
    }

    fn worker(self) -> Option<(Worker, usize)> {
        match self {
            Role::WorkerBootstrap(w, i) | Role::WorkerInfrastructure(w, i) => Some((w, i)),
            _ => None,
        }
    }
}

/// Labels or annotations, string values as JSON.
type StringMap = BTreeMap<String, Value>;

/// One request item: a class template on its way to becoming an object.
struct Slot {
    role: Role,
    /// The template as the ClusterClass gives it; `template` is it after the patches.
    /// Up to CAPI 1.13 the objects' metadata comes from this one and only the spec
    /// from the patched one.
    original: Value,
    uid: String,
    holder: HolderReference,
    template: Value,
    /// Name of the object made from it.
    name: String,
    /// The labels and annotations CAPI computes for the object before any patch runs.
    labels: StringMap,
    annotations: StringMap,
    /// `builtin` for this item (the non-cluster half).
    builtin: Value,
    /// Per-item override values (defaulted), by name.
    overrides: BTreeMap<String, Value>,
}

/// Everything derived from the inputs before patches run.
struct Plan<'a> {
    inputs: &'a Inputs,
    inline: Pack,
    /// Inline patch number in `inline` for each `spec.patches` index.
    inline_index: BTreeMap<usize, usize>,
    definitions: Vec<Definition>,
    global: BTreeMap<String, Value>,
    builtin_cluster: Value,
    slots: Vec<Slot>,
}

/// The class's inline variables and patches as a pack, so they run through the same
/// generator as packs do (a pack is exactly that shape).
fn inline_pack(class: &ClusterClass) -> Result<(Pack, BTreeMap<usize, usize>), Vec<String>> {
    let mut vars = Vec::new();
    for v in &class.variables {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            // The v1beta2 spelling of `metadata`; the pack shape knows only `metadata`.
            if let Some(m) = o.remove("deprecatedV1Beta1Metadata") {
                o.entry("metadata").or_insert(m);
            }
        }
        vars.push(v);
    }
    let mut patches = Vec::new();
    let mut index = BTreeMap::new();
    let mut back = Vec::new();
    for (i, p) in class.patches.iter().enumerate() {
        if let ClassPatch::Inline { raw, .. } = p {
            index.insert(i, patches.len());
            back.push(i);
            patches.push(raw.clone());
        }
    }
    let src = json!({"name": INLINE, "variables": vars, "patches": patches}).to_string();
    let file = format!("ClusterClass {}", class.name);
    pack::parse_pack(&file, &src)
        .map(|mut p| {
            p.creates_parents = false;
            (p, index)
        })
        .map_err(|problems| {
            problems
                .into_iter()
                .map(|p| {
                    let place = rewrite_place(&p.place, &back);
                    format!("{file}: {place}: {}", p.problem)
                })
                .collect()
        })
}

/// `patches[k]...` of the synthetic pack → `spec.patches[i]...` of the class.
fn rewrite_place(place: &str, back: &[usize]) -> String {
    if let Some(rest) = place.strip_prefix("patches[") {
        if let Some((n, tail)) = rest.split_once(']') {
            if let Some(i) = n.parse::<usize>().ok().and_then(|k| back.get(k)) {
                return format!("spec.patches[{i}]{tail}");
            }
        }
    }
    if place.is_empty() {
        return "spec".into();
    }
    format!("spec.{place}")
}

fn cluster_group_kind(obj: &Value) -> (String, String) {
    let api = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = api
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("")
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    (group, kind)
}

/// Whether a control-plane template's provider speaks contract v1beta2 (KCP ≥ 1.11).
fn v1beta2_contract(cp_template: &Value) -> bool {
    cp_template
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|a| a.ends_with("/v1beta2"))
}

fn object_kind(template_kind: &str) -> String {
    template_kind
        .strip_suffix("Template")
        .unwrap_or(template_kind)
        .to_string()
}

/// The class's variable definitions: its inline ones, then each external patch's
/// DiscoverVariables answer.
fn definitions(
    inputs: &Inputs,
    inline: &Pack,
    engine: &dyn PatchEngine,
) -> Result<Vec<Definition>, RenderError> {
    let class = &inputs.class;
    let capi = inputs.capi;
    let mut definitions: Vec<Definition> = inline
        .variables
        .iter()
        .filter_map(|v| {
            compiled(&v.schema).ok().map(|schema| Definition {
                name: v.name.clone(),
                required: v.required,
                from: INLINE.into(),
                schema,
            })
        })
        .collect();
    for (i, p) in class.patches.iter().enumerate() {
        let ClassPatch::External(e) = p else { continue };
        let Some(handler) = &e.discover else { continue };
        let req = DiscoverVariablesRequest {
            settings: e.settings.clone(),
        };
        let resp = engine.discover_variables(handler, &req, capi);
        if resp.status != ResponseStatus::Success {
            return Err(RenderError::Input(format!(
                "ClusterClass {}: spec.patches[{i}] ({}): DiscoverVariables of {handler:?} failed: {}",
                class.name, e.name, resp.message
            )));
        }
        for v in resp.variables {
            let schema = compiled(&v.schema.open_api_v3_schema).map_err(|(at, why)| {
                RenderError::Input(format!(
                    "ClusterClass {}: spec.patches[{i}] ({}): variable {:?}{at}: {why}",
                    class.name, e.name, v.name
                ))
            })?;
            definitions.push(Definition {
                name: v.name,
                required: v.required,
                from: e.name.clone(),
                schema,
            });
        }
    }
    Ok(definitions)
}

/// The Cluster's variables as CAPI's defaulting webhook stores them: each value with
/// its schema's nested defaults, every unset Cluster-wide variable that has a default
/// added, sorted by name. A management cluster holds Clusters so and files seldom do;
/// compared this way the two agree where CAPI would store the same object.
pub fn with_defaults(inputs: &Inputs, engine: &dyn PatchEngine) -> Result<Cluster, RenderError> {
    let (inline, _) = inline_pack(&inputs.class).map_err(RenderError::Invalid)?;
    let defs = definitions(inputs, &inline, engine)?;
    let fill = |vars: &mut Vec<Variable>| {
        for v in vars.iter_mut() {
            if let Some(d) = defs.iter().find(|d| d.name == v.name) {
                v.value = d.schema.default_value(&v.value);
            }
        }
        vars.sort_by(|a, b| a.name.cmp(&b.name));
    };
    let mut c = inputs.cluster.clone();
    for d in &defs {
        if c.variables.iter().any(|v| v.name == d.name) {
            continue;
        }
        if let Some(default) = d.schema_default() {
            c.variables.push(Variable {
                name: d.name.clone(),
                value: default,
            });
        }
    }
    fill(&mut c.variables);
    fill(&mut c.control_plane_overrides);
    for w in c
        .machine_deployments
        .iter_mut()
        .chain(c.machine_pools.iter_mut())
    {
        fill(&mut w.overrides);
    }
    Ok(c)
}

/// Checks every variable value and builds the plan. Returns every problem found.
fn plan<'a>(inputs: &'a Inputs, engine: &dyn PatchEngine) -> Result<Plan<'a>, RenderError> {
    let class = &inputs.class;
    let cluster = &inputs.cluster;
    let mut problems = Vec::new();

    if cluster.class != class.name {
        problems.push(format!(
            "Cluster {}: spec.topology class is {:?}, but the ClusterClass given is {:?}",
            cluster.name, cluster.class, class.name
        ));
    }

    let (inline, inline_index) = inline_pack(class).map_err(RenderError::Invalid)?;
    let capi = inputs.capi;
    // v1beta2 is served from CAPI 1.11 on: such inputs cannot reach CAPI 1.10.
    for (what, api) in [
        (format!("Cluster {}", cluster.name), &cluster.api_version),
        (format!("ClusterClass {}", class.name), &class.api_version),
    ] {
        if api.ends_with("/v1beta2") && capi.minor < 11 {
            problems.push(format!(
                "{what}: apiVersion {api} is served from CAPI 1.11 on, not by CAPI {capi}"
            ));
        }
    }

    let definitions = definitions(inputs, &inline, engine)?;

    // Values: defined, valid, required ones present; defaults filled in.
    let check = |values: &[Variable], at: &str, problems: &mut Vec<String>| {
        let mut out = BTreeMap::new();
        for v in values {
            let defs: Vec<&Definition> = definitions.iter().filter(|d| d.name == v.name).collect();
            if defs.is_empty() || v.name == BUILTIN {
                problems.push(format!(
                    "{at}[{}]: variable {:?} is not defined in ClusterClass {}",
                    v.name, v.name, class.name
                ));
                continue;
            }
            let value = defs[0].schema.default_value(&v.value);
            for d in &defs {
                for (path, msg) in d.schema.validate(&value) {
                    problems.push(format!("{at}[{}].value{path}: {msg}", v.name));
                }
            }
            out.insert(v.name.clone(), value);
        }
        out
    };
    let mut global = check(&cluster.variables, "spec.topology.variables", &mut problems);
    for d in &definitions {
        if global.contains_key(&d.name) {
            continue;
        }
        if let Some(default) = d.schema_default() {
            global.insert(d.name.clone(), d.schema.default_value(&default));
        } else if d.required {
            problems.push(format!(
                "spec.topology.variables: required variable {:?} is not set",
                d.name
            ));
        }
    }
    let cp_overrides = check(
        &cluster.control_plane_overrides,
        "spec.topology.controlPlane.variables.overrides",
        &mut problems,
    );
    let mut worker_overrides = BTreeMap::new();
    for (worker, topologies) in [
        (Worker::Deployment, &cluster.machine_deployments),
        (Worker::Pool, &cluster.machine_pools),
    ] {
        let classes = worker_classes(class, worker);
        let mut seen = BTreeSet::new();
        for (i, w) in topologies.iter().enumerate() {
            let at = format!("{}[{i}]", worker.topology_path());
            if !seen.insert(w.name.clone()) {
                problems.push(format!("{at}.name: {:?} is used twice", w.name));
            }
            if !classes.iter().any(|c| c.class == w.class) {
                problems.push(format!(
                    "{at}.class: {:?} is not a {} class of ClusterClass {}",
                    w.class,
                    worker.kind(),
                    class.name
                ));
            }
            worker_overrides.insert(
                (worker.key(), i),
                check(
                    &w.overrides,
                    &format!("{at}.variables.overrides"),
                    &mut problems,
                ),
            );
        }
    }

    // Templates.
    let mut get = |r: &TemplateRef| match inputs.templates.get(class, r) {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(e);
            None
        }
    };
    let infra_t = get(&class.infrastructure);
    let cp_t = get(&class.control_plane);
    let cp_infra_t = class
        .control_plane_machine_infrastructure
        .as_ref()
        .map(&mut get);
    let mut worker_t = BTreeMap::new();
    for (worker, topologies) in [
        (Worker::Deployment, &cluster.machine_deployments),
        (Worker::Pool, &cluster.machine_pools),
    ] {
        let classes = worker_classes(class, worker);
        for (i, w) in topologies.iter().enumerate() {
            if let Some(c) = classes.iter().find(|c| c.class == w.class) {
                worker_t.insert(
                    (worker.key(), i),
                    (get(&c.bootstrap), get(&c.infrastructure)),
                );
            }
        }
    }
    if !problems.is_empty() {
        return Err(RenderError::Invalid(problems));
    }
    let (Some(infra_t), Some(cp_t)) = (infra_t, cp_t) else {
        return Err(RenderError::Invalid(problems));
    };

    // Names, builtins and request items.
    // The class is left out: CAPI's names do not depend on it either, and moving a
    // Cluster to an equivalent class must not rename its objects.
    let seed = |role: &str| format!("{}/{}/{role}", cluster.namespace, cluster.name);
    // CAPI names its own API version in holder references, whatever version the
    // Cluster was written in.
    let holder_api = capi.holder_api_version().to_string();
    let cluster_holder = |field: &str| HolderReference {
        api_version: holder_api.clone(),
        kind: "Cluster".into(),
        namespace: cluster.namespace.clone(),
        name: cluster.name.clone(),
        field_path: field.into(),
    };
    let mut topology = Map::new();
    topology.insert("version".into(), json!(cluster.version));
    topology.insert("class".into(), json!(cluster.class));
    topology.insert("classNamespace".into(), json!(cluster.class_namespace));
    if capi.minor >= 11 {
        topology.insert(
            "classRef".into(),
            json!({"name": cluster.class, "namespace": cluster.class_namespace}),
        );
    }
    let mut bc = Map::new();
    bc.insert("name".into(), json!(cluster.name));
    bc.insert("namespace".into(), json!(cluster.namespace));
    if let Some(uid) = &cluster.uid {
        bc.insert("uid".into(), json!(uid));
    }
    bc.insert("topology".into(), Value::Object(topology));
    if !cluster.network.is_empty() {
        bc.insert("network".into(), Value::Object(cluster.network.clone()));
    }
    let builtin_cluster = json!({ "cluster": bc });

    let prefix = format!("{}-", cluster.name);
    let named =
        |template: &Option<String>, default: &str, worker: Option<(&str, &str)>, role: &str| {
            names::from_template(
                template.as_deref().unwrap_or(default),
                &cluster.name,
                worker,
                &seed(role),
            )
            .map_err(|e| RenderError::Invalid(vec![format!("ClusterClass {}: {e}", class.name)]))
        };
    let infra_name = named(
        &class.infrastructure_naming,
        names::DEFAULT_NAMING,
        None,
        "infrastructure-cluster",
    )?;
    let cp_name = named(
        &class.control_plane_naming,
        names::DEFAULT_NAMING,
        None,
        "control-plane",
    )?;
    let cp_infra_name = names::generated(&prefix, &seed("control-plane-infrastructure"));
    let mut cp_builtin = Map::new();
    cp_builtin.insert("version".into(), json!(cluster.version));
    cp_builtin.insert("name".into(), json!(cp_name));
    if let Some(r) = cluster.control_plane_replicas {
        cp_builtin.insert("replicas".into(), json!(r));
    }
    if cp_infra_t.is_some() {
        cp_builtin.insert(
            "machineTemplate".into(),
            json!({"infrastructureRef": {"name": cp_infra_name}}),
        );
    }
    let cp_builtin = json!({ "controlPlane": cp_builtin });

    let mut slots = vec![
        Slot {
            original: Value::Null,
            role: Role::InfrastructureCluster,
            uid: names::uid(&seed("infrastructure-cluster")),
            holder: cluster_holder("spec.infrastructureRef"),
            template: infra_t,
            name: infra_name,
            labels: StringMap::new(),
            annotations: StringMap::new(),
            builtin: Value::Null,
            overrides: BTreeMap::new(),
        },
        Slot {
            original: Value::Null,
            role: Role::ControlPlane,
            uid: names::uid(&seed("control-plane")),
            holder: cluster_holder("spec.controlPlaneRef"),
            template: cp_t.clone(),
            name: cp_name.clone(),
            labels: StringMap::new(),
            annotations: StringMap::new(),
            builtin: cp_builtin.clone(),
            overrides: cp_overrides.clone(),
        },
    ];
    if let Some(Some(t)) = cp_infra_t {
        let field = if v1beta2_contract(&cp_t) {
            "spec.machineTemplate.spec.infrastructureRef"
        } else {
            "spec.machineTemplate.infrastructureRef"
        };
        slots.push(Slot {
            original: Value::Null,
            role: Role::ControlPlaneInfrastructure,
            uid: names::uid(&seed("control-plane-infrastructure")),
            holder: HolderReference {
                api_version: cp_t
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                kind: object_kind(&cluster_group_kind(&cp_t).1),
                namespace: cluster.namespace.clone(),
                name: cp_name.clone(),
                field_path: field.into(),
            },
            template: t,
            name: cp_infra_name,
            labels: StringMap::new(),
            annotations: StringMap::new(),
            builtin: cp_builtin,
            overrides: cp_overrides,
        });
    }
    for (worker, topologies) in [
        (Worker::Deployment, &cluster.machine_deployments),
        (Worker::Pool, &cluster.machine_pools),
    ] {
        let classes = worker_classes(class, worker);
        for (i, w) in topologies.iter().enumerate() {
            let Some((Some(bt), Some(it))) = worker_t.remove(&(worker.key(), i)) else {
                continue;
            };
            let overrides = worker_overrides
                .remove(&(worker.key(), i))
                .unwrap_or_default();
            let w_prefix = format!("{}-{}-", cluster.name, w.name);
            let role_seed = format!("{}/{}", worker.seed(), w.name);
            let naming = classes
                .iter()
                .find(|c| c.class == w.class)
                .and_then(|c| c.naming.clone());
            let w_name = named(
                &naming,
                worker.default_naming(),
                Some((worker.key(), &w.name)),
                &role_seed,
            )?;
            let b_name = names::generated(&w_prefix, &seed(&format!("{role_seed}/bootstrap")));
            let i_name = names::generated(&w_prefix, &seed(&format!("{role_seed}/infrastructure")));
            let mut b = Map::new();
            b.insert("version".into(), json!(cluster.version));
            b.insert("class".into(), json!(w.class));
            b.insert("name".into(), json!(w_name));
            b.insert("topologyName".into(), json!(w.name));
            if let Some(r) = w.replicas {
                b.insert("replicas".into(), json!(r));
            }
            b.insert("bootstrap".into(), json!({"configRef": {"name": b_name}}));
            b.insert("infrastructureRef".into(), json!({"name": i_name}));
            let builtin = json!({ worker.key(): b });
            let holder = |field: &str| HolderReference {
                api_version: holder_api.clone(),
                kind: worker.kind().into(),
                namespace: cluster.namespace.clone(),
                name: w_name.clone(),
                field_path: field.into(),
            };
            slots.push(Slot {
                original: Value::Null,
                role: Role::WorkerBootstrap(worker, i),
                uid: names::uid(&seed(&format!("{role_seed}/bootstrap"))),
                holder: holder("spec.template.spec.bootstrap.configRef"),
                template: bt,
                name: b_name,
                labels: StringMap::new(),
                annotations: StringMap::new(),
                builtin: builtin.clone(),
                overrides: overrides.clone(),
            });
            slots.push(Slot {
                original: Value::Null,
                role: Role::WorkerInfrastructure(worker, i),
                uid: names::uid(&seed(&format!("{role_seed}/infrastructure"))),
                holder: holder("spec.template.spec.infrastructureRef"),
                template: it,
                name: i_name,
                labels: StringMap::new(),
                annotations: StringMap::new(),
                builtin,
                overrides,
            });
        }
    }

    let cp_meta = merged_meta(
        &class.control_plane_metadata,
        &cluster.control_plane_metadata,
    );
    for s in &mut slots {
        s.original = s.template.clone();
        let (labels, annotations) = desired_metadata(s.role, &s.original, cluster, &cp_meta);
        s.labels = labels;
        s.annotations = annotations;
        prepare_request_template(s, capi);
    }
    Ok(Plan {
        inputs,
        inline,
        inline_index,
        definitions,
        global,
        builtin_cluster,
        slots,
    })
}

/// The worker classes of `worker`'s kind.
fn worker_classes(class: &ClusterClass, worker: Worker) -> &[MachineDeploymentClass] {
    match worker {
        Worker::Deployment => &class.machine_deployments,
        Worker::Pool => &class.machine_pools,
    }
}

/// The labels and annotations CAPI gives the object made from `template` before patches
/// (`templateToObject` / `templateToTemplate` and `computeControlPlane` in
/// exp/topology/desiredstate/desired_state.go): an object takes `spec.template.metadata`,
/// a cloned template its own `metadata` without kubectl's last-applied record; the
/// ControlPlane adds the class's and the topology's control-plane metadata on top; then
/// the ownership labels, the worker's name label and the cloned-from annotations.
fn desired_metadata(
    role: Role,
    template: &Value,
    cluster: &Cluster,
    cp_meta: &Meta,
) -> (StringMap, StringMap) {
    let mut labels = StringMap::new();
    let mut annotations = StringMap::new();
    let meta = if role.makes_object() {
        "/spec/template/metadata"
    } else {
        "/metadata"
    };
    merge_strings(&mut labels, template.pointer(&format!("{meta}/labels")));
    merge_strings(
        &mut annotations,
        template.pointer(&format!("{meta}/annotations")),
    );
    if !role.makes_object() {
        annotations.remove(LAST_APPLIED);
    }
    if role == Role::ControlPlane {
        merge_meta(&mut labels, &mut annotations, cp_meta);
    }
    labels.insert(CLUSTER_NAME_LABEL.into(), json!(cluster.name));
    labels.insert(TOPOLOGY_OWNED_LABEL.into(), json!(""));
    if let Some((worker, i)) = role.worker() {
        let topologies = match worker {
            Worker::Deployment => &cluster.machine_deployments,
            Worker::Pool => &cluster.machine_pools,
        };
        if let Some(w) = topologies.get(i) {
            labels.insert(worker.name_label().into(), json!(w.name));
        }
    }
    let (group, kind) = cluster_group_kind(template);
    annotations.insert(
        CLONED_FROM_NAME.into(),
        template
            .pointer("/metadata/name")
            .cloned()
            .unwrap_or(Value::Null),
    );
    annotations.insert(
        CLONED_FROM_GROUPKIND.into(),
        json!(format!("{kind}.{group}")),
    );
    (labels, annotations)
}

/// The template as CAPI puts it in the GeneratePatches request. From 1.14 the object's
/// labels and annotations are written into it first (`spec.template.metadata` of a
/// template CAPI makes an object from, `metadata` of one it clones; `createRequest` in
/// core/reconcilers/topology/cluster/patches/engine.go at v1.14.0), so patches see and
/// can change them. From 1.11 managedFields and the last-applied and conversion-data
/// annotations are dropped (`cleanupUnstructured` in patches/template.go), and from
/// 1.14 an annotation map left empty goes too.
fn prepare_request_template(slot: &mut Slot, capi: CapiVersion) {
    if capi.minor >= 14 {
        let at: &[&str] = if slot.role.makes_object() {
            &["spec", "template", "metadata"]
        } else {
            &["metadata"]
        };
        if let Some(m) = object_at(&mut slot.template, at) {
            m.insert("labels".into(), json!(slot.labels));
            m.insert("annotations".into(), json!(slot.annotations));
        }
    }
    if capi.minor >= 11 {
        if let Some(meta) = slot
            .template
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
        {
            meta.remove("managedFields");
            let now_empty = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
                Some(a) => {
                    a.remove(LAST_APPLIED);
                    a.remove(CONVERSION_DATA);
                    a.is_empty()
                }
                None => false,
            };
            if now_empty && capi.minor >= 14 {
                meta.remove("annotations");
            }
        }
    }
}

/// The object at `path` under `v`, made (as empty objects) where missing; `None` when
/// something on the way is not an object.
fn object_at<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = v;
    for key in path {
        cur = cur
            .as_object_mut()?
            .entry(key.to_string())
            .or_insert_with(|| json!({}));
    }
    cur.as_object_mut()
}

impl Definition {
    fn schema_default(&self) -> Option<Value> {
        self.schema.top_level_default()
    }
}

impl Plan<'_> {
    /// The variables a patch may see: those defined by it (`from`), plus `builtin`.
    fn variables_for(&self, from: &str) -> (Vec<Variable>, Vec<Vec<Variable>>) {
        let allowed: BTreeSet<&str> = self
            .definitions
            .iter()
            .filter(|d| d.from == from)
            .map(|d| d.name.as_str())
            .collect();
        let mut global = vec![Variable {
            name: BUILTIN.into(),
            value: self.builtin_cluster.clone(),
        }];
        for (k, v) in &self.global {
            if allowed.contains(k.as_str()) {
                global.push(Variable {
                    name: k.clone(),
                    value: v.clone(),
                });
            }
        }
        let items = self
            .slots
            .iter()
            .map(|s| {
                let mut vars = Vec::new();
                if !s.builtin.is_null() {
                    vars.push(Variable {
                        name: BUILTIN.into(),
                        value: s.builtin.clone(),
                    });
                }
                for (k, v) in &s.overrides {
                    if allowed.contains(k.as_str()) {
                        vars.push(Variable {
                            name: k.clone(),
                            value: v.clone(),
                        });
                    }
                }
                vars
            })
            .collect();
        (global, items)
    }

    fn request(&self, from: &str, settings: &Settings) -> GeneratePatchesRequest {
        let (variables, item_vars) = self.variables_for(from);
        GeneratePatchesRequest {
            settings: settings.clone(),
            variables,
            items: self
                .slots
                .iter()
                .zip(item_vars)
                .map(|(s, variables)| GeneratePatchesRequestItem {
                    uid: s.uid.clone(),
                    holder_reference: s.holder.clone(),
                    object: s.template.clone(),
                    variables,
                })
                .collect(),
        }
    }

    /// Applies one GeneratePatches answer the way CAPI does: items in order, by uid.
    fn apply(&mut self, items: &[GeneratePatchesResponseItem]) -> Result<(), String> {
        let capi = self.inputs.capi;
        for item in items {
            let slot = self
                .slots
                .iter_mut()
                .find(|s| s.uid == item.uid)
                .ok_or_else(|| format!("response item for unknown uid {:?}", item.uid))?;
            let what = format!(
                "{} {:?}",
                slot.template
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("template"),
                slot.template
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            );
            if item.patch.0.is_empty() {
                continue;
            }
            let mut patched = slot.template.clone();
            match item.patch_type {
                PatchType::JSONPatch => {
                    let p: json_patch::Patch = serde_json::from_slice(&item.patch.0)
                        .map_err(|e| format!("{what}: the JSON patch does not decode: {e}"))?;
                    json_patch::patch(&mut patched, &p)
                        .map_err(|e| format!("{what}: the JSON patch does not apply: {e}"))?;
                }
                PatchType::JSONMergePatch => {
                    let p: Value = serde_json::from_slice(&item.patch.0)
                        .map_err(|e| format!("{what}: the merge patch does not decode: {e}"))?;
                    json_patch::merge(&mut patched, &p);
                }
            }
            // CAPI carries only the template's spec from one patch to the next, and
            // from 1.14 its labels and annotations too (`applyPatchToRequest`); a field
            // the patched copy lacks is left as it was.
            if let Some(spec) = patched.get("spec") {
                if let Some(t) = slot.template.as_object_mut() {
                    t.insert("spec".into(), spec.clone());
                }
            }
            if capi.minor >= 14 {
                for key in ["labels", "annotations"] {
                    if let Some(v) = patched.pointer(&format!("/metadata/{key}")) {
                        if let Some(m) = object_at(&mut slot.template, &["metadata"]) {
                            m.insert(key.into(), v.clone());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn run_patches(&mut self, engine: &dyn PatchEngine) -> Result<(), RenderError> {
        let class = &self.inputs.class;
        let mut last_from = INLINE.to_string();
        let mut last_settings = Settings::new();
        for (i, p) in class.patches.iter().enumerate() {
            let at = format!(
                "ClusterClass {}: spec.patches[{i}] ({})",
                class.name,
                p.name()
            );
            match p {
                ClassPatch::Inline { .. } => {
                    let req = self.request(INLINE, &Settings::new());
                    let k = self.inline_index.get(&i).copied();
                    let items = generate::generate_only(&self.inline, k, &req)
                        .map_err(|e| RenderError::Patch(format!("{at}: {e}")))?;
                    self.apply(&items)
                        .map_err(|e| RenderError::Patch(format!("{at}: {e}")))?;
                    last_from = INLINE.into();
                    last_settings = Settings::new();
                }
                ClassPatch::External(e) => {
                    last_from = e.name.clone();
                    last_settings = e.settings.clone();
                    let Some(handler) = &e.generate else { continue };
                    let req = self.request(&e.name, &e.settings);
                    let resp = engine.generate_patches(handler, &req);
                    if resp.status != ResponseStatus::Success {
                        return Err(RenderError::Patch(format!(
                            "{at}: GeneratePatches of {handler:?} failed: {}",
                            resp.message
                        )));
                    }
                    self.apply(&resp.items)
                        .map_err(|e| RenderError::Patch(format!("{at}: {e}")))?;
                }
            }
        }
        // ValidateTopology, once per validating patch, with the variables of the last
        // patch (CAPI's behaviour) and the fully patched templates.
        for (i, p) in class.patches.iter().enumerate() {
            let ClassPatch::External(e) = p else { continue };
            let Some(handler) = &e.validate else { continue };
            let gen = self.request(&last_from, &last_settings);
            let req = ValidateTopologyRequest {
                settings: e.settings.clone(),
                variables: gen.variables,
                items: gen
                    .items
                    .into_iter()
                    .map(|it| ValidateTopologyRequestItem {
                        holder_reference: it.holder_reference,
                        object: it.object,
                        variables: it.variables,
                    })
                    .collect(),
            };
            let resp = engine.validate_topology(handler, &req);
            if resp.status != ResponseStatus::Success {
                return Err(RenderError::Patch(format!(
                    "ClusterClass {}: spec.patches[{i}] ({}): validation of patch {:?} failed: {}",
                    class.name, e.name, e.name, resp.message
                )));
            }
        }
        Ok(())
    }

    fn objects(&self) -> Vec<Value> {
        let cluster = &self.inputs.cluster;
        let class = &self.inputs.class;
        let capi = self.inputs.capi;
        let mut out = Vec::new();
        let cp_infra = self
            .slots
            .iter()
            .find(|s| s.role == Role::ControlPlaneInfrastructure);
        let cp_meta = merged_meta(
            &class.control_plane_metadata,
            &cluster.control_plane_metadata,
        );
        for s in &self.slots {
            let t = &s.original;
            let (_, kind) = cluster_group_kind(t);
            let api = t.get("apiVersion").cloned().unwrap_or(Value::Null);
            let mut labels = s.labels.clone();
            let mut annotations = s.annotations.clone();
            // Up to 1.13 what patches do to metadata is dropped. From 1.14 the patched
            // labels and annotations replace the computed ones, except the ownership,
            // worker-name and cloned-from keys CAPI always keeps (`updateDesiredState`).
            let meta_at = if s.role.makes_object() {
                "/spec/template/metadata"
            } else {
                "/metadata"
            };
            if capi.minor >= 14 {
                patched_strings(
                    &mut labels,
                    s.template.pointer(&format!("{meta_at}/labels")),
                );
                patched_strings(
                    &mut annotations,
                    s.template.pointer(&format!("{meta_at}/annotations")),
                );
                keep_preserved(&mut labels, &s.labels, PRESERVED_LABELS);
                keep_preserved(&mut annotations, &s.annotations, PRESERVED_ANNOTATIONS);
            }
            let metadata = json!({"name": s.name, "namespace": cluster.namespace,
                                  "labels": labels, "annotations": annotations});
            if s.role.makes_object() {
                // An object from a template: spec.template → the object.
                let mut spec = s
                    .template
                    .pointer("/spec/template/spec")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                if s.role == Role::ControlPlane {
                    self.control_plane_spec(&mut spec, t, &cp_meta, cp_infra);
                }
                out.push(json!({
                    "apiVersion": api,
                    "kind": object_kind(&kind),
                    "metadata": metadata,
                    "spec": spec,
                }));
            } else {
                // A template cloned per cluster: its whole spec is kept, with
                // `spec.template.spec` (and from 1.14 `spec.template.metadata`'s labels
                // and annotations) as the patches left it.
                out.push(json!({
                    "apiVersion": api,
                    "kind": kind,
                    "metadata": metadata,
                    "spec": cloned_spec(t, &s.template, capi),
                }));
            }
        }
        out
    }

    /// The fields CAPI sets on the ControlPlane whatever the patches did.
    fn control_plane_spec(
        &self,
        spec: &mut Value,
        cp_t: &Value,
        meta: &Meta,
        cp_infra: Option<&Slot>,
    ) {
        let cluster = &self.inputs.cluster;
        let Some(o) = spec.as_object_mut() else {
            return;
        };
        o.insert("version".into(), json!(cluster.version));
        if let Some(r) = cluster.control_plane_replicas {
            o.insert("replicas".into(), json!(r));
        }
        // Only a control plane with machines has a machine template to fill in.
        let Some(ci) = cp_infra else { return };
        let mt = o.entry("machineTemplate").or_insert_with(|| json!({}));
        let Some(mt) = mt.as_object_mut() else { return };
        // The ClusterClass template's own machine-template metadata stays, under ours
        // (patches to it are dropped, as CAPI drops them).
        let mut labels = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        let own_meta = cp_t.pointer("/spec/template/spec/machineTemplate/metadata");
        merge_strings(&mut labels, own_meta.and_then(|m| m.get("labels")));
        merge_strings(
            &mut annotations,
            own_meta.and_then(|m| m.get("annotations")),
        );
        merge_meta(&mut labels, &mut annotations, meta);
        labels.insert(CLUSTER_NAME_LABEL.into(), json!(cluster.name));
        labels.insert(TOPOLOGY_OWNED_LABEL.into(), json!(""));
        let mut m = Map::new();
        m.insert("labels".into(), json!(labels));
        if !annotations.is_empty() {
            m.insert("annotations".into(), json!(annotations));
        }
        mt.insert("metadata".into(), Value::Object(m));
        {
            let (group, kind) = cluster_group_kind(&ci.original);
            if v1beta2_contract(cp_t) {
                let inner = mt.entry("spec").or_insert_with(|| json!({}));
                if let Some(inner) = inner.as_object_mut() {
                    inner.insert(
                        "infrastructureRef".into(),
                        json!({"apiGroup": group, "kind": kind, "name": ci.name}),
                    );
                }
            } else {
                mt.insert(
                    "infrastructureRef".into(),
                    json!({"apiVersion": ci.original.get("apiVersion"), "kind": kind,
                           "name": ci.name, "namespace": cluster.namespace}),
                );
            }
        }
    }
}

/// kubectl's record of the last applied manifest: CAPI does not copy it to clones.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// CAPI's record of fields another API version lost in conversion.
const CONVERSION_DATA: &str = "cluster.x-k8s.io/conversion-data";

/// A cloned template's spec: the ClusterClass template's, with `spec.template.spec`
/// taken from the patched copy (the only part CAPI takes from it up to 1.13; from 1.14
/// also `spec.template.metadata.labels` and `.annotations`, `patchTemplate` in
/// core/reconcilers/topology/cluster/patches/patch.go). A part the patched copy lacks
/// is left as the class has it.
fn cloned_spec(original: &Value, patched: &Value, capi: CapiVersion) -> Value {
    let mut spec = original.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut copy = |from: &str, path: &[&str]| {
        let Some(v) = patched.pointer(from) else {
            return;
        };
        let (last, parents) = match path.split_last() {
            Some(x) => x,
            None => return,
        };
        if let Some(m) = object_at(&mut spec, parents) {
            m.insert(last.to_string(), v.clone());
        }
    };
    copy("/spec/template/spec", &["template", "spec"]);
    if capi.minor >= 14 {
        copy(
            "/spec/template/metadata/labels",
            &["template", "metadata", "labels"],
        );
        copy(
            "/spec/template/metadata/annotations",
            &["template", "metadata", "annotations"],
        );
    }
    spec
}

/// Labels and annotations CAPI restores after copying patched metadata, when the
/// object had them before (`alwaysPreserveLabelsAndAnnotations` in patches/engine.go
/// at v1.14.0).
const PRESERVED_LABELS: &[&str] = &[
    CLUSTER_NAME_LABEL,
    TOPOLOGY_OWNED_LABEL,
    DEPLOYMENT_NAME_LABEL,
    POOL_NAME_LABEL,
];
const PRESERVED_ANNOTATIONS: &[&str] = &[CLONED_FROM_NAME, CLONED_FROM_GROUPKIND];

/// `into` replaced by the map at `patched`, if the patched template has one there.
fn patched_strings(into: &mut StringMap, patched: Option<&Value>) {
    match patched {
        Some(Value::Object(m)) => {
            *into = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        }
        Some(Value::Null) => into.clear(),
        _ => {}
    }
}

/// Puts back the `keys` that `before` had, with their earlier values.
fn keep_preserved(into: &mut StringMap, before: &StringMap, keys: &[&str]) {
    for k in keys {
        if let Some(v) = before.get(*k) {
            into.insert((*k).to_string(), v.clone());
        }
    }
}

fn merge_strings(into: &mut BTreeMap<String, Value>, from: Option<&Value>) {
    if let Some(Value::Object(m)) = from {
        for (k, v) in m {
            into.insert(k.clone(), v.clone());
        }
    }
}

/// Class metadata, then the topology's on top (the Cluster wins).
fn merged_meta(class: &Meta, topology: &Meta) -> Meta {
    let mut m = class.clone();
    m.labels.extend(topology.labels.clone());
    m.annotations.extend(topology.annotations.clone());
    m
}

fn merge_meta(
    labels: &mut BTreeMap<String, Value>,
    annotations: &mut BTreeMap<String, Value>,
    meta: &Meta,
) {
    for (k, v) in &meta.labels {
        labels.insert(k.clone(), json!(v));
    }
    for (k, v) in &meta.annotations {
        annotations.insert(k.clone(), json!(v));
    }
}

/// The objects the topology controller would create, in a fixed order:
/// InfrastructureCluster, ControlPlane, the control plane's machine template, each
/// MachineDeployment's bootstrap and infrastructure templates in topology order, then
/// each MachinePool's bootstrap config and infrastructure machine pool.
pub fn render(inputs: &Inputs, engine: &dyn PatchEngine) -> Result<Vec<Value>, RenderError> {
    let mut plan = plan(inputs, engine)?;
    plan.run_patches(engine)?;
    Ok(plan.objects())
}

/// The GeneratePatches request CAPI would send to external patch `patch_name` before
/// any patch ran (for tests and benchmarks that talk to a server themselves).
pub fn first_request(
    inputs: &Inputs,
    engine: &dyn PatchEngine,
    patch_name: &str,
) -> Result<GeneratePatchesRequest, RenderError> {
    let plan = plan(inputs, engine)?;
    let settings = inputs
        .class
        .patches
        .iter()
        .find_map(|p| match p {
            ClassPatch::External(e) if e.name == patch_name => Some(e.settings.clone()),
            _ => None,
        })
        .unwrap_or_default();
    Ok(plan.request(patch_name, &settings))
}

/// Every problem `render` would stop at, as `<field path>: <message>` lines; empty when
/// the Cluster renders. The rendered objects are not checked against CRDs here: that
/// needs a set of schemas, see [`validate_with`].
pub fn validate(inputs: &Inputs, engine: &dyn PatchEngine) -> Vec<String> {
    match render(inputs, engine) {
        Ok(_) => Vec::new(),
        Err(RenderError::Invalid(p)) => p,
        Err(e) => vec![e.to_string()],
    }
}

/// What `stackhook validate` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// `<field path>: <message>` lines, rendering problems first; the schema problems
    /// of an object start with its kind and name.
    pub problems: Vec<String>,
    /// `<apiVersion> <kind>` of rendered objects no known CRD describes.
    pub unchecked: Vec<String>,
}

/// [`validate`], then every rendered object against its CRD in `schemas` (what
/// `stackhook validate` runs, with [`crds::Schemas::built_in`] and `--crds`).
pub fn validate_with(inputs: &Inputs, engine: &dyn PatchEngine, schemas: &crds::Schemas) -> Report {
    let objects = match render(inputs, engine) {
        Ok(o) => o,
        Err(RenderError::Invalid(p)) => {
            return Report {
                problems: p,
                unchecked: vec![],
            }
        }
        Err(e) => {
            return Report {
                problems: vec![e.to_string()],
                unchecked: vec![],
            }
        }
    };
    let mut report = Report::default();
    let mut unchecked = BTreeSet::new();
    for o in &objects {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match schemas.check(o) {
            crds::Check::Checked(problems) => report
                .problems
                .extend(problems.into_iter().map(|p| format!("{kind} {name}: {p}"))),
            crds::Check::UnknownKind => {
                let api = o
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                unchecked.insert(format!("{api} {kind}"));
            }
        }
    }
    report.unchecked = unchecked.into_iter().collect();
    report
}

/// Multi-document YAML, one object per document.
pub fn to_yaml(objects: &[Value]) -> Result<String, RenderError> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(o).map_err(|e| RenderError::Input(e.to_string()))?);
    }
    Ok(out)
}

/// A JSON list of the objects.
pub fn to_json(objects: &[Value]) -> Result<String, RenderError> {
    let mut s =
        serde_json::to_string_pretty(objects).map_err(|e| RenderError::Input(e.to_string()))?;
    s.push('\n');
    Ok(s)
}

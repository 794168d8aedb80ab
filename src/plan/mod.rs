//! `stackhook plan`: what changing a set of Clusters, ClusterClasses and templates
//! will make CAPI do, before the change is merged.
//!
//! Both sides are rendered per Cluster through the same engine `stackhook render` and
//! the server use ([`crate::render`]); the rendered objects are compared the way CAPI's
//! topology controller compares them, and each difference is sorted by the rules of the
//! target CAPI release ([`rules`]) into template rotations, machine rollouts and changes
//! applied in place. The cause of each template change is found by reverting one input
//! at a time (a variable, the version, an inline patch, a template) and rendering again.

pub mod diff;
pub mod output;
pub mod rules;
pub mod sources;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{json, Value};

use crate::engine::clusterclass::{ClassPatch, Cluster, ClusterClass, TemplateRef};
use crate::engine::PatchEngine;
use crate::render::{self, Inputs, RenderError, Templates};
use crate::render::{
    CLONED_FROM_GROUPKIND, CLONED_FROM_NAME, DEPLOYMENT_NAME_LABEL, POOL_NAME_LABEL,
};
use crate::sdk::common::Variable;
use crate::sdk::CapiVersion;

pub use diff::FieldChange;
pub use rules::{Effect, Rules};

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Input(String),
    #[error("{source_name}: {message}")]
    Source {
        source_name: String,
        message: String,
    },
}

/// One side of a plan: the Clusters, ClusterClasses and templates of a directory, a
/// Git revision or a management cluster.
#[derive(Debug, Clone)]
pub struct ObjectSet {
    /// Where the objects came from, for messages.
    pub source: String,
    /// By `namespace/name`; a Cluster that does not parse keeps its error.
    clusters: BTreeMap<String, Result<Cluster, String>>,
    /// By namespace (empty when the file names none) and name.
    classes: BTreeMap<(String, String), Result<ClusterClass, String>>,
    templates: Templates,
    /// The apiVersion each object is written in, by kind and name.
    api_versions: BTreeMap<(String, String), String>,
    /// The documents the set was made of, for [`sources::as_stored`].
    documents: Vec<(String, Value)>,
}

impl ObjectSet {
    /// Sorts `(file, object)` pairs: Clusters and ClusterClasses of `cluster.x-k8s.io`,
    /// everything else is a template candidate. Documents without `apiVersion`/`kind`
    /// are not Kubernetes objects (values files, kustomizations) and are skipped.
    pub fn from_documents(
        source: &str,
        docs: Vec<(String, Value)>,
    ) -> Result<ObjectSet, PlanError> {
        let mut clusters = BTreeMap::new();
        let mut classes = BTreeMap::new();
        let mut templates = Vec::new();
        let mut api_versions = BTreeMap::new();
        let documents = docs.clone();
        for (file, d) in docs {
            let kind = d.get("kind").and_then(Value::as_str).unwrap_or_default();
            let api = d
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if kind.is_empty() || api.is_empty() {
                continue;
            }
            let name = d
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            api_versions.insert((kind.to_string(), name.clone()), api.to_string());
            let capi = api.starts_with("cluster.x-k8s.io/");
            match kind {
                "Cluster" if capi => {
                    let ns = d
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("default");
                    let key = format!("{ns}/{name}");
                    let parsed = Cluster::from_value(&d).map_err(|e| format!("{file}: {e}"));
                    if clusters.insert(key.clone(), parsed).is_some() {
                        return Err(PlanError::Source {
                            source_name: source.into(),
                            message: format!("{file}: Cluster {key} is defined twice"),
                        });
                    }
                }
                "ClusterClass" if capi => {
                    let parsed = ClusterClass::from_value(&d).map_err(|e| format!("{file}: {e}"));
                    let ns = d
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    if classes.insert((ns, name.clone()), parsed).is_some() {
                        return Err(PlanError::Source {
                            source_name: source.into(),
                            message: format!("{file}: ClusterClass {name} is defined twice"),
                        });
                    }
                }
                _ => templates.push((file, d)),
            }
        }
        let templates =
            Templates::from_documents(source, templates).map_err(|e| PlanError::Source {
                source_name: source.into(),
                message: e.to_string(),
            })?;
        Ok(ObjectSet {
            source: source.into(),
            clusters,
            classes,
            templates,
            api_versions,
            documents,
        })
    }

    /// The apiVersion object `kind`/`name` is written in here, if the set has it.
    pub fn api_version_of(&self, kind: &str, name: &str) -> Option<&str> {
        self.api_versions
            .get(&(kind.to_string(), name.to_string()))
            .map(String::as_str)
    }

    /// `namespace/name` of every Cluster.
    pub fn cluster_keys(&self) -> impl Iterator<Item = &String> {
        self.clusters.keys()
    }

    /// The render inputs of Cluster `key`: `None` when the set has no such Cluster.
    fn inputs(&self, key: &str, capi: CapiVersion) -> Option<Result<Inputs, String>> {
        let cluster = self.clusters.get(key)?;
        Some(cluster.clone().and_then(|cluster| {
            // The class in the Cluster's class namespace, else one written without a
            // namespace (applied to whichever namespace the Cluster is in).
            let class = self
                .classes
                .get(&(cluster.class_namespace.clone(), cluster.class.clone()))
                .or_else(|| self.classes.get(&(String::new(), cluster.class.clone())))
                .ok_or_else(|| {
                    format!(
                        "ClusterClass {} of Cluster {key} is not in {}",
                        cluster.class, self.source
                    )
                })?
                .clone()?;
            Ok(Inputs {
                cluster,
                class,
                templates: self.templates.clone(),
                capi,
            })
        }))
    }
}

/// What to plan.
#[derive(Debug, Clone)]
pub struct Options {
    pub capi: CapiVersion,
    /// Only this Cluster (`name` or `namespace/name`).
    pub cluster: Option<String>,
}

/// The plan of every Cluster (the JSON output; schema in the README).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub capi_version: String,
    pub clusters: Vec<ClusterPlan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    Unchanged,
    Changed,
    Created,
    Deleted,
    /// The new side does not render: CAPI would refuse it.
    Invalid,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlan {
    pub namespace: String,
    pub name: String,
    pub class: String,
    pub status: Status,
    /// Some machines will be replaced.
    pub rollout: bool,
    /// Why the new side does not render (variables that fail validation, patches
    /// that do not apply), each starting with its field path.
    pub problems: Vec<String>,
    pub templates: Vec<ObjectChange>,
    pub rollouts: Vec<Rollout>,
    pub in_place: Vec<InPlace>,
    pub created: Vec<Created>,
    pub deleted: Vec<Created>,
    /// What differs in the inputs of this Cluster.
    pub causes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// A new template under a new name, the reference moved to it.
    Rotate,
    /// Only labels or annotations differ: the template is patched, nothing rotates.
    PatchMetadata,
    /// The object (InfrastructureCluster, ControlPlane, a MachinePool's objects) is
    /// patched in place; CAPI never rotates these.
    Patch,
}

/// A rendered object that changes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectChange {
    /// `infrastructureCluster`, `controlPlane`, `controlPlane/machineInfrastructure`,
    /// `machineDeployment/<name>/bootstrap`, `machineDeployment/<name>/infrastructure`,
    /// `machinePool/<name>/bootstrap`, `machinePool/<name>/infrastructure`.
    pub role: String,
    pub kind: String,
    /// The object's name as rendered (CAPI picks a new one on rotation).
    pub name: String,
    pub action: Action,
    pub changes: Vec<FieldChange>,
    /// Which input change explains which of the changes: `{cause, paths}`.
    pub causes: Vec<Attribution>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Attribution {
    pub cause: String,
    pub paths: Vec<String>,
}

/// Machines replaced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// `controlPlane`, `machineDeployment` or `machinePool`.
    pub target: String,
    pub name: String,
    /// How many machines (the new replica count; `null` when unset).
    pub replicas: Option<i64>,
    /// `rollout` or `upgrade`.
    pub effect: Effect,
    pub reasons: Vec<String>,
}

/// A change written to an object (and its machines) without replacing machines.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlace {
    pub target: String,
    pub name: String,
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
    /// `scale` or `inPlace`.
    pub effect: Effect,
}

/// A MachineDeployment or MachinePool added or removed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    pub kind: String,
    pub name: String,
    pub replicas: Option<i64>,
}

impl Plan {
    /// No Cluster changes.
    pub fn unchanged(&self) -> bool {
        self.clusters.iter().all(|c| c.status == Status::Unchanged)
    }

    pub fn invalid(&self) -> bool {
        self.clusters.iter().any(|c| c.status == Status::Invalid)
    }

    pub fn rollout(&self) -> bool {
        self.clusters.iter().any(|c| c.rollout)
    }

    /// 0 no change, 2 changes with rollouts, 3 changes without rollouts, 1 a Cluster
    /// that would not render.
    pub fn exit_code(&self) -> u8 {
        if self.invalid() {
            1
        } else if self.rollout() {
            2
        } else if self.unchanged() {
            0
        } else {
            3
        }
    }
}

/// Plans every Cluster of either side (or `options.cluster` only).
pub fn plan(
    from: &ObjectSet,
    to: &ObjectSet,
    engine: &dyn PatchEngine,
    options: &Options,
) -> Result<Plan, PlanError> {
    let keys: BTreeSet<&String> = from.cluster_keys().chain(to.cluster_keys()).collect();
    let keys: Vec<&String> = keys
        .into_iter()
        .filter(|k| match &options.cluster {
            None => true,
            Some(want) => *k == want || k.split_once('/').is_some_and(|(_, name)| name == want),
        })
        .collect();
    if let (Some(want), true) = (&options.cluster, keys.is_empty()) {
        return Err(PlanError::Input(format!(
            "no Cluster {want} in {} or {}",
            from.source, to.source
        )));
    }
    let rules = Rules::of(options.capi);
    let one = |k: &String| {
        plan_cluster(
            k,
            from.inputs(k, options.capi),
            to.inputs(k, options.capi),
            engine,
            &rules,
        )
    };
    // Clusters are independent: one thread per core, each a contiguous share, so the
    // order stays that of the keys.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(keys.len().max(1));
    let clusters: Vec<ClusterPlan> = if threads <= 1 {
        keys.iter().map(|k| one(k)).collect()
    } else {
        let share = keys.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = keys
                .chunks(share)
                .map(|chunk| scope.spawn(move || chunk.iter().map(|k| one(k)).collect::<Vec<_>>()))
                .collect();
            let mut out = Vec::with_capacity(keys.len());
            for h in handles {
                match h.join() {
                    Ok(part) => out.extend(part),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            out
        })
    };
    Ok(Plan {
        capi_version: format!("1.{}", options.capi.minor),
        clusters,
    })
}

/// The rendered objects of one Cluster by role, in render order.
type Rendered = Vec<(String, Value)>;

fn render_roles(inputs: &Inputs, engine: &dyn PatchEngine) -> Result<Rendered, RenderError> {
    let objects = render::render(inputs, engine)?;
    let class = &inputs.class;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(objects.len());
    let is = |r: &TemplateRef, kind: &str, name: &str| r.kind == kind && r.name == name;
    for o in objects {
        let label = |l: &str| {
            o.pointer("/metadata/labels")
                .and_then(|m| m.get(l))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let worker = label(DEPLOYMENT_NAME_LABEL)
            .map(|n| format!("machineDeployment/{n}"))
            .or_else(|| label(POOL_NAME_LABEL).map(|n| format!("machinePool/{n}")));
        let role = if let Some(w) = worker {
            // The renderer emits a worker's bootstrap object, then its infrastructure.
            let n = seen.entry(w.clone()).or_default();
            *n += 1;
            if *n == 1 {
                format!("{w}/bootstrap")
            } else {
                format!("{w}/infrastructure")
            }
        } else {
            let ann = |a: &str| {
                o.pointer("/metadata/annotations")
                    .and_then(|m| m.get(a))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let from_kind = ann(CLONED_FROM_GROUPKIND)
                .split('.')
                .next()
                .unwrap_or_default();
            let from_name = ann(CLONED_FROM_NAME);
            if is(&class.infrastructure, from_kind, from_name) {
                "infrastructureCluster".to_string()
            } else if is(&class.control_plane, from_kind, from_name) {
                "controlPlane".to_string()
            } else if class
                .control_plane_machine_infrastructure
                .as_ref()
                .is_some_and(|r| is(r, from_kind, from_name))
            {
                "controlPlane/machineInfrastructure".to_string()
            } else {
                format!("other/{from_kind}/{from_name}")
            }
        };
        out.push((role, o));
    }
    Ok(out)
}

fn kind_name(o: &Value) -> (String, String) {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (s("/kind"), s("/metadata/name"))
}

/// The spec and the labels/annotations differences of one object.
fn object_diff(old: &Value, new: &Value) -> (Vec<FieldChange>, Vec<FieldChange>) {
    let spec = diff::diff("spec", old.get("spec"), new.get("spec"));
    let mut meta = diff::diff(
        "metadata.labels",
        old.pointer("/metadata/labels"),
        new.pointer("/metadata/labels"),
    );
    meta.extend(diff::diff(
        "metadata.annotations",
        old.pointer("/metadata/annotations"),
        new.pointer("/metadata/annotations"),
    ));
    (spec, meta)
}

/// The paths by which each role differs between `from` and `to`.
fn changed_paths(from: &Rendered, to: &Rendered) -> BTreeMap<String, BTreeSet<String>> {
    let old: BTreeMap<&str, &Value> = from.iter().map(|(r, o)| (r.as_str(), o)).collect();
    let mut out = BTreeMap::new();
    for (role, o) in to {
        if let Some(prev) = old.get(role.as_str()) {
            let (s, m) = object_diff(prev, o);
            out.insert(
                role.clone(),
                s.into_iter().chain(m).map(|c| c.path).collect(),
            );
        }
    }
    out
}

/// One input that differs between the sides, and how to undo it on the new side.
#[derive(Debug, Clone)]
enum Cause {
    Version {
        old: String,
        new: String,
    },
    /// A variable of the Cluster (`scope` None), of the control plane or of a worker.
    Variable {
        scope: Scope,
        name: String,
        old: Option<Value>,
        new: Option<Value>,
    },
    ClassPatch {
        name: String,
        old: Option<ClassPatch>,
        /// The new patch, as [`describe_patch`] names it.
        new: String,
    },
    Template {
        kind: String,
        name: String,
        old: Option<Value>,
    },
    /// The rest of the class (variable definitions, references, metadata).
    ClassOther {
        class: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Cluster,
    ControlPlane,
    Deployment(String),
    Pool(String),
}

fn short(v: &Option<Value>) -> String {
    match v {
        None => "(unset)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            let s = v.to_string();
            if s.len() > 80 {
                format!("{}…", s.chars().take(80).collect::<String>())
            } else {
                s
            }
        }
    }
}

fn describe_patch(p: &ClassPatch) -> String {
    match p {
        ClassPatch::Inline { .. } => "inline".into(),
        ClassPatch::External(e) => e.generate.clone().unwrap_or_else(|| "external".into()),
    }
}

impl Cause {
    fn describe(&self, class: &str) -> String {
        match self {
            Cause::Version { old, new } => format!("version {old} → {new}"),
            Cause::Variable {
                scope,
                name,
                old,
                new,
            } => {
                let at = match scope {
                    Scope::Cluster => String::new(),
                    Scope::ControlPlane => " (control plane override)".into(),
                    Scope::Deployment(d) => format!(" (MachineDeployment {d} override)"),
                    Scope::Pool(p) => format!(" (MachinePool {p} override)"),
                };
                let changes = match (old, new) {
                    (Some(o), Some(n)) => diff::diff("", Some(o), Some(n)),
                    _ => vec![],
                };
                if !changes.is_empty() && changes.len() <= 3 && !changes[0].path.is_empty() {
                    let parts: Vec<String> = changes
                        .iter()
                        .map(|c| {
                            format!("{name}.{}: {} → {}", c.path, short(&c.old), short(&c.new))
                        })
                        .collect();
                    format!("variable {}{at}", parts.join(", "))
                } else {
                    format!("variable {name}{at}: {} → {}", short(old), short(new))
                }
            }
            Cause::ClassPatch { name, old, new } => match old {
                None => format!("ClusterClass {class}: patch {name} added"),
                Some(p) if describe_patch(p) != *new => format!(
                    "ClusterClass {class}: patch {name} {} → {new}",
                    describe_patch(p)
                ),
                Some(_) => format!("ClusterClass {class}: patch {name} ({new}) changed"),
            },
            Cause::Template { kind, name, .. } => format!("template {kind} {name} edited"),
            Cause::ClassOther { class } => format!("ClusterClass {class}: other changes"),
        }
    }

    /// `to` with this one change undone from `from`.
    fn revert(&self, to: &Inputs, from: &Inputs) -> Inputs {
        let mut out = to.clone();
        match self {
            Cause::Version { old, .. } => out.cluster.version = old.clone(),
            Cause::Variable {
                scope, name, old, ..
            } => {
                let list: Option<&mut Vec<Variable>> = match scope {
                    Scope::Cluster => Some(&mut out.cluster.variables),
                    Scope::ControlPlane => Some(&mut out.cluster.control_plane_overrides),
                    Scope::Deployment(d) => out
                        .cluster
                        .machine_deployments
                        .iter_mut()
                        .find(|m| &m.name == d)
                        .map(|m| &mut m.overrides),
                    Scope::Pool(p) => out
                        .cluster
                        .machine_pools
                        .iter_mut()
                        .find(|m| &m.name == p)
                        .map(|m| &mut m.overrides),
                };
                if let Some(list) = list {
                    set_variable(list, name, old.clone());
                }
            }
            Cause::ClassPatch { name, old, .. } => {
                let at = out.class.patches.iter().position(|p| p.name() == name);
                match (at, old) {
                    (Some(i), Some(p)) => out.class.patches[i] = p.clone(),
                    (Some(i), None) => {
                        out.class.patches.remove(i);
                    }
                    (None, Some(p)) => out.class.patches.push(p.clone()),
                    (None, None) => {}
                }
            }
            Cause::Template { kind, name, old } => {
                out.templates.set(kind, name, old.clone());
            }
            Cause::ClassOther { .. } => {
                let patches = std::mem::take(&mut out.class.patches);
                out.class = from.class.clone();
                out.class.patches = patches;
            }
        }
        out
    }
}

fn set_variable(list: &mut Vec<Variable>, name: &str, value: Option<Value>) {
    let at = list.iter().position(|v| v.name == name);
    match (at, value) {
        (Some(i), Some(v)) => list[i].value = v,
        (Some(i), None) => {
            list.remove(i);
        }
        (None, Some(v)) => list.push(Variable {
            name: name.into(),
            value: v,
        }),
        (None, None) => {}
    }
}

fn variable_causes(scope: Scope, old: &[Variable], new: &[Variable], out: &mut Vec<Cause>) {
    let o: BTreeMap<&str, &Value> = old.iter().map(|v| (v.name.as_str(), &v.value)).collect();
    let n: BTreeMap<&str, &Value> = new.iter().map(|v| (v.name.as_str(), &v.value)).collect();
    let names: BTreeSet<&str> = o.keys().chain(n.keys()).copied().collect();
    for name in names {
        let (a, b) = (o.get(name).copied(), n.get(name).copied());
        if a != b {
            out.push(Cause::Variable {
                scope: scope.clone(),
                name: name.into(),
                old: a.cloned(),
                new: b.cloned(),
            });
        }
    }
}

/// Every input of the Cluster that differs between the sides.
fn causes(from: &Inputs, to: &Inputs) -> Vec<Cause> {
    let mut out = Vec::new();
    let (a, b) = (&from.cluster, &to.cluster);
    if a.version != b.version {
        out.push(Cause::Version {
            old: a.version.clone(),
            new: b.version.clone(),
        });
    }
    variable_causes(Scope::Cluster, &a.variables, &b.variables, &mut out);
    variable_causes(
        Scope::ControlPlane,
        &a.control_plane_overrides,
        &b.control_plane_overrides,
        &mut out,
    );
    for md in &b.machine_deployments {
        if let Some(prev) = a.machine_deployments.iter().find(|m| m.name == md.name) {
            variable_causes(
                Scope::Deployment(md.name.clone()),
                &prev.overrides,
                &md.overrides,
                &mut out,
            );
        }
    }
    for mp in &b.machine_pools {
        if let Some(prev) = a.machine_pools.iter().find(|m| m.name == mp.name) {
            variable_causes(
                Scope::Pool(mp.name.clone()),
                &prev.overrides,
                &mp.overrides,
                &mut out,
            );
        }
    }
    let (ca, cb) = (&from.class, &to.class);
    if ca != cb {
        let names: BTreeSet<&str> = ca
            .patches
            .iter()
            .chain(&cb.patches)
            .map(ClassPatch::name)
            .collect();
        for name in names {
            let old = ca.patches.iter().find(|p| p.name() == name);
            let new = cb.patches.iter().find(|p| p.name() == name);
            if old != new && new.is_some() {
                out.push(Cause::ClassPatch {
                    name: name.into(),
                    old: old.cloned(),
                    new: new.map(describe_patch).unwrap_or_default(),
                });
            }
        }
        let mut rest = cb.clone();
        rest.patches = ca.patches.clone();
        if &rest != ca {
            out.push(Cause::ClassOther {
                class: cb.name.clone(),
            });
        }
    }
    for r in class_refs(cb) {
        let old = from.templates.raw(&r.kind, &r.name);
        let new = to.templates.raw(&r.kind, &r.name);
        if new.is_some() && old != new {
            out.push(Cause::Template {
                kind: r.kind.clone(),
                name: r.name.clone(),
                old: old.cloned(),
            });
        }
    }
    out
}

/// Whether two sides would render alike: the same Cluster, class and referenced templates.
fn same_inputs(a: &Inputs, b: &Inputs) -> bool {
    a.capi == b.capi
        && a.cluster == b.cluster
        && a.class == b.class
        && class_refs(&b.class)
            .iter()
            .all(|r| a.templates.raw(&r.kind, &r.name) == b.templates.raw(&r.kind, &r.name))
}

fn class_refs(c: &ClusterClass) -> Vec<&TemplateRef> {
    let mut refs = vec![&c.infrastructure, &c.control_plane];
    refs.extend(c.control_plane_machine_infrastructure.as_ref());
    for md in &c.machine_deployments {
        refs.push(&md.bootstrap);
        refs.push(&md.infrastructure);
    }
    for mp in &c.machine_pools {
        refs.push(&mp.bootstrap);
        refs.push(&mp.infrastructure);
    }
    refs.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    refs.dedup_by(|a, b| a.kind == b.kind && a.name == b.name);
    refs
}

/// Counterfactual renders are one per cause: past this many, causes are listed but
/// not attributed to fields.
const MAX_ATTRIBUTED_CAUSES: usize = 16;

fn plan_cluster(
    key: &str,
    from: Option<Result<Inputs, String>>,
    to: Option<Result<Inputs, String>>,
    engine: &dyn PatchEngine,
    rules: &Rules,
) -> ClusterPlan {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    // Both sides as CAPI stores them: a live Cluster carries its variables' defaults
    // and its UID, the files of a change usually neither.
    let defaulted = |side: Option<Result<Inputs, String>>| {
        side.map(|r| {
            r.map(|mut i| {
                if let Ok(c) = render::with_defaults(&i, engine) {
                    i.cluster = c;
                }
                i
            })
        })
    };
    let from = defaulted(from);
    let mut to = defaulted(to);
    if let (Some(Ok(f)), Some(Ok(t))) = (&from, &mut to) {
        if t.cluster.uid.is_none() {
            t.cluster.uid.clone_from(&f.cluster.uid);
        }
    }
    let mut plan = ClusterPlan {
        namespace: namespace.into(),
        name: name.into(),
        class: String::new(),
        status: Status::Unchanged,
        rollout: false,
        problems: vec![],
        templates: vec![],
        rollouts: vec![],
        in_place: vec![],
        created: vec![],
        deleted: vec![],
        causes: vec![],
    };
    let to = match to {
        None => {
            plan.status = Status::Deleted;
            if let Some(Ok(f)) = &from {
                plan.class = f.class.name.clone();
            }
            return plan;
        }
        Some(Err(e)) => {
            plan.status = Status::Invalid;
            plan.problems.push(e);
            return plan;
        }
        Some(Ok(to)) => to,
    };
    plan.class = to.class.name.clone();
    let rendered_to = match render_roles(&to, engine) {
        Ok(r) => r,
        Err(e) => {
            plan.status = Status::Invalid;
            plan.problems = match e {
                RenderError::Invalid(p) => p,
                e => vec![e.to_string()],
            };
            return plan;
        }
    };
    // The rendering is a function of its inputs: the same inputs, the same objects
    // (the new side was rendered above, so a Cluster that no longer renders is
    // still reported).
    if let Some(Ok(f)) = &from {
        if same_inputs(f, &to) {
            return plan;
        }
    }
    let from = match from {
        None => {
            plan.status = Status::Created;
            for (role, o) in &rendered_to {
                let (kind, name) = kind_name(o);
                plan.created.push(Created {
                    kind: format!("{kind} ({role})"),
                    name,
                    replicas: None,
                });
            }
            return plan;
        }
        Some(Err(e)) => {
            plan.status = Status::Invalid;
            plan.problems.push(format!("the current side: {e}"));
            return plan;
        }
        Some(Ok(f)) => f,
    };
    let rendered_from = match render_roles(&from, engine) {
        Ok(r) => r,
        Err(e) => {
            plan.status = Status::Invalid;
            plan.problems
                .push(format!("the current side does not render: {e}"));
            return plan;
        }
    };

    let all_causes = causes(&from, &to);
    plan.causes = all_causes
        .iter()
        .map(|c| c.describe(&to.class.name))
        .collect();

    compare_objects(&mut plan, &rendered_from, &rendered_to, rules, &to);
    compare_topology(&mut plan, &from, &to, rules);

    // Attribution: undo one cause at a time; the fields that stop differing are its.
    if !plan.templates.is_empty() && all_causes.len() <= MAX_ATTRIBUTED_CAUSES {
        let base = changed_paths(&rendered_from, &rendered_to);
        for cause in &all_causes {
            let reverted = cause.revert(&to, &from);
            // Undoing the only difference gives the old inputs, hence the old objects:
            // every field is this cause's, no render needed.
            let now = if same_inputs(&from, &reverted) {
                None
            } else {
                let Ok(r) = render_roles(&reverted, engine) else {
                    continue;
                };
                Some(changed_paths(&rendered_from, &r))
            };
            let none = BTreeSet::new();
            let text = cause.describe(&to.class.name);
            for t in &mut plan.templates {
                let Some(before) = base.get(&t.role) else {
                    continue;
                };
                let after = match &now {
                    None => &none,
                    Some(now) => match now.get(&t.role) {
                        Some(a) => a,
                        None => continue,
                    },
                };
                let paths: Vec<String> = before.difference(after).cloned().collect();
                if !paths.is_empty() {
                    t.causes.push(Attribution {
                        cause: text.clone(),
                        paths,
                    });
                }
            }
        }
    }

    // The control plane first (it upgrades first), then workers by name.
    plan.rollouts.sort_by(|a, b| {
        (a.target != "controlPlane", &a.target, &a.name).cmp(&(
            b.target != "controlPlane",
            &b.target,
            &b.name,
        ))
    });
    plan.rollout = !plan.rollouts.is_empty();
    let changed = !(plan.templates.is_empty()
        && plan.rollouts.is_empty()
        && plan.in_place.is_empty()
        && plan.created.is_empty()
        && plan.deleted.is_empty());
    plan.status = if changed {
        Status::Changed
    } else {
        Status::Unchanged
    };
    plan
}

fn rollout_entry<'a>(
    plan: &'a mut ClusterPlan,
    target: &str,
    name: &str,
    replicas: Option<i64>,
) -> &'a mut Rollout {
    let at = plan
        .rollouts
        .iter()
        .position(|r| r.target == target && r.name == name);
    let i = match at {
        Some(i) => i,
        None => {
            plan.rollouts.push(Rollout {
                target: target.into(),
                name: name.into(),
                replicas,
                effect: Effect::Rollout,
                reasons: vec![],
            });
            plan.rollouts.len() - 1
        }
    };
    &mut plan.rollouts[i]
}

fn add_reason(
    plan: &mut ClusterPlan,
    target: &str,
    name: &str,
    replicas: Option<i64>,
    effect: Effect,
    reason: String,
) {
    let r = rollout_entry(plan, target, name, replicas);
    // An upgrade that also changes other things is still reported as an upgrade.
    if effect == Effect::Upgrade {
        r.effect = Effect::Upgrade;
    }
    if !r.reasons.contains(&reason) {
        r.reasons.push(reason);
    }
}

fn worker_replicas(to: &Inputs, role: &str) -> (String, String, Option<i64>) {
    let mut parts = role.splitn(3, '/');
    let target = parts.next().unwrap_or_default().to_string();
    let name = parts.next().unwrap_or_default().to_string();
    let list = if target == "machinePool" {
        &to.cluster.machine_pools
    } else {
        &to.cluster.machine_deployments
    };
    let replicas = list
        .iter()
        .find(|m| m.name == name)
        .and_then(|m| m.replicas);
    (target, name, replicas)
}

/// The rendered objects: rotations, in-place patches and what they roll.
fn compare_objects(
    plan: &mut ClusterPlan,
    from: &Rendered,
    to: &Rendered,
    rules: &Rules,
    inputs: &Inputs,
) {
    let old: BTreeMap<&str, &Value> = from.iter().map(|(r, o)| (r.as_str(), o)).collect();
    let new_roles: BTreeSet<&str> = to.iter().map(|(r, _)| r.as_str()).collect();
    let cp_replicas = inputs.cluster.control_plane_replicas;
    for (role, o) in to {
        let Some(prev) = old.get(role.as_str()) else {
            // A new worker's objects: reported as the worker being created.
            continue;
        };
        let (spec, meta) = object_diff(prev, o);
        if spec.is_empty() && meta.is_empty() {
            continue;
        }
        let (kind, name) = kind_name(o);
        let template_role =
            role == "controlPlane/machineInfrastructure" || role.starts_with("machineDeployment/");
        let action = match (template_role, spec.is_empty()) {
            (true, false) => Action::Rotate,
            (true, true) => Action::PatchMetadata,
            (false, _) => Action::Patch,
        };
        match role.as_str() {
            "controlPlane/machineInfrastructure" if action == Action::Rotate => add_reason(
                plan,
                "controlPlane",
                "",
                cp_replicas,
                Effect::Rollout,
                format!("{kind} rotated"),
            ),
            "controlPlane" => {
                for c in spec.iter().chain(&meta) {
                    let effect = if kind == "KubeadmControlPlane" {
                        rules.kubeadm_control_plane_field(&c.path)
                    } else if c.path == "spec.replicas" {
                        Effect::Scale
                    } else if c.path == "spec.version" {
                        Effect::Upgrade
                    } else if c.path.starts_with("metadata.") {
                        Effect::InPlace
                    } else {
                        // Another provider's control plane: assume its machines roll.
                        Effect::Rollout
                    };
                    match effect {
                        Effect::Rollout | Effect::Upgrade => {
                            let reason = if effect == Effect::Upgrade {
                                format!("version {} → {}", short(&c.old), short(&c.new))
                            } else {
                                format!("{kind} {}", top_path(&c.path))
                            };
                            add_reason(plan, "controlPlane", "", cp_replicas, effect, reason)
                        }
                        _ => plan.in_place.push(InPlace {
                            target: "controlPlane".into(),
                            name: String::new(),
                            path: c.path.clone(),
                            old: c.old.clone(),
                            new: c.new.clone(),
                            effect,
                        }),
                    }
                }
            }
            r if r.starts_with("machineDeployment/") && action == Action::Rotate => {
                let (target, name, replicas) = worker_replicas(inputs, r);
                add_reason(
                    plan,
                    &target,
                    &name,
                    replicas,
                    Effect::Rollout,
                    format!("{kind} rotated"),
                );
            }
            r if r.starts_with("machinePool/") && !spec.is_empty() => {
                let (target, name, replicas) = worker_replicas(inputs, r);
                add_reason(
                    plan,
                    &target,
                    &name,
                    replicas,
                    Effect::Rollout,
                    format!("{kind} changed (the infrastructure provider replaces instances)"),
                );
            }
            _ => {}
        }
        let mut changes = spec;
        changes.extend(meta);
        plan.templates.push(ObjectChange {
            role: role.clone(),
            kind,
            name,
            action,
            changes,
            causes: vec![],
        });
    }
    for (role, o) in from {
        if !new_roles.contains(role.as_str()) && role.starts_with("other/") {
            let (kind, name) = kind_name(o);
            plan.deleted.push(Created {
                kind,
                name,
                replicas: None,
            });
        }
    }
}

/// The first two segments of a path, for a short reason.
fn top_path(path: &str) -> String {
    let segs: Vec<&str> = path.splitn(4, '.').collect();
    segs.iter().take(3).copied().collect::<Vec<_>>().join(".")
}

fn topology_workers<'a>(cluster: &'a Value, list: &str) -> BTreeMap<String, &'a Value> {
    cluster
        .pointer(&format!("/spec/topology/workers/{list}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|w| Some((w.get("name")?.as_str()?.to_string(), w)))
                .collect()
        })
        .unwrap_or_default()
}

/// The Cluster's topology itself: workers added or removed, replicas, labels and the
/// other fields CAPI writes to a MachineDeployment, the version.
fn compare_topology(plan: &mut ClusterPlan, from: &Inputs, to: &Inputs, rules: &Rules) {
    let (a, b) = (cluster_value(&from.cluster), cluster_value(&to.cluster));
    for (list, kind, target) in [
        (
            "machineDeployments",
            "MachineDeployment",
            "machineDeployment",
        ),
        ("machinePools", "MachinePool", "machinePool"),
    ] {
        let old = topology_workers(&a, list);
        let new = topology_workers(&b, list);
        for (name, w) in &new {
            let replicas = w.get("replicas").and_then(Value::as_i64);
            let Some(prev) = old.get(name) else {
                plan.created.push(Created {
                    kind: kind.into(),
                    name: name.clone(),
                    replicas,
                });
                continue;
            };
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    // Variables act through the templates, compared above.
                    o.remove("variables");
                    o.remove("name");
                    o.remove("class");
                }
                v
            };
            for c in diff::diff("", Some(&strip(prev)), Some(&strip(w))) {
                match rules.machine_deployment_field(&c.path) {
                    Effect::Rollout => add_reason(
                        plan,
                        target,
                        name,
                        replicas,
                        Effect::Rollout,
                        format!("{} {} → {}", c.path, short(&c.old), short(&c.new)),
                    ),
                    effect => plan.in_place.push(InPlace {
                        target: target.into(),
                        name: name.clone(),
                        path: c.path,
                        old: c.old,
                        new: c.new,
                        effect,
                    }),
                }
            }
            if from.cluster.version != to.cluster.version {
                add_reason(
                    plan,
                    target,
                    name,
                    replicas,
                    Effect::Upgrade,
                    format!(
                        "version {} → {} (after the control plane)",
                        from.cluster.version, to.cluster.version
                    ),
                );
            }
        }
        for (name, w) in &old {
            if !new.contains_key(name) {
                plan.deleted.push(Created {
                    kind: kind.into(),
                    name: name.clone(),
                    replicas: w.get("replicas").and_then(Value::as_i64),
                });
            }
        }
    }
}

/// The topology part of a parsed Cluster, in the shape the diff walks.
fn cluster_value(c: &Cluster) -> Value {
    let worker = |w: &crate::engine::clusterclass::MachineDeploymentTopology| {
        let mut o = json!({"name": w.name, "class": w.class});
        if let Some(r) = w.replicas {
            o["replicas"] = json!(r);
        }
        if !w.metadata.labels.is_empty() {
            o["metadata"]["labels"] = json!(w.metadata.labels);
        }
        if !w.metadata.annotations.is_empty() {
            o["metadata"]["annotations"] = json!(w.metadata.annotations);
        }
        for (k, v) in &w.extra {
            o[k] = v.clone();
        }
        o
    };
    json!({"spec": {"topology": {"workers": {
        "machineDeployments": c.machine_deployments.iter().map(worker).collect::<Vec<_>>(),
        "machinePools": c.machine_pools.iter().map(worker).collect::<Vec<_>>(),
    }}}})
}

#[cfg(test)]
mod tests;

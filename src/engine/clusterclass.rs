//! The parts of a ClusterClass and a Cluster that decide what the topology controller
//! creates, read from either API version: `cluster.x-k8s.io/v1beta1` (CAPI 1.10) and
//! `cluster.x-k8s.io/v1beta2` (CAPI 1.11 and later).
//!
//! Only what rendering needs is read; everything else in the objects is ignored, as
//! the API server would have checked it already.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::sdk::common::{Settings, Variable};

pub const GROUP: &str = "cluster.x-k8s.io";

/// A problem in an input object: which object, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {path}: {problem}")]
pub struct ParseError {
    pub object: String,
    pub path: String,
    pub problem: String,
}

/// A reference from the ClusterClass to a template, by kind and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// Where the reference sits in the ClusterClass, for messages.
    pub field: String,
}

/// Labels and annotations, as `metadata` blocks in the class and the topology carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A worker class: `workers.machineDeployments[]` or `workers.machinePools[]` of a
/// ClusterClass (both have the same shape in both API versions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDeploymentClass {
    pub class: String,
    /// `naming.template` (v1beta2) / `namingStrategy.template` (v1beta1).
    pub naming: Option<String>,
    pub metadata: Meta,
    pub bootstrap: TemplateRef,
    pub infrastructure: TemplateRef,
}

/// `workers.machinePools[]`: read exactly like a MachineDeployment class.
pub type MachinePoolClass = MachineDeploymentClass;

/// One entry of `spec.patches`.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassPatch {
    /// `definitions`: the raw patch, loaded with the inline variables as a pack.
    Inline {
        name: String,
        raw: Value,
    },
    External(ExternalPatch),
}

impl ClassPatch {
    pub fn name(&self) -> &str {
        match self {
            ClassPatch::Inline { name, .. } => name,
            ClassPatch::External(e) => &e.name,
        }
    }
}

/// `external` references are `<handler>.<extensionconfig>`; the handler part is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalPatch {
    pub name: String,
    pub generate: Option<String>,
    pub validate: Option<String>,
    pub discover: Option<String>,
    pub settings: Settings,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterClass {
    pub api_version: String,
    pub name: String,
    pub namespace: String,
    pub infrastructure: TemplateRef,
    pub control_plane: TemplateRef,
    pub control_plane_metadata: Meta,
    pub control_plane_machine_infrastructure: Option<TemplateRef>,
    /// Naming templates of the InfrastructureCluster and the ControlPlane, if set.
    pub infrastructure_naming: Option<String>,
    pub control_plane_naming: Option<String>,
    pub machine_deployments: Vec<MachineDeploymentClass>,
    pub machine_pools: Vec<MachinePoolClass>,
    /// `spec.variables` as written (inline definitions).
    pub variables: Vec<Value>,
    pub patches: Vec<ClassPatch>,
}

/// One `spec.topology.workers.machineDeployments[]` or `.machinePools[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineDeploymentTopology {
    pub class: String,
    pub name: String,
    pub replicas: Option<i64>,
    pub metadata: Meta,
    pub overrides: Vec<Variable>,
    /// The entry's other fields as written (failureDomain, timeouts, strategy...):
    /// the renderer does not use them, `stackhook plan` compares them.
    pub extra: Map<String, Value>,
}

/// `spec.topology.workers.machinePools[]`: the same fields as a MachineDeployment's.
pub type MachinePoolTopology = MachineDeploymentTopology;

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub api_version: String,
    pub name: String,
    pub namespace: String,
    pub uid: Option<String>,
    pub class: String,
    pub class_namespace: String,
    pub version: String,
    pub control_plane_replicas: Option<i64>,
    pub control_plane_metadata: Meta,
    pub control_plane_overrides: Vec<Variable>,
    pub variables: Vec<Variable>,
    pub machine_deployments: Vec<MachineDeploymentTopology>,
    pub machine_pools: Vec<MachinePoolTopology>,
    /// `builtin.cluster.network`, already in the builtin shape (empty when unset).
    pub network: Map<String, Value>,
}

impl Cluster {
    /// Whether this is a v1beta2 Cluster, i.e. CAPI 1.11 or later.
    pub fn is_v1beta2(&self) -> bool {
        self.api_version == format!("{GROUP}/v1beta2")
    }
}

/// Reads fields of one object, naming it and the path in every error.
struct Reader<'a> {
    object: String,
    root: &'a Value,
}

impl<'a> Reader<'a> {
    fn err(&self, path: &str, problem: impl Into<String>) -> ParseError {
        ParseError {
            object: self.object.clone(),
            path: path.to_string(),
            problem: problem.into(),
        }
    }

    fn get(&self, path: &str) -> Option<&'a Value> {
        get_path(self.root, path)
    }

    fn string(&self, path: &str) -> Result<String, ParseError> {
        match self.get(path) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) | None | Some(Value::Null) => {
                Err(self.err(path, "required field is missing"))
            }
            Some(_) => Err(self.err(path, "must be a string")),
        }
    }

    fn opt_string(&self, path: &str) -> Result<Option<String>, ParseError> {
        match self.get(path) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.err(path, "must be a string")),
        }
    }

    fn list(&self, path: &str) -> Result<&'a [Value], ParseError> {
        match self.get(path) {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.err(path, "must be a list")),
        }
    }

    fn int(&self, path: &str) -> Result<Option<i64>, ParseError> {
        match self.get(path) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.err(path, "must be an integer")),
        }
    }

    fn meta(&self, path: &str) -> Result<Meta, ParseError> {
        let map = |p: String| -> Result<BTreeMap<String, String>, ParseError> {
            match self.get(&p) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        _ => Err(self.err(&format!("{p}.{k}"), "must be a string")),
                    })
                    .collect(),
                Some(_) => Err(self.err(&p, "must be a map of strings")),
            }
        };
        Ok(Meta {
            labels: map(format!("{path}.labels"))?,
            annotations: map(format!("{path}.annotations"))?,
        })
    }

    /// A template reference: `templateRef` (v1beta2) or `ref` (v1beta1) under `path`.
    fn template_ref(&self, path: &str, v1beta2: bool) -> Result<TemplateRef, ParseError> {
        let field = if v1beta2 {
            format!("{path}.templateRef")
        } else {
            format!("{path}.ref")
        };
        Ok(TemplateRef {
            api_version: self.string(&format!("{field}.apiVersion"))?,
            kind: self.string(&format!("{field}.kind"))?,
            name: self.string(&format!("{field}.name"))?,
            field,
        })
    }

    fn variables(&self, path: &str) -> Result<Vec<Variable>, ParseError> {
        self.list(path)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let name = v
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| self.err(&format!("{path}[{i}].name"), "required"))?;
                let value = v
                    .get("value")
                    .cloned()
                    .ok_or_else(|| self.err(&format!("{path}[{i}].value"), "required"))?;
                Ok(Variable {
                    name: name.to_string(),
                    value,
                })
            })
            .collect()
    }
}

/// `a.b.c` into nested objects.
pub fn get_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |cur, key| cur.get(key))
}

/// `(api version, is v1beta2)` of a `cluster.x-k8s.io` object of `kind`.
fn check_kind(v: &Value, kind: &str, object: &str) -> Result<(String, bool), ParseError> {
    let err = |path: &str, problem: String| ParseError {
        object: object.to_string(),
        path: path.to_string(),
        problem,
    };
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let got_kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if got_kind != kind {
        return Err(err("kind", format!("expected {kind}, found {got_kind:?}")));
    }
    match api_version
        .strip_prefix(GROUP)
        .and_then(|r| r.strip_prefix('/'))
    {
        Some("v1beta1") => Ok((api_version.to_string(), false)),
        Some("v1beta2") => Ok((api_version.to_string(), true)),
        _ => Err(err(
            "apiVersion",
            format!("expected {GROUP}/v1beta1 or {GROUP}/v1beta2, found {api_version:?}"),
        )),
    }
}

fn metadata_name(r: &Reader<'_>) -> Result<(String, String), ParseError> {
    let name = r.string("metadata.name")?;
    let namespace = r
        .opt_string("metadata.namespace")?
        .unwrap_or_else(|| "default".to_string());
    Ok((name, namespace))
}

/// The handler part of `<handler>.<extensionconfig>`.
pub fn handler_of(reference: &str) -> &str {
    reference.split('.').next().unwrap_or(reference)
}

/// The worker classes under `path` (`spec.workers.machineDeployments` or
/// `spec.workers.machinePools`): v1beta2 `bootstrap.templateRef`, `metadata` and
/// `naming`; v1beta1 `template.bootstrap.ref`, `template.metadata` and `namingStrategy`.
fn worker_classes(
    r: &Reader<'_>,
    path: &str,
    v1beta2: bool,
) -> Result<Vec<MachineDeploymentClass>, ParseError> {
    let mut out = Vec::new();
    for (i, w) in r.list(path)?.iter().enumerate() {
        let path = format!("{path}[{i}]");
        let wr = Reader {
            object: r.object.clone(),
            root: w,
        };
        let prefix = |e: ParseError| ParseError {
            path: format!("{path}.{}", e.path),
            ..e
        };
        let (bootstrap, infrastructure, metadata) = if v1beta2 {
            (
                wr.template_ref("bootstrap", true).map_err(prefix)?,
                wr.template_ref("infrastructure", true).map_err(prefix)?,
                wr.meta("metadata").map_err(prefix)?,
            )
        } else {
            (
                wr.template_ref("template.bootstrap", false)
                    .map_err(prefix)?,
                wr.template_ref("template.infrastructure", false)
                    .map_err(prefix)?,
                wr.meta("template.metadata").map_err(prefix)?,
            )
        };
        let fix = |mut t: TemplateRef| {
            t.field = format!("{path}.{}", t.field);
            t
        };
        out.push(MachineDeploymentClass {
            class: wr.string("class").map_err(prefix)?,
            naming: wr
                .opt_string(if v1beta2 {
                    "naming.template"
                } else {
                    "namingStrategy.template"
                })
                .map_err(prefix)?,
            metadata,
            bootstrap: fix(bootstrap),
            infrastructure: fix(infrastructure),
        });
    }
    Ok(out)
}

/// The worker topologies under `path` (`...workers.machineDeployments` or
/// `...workers.machinePools`); the same fields in both API versions.
fn worker_topologies(
    r: &Reader<'_>,
    path: &str,
) -> Result<Vec<MachineDeploymentTopology>, ParseError> {
    let mut out = Vec::new();
    for (i, w) in r.list(path)?.iter().enumerate() {
        let path = format!("{path}[{i}]");
        let wr = Reader {
            object: r.object.clone(),
            root: w,
        };
        let prefix = |e: ParseError| ParseError {
            path: format!("{path}.{}", e.path),
            ..e
        };
        out.push(MachineDeploymentTopology {
            class: wr.string("class").map_err(prefix)?,
            name: wr.string("name").map_err(prefix)?,
            replicas: wr.int("replicas").map_err(prefix)?,
            metadata: wr.meta("metadata").map_err(prefix)?,
            overrides: wr.variables("variables.overrides").map_err(prefix)?,
            extra: w
                .as_object()
                .map(|o| {
                    o.iter()
                        .filter(|(k, _)| {
                            !matches!(
                                k.as_str(),
                                "class" | "name" | "replicas" | "metadata" | "variables"
                            )
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

impl ClusterClass {
    pub fn from_value(v: &Value) -> Result<ClusterClass, ParseError> {
        let (api_version, v1beta2) = check_kind(v, "ClusterClass", "ClusterClass")?;
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let r = Reader {
            object: format!("ClusterClass {name}"),
            root: v,
        };
        let (name, namespace) = metadata_name(&r)?;
        let infrastructure = r.template_ref("spec.infrastructure", v1beta2)?;
        let control_plane = r.template_ref("spec.controlPlane", v1beta2)?;
        let control_plane_machine_infrastructure = match r
            .get("spec.controlPlane.machineInfrastructure")
        {
            None | Some(Value::Null) => None,
            Some(_) => Some(r.template_ref("spec.controlPlane.machineInfrastructure", v1beta2)?),
        };
        let machine_deployments = worker_classes(&r, "spec.workers.machineDeployments", v1beta2)?;
        let machine_pools = worker_classes(&r, "spec.workers.machinePools", v1beta2)?;
        let mut patches = Vec::new();
        for (i, p) in r.list("spec.patches")?.iter().enumerate() {
            let path = format!("spec.patches[{i}]");
            let pname = p
                .get("name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| r.err(&format!("{path}.name"), "required field is missing"))?
                .to_string();
            let has_defs = p.get("definitions").is_some_and(|d| !d.is_null());
            match (has_defs, p.get("external").filter(|e| !e.is_null())) {
                (true, None) => patches.push(ClassPatch::Inline {
                    name: pname,
                    raw: p.clone(),
                }),
                (false, Some(ext)) => {
                    let er = Reader {
                        object: r.object.clone(),
                        root: ext,
                    };
                    let pick = |names: &[&str]| -> Result<Option<String>, ParseError> {
                        for n in names {
                            if let Some(s) = er.opt_string(n).map_err(|e| ParseError {
                                path: format!("{path}.external.{}", e.path),
                                ..e
                            })? {
                                return Ok(Some(handler_of(&s).to_string()));
                            }
                        }
                        Ok(None)
                    };
                    // Both spellings: CAPI 1.11+ and the 1.10 (v1beta1) names.
                    let generate = pick(&["generatePatchesExtension", "generateExtension"])?;
                    let validate = pick(&["validateTopologyExtension", "validateExtension"])?;
                    let discover = pick(&["discoverVariablesExtension"])?;
                    if generate.is_none() && validate.is_none() {
                        return Err(r.err(
                            &format!("{path}.external"),
                            "needs generatePatchesExtension or validateTopologyExtension",
                        ));
                    }
                    let settings = match ext.get("settings") {
                        None | Some(Value::Null) => Settings::new(),
                        Some(s) => serde_json::from_value(s.clone()).map_err(|e| {
                            r.err(&format!("{path}.external.settings"), e.to_string())
                        })?,
                    };
                    patches.push(ClassPatch::External(ExternalPatch {
                        name: pname,
                        generate,
                        validate,
                        discover,
                        settings,
                    }));
                }
                _ => {
                    return Err(r.err(
                        &path,
                        "a patch needs exactly one of definitions and external",
                    ))
                }
            }
        }
        Ok(ClusterClass {
            api_version,
            name,
            namespace,
            infrastructure,
            control_plane,
            control_plane_metadata: r.meta("spec.controlPlane.metadata")?,
            control_plane_machine_infrastructure,
            infrastructure_naming: r.opt_string(if v1beta2 {
                "spec.infrastructure.naming.template"
            } else {
                "spec.infrastructureNamingStrategy.template"
            })?,
            control_plane_naming: r.opt_string(if v1beta2 {
                "spec.controlPlane.naming.template"
            } else {
                "spec.controlPlane.namingStrategy.template"
            })?,
            machine_deployments,
            machine_pools,
            variables: r.list("spec.variables")?.to_vec(),
            patches,
        })
    }
}

impl Cluster {
    pub fn from_value(v: &Value) -> Result<Cluster, ParseError> {
        let (api_version, v1beta2) = check_kind(v, "Cluster", "Cluster")?;
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let r = Reader {
            object: format!("Cluster {name}"),
            root: v,
        };
        let (name, namespace) = metadata_name(&r)?;
        if r.get("spec.topology").is_none() {
            return Err(r.err("spec.topology", "the Cluster has no managed topology"));
        }
        let (class, class_namespace) = if v1beta2 {
            (
                r.string("spec.topology.classRef.name")?,
                r.opt_string("spec.topology.classRef.namespace")?,
            )
        } else {
            (
                r.string("spec.topology.class")?,
                r.opt_string("spec.topology.classNamespace")?,
            )
        };
        let machine_deployments =
            worker_topologies(&r, "spec.topology.workers.machineDeployments")?;
        let machine_pools = worker_topologies(&r, "spec.topology.workers.machinePools")?;
        let mut network = Map::new();
        if let Some(d) = r.opt_string("spec.clusterNetwork.serviceDomain")? {
            network.insert("serviceDomain".into(), Value::String(d));
        }
        for (key, path) in [
            ("services", "spec.clusterNetwork.services.cidrBlocks"),
            ("pods", "spec.clusterNetwork.pods.cidrBlocks"),
        ] {
            let blocks = r.list(path)?;
            if !blocks.is_empty() {
                network.insert(key.into(), Value::Array(blocks.to_vec()));
            }
        }
        Ok(Cluster {
            api_version,
            uid: r.opt_string("metadata.uid")?,
            class,
            class_namespace: class_namespace.unwrap_or_else(|| namespace.clone()),
            version: r.string("spec.topology.version")?,
            control_plane_replicas: r.int("spec.topology.controlPlane.replicas")?,
            control_plane_metadata: r.meta("spec.topology.controlPlane.metadata")?,
            control_plane_overrides: r
                .variables("spec.topology.controlPlane.variables.overrides")?,
            variables: r.variables("spec.topology.variables")?,
            machine_deployments,
            machine_pools,
            network,
            name,
            namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_api_versions_of_a_class_read_the_same() {
        let v1 = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "ClusterClass",
            "metadata": {"name": "cc", "namespace": "ns"},
            "spec": {"infrastructure": {"ref": {"apiVersion": "a/v1", "kind": "IT", "name": "i"}},
                     "controlPlane": {"ref": {"apiVersion": "c/v1", "kind": "CT", "name": "c"}},
                     "workers": {"machineDeployments": [{"class": "w", "template": {
                        "bootstrap": {"ref": {"apiVersion": "b/v1", "kind": "BT", "name": "b"}},
                        "infrastructure": {"ref": {"apiVersion": "a/v1", "kind": "MT", "name": "m"}}}}]},
                     "patches": [{"name": "x", "external": {"generateExtension": "h-generate-patches.ext",
                        "discoverVariablesExtension": "h-discover-variables.ext"}}]}});
        let v2 = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": {"name": "cc", "namespace": "ns"},
            "spec": {"infrastructure": {"templateRef": {"apiVersion": "a/v1", "kind": "IT", "name": "i"}},
                     "controlPlane": {"templateRef": {"apiVersion": "c/v1", "kind": "CT", "name": "c"}},
                     "workers": {"machineDeployments": [{"class": "w",
                        "bootstrap": {"templateRef": {"apiVersion": "b/v1", "kind": "BT", "name": "b"}},
                        "infrastructure": {"templateRef": {"apiVersion": "a/v1", "kind": "MT", "name": "m"}}}]},
                     "patches": [{"name": "x", "external": {"generatePatchesExtension": "h-generate-patches.ext",
                        "discoverVariablesExtension": "h-discover-variables.ext"}}]}});
        let a = ClusterClass::from_value(&v1).unwrap();
        let b = ClusterClass::from_value(&v2).unwrap();
        assert_eq!(a.machine_deployments[0].bootstrap.name, "b");
        assert_eq!(b.machine_deployments[0].bootstrap.name, "b");
        assert_eq!(a.patches, b.patches);
        let ClassPatch::External(e) = &a.patches[0] else {
            panic!("external expected")
        };
        assert_eq!(e.generate.as_deref(), Some("h-generate-patches"));
        assert_eq!(e.discover.as_deref(), Some("h-discover-variables"));
    }

    #[test]
    fn missing_fields_are_named_with_their_path() {
        let v = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": {"name": "cc"},
            "spec": {"infrastructure": {"templateRef": {"apiVersion": "a/v1", "kind": "IT"}}}});
        let e = ClusterClass::from_value(&v).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ClusterClass cc: spec.infrastructure.templateRef.name: required field is missing"
        );
        let c = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1"}, "spec": {"topology": {"classRef": {"name": "cc"}}}});
        let e = Cluster::from_value(&c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Cluster c1: spec.topology.version: required field is missing"
        );
    }
}

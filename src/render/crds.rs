//! Rendered objects checked against the `openAPIV3Schema` of their CRDs, the way the
//! API server checks a create with strict field validation (`kubectl apply
//! --validate=strict`): wrong types, missing required fields, enum, pattern and bounds
//! failures, and fields the schema does not declare, each with its field path.
//!
//! Built in are the OpenStack CRDs of `stackhook crds` and Cluster API's kubeadm CRDs
//! (`crds/`, copied from Cluster API v1.13.5); `--crds DIR` adds more. The schema of
//! the object's own apiVersion is used, and only served versions count.
//!
//! Kubernetes structural-schema rules followed here: `x-kubernetes-int-or-string`
//! takes an integer or a string, `x-kubernetes-preserve-unknown-fields` keeps undeclared
//! fields, `nullable` allows `null`, a `null` in a field that is not nullable is pruned
//! (not an error), `metadata` at the top is the API server's own ObjectMeta (not checked
//! here), and the top and embedded resources may carry `apiVersion`, `kind` and
//! `metadata` whether the schema lists them or not. Not
//! checked: `format`s and `x-kubernetes-validations` (CEL) rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use jsonschema::error::ValidationErrorKind;
use serde_json::{json, Map, Value};

use crate::sdk::clip::{clip, clip_json};

/// Cluster API's kubeadm CRDs, as released (see `crds/README.md`).
const CAPI_CRDS: &[(&str, &str)] = &[
    (
        "bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml",
        include_str!("crds/bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml"),
    ),
    (
        "bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
        include_str!("crds/bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml"),
    ),
    (
        "controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml",
        include_str!("crds/controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml"),
    ),
];

/// How many undeclared fields of one object are listed one by one.
const SHOWN_FIELDS: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("{file}: {problem}")]
    Read { file: String, problem: String },
    #[error("generating the OpenStack CRDs: {0}")]
    Ours(String),
}

/// What the CRDs known to one validation say, by group, kind and served version.
#[derive(Debug, Clone, Default)]
pub struct Schemas {
    /// `(group, kind)` → served version → `openAPIV3Schema`.
    by_kind: BTreeMap<(String, String), BTreeMap<String, Arc<Value>>>,
}

/// The outcome of checking one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Every problem as `<field path>: <message>`; empty when the object fits.
    Checked(Vec<String>),
    /// No CRD of this group and kind is known.
    UnknownKind,
}

impl Schemas {
    /// No CRDs at all.
    pub fn empty() -> Schemas {
        Schemas::default()
    }

    /// The OpenStack CRDs this binary serves and Cluster API's kubeadm CRDs. Parsed once
    /// per process: they are large and never change.
    pub fn built_in() -> Result<Schemas, CrdError> {
        static BUILT_IN: OnceLock<Result<Schemas, String>> = OnceLock::new();
        let r = BUILT_IN.get_or_init(|| {
            let mut s = Schemas::empty();
            let ours = crate::infra::api::try_crds_yaml().map_err(|e| e.to_string())?;
            s.add_yaml("stackhook crds", &ours)
                .map_err(|e| e.to_string())?;
            for (file, text) in CAPI_CRDS {
                s.add_yaml(file, text).map_err(|e| e.to_string())?;
            }
            Ok(s)
        });
        r.clone().map_err(CrdError::Ours)
    }

    /// Every CustomResourceDefinition of every `*.yaml`/`*.yml` file of `dir`; other
    /// documents are skipped. A CRD for a kind already known replaces it.
    pub fn add_dir(&mut self, dir: &Path) -> Result<(), CrdError> {
        let read = |file: &Path, problem: String| CrdError::Read {
            file: file.display().to_string(),
            problem,
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| read(dir, e.to_string()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| read(&f, e.to_string()))?;
            self.add_yaml(&f.display().to_string(), &text)?;
        }
        Ok(())
    }

    /// The CRDs of a YAML stream; `source` names it in errors.
    pub fn add_yaml(&mut self, source: &str, text: &str) -> Result<(), CrdError> {
        let err = |problem: String| CrdError::Read {
            file: source.to_string(),
            problem,
        };
        for doc in super::yaml_documents(text).map_err(err)? {
            if doc.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            let group = doc.pointer("/spec/group").and_then(Value::as_str);
            let kind = doc.pointer("/spec/names/kind").and_then(Value::as_str);
            let (Some(group), Some(kind)) = (group, kind) else {
                return Err(err(format!(
                    "CRD {name}: spec.group and spec.names.kind are required"
                )));
            };
            let mut versions = BTreeMap::new();
            let list = doc
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (i, v) in list.iter().enumerate() {
                if v.get("served") != Some(&Value::Bool(true)) {
                    continue;
                }
                let version = v.get("name").and_then(Value::as_str).ok_or_else(|| {
                    err(format!("CRD {name}: spec.versions[{i}].name is required"))
                })?;
                let schema = v.pointer("/schema/openAPIV3Schema").ok_or_else(|| {
                    err(format!(
                        "CRD {name}: spec.versions[{i}].schema.openAPIV3Schema is required"
                    ))
                })?;
                versions.insert(version.to_string(), Arc::new(schema.clone()));
            }
            self.by_kind
                .insert((group.to_string(), kind.to_string()), versions);
        }
        Ok(())
    }

    /// The object checked against its CRD's schema for its apiVersion.
    pub fn check(&self, object: &Value) -> Check {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let Some(versions) = self.by_kind.get(&(group.to_string(), kind.to_string())) else {
            return Check::UnknownKind;
        };
        let Some(schema) = versions.get(version) else {
            let served: Vec<&str> = versions.keys().map(String::as_str).collect();
            return Check::Checked(vec![format!(
                "apiVersion: {group}/{version} is not served by the {kind} CRD (served: {})",
                served.join(", ")
            )]);
        };
        Check::Checked(validate(schema, object))
    }
}

/// `object` against the structural `schema`, as `<field path>: <message>` lines.
fn validate(schema: &Value, object: &Value) -> Vec<String> {
    let mut value = object.clone();
    prune_nulls(schema, &mut value);
    let converted = to_json_schema(schema, true);
    let validator = match jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .should_validate_formats(false)
        .build(&converted)
    {
        Ok(v) => v,
        Err(e) => return vec![format!("the CRD's schema cannot be used: {e}")],
    };
    let mut out = BTreeSet::new();
    for e in validator.iter_errors(&value) {
        let path = pointer_to_path(&value, e.instance_path().as_str());
        if let ValidationErrorKind::AdditionalProperties { unexpected } = e.kind() {
            for (i, field) in unexpected.iter().enumerate() {
                if i == SHOWN_FIELDS {
                    out.insert(format!(
                        "{path}: and {} more fields not declared in the schema",
                        unexpected.len() - SHOWN_FIELDS
                    ));
                    break;
                }
                let at = join(&path, &clip(field));
                out.insert(format!(
                    "{at}: unknown field {:?}: not declared in the schema",
                    clip(field)
                ));
            }
            continue;
        }
        let message = e.masked_with(clip_json(e.instance())).to_string();
        out.insert(format!(
            "{}: {message}",
            if path.is_empty() { "(object)" } else { &path }
        ));
    }
    out.into_iter().collect()
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// Drops `null` fields whose schema is not `nullable`, as the API server prunes them
/// before it validates.
fn prune_nulls(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            m.retain(|k, v| {
                let s = props.and_then(|p| p.get(k)).or(additional);
                !(v.is_null() && s.is_some_and(|s| s.get("nullable") != Some(&Value::Bool(true))))
            });
            for (k, v) in m.iter_mut() {
                if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
                    prune_nulls(s, v);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for v in a {
                    prune_nulls(items, v);
                }
            }
        }
        _ => {}
    }
}

/// A structural schema as the JSON Schema draft 4 the validator reads. An object node
/// declares all its fields unless it preserves unknown ones; `root` is the CRD's top
/// node, whose `metadata` is ObjectMeta.
fn to_json_schema(s: &Value, root: bool) -> Value {
    let Some(obj) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in obj {
        let converted = match k.as_str() {
            "properties" => {
                let mut props = Map::new();
                for (name, p) in v.as_object().into_iter().flatten() {
                    let c = if root && name == "metadata" {
                        json!({"type": "object"})
                    } else {
                        to_json_schema(p, false)
                    };
                    props.insert(name.clone(), c);
                }
                Value::Object(props)
            }
            "items" | "not" => to_json_schema(v, false),
            "additionalProperties" if v.is_object() => to_json_schema(v, false),
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                v.as_array()
                    .map(|a| a.iter().map(|x| to_json_schema(x, false)).collect())
                    .unwrap_or_default(),
            ),
            // Everything else the validator reads is JSON Schema's own; these are not.
            "default" | "example" | "description" | "format" | "nullable" | "title"
            | "externalDocs" => continue,
            k if k.starts_with("x-kubernetes-") => continue,
            _ => v.clone(),
        };
        out.insert(k.clone(), converted);
    }
    let flag = |key: &str| obj.get(key) == Some(&Value::Bool(true));
    // The API server declares these itself at the top and in embedded resources.
    if root || flag("x-kubernetes-embedded-resource") {
        let props = out
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(props) = props {
            for (k, t) in [
                ("apiVersion", "string"),
                ("kind", "string"),
                ("metadata", "object"),
            ] {
                props.entry(k).or_insert_with(|| json!({ "type": t }));
            }
        }
    }
    let is_object =
        obj.get("type").and_then(Value::as_str) == Some("object") || obj.contains_key("properties");
    if is_object
        && !obj.contains_key("additionalProperties")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        out.insert("additionalProperties".into(), Value::Bool(false));
        // With `properties` present the validator names each undeclared field.
        out.entry("properties").or_insert_with(|| json!({}));
    }
    if flag("x-kubernetes-int-or-string") && !obj.contains_key("type") {
        out.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if flag("nullable") {
        if let Some(Value::String(t)) = out.get("type").cloned() {
            out.insert("type".into(), json!([t, "null"]));
        }
        // An enum must list null to take it, as the API server's does not.
        if let Some(Value::Array(e)) = out.get_mut("enum") {
            if !e.contains(&Value::Null) {
                e.push(Value::Null);
            }
        }
    }
    Value::Object(out)
}

/// `/a/0/b` → `a[0].b`, reading the value to tell list indexes from map keys.
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
            other => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&clip(&seg));
                cur = match other {
                    Some(Value::Object(m)) => m.get(&seg),
                    _ => None,
                };
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas() -> Schemas {
        let mut s = Schemas::empty();
        s.add_yaml(
            "test",
            r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget}
  versions:
  - name: v1
    served: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              port: {x-kubernetes-int-or-string: true}
              note: {type: string, nullable: true}
              mode: {type: string, enum: [a, b]}
              free: {type: object, x-kubernetes-preserve-unknown-fields: true}
              tags: {type: object, additionalProperties: {type: string}}
              empty: {type: object}
              items:
                type: array
                items: {type: object, properties: {name: {type: string}}}
  - name: v0
    served: false
    schema: {openAPIV3Schema: {type: object}}
"#,
        )
        .unwrap();
        s
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "labels": {"a": "b"}, "anything": 1}, "spec": spec})
    }

    #[test]
    fn fitting_objects_pass() {
        let s = schemas();
        let ok = widget(
            json!({"size": 2, "port": "http", "note": null, "mode": null,
            "free": {"x": {"y": 1}}, "tags": {"k": "v"}, "items": [{"name": "n"}]}),
        );
        assert_eq!(s.check(&ok), Check::Checked(vec![]));
        assert_eq!(
            s.check(&widget(json!({"size": 1, "port": 8080}))),
            Check::Checked(vec![])
        );
    }

    #[test]
    fn problems_carry_field_paths() {
        let s = schemas();
        let bad = widget(
            json!({"size": "three", "port": 1.5, "mode": "c", "bogus": 1,
            "tags": {"k": 5}, "empty": {"x": 1}, "items": [{"name": "n", "nam": "typo"}]}),
        );
        let Check::Checked(p) = s.check(&bad) else {
            panic!("the kind is known")
        };
        let paths: Vec<&str> = p.iter().map(|l| l.split(':').next().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "spec.bogus",
                "spec.empty.x",
                "spec.items[0].nam",
                "spec.mode",
                "spec.port",
                "spec.size",
                "spec.tags.k"
            ],
            "{p:#?}"
        );
        assert!(p.contains(&r#"spec.size: "three" is not of type "integer""#.to_string()));
        assert!(p.contains(
            &r#"spec.bogus: unknown field "bogus": not declared in the schema"#.to_string()
        ));
        let Check::Checked(p) = s.check(&widget(json!({}))) else {
            panic!()
        };
        assert_eq!(p, [r#"spec: "size" is a required property"#]);
    }

    #[test]
    fn versions_and_kinds() {
        let s = schemas();
        let mut w = widget(json!({"size": 1}));
        w["apiVersion"] = json!("example.com/v0");
        assert_eq!(
            s.check(&w),
            Check::Checked(vec![
                "apiVersion: example.com/v0 is not served by the Widget CRD (served: v1)".into()
            ])
        );
        w["kind"] = json!("Gadget");
        assert_eq!(s.check(&w), Check::UnknownKind);
    }

    #[test]
    fn built_in_crds_know_the_rendered_kinds() {
        let s = Schemas::built_in().unwrap();
        for (api, kind) in [
            (
                "controlplane.cluster.x-k8s.io/v1beta1",
                "KubeadmControlPlane",
            ),
            (
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlane",
            ),
            (
                "bootstrap.cluster.x-k8s.io/v1beta2",
                "KubeadmConfigTemplate",
            ),
            ("bootstrap.cluster.x-k8s.io/v1beta1", "KubeadmConfig"),
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackCluster",
            ),
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachineTemplate",
            ),
        ] {
            let o = json!({"apiVersion": api, "kind": kind, "metadata": {"name": "x"}});
            assert_ne!(s.check(&o), Check::UnknownKind, "{api} {kind}");
        }
    }
}

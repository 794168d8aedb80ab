//! Topology mutation hooks: GeneratePatches, ValidateTopology, DiscoverVariables.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::common::{Base64Bytes, PatchType, ResponseStatus, Settings, Variable};

/// Where a template sits in the topology; the engine's selectors read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HolderReference {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub field_path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesRequestItem {
    pub uid: String,
    pub holder_reference: HolderReference,
    pub object: Value,
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub variables: Vec<Variable>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesRequest {
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "super::common::null_as_default"
    )]
    pub settings: Settings,
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub variables: Vec<Variable>,
    pub items: Vec<GeneratePatchesRequestItem>,
}

/// A variable whose value is still the JSON text of the body.
#[derive(Debug, Clone, Deserialize)]
pub struct RawVariable<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow)]
    pub value: &'a RawValue,
}

/// A template's top-level fields, each value still JSON text, in body order (a
/// duplicate key is kept; the last one counts, as when the template is built).
///
/// Split at the top so that `apiVersion`, `kind` and `metadata`, which decide whether
/// a patch selects the template, are read without going over `spec` again.
#[derive(Debug, Clone, Default)]
pub struct RawObject<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> RawObject<'a> {
    /// The value of `key`: the last one, if the key is repeated.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The template as a tree.
    pub fn build(&self) -> Result<Value, serde_json::Error> {
        let mut m = serde_json::Map::new();
        for (k, v) in &self.0 {
            m.insert(k.to_string(), serde_json::from_str(v.get())?);
        }
        Ok(Value::Object(m))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawObject<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = RawObject<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<RawObject<'a>, M::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(4));
                while let Some(Key(k)) = m.next_key::<Key<'de>>()? {
                    out.push((k, m.next_value::<&'de RawValue>()?));
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A key borrowed from the body unless it holds an escape.
pub(crate) struct Key<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawGeneratePatchesItem<'a> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    pub holder_reference: HolderReference,
    #[serde(borrow)]
    pub object: RawObject<'a>,
    #[serde(borrow, default, deserialize_with = "super::common::null_as_default")]
    pub variables: Vec<RawVariable<'a>>,
}

/// A GeneratePatches request as CAPI's Go types hold it: each template
/// (`runtime.RawExtension`) and each variable value (`apiextensionsv1.JSON`) stays JSON
/// text, borrowed from the body, until a patch needs it as a tree.
///
/// A pack has ops for few of a Cluster's templates (the `openstack` pack: the six
/// OpenStack ones of twelve), and only those are read again: the parts their ops reach
/// are built, the rest is checked as building would check it. The engine reads every
/// body through this type, with or without its answer cache, so whether a value serde
/// cannot build (a number beyond `f64`, a lone surrogate escape) fails a call depends
/// on whether a patch needs it, never on how the server is configured.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawGeneratePatchesRequest<'a> {
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub settings: Settings,
    #[serde(borrow, default, deserialize_with = "super::common::null_as_default")]
    pub variables: Vec<RawVariable<'a>>,
    #[serde(borrow)]
    pub items: Vec<RawGeneratePatchesItem<'a>>,
}

impl RawGeneratePatchesRequest<'_> {
    /// `(namespace, name)` of the Cluster the request is for, when it says.
    pub fn cluster(&self) -> Option<(String, String)> {
        self.variables
            .iter()
            .find(|v| v.name == "builtin")
            .and_then(|b| builtin_cluster(b.value))
            .or_else(|| {
                self.items
                    .iter()
                    .map(|i| &i.holder_reference)
                    .find(|h| h.kind == "Cluster")
                    .map(|h| (h.namespace.clone(), h.name.clone()))
            })
    }
}

/// An object's `name` and `namespace`, whichever it has, read from JSON text.
#[derive(Deserialize)]
pub(crate) struct Named {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// `(namespace, name)` of `builtin.cluster` in a raw `builtin` value, read without
/// building the rest of it.
pub fn builtin_cluster(builtin: &RawValue) -> Option<(String, String)> {
    #[derive(Deserialize)]
    struct Builtin {
        cluster: Named,
    }
    let c = serde_json::from_str::<Builtin>(builtin.get()).ok()?.cluster;
    Some((c.namespace?, c.name?))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesResponseItem {
    pub uid: String,
    pub patch_type: PatchType,
    pub patch: Base64Bytes,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<GeneratePatchesResponseItem>,
}

impl GeneratePatchesResponse {
    /// A successful answer with no patches (yet).
    pub fn success() -> Self {
        GeneratePatchesResponse {
            api_version: super::API_VERSION.to_string(),
            kind: super::response_kind(super::Hook::GeneratePatches),
            status: ResponseStatus::Success,
            message: String::new(),
            items: vec![],
        }
    }
}

/// ValidateTopology items carry no `uid`: the objects are already fully patched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateTopologyRequestItem {
    pub holder_reference: HolderReference,
    pub object: Value,
    #[serde(default)]
    pub variables: Vec<Variable>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateTopologyRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
    #[serde(default)]
    pub variables: Vec<Variable>,
    pub items: Vec<ValidateTopologyRequestItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverVariablesRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: Settings,
}

/// Labels and annotations of a variable, for UIs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct VariableMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl VariableMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariableSchema {
    #[serde(rename = "openAPIV3Schema")]
    pub open_api_v3_schema: Value,
}

/// `ClusterClassVariable` as DiscoverVariables returns it. The element changed in CAPI
/// 1.13 (`metadata` → `deprecatedV1Beta1Metadata`); both keys exist here and the
/// producer fills the one the target version reads. `required` is always written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassVariable {
    pub name: String,
    pub required: bool,
    #[serde(default, skip_serializing_if = "VariableMetadata::is_empty")]
    pub metadata: VariableMetadata,
    #[serde(
        default,
        rename = "deprecatedV1Beta1Metadata",
        skip_serializing_if = "VariableMetadata::is_empty"
    )]
    pub deprecated_v1beta1_metadata: VariableMetadata,
    pub schema: VariableSchema,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverVariablesResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub variables: Vec<ClusterClassVariable>,
}

impl GeneratePatchesRequest {
    /// `(namespace, name)` of the Cluster the request is for, when it says.
    pub fn cluster(&self) -> Option<(String, String)> {
        cluster_of(
            &self.variables,
            self.items.iter().map(|i| &i.holder_reference),
        )
    }
}

impl ValidateTopologyRequest {
    /// `(namespace, name)` of the Cluster the request is for, when it says.
    pub fn cluster(&self) -> Option<(String, String)> {
        cluster_of(
            &self.variables,
            self.items.iter().map(|i| &i.holder_reference),
        )
    }
}

/// The cluster a topology request is for: `builtin.cluster`, else the Cluster holder.
fn cluster_of<'a>(
    vars: &[Variable],
    mut holders: impl Iterator<Item = &'a HolderReference>,
) -> Option<(String, String)> {
    if let Some(b) = vars.iter().find(|v| v.name == "builtin") {
        let c = &b.value["cluster"];
        if let (Some(ns), Some(n)) = (
            c.get("namespace").and_then(Value::as_str),
            c.get("name").and_then(Value::as_str),
        ) {
            return Some((ns.to_string(), n.to_string()));
        }
    }
    holders
        .find(|h| h.kind == "Cluster")
        .map(|h| (h.namespace.clone(), h.name.clone()))
}

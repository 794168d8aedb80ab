//! A version-tolerant view of the Cluster carried by lifecycle hooks.
//!
//! CAPI ≤ 1.12 sends a `cluster.x-k8s.io/v1beta1` Cluster and ≥ 1.13 a `v1beta2` one,
//! sometimes without TypeMeta, trimmed of status from 1.11 on. We keep the raw object and
//! read the few fields handlers need through accessors that know both shapes.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    raw: Value,
    name: String,
    namespace: String,
}

impl Cluster {
    /// Checks the parts every handler relies on: an object with `metadata.name`.
    pub fn from_value(raw: Value) -> Result<Cluster, String> {
        let obj = raw
            .as_object()
            .ok_or_else(|| "cluster must be an object".to_string())?;
        let meta = obj
            .get("metadata")
            .and_then(Value::as_object)
            .ok_or_else(|| "cluster.metadata is required".to_string())?;
        let name = match meta.get("name") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err("cluster.metadata.name is required".to_string()),
        };
        let namespace = match meta.get("namespace") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err("cluster.metadata.namespace must be a string".to_string()),
        };
        if let Some(a) = meta.get("annotations") {
            if !a.is_null() && !is_string_map(a) {
                return Err("cluster.metadata.annotations must map strings to strings".into());
            }
        }
        Ok(Cluster {
            raw,
            name,
            namespace,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn raw(&self) -> &Value {
        &self.raw
    }

    pub fn annotations(&self) -> BTreeMap<&str, &str> {
        self.raw
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.raw
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    }

    /// `v1beta1` or `v1beta2`. Without TypeMeta, the shape tells: v1beta2 has
    /// `spec.topology.classRef`, v1beta1 `spec.topology.class`.
    pub fn contract(&self) -> ClusterApiVersion {
        match self.raw.get("apiVersion").and_then(Value::as_str) {
            Some("cluster.x-k8s.io/v1beta2") => ClusterApiVersion::V1Beta2,
            Some("cluster.x-k8s.io/v1beta1") => ClusterApiVersion::V1Beta1,
            _ if self.raw.pointer("/spec/topology/classRef").is_some() => {
                ClusterApiVersion::V1Beta2
            }
            _ => ClusterApiVersion::V1Beta1,
        }
    }

    /// The ClusterClass name, from `topology.class` (v1beta1) or `topology.classRef.name`.
    pub fn class_name(&self) -> Option<&str> {
        self.raw
            .pointer("/spec/topology/classRef/name")
            .or_else(|| self.raw.pointer("/spec/topology/class"))
            .and_then(Value::as_str)
    }

    pub fn topology_version(&self) -> Option<&str> {
        self.raw
            .pointer("/spec/topology/version")
            .and_then(Value::as_str)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterApiVersion {
    V1Beta1,
    V1Beta2,
}

fn is_string_map(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m: &Map<String, Value>| m.values().all(Value::is_string))
}

impl<'de> Deserialize<'de> for Cluster {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        Cluster::from_value(raw).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Cluster {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_v1beta1_and_v1beta2() {
        let b1 = Cluster::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns", "annotations": {"a": "b"}},
            "spec": {"topology": {"class": "cc", "version": "v1.32.1"}}
        }))
        .unwrap();
        assert_eq!(b1.contract(), ClusterApiVersion::V1Beta1);
        assert_eq!(b1.class_name(), Some("cc"));
        assert_eq!(b1.annotation("a"), Some("b"));

        let b2 = Cluster::from_value(json!({
            "metadata": {"name": "c2"},
            "spec": {"topology": {"classRef": {"name": "cc2"}, "version": "v1.33.0"}}
        }))
        .unwrap();
        assert_eq!(b2.contract(), ClusterApiVersion::V1Beta2);
        assert_eq!(b2.class_name(), Some("cc2"));
        assert_eq!(b2.namespace(), "");
        assert_eq!(b2.topology_version(), Some("v1.33.0"));
    }

    #[test]
    fn rejects_unusable_clusters() {
        assert!(Cluster::from_value(json!([])).is_err());
        assert!(Cluster::from_value(json!({"metadata": {}}))
            .unwrap_err()
            .contains("metadata.name"));
        assert!(
            Cluster::from_value(json!({"metadata": {"name": "x", "annotations": {"a": 1}}}))
                .is_err()
        );
    }
}

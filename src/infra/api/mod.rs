//! `infrastructure.cluster.x-k8s.io/v1beta1`: OpenStackCluster,
//! OpenStackClusterTemplate, OpenStackMachine and OpenStackMachineTemplate,
//! field-compatible with CAPO v0.14 so that CAPI, clusterctl, ClusterClasses
//! and existing manifests work unchanged, plus our `extensions` fields; and
//! `v1alpha1` OpenStackClusterIdentity, CAPO's cluster-scoped credentials.

pub mod cluster;
pub mod extensions;
pub mod identity;
pub mod machine;
pub mod names;
pub mod schema;
pub mod types;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::CustomResourceExt;
use serde_json::{json, Value};

pub use cluster::{
    OpenStackCluster, OpenStackClusterSpec, OpenStackClusterStatus, OpenStackClusterTemplate,
    OpenStackClusterTemplateSpec,
};
pub use identity::{OpenStackClusterIdentity, OpenStackClusterIdentitySpec};
pub use machine::{
    OpenStackMachine, OpenStackMachineSpec, OpenStackMachineStatus, OpenStackMachineTemplate,
    OpenStackMachineTemplateSpec, OpenStackMachineTemplateStatus,
};

/// Why a CRD could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("CRD {name} does not convert to or from JSON: {source}")]
    Json {
        name: String,
        source: serde_json::Error,
    },
    #[error("CRD {name} has a schema the apiserver would reject: {problems}")]
    NotStructural { name: String, problems: String },
    #[error("CRD {name} does not render as YAML: {source}")]
    Yaml {
        name: String,
        source: serde_saphyr::SerializeError,
    },
}

/// The generated CRDs, before post-processing.
fn raw_crds() -> Vec<CustomResourceDefinition> {
    vec![
        OpenStackCluster::crd(),
        OpenStackClusterTemplate::crd(),
        OpenStackMachine::crd(),
        OpenStackMachineTemplate::crd(),
        OpenStackClusterIdentity::crd(),
    ]
}

/// Normalizes the schema, adds the CAPI contract label and checks the result.
fn finish(crd: CustomResourceDefinition) -> Result<CustomResourceDefinition, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let json_err = |source| CrdError::Json {
        name: name.clone(),
        source,
    };
    let mut value = serde_json::to_value(&crd).map_err(json_err)?;
    let mut problems = Vec::new();
    if let Some(Value::Array(versions)) = value.pointer_mut("/spec/versions") {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                add_root_properties(schema);
                schema::normalize(schema);
                problems.extend(schema::check_structural(schema));
            }
        }
    }
    if !problems.is_empty() {
        let problems = problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.problem))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(CrdError::NotStructural { name, problems });
    }
    let mut crd: CustomResourceDefinition = serde_json::from_value(value).map_err(json_err)?;
    // Spelled out so that applying over CAPO's CRDs switches off their
    // conversion webhook, which is gone once CAPO's manager is.
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "None".to_owned(),
        webhook: None,
    });
    // The contract label tells CAPI which version of a kind it references; no CAPI
    // object references an identity, and its only version is not the contract's.
    if crd.spec.versions.iter().any(|v| v.name == names::VERSION) {
        crd.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(names::CONTRACT_LABEL.to_owned(), names::VERSION.to_owned());
    }
    Ok(crd)
}

/// `apiVersion`, `kind` and `metadata` as every generated Kubernetes CRD
/// declares them; kube leaves them out.
fn add_root_properties(schema: &mut Value) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.entry("apiVersion").or_insert_with(|| {
            json!({"type": "string", "description": "Versioned schema of this representation of an object."})
        });
        props.entry("kind").or_insert_with(
            || json!({"type": "string", "description": "REST resource this object represents."}),
        );
        props
            .entry("metadata")
            .or_insert_with(|| json!({"type": "object"}));
    }
}

/// The CRDs, ready to apply, or the first reason one is not.
pub fn try_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    raw_crds().into_iter().map(finish).collect()
}

/// The CRDs, ready to apply. The post-processing is covered by tests, so
/// a failure here is a bug: it is logged and the unprocessed CRD is returned
/// rather than none at all.
pub fn crds() -> Vec<CustomResourceDefinition> {
    raw_crds()
        .into_iter()
        .map(|crd| {
            finish(crd.clone()).unwrap_or_else(|err| {
                tracing::error!(%err, "CRD post-processing failed");
                crd
            })
        })
        .collect()
}

/// Multi-document YAML of the CRDs, in a fixed order with sorted keys.
pub fn try_crds_yaml() -> Result<String, CrdError> {
    let mut out = String::new();
    for crd in try_crds()? {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut value = serde_json::to_value(&crd).map_err(|source| CrdError::Json {
            name: name.clone(),
            source,
        })?;
        schema::integer_bounds(&mut value);
        let doc =
            serde_saphyr::to_string(&value).map_err(|source| CrdError::Yaml { name, source })?;
        out.push_str("---\n");
        out.push_str(&doc);
    }
    Ok(out)
}

/// Multi-document YAML for `stackhook crds`; on the (tested-against) failure
/// of post-processing the error is written as a YAML comment, which makes
/// `kubectl apply` fail visibly instead of applying a half-right schema.
pub fn crds_yaml() -> String {
    try_crds_yaml().unwrap_or_else(|err| format!("# error: {err}\n"))
}

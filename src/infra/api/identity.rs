//! `infrastructure.cluster.x-k8s.io/v1alpha1` OpenStackClusterIdentity, as CAPO v0.14
//! defines it: a cluster-scoped pointer to a credentials Secret, usable from the
//! namespaces its `namespaceSelector` admits (CAPI's multi-tenancy contract).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Secret holding `clouds.yaml` (and optionally `cacert`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackCredentialsSecretReference {
    /// Name of the Secret which contains a `clouds.yaml` key (and optionally `cacert`).
    pub name: String,
    /// Namespace where the Secret resides.
    pub namespace: String,
}

/// Credentials shared by clusters of several namespaces.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "OpenStackClusterIdentity",
    plural = "openstackclusteridentities",
    shortname = "osci",
    category = "cluster-api",
    derive = "PartialEq",
    doc = "OpenStackClusterIdentity is a cluster-scoped identity that centralizes OpenStack credentials."
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterIdentitySpec {
    /// SecretRef references the credentials Secret containing a `clouds.yaml` file.
    pub secret_ref: OpenStackCredentialsSecretReference,
    /// NamespaceSelector limits which namespaces may use this identity. If nil, all
    /// namespaces are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub namespace_selector: Option<LabelSelector>,
}

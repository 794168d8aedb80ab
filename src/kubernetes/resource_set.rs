//! The addons' ClusterResourceSet: the resource Secrets `addons::render` made,
//! and the ClusterResourceSet that hands them to CAPI, which applies them to the
//! workload cluster (strategy Reconcile: again whenever a Secret's content
//! changes). Everything is owned by the OpenStackCluster, in the Cluster's
//! namespace. The ClusterResourceSetBinding CAPI keeps per Cluster tells which
//! content it has applied.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::ByteString;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{json, Value};

use super::secrets::{self, SecretChange};
use crate::addons::{self, Part, Rendered};
use crate::infra::api::names::CLUSTER_NAME_LABEL;
use crate::infra::api::OpenStackCluster;

pub const GROUP: &str = "addons.cluster.x-k8s.io";
/// Label on every addons Secret; the cluster controller watches these.
pub const SECRET_LABEL: &str = "stackhook.io/addons";
/// On the ClusterResourceSet: the Kubernetes version the CCM and CSI were
/// rendered for. Moves only when the control plane has reached a new one.
pub const VERSION_ANNOTATION: &str = "addons.stackhook.io/kubernetes-version";

/// API resources of CAPI's addons kinds, at the version the API server prefers.
#[derive(Clone, Debug)]
pub struct ResourceSetApi {
    pub resource_set: ApiResource,
    pub binding: ApiResource,
}

impl ResourceSetApi {
    pub fn at(version: &str) -> ResourceSetApi {
        let res = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, kind), plural)
        };
        ResourceSetApi {
            resource_set: res("ClusterResourceSet", "clusterresourcesets"),
            binding: res("ClusterResourceSetBinding", "clusterresourcesetbindings"),
        }
    }

    /// `None` when the API server does not serve the group (CAPI installed
    /// without its ClusterResourceSet CRDs).
    pub async fn discover(client: &Client) -> Result<Option<ResourceSetApi>, kube::Error> {
        Ok(super::capi::preferred_version(client, GROUP)
            .await?
            .map(|v| ResourceSetApi::at(&v)))
    }
}

/// What [`ensure`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub written: Vec<String>,
    pub removed: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.removed.is_empty()
    }
}

fn owner(osc: &OpenStackCluster) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: OpenStackCluster::api_version(&()).to_string(),
        kind: OpenStackCluster::kind(&()).to_string(),
        name: osc.name_any(),
        uid: osc.uid()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The Secret of one part, as it should be.
pub fn desired_secret(
    osc: &OpenStackCluster,
    cluster: &str,
    part: Part,
    data: &BTreeMap<String, String>,
) -> Option<Secret> {
    let mut s = Secret {
        data: Some(
            data.iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
                .collect(),
        ),
        type_: Some(addons::RESOURCE_SET_SECRET_TYPE.into()),
        ..Default::default()
    };
    s.metadata.name = Some(part.secret_name(cluster));
    s.metadata.namespace = osc.namespace();
    s.metadata.labels = Some(BTreeMap::from([
        (CLUSTER_NAME_LABEL.to_string(), cluster.to_string()),
        (SECRET_LABEL.to_string(), part.suffix().to_string()),
    ]));
    s.metadata.owner_references = Some(vec![owner(osc)?]);
    Some(s)
}

/// The ClusterResourceSet as it should be, selecting the Cluster by the label
/// CAPI puts on every Cluster it manages a topology for.
pub fn desired_resource_set(
    api: &ResourceSetApi,
    osc: &OpenStackCluster,
    cluster: &str,
    rendered: &Rendered,
    kubernetes_version: &str,
) -> Option<DynamicObject> {
    let resources: Vec<Value> = rendered
        .parts
        .keys()
        .map(|p| json!({"kind": "Secret", "name": p.secret_name(cluster)}))
        .collect();
    let mut o = DynamicObject::new(&addons::resource_set_name(cluster), &api.resource_set)
        .within(&osc.namespace()?)
        .data(json!({"spec": {
            "clusterSelector": {"matchLabels": {CLUSTER_NAME_LABEL: cluster}},
            "resources": resources,
            "strategy": "Reconcile",
        }}));
    o.metadata.labels = Some(BTreeMap::from([(
        CLUSTER_NAME_LABEL.to_string(),
        cluster.to_string(),
    )]));
    o.metadata.annotations = Some(BTreeMap::from([(
        VERSION_ANNOTATION.to_string(),
        kubernetes_version.to_string(),
    )]));
    o.metadata.owner_references = Some(vec![owner(osc)?]);
    Some(o)
}

/// The version the addons were last rendered for, from the ClusterResourceSet.
pub async fn recorded_version(
    client: &Client,
    api: &ResourceSetApi,
    namespace: &str,
    cluster: &str,
) -> Result<Option<String>, kube::Error> {
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api.resource_set);
    Ok(sets
        .get_opt(&addons::resource_set_name(cluster))
        .await?
        .and_then(|o| o.annotations().get(VERSION_ANNOTATION).cloned()))
}

/// Writes what differs: each part's Secret, the ClusterResourceSet, and removes
/// the Secrets of parts turned off (CAPI never deletes what it applied; the
/// objects stay in the workload cluster, as CAPI documents).
pub async fn ensure(
    client: &Client,
    api: &ResourceSetApi,
    osc: &OpenStackCluster,
    cluster: &str,
    rendered: &Rendered,
    kubernetes_version: &str,
) -> Result<Changes, kube::Error> {
    let namespace = osc.namespace().unwrap_or_default();
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut changes = Changes::default();
    for (part, data) in &rendered.parts {
        let Some(want) = desired_secret(osc, cluster, *part, data) else {
            continue;
        };
        if secrets::ensure(&secrets_api, want).await? != SecretChange::Unchanged {
            changes.written.push(part.secret_name(cluster));
        }
    }
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &api.resource_set);
    if let Some(want) = desired_resource_set(api, osc, cluster, rendered, kubernetes_version) {
        let name = want.name_any();
        match sets.get_opt(&name).await? {
            None => {
                sets.create(&PostParams::default(), &want).await?;
                changes.written.push(name);
            }
            Some(have) if same_resource_set(&have, &want) => {}
            Some(mut have) => {
                have.data["spec"] = want.data["spec"].clone();
                have.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .extend(want.metadata.annotations.unwrap_or_default());
                have.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .extend(want.metadata.labels.unwrap_or_default());
                have.metadata.owner_references = secrets::merged_owners(
                    have.metadata.owner_references.take(),
                    want.metadata.owner_references,
                );
                sets.replace(&name, &PostParams::default(), &have).await?;
                changes.written.push(name);
            }
        }
    }
    for part in Part::ALL {
        if !rendered.parts.contains_key(&part) {
            let name = part.secret_name(cluster);
            if secrets::remove(&secrets_api, &name).await? {
                changes.removed.push(name);
            }
        }
    }
    Ok(changes)
}

fn same_resource_set(have: &DynamicObject, want: &DynamicObject) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>, have: &BTreeMap<String, String>| {
        want.iter().flatten().all(|(k, v)| have.get(k) == Some(v))
    };
    have.data.get("spec") == want.data.get("spec")
        && subset(&want.metadata.annotations, have.annotations())
        && subset(&want.metadata.labels, have.labels())
        && secrets::owners_present(have, want)
}

/// Removes the ClusterResourceSet and every addons Secret of the cluster (the
/// owner reference does the same where a garbage collector runs).
pub async fn remove(
    client: &Client,
    api: Option<&ResourceSetApi>,
    namespace: &str,
    cluster: &str,
) -> Result<usize, kube::Error> {
    let mut removed = 0;
    if let Some(api) = api {
        let sets: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &api.resource_set);
        match sets
            .delete(
                &addons::resource_set_name(cluster),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => removed += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for part in Part::ALL {
        if secrets::remove(&secrets_api, &part.secret_name(cluster)).await? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The resource Secrets whose current content CAPI has not applied yet, by
/// name: the binding lacks them, records another hash, or failed to apply.
pub async fn not_applied(
    client: &Client,
    api: &ResourceSetApi,
    namespace: &str,
    cluster: &str,
    rendered: &Rendered,
) -> Result<Vec<String>, kube::Error> {
    let bindings: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api.binding);
    let binding = bindings.get_opt(cluster).await?;
    let applied = binding
        .as_ref()
        .map(|b| applied_hashes(&b.data, &addons::resource_set_name(cluster)))
        .unwrap_or_default();
    Ok(rendered
        .parts
        .iter()
        .filter_map(|(part, data)| {
            let name = part.secret_name(cluster);
            (applied.get(&name) != Some(&Rendered::hash(data))).then_some(name)
        })
        .collect())
}

/// Secret name → hash of the content applied successfully, from one
/// ClusterResourceSet's entry of a binding (v1beta1 and v1beta2 alike).
pub fn applied_hashes(binding: &Value, resource_set: &str) -> BTreeMap<String, String> {
    binding
        .pointer("/spec/bindings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("clusterResourceSetName").and_then(Value::as_str) == Some(resource_set))
        .flat_map(|b| {
            b.get("resources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter(|r| r.get("kind").and_then(Value::as_str) == Some("Secret"))
        .filter(|r| r.get("applied").and_then(Value::as_bool) == Some(true))
        .filter_map(|r| {
            Some((
                r.get("name")?.as_str()?.to_string(),
                r.get("hash")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_applied_entries_of_our_resource_set_count() {
        let binding = json!({"spec": {"bindings": [
            {"clusterResourceSetName": "prod-addons", "resources": [
                {"kind": "Secret", "name": "prod-addons-ccm", "hash": "sha256:aa", "applied": true},
                {"kind": "Secret", "name": "prod-addons-cni", "hash": "sha256:bb", "applied": false},
                {"kind": "ConfigMap", "name": "prod-addons-csi", "hash": "sha256:cc", "applied": true},
            ]},
            {"clusterResourceSetName": "other", "resources": [
                {"kind": "Secret", "name": "prod-addons-cloud-config", "hash": "sha256:dd", "applied": true},
            ]},
        ]}});
        let got = applied_hashes(&binding, "prod-addons");
        assert_eq!(got.len(), 1);
        assert_eq!(got["prod-addons-ccm"], "sha256:aa");
    }

    #[test]
    fn the_hash_is_capi_s() {
        // CAPI: sha256 over the decoded values in key order, hex, "sha256:" first.
        let data = BTreeMap::from([
            ("b.yaml".to_string(), "two".to_string()),
            ("a.yaml".to_string(), "one".to_string()),
        ]);
        // printf 'onetwo' | sha256sum
        assert_eq!(
            Rendered::hash(&data),
            "sha256:25b6746d5172ed6352966a013d93ac846e1110d5a25e8f183b5931f4688842a1"
        );
    }
}

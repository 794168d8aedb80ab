//! The few facts the controllers read from CAPI's own kinds (Cluster, Machine),
//! read as dynamic objects so that one build works with CAPI releases whose
//! preferred version is `v1beta1` and with those whose is `v1beta2`.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};

use crate::infra::api::OpenStackCluster;

pub const GROUP: &str = "cluster.x-k8s.io";
/// Label the Magnum driver puts on its Clusters; its cloud provider and CSI
/// driver are started with this UUID as the cluster name.
pub const MAGNUM_UUID_LABEL: &str = "cluster-uuid";
/// Annotation that pauses reconciliation of one object (CAPI's `IsPaused`).
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// API resources of the CAPI kinds, at the version the apiserver prefers.
#[derive(Clone, Debug)]
pub struct CapiResources {
    pub cluster: ApiResource,
    pub machine: ApiResource,
}

impl CapiResources {
    /// Resources at a fixed version, e.g. `v1beta1`.
    pub fn at(version: &str) -> CapiResources {
        let res = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, kind), plural)
        };
        CapiResources {
            cluster: res("Cluster", "clusters"),
            machine: res("Machine", "machines"),
        }
    }

    /// Asks the apiserver which version of `cluster.x-k8s.io` it prefers.
    pub async fn discover(client: &Client) -> Result<CapiResources, kube::Error> {
        let version = preferred_version(client, GROUP)
            .await?
            .unwrap_or_else(|| "v1beta1".to_string());
        Ok(CapiResources::at(&version))
    }
}

/// The version of `group` the API server prefers (its first one when it names
/// none); `None` when the group is not served.
pub async fn preferred_version(
    client: &Client,
    group: &str,
) -> Result<Option<String>, kube::Error> {
    let groups = client.list_api_groups().await?;
    Ok(groups
        .groups
        .iter()
        .find(|g| g.name == group)
        .and_then(|g| {
            g.preferred_version
                .as_ref()
                .map(|v| v.version.clone())
                .or_else(|| g.versions.first().map(|v| v.version.clone()))
        }))
}

/// The name of the CAPI Cluster that owns this object, if CAPI has set the
/// owner reference yet (any `cluster.x-k8s.io` version).
pub fn owner_cluster_name(osc: &OpenStackCluster) -> Option<String> {
    osc.owner_references()
        .iter()
        .find(|o| {
            o.kind == "Cluster"
                && o.api_version
                    .split('/')
                    .next()
                    .is_some_and(|group| group == GROUP)
        })
        .map(|o| o.name.clone())
}

/// The name cloud-provider-openstack is given for a cluster (its CCM's
/// `--cluster-name`, its CSI driver's `--cluster`): the OpenStackCluster's
/// `spec.extensions.cloudProvider.clusterName`, else the Magnum UUID of a Magnum
/// cluster, else the CAPI Cluster's name. `cluster` is the Cluster as JSON.
pub fn cloud_provider_cluster_name(
    osc: &OpenStackCluster,
    cluster: &serde_json::Value,
    cluster_name: &str,
) -> String {
    osc.spec
        .extensions
        .as_ref()
        .and_then(|e| e.cloud_provider.as_ref())
        .and_then(|c| c.cluster_name.clone())
        .or_else(|| {
            cluster
                .pointer(&format!("/metadata/labels/{MAGNUM_UUID_LABEL}"))
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| cluster_name.to_string())
}

/// CAPI's pause rule: `spec.paused` on the Cluster, or the paused annotation
/// on the object itself.
pub fn is_paused(cluster: Option<&DynamicObject>, obj: &impl ResourceExt) -> bool {
    let cluster_paused = cluster
        .and_then(|c| c.data.pointer("/spec/paused"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    cluster_paused || obj.annotations().contains_key(PAUSED_ANNOTATION)
}

/// Whether the Cluster's infrastructure is provisioned: v1beta1
/// `status.infrastructureReady`, v1beta2 `status.initialization.infrastructureProvisioned`.
pub fn infrastructure_ready(cluster: &DynamicObject) -> bool {
    let flag = |p: &str| cluster.data.pointer(p).and_then(|v| v.as_bool());
    flag("/status/initialization/infrastructureProvisioned")
        .or_else(|| flag("/status/infrastructureReady"))
        .unwrap_or(false)
}

/// The name of the CAPI Machine that owns `obj`, once CAPI has set the reference.
pub fn owner_machine_name(obj: &impl ResourceExt) -> Option<String> {
    obj.owner_references()
        .iter()
        .find(|o| o.kind == "Machine" && o.api_version.split('/').next() == Some(GROUP))
        .map(|o| o.name.clone())
}

/// The OpenStackMachine a Machine points at through `spec.infrastructureRef`.
pub fn machine_infrastructure_ref(
    machine: &DynamicObject,
) -> Option<ObjectRef<crate::infra::api::OpenStackMachine>> {
    use crate::infra::api::OpenStackMachine;
    let r = machine.data.pointer("/spec/infrastructureRef")?;
    if r.get("kind")?.as_str()? != OpenStackMachine::kind(&()) {
        return None;
    }
    let name = r.get("name")?.as_str()?;
    let namespace = machine.namespace()?;
    Some(ObjectRef::new(name).within(&namespace))
}

/// The OpenStackCluster a Cluster points at through `spec.infrastructureRef`
/// (v1beta1 `{apiVersion, kind, name, namespace}` or v1beta2 `{apiGroup, kind, name}`).
pub fn infrastructure_ref(cluster: &DynamicObject) -> Option<ObjectRef<OpenStackCluster>> {
    infrastructure_ref_of(&cluster.data, cluster.namespace())
}

/// [`infrastructure_ref`] of a Cluster as plain JSON (a hook request's Cluster),
/// whose own namespace is `namespace`.
pub fn infrastructure_ref_of(
    cluster: &serde_json::Value,
    namespace: Option<String>,
) -> Option<ObjectRef<OpenStackCluster>> {
    let r = cluster.pointer("/spec/infrastructureRef")?;
    if r.get("kind")?.as_str()? != OpenStackCluster::kind(&()) {
        return None;
    }
    let group = r
        .get("apiGroup")
        .and_then(|g| g.as_str())
        .or_else(|| {
            r.get("apiVersion")
                .and_then(|v| v.as_str())
                .and_then(|v| v.split('/').next())
        })
        .unwrap_or_default();
    if group != OpenStackCluster::group(&()) {
        return None;
    }
    let name = r.get("name")?.as_str()?;
    let namespace = r
        .get("namespace")
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .or(namespace)?;
    Some(ObjectRef::new(name).within(&namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::OpenStackClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    fn cluster(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn owner_must_be_a_capi_cluster() {
        let mut o = OpenStackCluster::new("c1", OpenStackClusterSpec::default());
        assert_eq!(owner_cluster_name(&o), None);
        o.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Cluster".into(),
            name: "other".into(),
            uid: "u0".into(),
            ..Default::default()
        }]);
        assert_eq!(owner_cluster_name(&o), None);
        o.metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(OwnerReference {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Cluster".into(),
                name: "prod".into(),
                uid: "u1".into(),
                ..Default::default()
            });
        assert_eq!(owner_cluster_name(&o).as_deref(), Some("prod"));
    }

    #[test]
    fn paused_by_cluster_spec_or_own_annotation() {
        let mut o = OpenStackCluster::new("c1", OpenStackClusterSpec::default());
        let running = cluster(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "ns"},
            "spec": {"paused": false}
        }));
        let paused = cluster(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "ns"},
            "spec": {"paused": true}
        }));
        assert!(!is_paused(Some(&running), &o));
        assert!(is_paused(Some(&paused), &o));
        o.metadata.annotations = Some([(PAUSED_ANNOTATION.to_string(), String::new())].into());
        assert!(is_paused(Some(&running), &o));
        assert!(is_paused(None, &o));
    }

    #[test]
    fn infrastructure_ref_in_both_versions() {
        let v1 = cluster(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "ns"},
            "spec": {"infrastructureRef": {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "OpenStackCluster", "name": "prod-abcde", "namespace": "ns"}}
        }));
        let v2 = cluster(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "ns2"},
            "spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackCluster", "name": "prod-xyz"}}
        }));
        let docker = cluster(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "ns2"},
            "spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerCluster", "name": "prod-xyz"}}
        }));
        assert_eq!(
            infrastructure_ref(&v1),
            Some(ObjectRef::new("prod-abcde").within("ns"))
        );
        assert_eq!(
            infrastructure_ref(&v2),
            Some(ObjectRef::new("prod-xyz").within("ns2"))
        );
        assert_eq!(infrastructure_ref(&docker), None);
    }
}

//! Keeps the Secret `<cluster>-bootstrap-vars` current: written by the
//! OpenStackCluster controller after each status write, and by the
//! AfterControlPlaneInitialized hook. The content is a pure function of the
//! OpenStackCluster and its machines (`infra::bootstrap`), so any writer
//! converges on the same bytes; a write happens only when they differ.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::ByteString;
use kube::api::ListParams;
use kube::{Api, Client, Resource, ResourceExt};

use crate::infra::api::names::CLUSTER_NAME_LABEL;
use crate::infra::api::{OpenStackCluster, OpenStackMachine};
use crate::infra::bootstrap::{self, MachineFacts, RenderError, SECRET_LABEL};

use super::secrets;
pub use super::secrets::SecretChange;

/// Why the Secret could not be written.
#[derive(Debug, thiserror::Error)]
pub enum VarsError {
    #[error("apiserver: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error("the OpenStackCluster has no namespace or uid yet")]
    Unsaved,
}

/// The cluster's OpenStackMachines, read from the apiserver (not a cache), so the
/// Secret written right after a machine event already holds that machine.
pub async fn machines_of(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<MachineFacts>, kube::Error> {
    let api: Api<OpenStackMachine> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(MachineFacts::from_machine)
        .collect())
}

/// The Secret as it should be: data, labels and the owner reference.
pub fn desired(
    osc: &OpenStackCluster,
    cluster: &str,
    machines: &[MachineFacts],
) -> Result<Secret, VarsError> {
    let (Some(namespace), Some(uid)) = (osc.namespace(), osc.uid()) else {
        return Err(VarsError::Unsaved);
    };
    let data = bootstrap::render(osc, machines)?
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    let mut s = Secret {
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    s.metadata.name = Some(bootstrap::secret_name(cluster));
    s.metadata.namespace = Some(namespace);
    s.metadata.labels = Some(BTreeMap::from([
        (CLUSTER_NAME_LABEL.to_string(), cluster.to_string()),
        (SECRET_LABEL.to_string(), "true".to_string()),
    ]));
    // Garbage-collected with the OpenStackCluster; `controller` lets the
    // controller's watch map Secret events back to it.
    s.metadata.owner_references = Some(vec![OwnerReference {
        api_version: OpenStackCluster::api_version(&()).to_string(),
        kind: OpenStackCluster::kind(&()).to_string(),
        name: osc.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Ok(s)
}

/// Creates the Secret, or updates it when its data, labels or owner differ.
pub async fn ensure(
    client: &Client,
    osc: &OpenStackCluster,
    cluster: &str,
    machines: &[MachineFacts],
) -> Result<SecretChange, VarsError> {
    let want = desired(osc, cluster, machines)?;
    let namespace = want.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    Ok(secrets::ensure(&api, want).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::OpenStackClusterSpec;
    use crate::kubernetes::secrets::current;

    fn osc() -> OpenStackCluster {
        let mut o = OpenStackCluster::new("prod-abcde", OpenStackClusterSpec::default());
        o.metadata.namespace = Some("ns".into());
        o.metadata.uid = Some("u-1".into());
        o
    }

    #[test]
    fn desired_secret_is_owned_labelled_and_named_for_the_cluster() {
        let s = desired(&osc(), "prod", &[]).unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("prod-bootstrap-vars"));
        assert_eq!(s.labels()[CLUSTER_NAME_LABEL], "prod");
        assert_eq!(s.labels()[SECRET_LABEL], "true");
        let owner = &s.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("OpenStackCluster", "prod-abcde", "u-1")
        );
        assert_eq!(owner.api_version, "infrastructure.cluster.x-k8s.io/v1beta1");
        let keys: Vec<&String> = s.data.as_ref().unwrap().keys().collect();
        assert_eq!(keys, ["cilium-values.yaml", "inventory.yaml", "vars.yaml"]);
        assert!(matches!(
            desired(
                &OpenStackCluster::new("x", OpenStackClusterSpec::default()),
                "x",
                &[]
            ),
            Err(VarsError::Unsaved)
        ));
    }

    #[test]
    fn only_a_difference_counts_as_a_change() {
        let want = desired(&osc(), "prod", &[]).unwrap();
        let mut have = want.clone();
        have.metadata.resource_version = Some("7".into());
        have.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("extra".into(), "kept".into());
        assert!(current(&have, &want));
        let mut edited = have.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("vars.yaml".into(), ByteString(b"x: 1\n".to_vec()));
        assert!(!current(&edited, &want));
        let mut orphaned = have.clone();
        orphaned.metadata.owner_references = None;
        assert!(!current(&orphaned, &want));
    }
}

//! Writes a Secret stackhook owns: created when missing, replaced when its data,
//! type, labels, annotations or owner differ from what it should be, left alone
//! otherwise, so a steady state makes no write.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretChange {
    Created,
    Updated,
    Unchanged,
}

/// Makes `want` (named and namespaced) exist as it is. Labels and annotations
/// others added are kept; the replace is guarded by the resourceVersion read, so a
/// concurrent writer makes it a conflict, retried with fresh inputs.
pub async fn ensure(api: &Api<Secret>, want: Secret) -> Result<SecretChange, kube::Error> {
    let name = want.name_any();
    match api.get_opt(&name).await? {
        None => {
            api.create(&PostParams::default(), &want).await?;
            Ok(SecretChange::Created)
        }
        Some(have) if current(&have, &want) => Ok(SecretChange::Unchanged),
        Some(mut have) => {
            have.data = want.data;
            have.string_data = None;
            have.type_ = want.type_;
            have.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .extend(want.metadata.labels.unwrap_or_default());
            if let Some(a) = want.metadata.annotations {
                have.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .extend(a);
            }
            have.metadata.owner_references = merged_owners(
                have.metadata.owner_references.take(),
                want.metadata.owner_references,
            );
            api.replace(&name, &PostParams::default(), &have).await?;
            Ok(SecretChange::Updated)
        }
    }
}

/// Deletes the Secret if it is there; `true` when it was.
pub async fn remove(api: &Api<Secret>, name: &str) -> Result<bool, kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `have` already is `want`, ignoring what others may add.
pub fn current(have: &Secret, want: &Secret) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>, have: &BTreeMap<String, String>| {
        want.iter().flatten().all(|(k, v)| have.get(k) == Some(v))
    };
    have.data == want.data
        && have.string_data.is_none()
        // The API server defaults an unset type to Opaque.
        && (want.type_.is_none()
            || have.type_.as_deref().unwrap_or("Opaque") == want.type_.as_deref().unwrap_or("Opaque"))
        && subset(&want.metadata.labels, have.labels())
        && subset(&want.metadata.annotations, have.annotations())
        && owners_present(have, want)
}

/// Every owner `want` names is on `have`, as it should be. Owners others add stay:
/// CAPI puts its ClusterResourceSet on each resource Secret, and taking it off
/// again on every pass would be a fight of writes.
pub fn owners_present<K: kube::Resource>(have: &K, want: &K) -> bool {
    want.meta().owner_references.iter().flatten().all(|o| {
        have.meta()
            .owner_references
            .iter()
            .flatten()
            .any(|h| h == o)
    })
}

/// `have`'s owners with `want`'s replacing those of the same uid.
pub fn merged_owners(
    have: Option<Vec<OwnerReference>>,
    want: Option<Vec<OwnerReference>>,
) -> Option<Vec<OwnerReference>> {
    let want = want.unwrap_or_default();
    let mut all: Vec<OwnerReference> = have
        .unwrap_or_default()
        .into_iter()
        .filter(|h| !want.iter().any(|w| w.uid == h.uid))
        .collect();
    all.extend(want);
    (!all.is_empty()).then_some(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str, kind: &str) -> OwnerReference {
        OwnerReference {
            api_version: "x/v1".into(),
            kind: kind.into(),
            name: uid.into(),
            uid: uid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_owner_capi_adds_is_neither_a_difference_nor_removed() {
        let mut want = Secret::default();
        want.metadata.owner_references = Some(vec![owner("osc", "OpenStackCluster")]);
        let mut have = want.clone();
        have.metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(owner("crs", "ClusterResourceSet"));
        assert!(current(&have, &want));
        let mut stale = have.clone();
        stale.metadata.owner_references = Some(vec![owner("crs", "ClusterResourceSet")]);
        assert!(!current(&stale, &want), "our owner missing");
        let merged = merged_owners(
            stale.metadata.owner_references,
            want.metadata.owner_references,
        )
        .unwrap();
        let kinds: Vec<&str> = merged.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["ClusterResourceSet", "OpenStackCluster"]);
    }
}

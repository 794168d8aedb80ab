//! Writes a Secret stackhook owns: created when missing, replaced when its data,
//! type, labels, annotations or owner differ from what it should be, left alone
//! otherwise, so a steady state makes no write.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
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
            have.metadata.owner_references = want.metadata.owner_references;
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
        && have.metadata.owner_references == want.metadata.owner_references
}

//! `image.imageRef`: the boot image through an ORC `Image` object
//! (`openstack.k-orc.cloud/v1alpha1`) in the machine's namespace, read as CAPO v0.14
//! reads it: its `status.id` once its `Available` condition is `True`; until then the
//! machine waits (the Image may not exist yet, or ORC may still be uploading it).

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::Value;

use crate::infra::api::types::ImageParam;

/// ORC's group and version of `Image`.
pub const ORC_API_VERSION: &str = "openstack.k-orc.cloud/v1alpha1";
/// Reason of the Ready condition while the Image is not available.
pub const WAITING_FOR_IMAGE: &str = "WaitingForImage";

/// Where an `imageRef` stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRefState {
    /// The Glance image ID ORC recorded.
    Available(String),
    /// Why the machine has to wait.
    Waiting(String),
}

/// ORC's `Image` resource.
pub fn orc_image_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("openstack.k-orc.cloud", "v1alpha1", "Image");
    ApiResource::from_gvk_with_plural(&gvk, "images")
}

/// The pure part: what an Image object (as ORC writes its status) says.
pub fn image_state(namespace: &str, name: &str, image: &Value) -> ImageRefState {
    let available = image
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"));
    let id = image
        .pointer("/status/id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty());
    match (available, id) {
        (Some(c), Some(id)) if c.get("status").and_then(Value::as_str) == Some("True") => {
            ImageRefState::Available(id.to_string())
        }
        (Some(c), _) => {
            let why = c
                .get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .or_else(|| c.get("reason").and_then(Value::as_str))
                .unwrap_or("no reason given");
            ImageRefState::Waiting(format!(
                "ORC Image {namespace}/{name} is not available yet: {why}"
            ))
        }
        (None, _) => ImageRefState::Waiting(format!(
            "ORC Image {namespace}/{name} is not available yet: it has no Available condition"
        )),
    }
}

/// Resolves `image` when it is an `imageRef`: `Ok(None)` when it is not one (the
/// cloud half resolves IDs and filters), else the Image's state.
pub async fn resolve_image_ref(
    client: &Client,
    namespace: &str,
    image: &ImageParam,
) -> Result<Option<ImageRefState>, kube::Error> {
    let Some(reference) = &image.image_ref else {
        return Ok(None);
    };
    if image.id.as_ref().is_some_and(|id| !id.is_empty()) || image.filter.is_some() {
        return Ok(None);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &orc_image_resource());
    let found = match api.get_opt(&reference.name).await {
        Ok(found) => found,
        // No ORC CRD installed at all reads as "no such Image yet", as CAPO waits.
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(e),
    };
    Ok(Some(match found {
        None => ImageRefState::Waiting(format!(
            "ORC Image {namespace}/{} does not exist yet",
            reference.name
        )),
        Some(obj) => image_state(namespace, &reference.name, &obj.data),
    }))
}

/// What an `imageRef` gives one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRefPass {
    /// Not a reference, or already resolved (`status...resolved.imageID`): the cloud
    /// half goes on as it is.
    Unchanged,
    /// Boot this Glance image.
    Id(String),
    /// Wait, for this reason.
    Waiting(String),
}

/// Resolves `image` once, as CAPO records it: after the server's image is in its
/// status (`already_resolved`), the Image object is not read again.
pub async fn image_ref_pass(
    client: &Client,
    namespace: &str,
    image: &ImageParam,
    already_resolved: bool,
) -> Result<ImageRefPass, kube::Error> {
    if already_resolved {
        return Ok(ImageRefPass::Unchanged);
    }
    Ok(match resolve_image_ref(client, namespace, image).await? {
        None => ImageRefPass::Unchanged,
        Some(ImageRefState::Available(id)) => ImageRefPass::Id(id),
        Some(ImageRefState::Waiting(message)) => ImageRefPass::Waiting(message),
    })
}

/// `image` with the resolved Glance ID in place of its reference.
pub fn with_id(id: String) -> ImageParam {
    ImageParam {
        id: Some(id),
        ..ImageParam::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image(status: Value) -> Value {
        json!({"apiVersion": ORC_API_VERSION, "kind": "Image",
               "metadata": {"name": "ubuntu", "namespace": "ns"},
               "spec": {"cloudCredentialsRef": {"secretName": "c", "cloudName": "o"}},
               "status": status})
    }

    fn cond(status: &str, reason: &str, message: &str) -> Value {
        json!({"type": "Available", "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn available_image_gives_its_id() {
        let img = image(json!({"id": "9f1c", "conditions": [
            {"type": "Progressing", "status": "False", "reason": "Success", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            cond("True", "Success", "OpenStack resource is available")]}));
        assert_eq!(
            image_state("ns", "ubuntu", &img),
            ImageRefState::Available("9f1c".into())
        );
    }

    #[test]
    fn image_waits_until_available_and_with_an_id() {
        let cases = [
            (image(json!({})), "no Available condition"),
            (
                image(
                    json!({"conditions": [cond("False", "Progressing", "Image upload in progress")]}),
                ),
                "Image upload in progress",
            ),
            (
                // ORC has the ID as soon as Glance made the image; it is not usable yet.
                image(json!({"id": "9f1c", "conditions": [cond("False", "Progressing", "")]})),
                "Progressing",
            ),
            (
                image(json!({"id": "", "conditions": [cond("True", "Success", "odd")]})),
                "odd",
            ),
        ];
        for (img, says) in cases {
            match image_state("ns", "ubuntu", &img) {
                ImageRefState::Waiting(m) => {
                    assert!(m.contains("ns/ubuntu") && m.contains(says), "{m}")
                }
                other => panic!("{img}: {other:?}"),
            }
        }
    }
}

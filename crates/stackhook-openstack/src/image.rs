//! Glance (service type `image`, API v2): finding the image a server boots.

use std::future::Future;
use std::sync::Arc;

use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use crate::error::OsError;
use crate::session::Session;

const SERVICE: &[&str] = &["image"];

/// A Glance image, found by name and tags to boot a server from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Image {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Glance's `os_type` property (`linux`, `windows`).
    #[serde(default)]
    pub os_type: Option<String>,
    /// Glance's `architecture` property (`x86_64`, `aarch64`, ...).
    #[serde(default)]
    pub architecture: Option<String>,
}

/// The Glance calls the controllers need.
pub trait Images: Send + Sync {
    /// `GET /v2/images` with filters such as `name` and repeated `tag`.
    fn list(
        &self,
        query: &[(&str, String)],
    ) -> impl Future<Output = Result<Vec<Image>, OsError>> + Send;
}

/// The real Glance client.
#[derive(Clone, Debug)]
pub struct Glance {
    session: Arc<Session>,
}

impl Glance {
    /// A Glance client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self { session }
    }

    /// `GET /v2/images/{id}`: one image; a 404 means no such image is visible.
    pub async fn get(&self, id: &str) -> Result<Image, OsError> {
        let path = format!("/v2/images/{}", crate::networking::encode_segment(id));
        let v = self
            .session
            .request(Method::GET, SERVICE, &path, &[], None, &vec![])
            .await?;
        v.ok_or_else(|| "empty body".to_owned())
            .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
            .map_err(|message| OsError::Decode {
                service: "image".into(),
                path,
                message,
            })
    }
}

impl Images for Glance {
    async fn list(&self, query: &[(&str, String)]) -> Result<Vec<Image>, OsError> {
        let path = "/v2/images";
        let v = self
            .session
            .request(Method::GET, SERVICE, path, query, None, &vec![])
            .await?;
        parse_images(v).map_err(|message| OsError::Decode {
            service: "image".into(),
            path: path.into(),
            message,
        })
    }
}

/// `{"images": [...]}`.
fn parse_images(v: Option<Value>) -> Result<Vec<Image>, String> {
    let list = v
        .and_then(|mut v| v.get_mut("images").map(Value::take))
        .ok_or_else(|| "no images".to_owned())?;
    serde_json::from_value(list).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_glance_image_list() {
        let v = json!({"images": [{"id": "i1", "name": "ubuntu", "status": "active",
            "tags": ["k8s"], "visibility": "public"}], "first": "/v2/images"});
        let images = parse_images(Some(v)).unwrap();
        assert_eq!(images[0].id, "i1");
        assert_eq!(images[0].tags, vec!["k8s".to_owned()]);
        assert!(parse_images(Some(json!({}))).is_err());
    }
}

//! Cinder (service type `block-storage`, else `volumev3`; API v3): the root
//! and data volumes of machines that boot from volume.
//!
//! No `OpenStack-API-Version: volume 3.x` header is sent: every call here
//! works at 3.0, as CAPO makes them, so the answers do not depend on how new
//! the cloud's Cinder is.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use reqwest::Method;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

use crate::compute::{given, null_default};
use crate::error::OsError;
use crate::session::{unwrap_body, Session};

/// Catalogs name Cinder v3 `block-storage` (new) or `volumev3` (most
/// deployed clouds, and the test cloud); the first one present wins.
const SERVICE: &[&str] = &["block-storage", "volumev3"];

/// A server the volume is attached to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct VolumeAttachment {
    #[serde(default, deserialize_with = "null_default")]
    pub server_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub attachment_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub device: String,
}

/// A Cinder volume as `GET /volumes/{id}` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Volume {
    pub id: String,
    /// Cinder sends `null` for unnamed volumes.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    /// `creating`, `available`, `in-use`, `error`, `deleting`...
    #[serde(default)]
    pub status: String,
    /// GiB.
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub volume_type: Option<String>,
    /// Cinder sends the string `"true"`/`"false"`.
    #[serde(default, deserialize_with = "loose_bool")]
    pub bootable: bool,
    #[serde(default)]
    pub multiattach: bool,
    #[serde(default, deserialize_with = "null_default")]
    pub metadata: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_default")]
    pub attachments: Vec<VolumeAttachment>,
}

impl Volume {
    /// Ready to attach or boot from.
    pub fn is_available(&self) -> bool {
        self.status == "available"
    }
    /// Attached to a server.
    pub fn is_in_use(&self) -> bool {
        self.status == "in-use"
    }
    /// `error`, `error_deleting`, `error_extending`...: Cinder will not get
    /// it to `available` by itself, so waiting longer is pointless.
    pub fn is_failed(&self) -> bool {
        self.status.starts_with("error")
    }
}

/// `true`, `false`, `"true"` or `"false"` (any case).
fn loose_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Bool(b) => b,
        Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    })
}

/// A new volume; CAPO's root volume is `<server>-root` with the image, its
/// data volumes `<server>-<device>` without. An optional string that is
/// empty (`Some("")`) stays out of the body like `None`, as in CAPO's
/// gophercloud body (`omitempty`): Cinder reads `volume_type: ""` as a type
/// named `""` and refuses it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeCreate {
    pub name: String,
    pub size_gib: u32,
    pub description: Option<String>,
    /// Cinder's default type when `None`.
    pub volume_type: Option<String>,
    /// Cinder's default zone when `None` (which need not be the server's).
    pub availability_zone: Option<String>,
    /// Copies the image in, making the volume bootable.
    pub image_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl VolumeCreate {
    /// The `POST /volumes` body, envelope included.
    pub fn body(&self) -> Value {
        let mut v = json!({"name": self.name, "size": self.size_gib});
        if let Some(d) = given(&self.description) {
            v["description"] = json!(d);
        }
        if let Some(t) = given(&self.volume_type) {
            v["volume_type"] = json!(t);
        }
        if let Some(az) = given(&self.availability_zone) {
            v["availability_zone"] = json!(az);
        }
        if let Some(image) = given(&self.image_id) {
            v["imageRef"] = json!(image);
        }
        if !self.metadata.is_empty() {
            v["metadata"] = json!(self.metadata);
        }
        json!({ "volume": v })
    }
}

/// Which volumes to list; empty lists the whole project. Fields are ANDed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeFilter {
    /// Exact name (Cinder names are not unique: expect several).
    pub name: Option<String>,
    /// Volumes carrying all these metadata pairs.
    pub metadata: BTreeMap<String, String>,
}

impl VolumeFilter {
    /// Volumes named `name`.
    pub fn named(name: &str) -> Self {
        Self {
            name: Some(name.to_owned()),
            ..Default::default()
        }
    }

    /// The query of `GET /volumes/detail`. Cinder reads `metadata` as a
    /// Python dict literal, which a JSON object of strings is.
    pub fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(n) = &self.name {
            q.push(("name", n.clone()));
        }
        if !self.metadata.is_empty() {
            q.push(("metadata", json!(self.metadata).to_string()));
        }
        q
    }
}

/// The Cinder calls a machine needs.
pub trait BlockStorage: Send + Sync {
    /// Starts creating the volume; it is `creating` until Cinder is done,
    /// then `available` or `error`.
    fn create_volume(
        &self,
        volume: &VolumeCreate,
    ) -> impl Future<Output = Result<Volume, OsError>> + Send;
    /// One volume; a 404 means it is gone.
    fn volume(&self, id: &str) -> impl Future<Output = Result<Volume, OsError>> + Send;
    /// Volumes of the project matching `filter`, with details.
    fn volumes(
        &self,
        filter: &VolumeFilter,
    ) -> impl Future<Output = Result<Vec<Volume>, OsError>> + Send;
    /// Starts the deletion (`deleting`, then 404). Cinder answers 400 while
    /// the volume is attached or still `creating`.
    fn delete_volume(&self, id: &str) -> impl Future<Output = Result<(), OsError>> + Send;
    /// The volume types the project may use.
    fn volume_types(&self) -> impl Future<Output = Result<Vec<VolumeType>, OsError>> + Send;
    /// The type a volume created without one gets (`GET /types/default`):
    /// Cinder's `default_volume_type`, or the project's own default.
    fn default_volume_type(&self) -> impl Future<Output = Result<VolumeType, OsError>> + Send;
}

/// A Cinder volume type (`GET /types`), which a StorageClass names as its `type`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct VolumeType {
    pub id: String,
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    /// Private types are visible only to the projects they were given to.
    #[serde(default = "public", rename = "os-volume-type-access:is_public")]
    pub is_public: bool,
}

fn public() -> bool {
    true
}

/// The real Cinder client.
#[derive(Clone, Debug)]
pub struct Cinder {
    session: Arc<Session>,
}

impl Cinder {
    /// A Cinder client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self { session }
    }
}

impl BlockStorage for Cinder {
    async fn create_volume(&self, volume: &VolumeCreate) -> Result<Volume, OsError> {
        let path = "/volumes";
        let v = self
            .session
            .request(
                Method::POST,
                SERVICE,
                path,
                &[],
                Some(&volume.body()),
                &vec![],
            )
            .await?;
        unwrap_body(SERVICE, v, "volume", path)
    }

    async fn volume(&self, id: &str) -> Result<Volume, OsError> {
        let path = format!("/volumes/{id}");
        self.session.get_wrapped(SERVICE, &path, "volume").await
    }

    async fn volumes(&self, filter: &VolumeFilter) -> Result<Vec<Volume>, OsError> {
        self.session
            .list_wrapped(SERVICE, "/volumes/detail", "volumes", &filter.query())
            .await
    }

    async fn delete_volume(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/volumes/{id}");
        self.session.delete_path(SERVICE, &path).await
    }

    async fn volume_types(&self) -> Result<Vec<VolumeType>, OsError> {
        self.session
            .list_wrapped(SERVICE, "/types", "volume_types", &[])
            .await
    }

    async fn default_volume_type(&self) -> Result<VolumeType, OsError> {
        self.session
            .get_wrapped(SERVICE, "/types/default", "volume_type")
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_cinder_volumes() {
        let v: Volume = unwrap_body(
            SERVICE,
            Some(json!({"volume": {
                "id": "v1", "name": null, "description": null, "status": "in-use",
                "size": 10, "availability_zone": "az1", "volume_type": "__DEFAULT__",
                "bootable": "true", "multiattach": false, "metadata": {"k": "v"},
                "attachments": [{"server_id": "s1", "attachment_id": "a1",
                    "device": "/dev/vda", "host_name": null}]
            }})),
            "volume",
            "/volumes/v1",
        )
        .unwrap();
        assert_eq!(v.name, "");
        assert!(v.bootable && v.is_in_use() && !v.is_failed());
        assert_eq!(v.attachments[0].server_id, "s1");
        assert_eq!(v.metadata["k"], "v");
        let err: Volume =
            serde_json::from_value(json!({"id": "v2", "status": "error_deleting"})).unwrap();
        assert!(err.is_failed() && !err.bootable);
    }

    #[test]
    fn builds_create_bodies_and_filters() {
        let plain = VolumeCreate {
            name: "m-data".into(),
            size_gib: 5,
            ..Default::default()
        };
        assert_eq!(
            plain.body(),
            json!({"volume": {"name": "m-data", "size": 5}})
        );
        let root = VolumeCreate {
            name: "m-root".into(),
            size_gib: 20,
            description: Some("root".into()),
            volume_type: Some("ssd".into()),
            availability_zone: Some("az2".into()),
            image_id: Some("img".into()),
            metadata: [("owner".to_owned(), "m".to_owned())].into(),
        };
        assert_eq!(
            root.body(),
            json!({"volume": {"name": "m-root", "size": 20, "description": "root",
                "volume_type": "ssd", "availability_zone": "az2", "imageRef": "img",
                "metadata": {"owner": "m"}}})
        );
        // Empty optional strings stay out like `None`; set ones go in.
        type Case = (&'static str, &'static str, fn(&mut VolumeCreate, &str));
        let cases: [Case; 4] = [
            ("description", "description", |v, s| {
                v.description = Some(s.into())
            }),
            ("volume_type", "volume_type", |v, s| {
                v.volume_type = Some(s.into())
            }),
            ("availability_zone", "availability_zone", |v, s| {
                v.availability_zone = Some(s.into())
            }),
            ("image_id", "imageRef", |v, s| v.image_id = Some(s.into())),
        ];
        for (field, key, set) in cases {
            let mut empty = plain.clone();
            set(&mut empty, "");
            let body = empty.body();
            assert!(body["volume"].get(key).is_none(), "{field} empty: {body}");
            let mut given = plain.clone();
            set(&mut given, "x");
            let body = given.body();
            assert_eq!(body["volume"][key], "x", "{field} set: {body}");
        }
        assert!(VolumeFilter::default().query().is_empty());
        let f = VolumeFilter {
            name: Some("m-root".into()),
            metadata: [("owner".to_owned(), "m".to_owned())].into(),
        };
        assert_eq!(
            f.query(),
            vec![
                ("name", "m-root".to_owned()),
                ("metadata", r#"{"owner":"m"}"#.to_owned())
            ]
        );
    }
}

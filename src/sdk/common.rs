//! Types shared by every hook: status, common responses, variables, patches.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// `status` must be exactly one of these two strings; CAPI compares case-sensitively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseStatus {
    Success,
    Failure,
}

/// ExtensionConfig (and ClusterClass patch) settings, passed to every hook but Discovery.
pub type Settings = BTreeMap<String, String>;

/// `CommonResponse`: the answer of non-retry hooks (AfterControlPlaneInitialized,
/// ValidateTopology, AfterClusterUpgrade before v1.12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommonResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `CommonRetryResponse`: blocking hooks. `retryAfterSeconds` is required on the wire
/// and is always written, zero included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryResponse {
    pub api_version: String,
    pub kind: String,
    pub status: ResponseStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub retry_after_seconds: i32,
}

/// A variable as hooks carry it: only `name` and `value` (no `definitionFrom`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variable {
    pub name: String,
    pub value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatchType {
    JSONPatch,
    JSONMergePatch,
}

/// Go decodes JSON `null` into a nil slice or map, so a Go client may send `null` for
/// an empty list or map; read it as empty, like an omitted field, on every decoding path.
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Patch bytes travel as standard, padded base64 (Go `[]byte`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Base64Bytes(pub Vec<u8>);

impl Serialize for Base64Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&data_encoding::BASE64.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Base64Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        data_encoding::BASE64
            .decode(s.as_bytes())
            .map(Base64Bytes)
            .map_err(serde::de::Error::custom)
    }
}

/// A patch in the in-place update hooks' responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    pub patch_type: PatchType,
    pub patch: Base64Bytes,
}

/// `{"version": "v1.32.3"}`: one step of a chained upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeStep {
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_bytes_are_standard_padded_base64() {
        let b = Base64Bytes(b"[{\"op\":1}]\xff".to_vec());
        let wire = serde_json::to_value(&b).unwrap();
        assert_eq!(wire, "W3sib3AiOjF9Xf8=");
        assert_eq!(serde_json::from_value::<Base64Bytes>(wire).unwrap(), b);
        // Unpadded, URL-safe or non-canonical text is refused.
        for bad in ["W3sib3AiOjF9Xf8", "W3sib3AiOjF9Xf-=", "W3sib3AiOjF9Xf9="] {
            assert!(
                serde_json::from_value::<Base64Bytes>(bad.into()).is_err(),
                "{bad}"
            );
        }
    }
}

//! Request decoding: bytes → typed request, with errors that name the problem.
//!
//! CAPI sends no Content-Type, so the body is the only thing we trust. Every error here
//! becomes an HTTP 200 `Failure` carrying this message, as CAPI's Go SDK server answers.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Hook, API_VERSION};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("request body exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// The body could not be read whole (too slow, server busy, connection error).
    #[error("{detail}")]
    Unread { detail: String },
    #[error("request body is empty: expected a {kind} JSON object")]
    Empty { kind: String },
    #[error("request body is not valid JSON: {detail}")]
    Syntax { detail: String },
    #[error("request body must be a JSON object, got {got}")]
    NotObject { got: &'static str },
    #[error("apiVersion is {got}, expected \"{API_VERSION}\"")]
    ApiVersion { got: String },
    #[error("kind is {got}, expected \"{expected}\"")]
    Kind { got: String, expected: String },
    #[error("invalid {kind}: {detail}")]
    Invalid { kind: String, detail: String },
}

fn describe(v: Option<&Value>) -> String {
    match v {
        None => "missing".to_string(),
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => format!("not a string ({other})"),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Only the two fields checked before the rest; every other field is skipped unread.
#[derive(serde::Deserialize)]
struct Header<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// Decodes the body of a `hook` request, checking `apiVersion` and `kind` first.
///
/// A well-formed request goes straight from bytes to `T` (after a cheap scan for the
/// two header fields); anything else takes the slow path through a `Value`, which is
/// what names the problem. Both paths accept exactly the same bodies.
pub fn decode<T: DeserializeOwned>(hook: Hook, body: &[u8]) -> Result<T, DecodeError> {
    let fast = serde_json::from_slice::<Header>(body).ok().filter(|h| {
        h.api_version.as_deref() == Some(API_VERSION)
            && h.kind.as_deref() == Some(hook.request_kind().as_str())
    });
    if fast.is_some() {
        if let Ok(t) = serde_json::from_slice::<T>(body) {
            return Ok(t);
        }
    }
    decode_slow(hook, body)
}

/// A GeneratePatches request in one pass over the body (the generic [`decode`] reads
/// it twice: once for the header, once for the request). It is the largest request CAPI
/// sends, up to every template of a Cluster. Anything but a well-formed request takes
/// [`decode`]'s path, which names the problem; both accept exactly the same bodies.
pub fn decode_generate_patches(
    body: &[u8],
) -> Result<super::topology::GeneratePatchesRequest, DecodeError> {
    use super::common::{Settings, Variable};
    use super::topology::{GeneratePatchesRequest, GeneratePatchesRequestItem};
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Body {
        #[serde(default)]
        api_version: Option<String>,
        #[serde(default)]
        kind: Option<String>,
        #[serde(default, deserialize_with = "super::common::null_as_default")]
        settings: Settings,
        #[serde(default, deserialize_with = "super::common::null_as_default")]
        variables: Vec<Variable>,
        items: Vec<GeneratePatchesRequestItem>,
    }
    let hook = Hook::GeneratePatches;
    match serde_json::from_slice::<Body>(body) {
        Ok(b)
            if b.api_version.as_deref() == Some(API_VERSION)
                && b.kind.as_deref() == Some(hook.request_kind().as_str()) =>
        {
            Ok(GeneratePatchesRequest {
                settings: b.settings,
                variables: b.variables,
                items: b.items,
            })
        }
        _ => decode(hook, body),
    }
}

fn decode_slow<T: DeserializeOwned>(hook: Hook, body: &[u8]) -> Result<T, DecodeError> {
    let kind = hook.request_kind();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty { kind });
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| DecodeError::Syntax {
        detail: e.to_string(),
    })?;
    let obj = match &value {
        Value::Object(o) => o,
        other => {
            return Err(DecodeError::NotObject {
                got: json_kind(other),
            })
        }
    };
    if obj.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION) {
        return Err(DecodeError::ApiVersion {
            got: describe(obj.get("apiVersion")),
        });
    }
    if obj.get("kind").and_then(Value::as_str) != Some(kind.as_str()) {
        return Err(DecodeError::Kind {
            got: describe(obj.get("kind")),
            expected: kind,
        });
    }
    serde_json::from_value(value).map_err(|e| DecodeError::Invalid {
        kind,
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::lifecycle::BeforeUpgradeRequest;

    fn dec(body: &str) -> Result<BeforeUpgradeRequest, DecodeError> {
        decode(Hook::BeforeClusterUpgrade, body.as_bytes())
    }

    #[test]
    fn one_pass_generate_patches_agrees_with_the_generic_decoder() {
        use crate::sdk::topology::GeneratePatchesRequest;
        let api = API_VERSION;
        let k = "GeneratePatchesRequest";
        let item = r#"{"uid":"u","holderReference":{"apiVersion":"a","kind":"Cluster","namespace":"n","name":"c","fieldPath":"spec.infrastructureRef"},"object":{"kind":"T"},"variables":[]}"#;
        let bodies = [
            format!(
                r#"{{"apiVersion":"{api}","kind":"{k}","settings":{{"a":"b"}},"variables":[{{"name":"x","value":1}}],"items":[{item}]}}"#
            ),
            format!(r#"{{"kind":"{k}","items":[{item}],"apiVersion":"{api}"}}"#),
            // Duplicate keys: the last one wins on both paths.
            format!(r#"{{"apiVersion":"v1","apiVersion":"{api}","kind":"{k}","items":[{item}]}}"#),
            format!(
                r#"{{"apiVersion":"{api}","kind":"ValidateTopologyRequest","items":[{item}]}}"#
            ),
            format!(r#"{{"apiVersion":7,"kind":"{k}","items":[{item}]}}"#),
            format!(r#"{{"apiVersion":"{api}","kind":"{k}"}}"#),
            format!(r#"{{"apiVersion":"{api}","kind":"{k}","items":[{item}]}} x"#),
            format!(r#"{{"apiVersion":"{api}","kind":"{k}","settings":{{"a":1}},"items":[]}}"#),
        ];
        for body in &bodies {
            let one = decode_generate_patches(body.as_bytes());
            let generic: Result<GeneratePatchesRequest, _> =
                decode(Hook::GeneratePatches, body.as_bytes());
            assert_eq!(one, generic, "{body}");
        }
        assert!(decode_generate_patches(bodies[0].as_bytes()).is_ok());
        assert!(decode_generate_patches(bodies[2].as_bytes()).is_ok());
        assert!(decode_generate_patches(bodies[4].as_bytes()).is_err());
    }

    #[test]
    fn fast_and_slow_paths_agree() {
        let api = API_VERSION;
        let k = "BeforeClusterUpgradeRequest";
        let cluster = r#"{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","metadata":{"name":"c","namespace":"n"},"spec":{}}"#;
        let bodies = [
            format!(
                r#"{{"apiVersion":"{api}","kind":"{k}","cluster":{cluster},"fromKubernetesVersion":"v1.32.0","toKubernetesVersion":"v1.33.0"}}"#
            ),
            // Duplicate keys: the last one wins on both paths.
            format!(
                r#"{{"apiVersion":"v1","apiVersion":"{api}","kind":"{k}","cluster":{cluster},"fromKubernetesVersion":"v1.32.0","toKubernetesVersion":"v1.33.0","toKubernetesVersion":"v1.34.0"}}"#
            ),
            format!(
                r#"{{"apiVersion":"{api}","kind":"{k}","cluster":{cluster},"fromKubernetesVersion":1}}"#
            ),
            format!(r#"{{"apiVersion":"{api}","kind":"{k}"}}"#),
            format!(
                r#"{{"apiVersion":"{api}","kind":"{k}","cluster":{cluster},"fromKubernetesVersion":"v1.32.0","toKubernetesVersion":"v1.33.0"}} x"#
            ),
            format!(r#"{{"apiVersion":"{api}","kind":7}}"#),
        ];
        for body in &bodies {
            let fast: Result<BeforeUpgradeRequest, _> =
                decode(Hook::BeforeClusterUpgrade, body.as_bytes());
            let slow: Result<BeforeUpgradeRequest, _> =
                decode_slow(Hook::BeforeClusterUpgrade, body.as_bytes());
            assert_eq!(fast.is_ok(), slow.is_ok(), "{body}");
            match (fast, slow) {
                (Ok(a), Ok(b)) => assert_eq!(
                    serde_json::to_value(&a).unwrap(),
                    serde_json::to_value(&b).unwrap(),
                    "{body}"
                ),
                (Err(a), Err(b)) => assert_eq!(a, b, "{body}"),
                _ => unreachable!(),
            }
        }
        let first: BeforeUpgradeRequest =
            decode(Hook::BeforeClusterUpgrade, bodies[1].as_bytes()).unwrap();
        assert_eq!(
            serde_json::to_value(&first).unwrap()["toKubernetesVersion"],
            "v1.34.0"
        );
    }

    #[test]
    fn names_each_problem() {
        assert!(matches!(dec(""), Err(DecodeError::Empty { .. })));
        assert!(matches!(dec("{\"a\":"), Err(DecodeError::Syntax { .. })));
        assert!(matches!(
            dec("[]"),
            Err(DecodeError::NotObject { got: "an array" })
        ));
        let e = dec(r#"{"apiVersion":"v1","kind":"BeforeClusterUpgradeRequest"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "apiVersion is \"v1\", expected \"hooks.runtime.cluster.x-k8s.io/v1alpha1\""
        );
        let e = dec(r#"{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"X"}"#)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "kind is \"X\", expected \"BeforeClusterUpgradeRequest\""
        );
        let e = dec(r#"{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"BeforeClusterUpgradeRequest","cluster":{"metadata":{"name":"c"}},"toKubernetesVersion":"v1.2.3"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid BeforeClusterUpgradeRequest: missing field `fromKubernetesVersion`"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let body = format!(
            "{{\"apiVersion\":\"{API_VERSION}\",\"kind\":\"BeforeClusterUpgradeRequest\",\"x\":{}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(matches!(dec(&body), Err(DecodeError::Syntax { .. })));
    }
}

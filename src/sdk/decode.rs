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

/// Decodes the body of a `hook` request, checking `apiVersion` and `kind` first.
pub fn decode<T: DeserializeOwned>(hook: Hook, body: &[u8]) -> Result<T, DecodeError> {
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

//! Request decoding: bytes → typed request, with errors that name the problem.
//!
//! CAPI sends no Content-Type, so the body is the only thing we trust. Every error here
//! becomes an HTTP 200 `Failure` carrying this message, as CAPI's Go SDK server answers.

use serde::de::DeserializeOwned;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::clip::clip_to;
use super::{Hook, API_VERSION};

/// How much of a decoder's message an `Invalid` error keeps: serde quotes the value
/// that does not fit (a string where a list belongs), which may be megabytes.
const DETAIL_CHARS: usize = 256;

fn detail(message: String) -> String {
    match clip_to(&message, DETAIL_CHARS) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

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

/// How a header field that is not the expected string is shown: its JSON text, cut
/// short, so a huge value is never copied whole into the answer.
fn describe(v: Option<&RawValue>) -> String {
    const SHOWN: usize = 64;
    let Some(raw) = v else {
        return "missing".to_string();
    };
    let text = raw.get();
    if let Ok(s) = serde_json::from_str::<String>(text) {
        return format!("{:?}", cut(&s, SHOWN));
    }
    format!("not a string ({})", cut(text, SHOWN))
}

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

/// The JSON type a document starts with (the body is known to be valid JSON).
fn json_kind(body: &[u8]) -> &'static str {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// The two header fields as written, whatever their type; every other field is
/// skipped unread.
#[derive(serde::Deserialize)]
struct RawHeader<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
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

/// A GeneratePatches body as the engine reads it.
#[derive(Debug)]
pub enum GeneratePatchesBody<'a> {
    /// A well-formed request, its templates and variable values still JSON text.
    Raw(super::topology::RawGeneratePatchesRequest<'a>),
    /// A request only the full decoder reads (duplicate keys, where the last wins).
    Decoded(super::topology::GeneratePatchesRequest),
}

impl GeneratePatchesBody<'_> {
    /// `(namespace, name)` of the Cluster the request is for, when it says.
    pub fn cluster(&self) -> Option<(String, String)> {
        match self {
            GeneratePatchesBody::Raw(r) => r.cluster(),
            GeneratePatchesBody::Decoded(r) => r.cluster(),
        }
    }
}

/// `body` read as `T`: a UTF-8 body (any body CAPI sends) is checked as UTF-8 once, up
/// front, and then read as text, instead of checked again for every string and raw
/// part. Any other body is read as bytes, so the same bodies are accepted either way
/// (serde_json does not check a string it skips).
pub fn read_text<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

/// A GeneratePatches request in one pass over the body, its parts left raw (see
/// [`super::topology::RawGeneratePatchesRequest`]). Anything but a well-formed request
/// takes [`decode`]'s path, which names the problem.
pub fn decode_generate_patches_raw(body: &[u8]) -> Result<GeneratePatchesBody<'_>, DecodeError> {
    use super::common::Settings;
    use super::topology::{RawGeneratePatchesItem, RawGeneratePatchesRequest, RawVariable};
    use std::borrow::Cow;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Body<'a> {
        #[serde(borrow, default)]
        api_version: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        kind: Option<Cow<'a, str>>,
        #[serde(default, deserialize_with = "super::common::null_as_default")]
        settings: Settings,
        #[serde(borrow, default, deserialize_with = "super::common::null_as_default")]
        variables: Vec<RawVariable<'a>>,
        #[serde(borrow)]
        items: Vec<RawGeneratePatchesItem<'a>>,
    }
    let hook = Hook::GeneratePatches;
    match read_text::<Body>(body) {
        Ok(b)
            if b.api_version.as_deref() == Some(API_VERSION)
                && b.kind.as_deref() == Some(hook.request_kind().as_str()) =>
        {
            Ok(GeneratePatchesBody::Raw(RawGeneratePatchesRequest {
                settings: b.settings,
                variables: b.variables,
                items: b.items,
            }))
        }
        _ => decode(hook, body).map(GeneratePatchesBody::Decoded),
    }
}

/// Names the first problem of a body the fast path refused. It never builds a tree of
/// the document: syntax is checked by skipping over it, the header is read as raw
/// text, and the typed decode reports the path of the field that does not fit.
fn decode_slow<T: DeserializeOwned>(hook: Hook, body: &[u8]) -> Result<T, DecodeError> {
    let kind = hook.request_kind();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty { kind });
    }
    serde_json::from_slice::<IgnoredAny>(body).map_err(|e| DecodeError::Syntax {
        detail: e.to_string(),
    })?;
    let got = json_kind(body);
    if got != "an object" {
        return Err(DecodeError::NotObject { got });
    }
    let header: RawHeader = match serde_json::from_slice(body) {
        Ok(h) => h,
        Err(e) if is_duplicate(&e) => return decode_tree(hook, body),
        Err(e) => {
            return Err(DecodeError::Invalid {
                kind,
                detail: detail(e.to_string()),
            })
        }
    };
    let is = |v: Option<&RawValue>, want: &str| {
        v.and_then(|r| serde_json::from_str::<&str>(r.get()).ok()) == Some(want)
    };
    if !is(header.api_version, API_VERSION) {
        return Err(DecodeError::ApiVersion {
            got: describe(header.api_version),
        });
    }
    if !is(header.kind, &kind) {
        return Err(DecodeError::Kind {
            got: describe(header.kind),
            expected: kind,
        });
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize(de) {
        Ok(t) => Ok(t),
        Err(e) if is_duplicate(e.inner()) => decode_tree(hook, body),
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            Err(DecodeError::Invalid {
                kind,
                // Our own decoders' messages already start with the field's path.
                detail: if path == "." || inner.to_string().starts_with(&path) {
                    detail(inner.to_string())
                } else {
                    // A deeply nested field has a long path: cut apart from the
                    // message, so the problem is still said.
                    format!(
                        "{}: {}",
                        clip_to(&path, DETAIL_CHARS / 2),
                        detail(inner.to_string())
                    )
                },
            })
        }
    }
}

fn is_duplicate(e: &serde_json::Error) -> bool {
    e.is_data() && e.to_string().starts_with("duplicate field")
}

/// Go's encoding/json lets the last of duplicate keys win where serde's derived
/// decoders refuse them, so a body with duplicate keys (which CAPI never sends) is
/// decoded through a tree, which keeps the last. It is valid JSON within the body
/// limit by the time it gets here.
fn decode_tree<T: DeserializeOwned>(hook: Hook, body: &[u8]) -> Result<T, DecodeError> {
    let kind = hook.request_kind();
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| DecodeError::Syntax {
            detail: e.to_string(),
        })?;
    let field = |name: &str| {
        value
            .get(name)
            .map(|v| RawValue::from_string(v.to_string()).ok())
    };
    let (api_version, got_kind) = (field("apiVersion").flatten(), field("kind").flatten());
    let as_str = |v: &Option<Box<RawValue>>| {
        v.as_ref()
            .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
    };
    if as_str(&api_version).as_deref() != Some(API_VERSION) {
        return Err(DecodeError::ApiVersion {
            got: describe(api_version.as_deref()),
        });
    }
    if as_str(&got_kind).as_deref() != Some(kind.as_str()) {
        return Err(DecodeError::Kind {
            got: describe(got_kind.as_deref()),
            expected: kind,
        });
    }
    serde_json::from_value(value).map_err(|e| DecodeError::Invalid {
        kind,
        detail: detail(e.to_string()),
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
    fn bytes_that_are_not_utf8_are_refused_where_a_reader_keeps_them() {
        let api = API_VERSION;
        let k = "GeneratePatchesRequest";
        let body = |object: &str, value: &str| {
            format!(
                r#"{{"apiVersion":"{api}","kind":"{k}","variables":[{{"name":"x","value":{value}}}],"items":[{{"uid":"u","holderReference":{{"apiVersion":"a","kind":"Cluster","namespace":"n","name":"c","fieldPath":"f"}},"object":{object}}}]}}"#
            )
            .into_bytes()
        };
        let good = body(r#"{"kind":"T","spec":{"s":"MARK"}}"#, r#""MARK""#);
        assert!(matches!(
            decode_generate_patches_raw(&good),
            Ok(GeneratePatchesBody::Raw(_))
        ));
        // Invalid UTF-8 inside a template's string, and inside a variable's value: both
        // stay raw text on the fast path, and must not be accepted there.
        let at = good.windows(4).position(|w| w == b"MARK").unwrap();
        let last = good.windows(4).rposition(|w| w == b"MARK").unwrap();
        for i in [at, last] {
            let mut bad = good.clone();
            bad[i] = 0xff;
            assert!(decode_generate_patches_raw(&bad).is_err(), "byte {i}");
            assert!(decode_generate_patches(&bad).is_err(), "byte {i}");
        }
        // Inside a member no reader keeps, serde_json never looks at the string's bytes:
        // such a body is read on the fast path, UTF-8 or not.
        let extra = String::from_utf8(good.clone())
            .unwrap()
            .replacen(r#"{"apiVersion""#, r#"{"extra":"MARK","apiVersion""#, 1)
            .into_bytes();
        let mut bad = extra.clone();
        bad[extra.windows(4).position(|w| w == b"MARK").unwrap()] = 0xff;
        assert!(std::str::from_utf8(&bad).is_err());
        assert!(matches!(
            decode_generate_patches_raw(&bad),
            Ok(GeneratePatchesBody::Raw(_))
        ));
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
            "invalid BeforeClusterUpgradeRequest: missing field `fromKubernetesVersion` at line 1 column 160"
        );
        // The field that does not fit is named by its path.
        let e = dec(r#"{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"BeforeClusterUpgradeRequest","cluster":{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","metadata":{"name":"c","namespace":"n"},"spec":{}},"fromKubernetesVersion":7,"toKubernetesVersion":"v1.2.3"}"#).unwrap_err();
        assert!(
            e.to_string().starts_with("invalid BeforeClusterUpgradeRequest: fromKubernetesVersion: invalid type: integer `7`, expected a string"),
            "{e}"
        );
        // A huge header value is shown cut short.
        let e = dec(&format!(
            r#"{{"apiVersion":"{}","kind":"BeforeClusterUpgradeRequest"}}"#,
            "v".repeat(10_000)
        ))
        .unwrap_err();
        assert!(e.to_string().len() < 200, "{e}");
        assert!(e.to_string().starts_with("apiVersion is \"vvvv"), "{e}");
    }

    #[test]
    fn a_huge_value_that_does_not_fit_is_quoted_by_its_start() {
        let huge = "k".repeat(10_000);
        let upgrade = |extra: &str| {
            format!(
                r#"{{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"BeforeClusterUpgradeRequest","cluster":{{"metadata":{{"name":"c"}}}},"fromKubernetesVersion":"v1","toKubernetesVersion":"v2",{extra}}}"#
            )
        };
        let e = dec(&upgrade(&format!(r#""controlPlaneUpgrades":"{huge}""#))).unwrap_err();
        let e = e.to_string();
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
        assert!(
            e.starts_with(
                "invalid BeforeClusterUpgradeRequest: controlPlaneUpgrades: invalid type: string \"kkk"
            ),
            "{e}"
        );
        assert!(e.ends_with(" bytes)"), "{e}");
        // The same through the duplicate-key path.
        let e = dec(&upgrade(&format!(
            r#""controlPlaneUpgrades":[],"controlPlaneUpgrades":"{huge}""#
        )))
        .unwrap_err()
        .to_string();
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
        assert!(e.contains("invalid type: string \"kkk"), "{e}");
        // A short one is shown whole.
        let e = dec(&upgrade(r#""controlPlaneUpgrades":"short""#)).unwrap_err();
        assert!(
            e.to_string()
                .contains(r#"invalid type: string "short", expected a sequence"#),
            "{e}"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let body = format!(
            "{{\"apiVersion\":\"{API_VERSION}\",\"kind\":\"BeforeClusterUpgradeRequest\",\"x\":{}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        // Skipped without recursion (no stack to overflow) and without a tree; the
        // request is then refused for what it lacks.
        let e = dec(&body).unwrap_err();
        assert!(e.to_string().contains("missing field `cluster`"), "{e}");
        // Where the nesting is in a field that is decoded, serde_json's depth limit
        // refuses it.
        let body = format!(
            "{{\"apiVersion\":\"{API_VERSION}\",\"kind\":\"BeforeClusterUpgradeRequest\",\"cluster\":{{\"spec\":{}{}}}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = dec(&body).unwrap_err();
        assert!(e.to_string().contains("recursion limit exceeded"), "{e}");
    }
}

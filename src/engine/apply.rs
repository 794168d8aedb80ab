//! The three RFC 6902 operations packs emit (add, replace, remove), applied strictly,
//! as CAPI applies a patch to a template.
//!
//! Why not `json_patch::patch`: it reaches every parent through serde_json's
//! `Value::pointer_mut`, which allocates two `String`s per path token. The engine checks
//! every op of every request that misses the answer cache, so that was a measurable part
//! of a GeneratePatches call. Here a path is walked as tokens the caller decoded (a
//! pack's, once, at load). The outcome, including the error
//! kind, is the same as `json_patch`'s; a test compares the two on the same cases.

use std::borrow::Cow;

use json_patch::jsonptr::{index::Index, Pointer};
use json_patch::{PatchErrorKind, PatchOperation};
use serde_json::Value;

/// Applies one op to `doc`. On error `doc` is unchanged.
pub fn apply(doc: &mut Value, op: &PatchOperation) -> Result<(), PatchErrorKind> {
    apply_at(doc, op, &decoded_tokens(op.path()))
}

/// The tokens of `path`, decoded; borrowed unless a token holds an escape.
pub fn decoded_tokens(path: &Pointer) -> Vec<Cow<'_, str>> {
    path.tokens()
        .map(|t| {
            if t.encoded().contains('~') {
                Cow::Owned(t.decoded().into_owned())
            } else {
                t.into_encoded()
            }
        })
        .collect()
}

/// [`apply`] for an op whose path is `tokens`, decoded: a pack's paths are split once,
/// when it is loaded, instead of on every call.
pub fn apply_at<S: AsRef<str>>(
    doc: &mut Value,
    op: &PatchOperation,
    tokens: &[S],
) -> Result<(), PatchErrorKind> {
    match op {
        PatchOperation::Add(a) => add(doc, tokens, a.value.clone()),
        PatchOperation::Replace(r) => {
            *resolve_mut(doc, tokens).ok_or(PatchErrorKind::InvalidPointer)? = r.value.clone();
            Ok(())
        }
        PatchOperation::Remove(_) => remove(doc, tokens),
        // Packs emit no other op; anything else goes through the library.
        other => json_patch::patch_unsafe(doc, std::slice::from_ref(other)).map_err(|e| e.kind),
    }
}

/// The value at `tokens`, as `Value::pointer_mut` finds it.
fn resolve_mut<'v, S: AsRef<str>>(doc: &'v mut Value, tokens: &[S]) -> Option<&'v mut Value> {
    tokens.iter().try_fold(doc, |cur, tok| match cur {
        Value::Object(m) => m.get_mut(tok.as_ref()),
        Value::Array(a) => array_index(tok.as_ref()).and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// An array index as `Value::pointer_mut` reads one: decimal digits without a leading
/// zero; `-` and anything else name no element. (A token that decodes differently from
/// its encoding holds `~` or `/`, and is no index either way.)
fn array_index(s: &str) -> Option<usize> {
    if s.is_empty() || s.starts_with('+') || (s.starts_with('0') && s.len() != 1) {
        return None;
    }
    s.parse().ok()
}

fn add<S: AsRef<str>>(doc: &mut Value, tokens: &[S], value: Value) -> Result<(), PatchErrorKind> {
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match resolve_mut(doc, parent).ok_or(PatchErrorKind::InvalidPointer)? {
        Value::Object(m) => {
            m.insert(last.as_ref().to_string(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = to_index(last.as_ref(), a.len(), true)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(PatchErrorKind::InvalidPointer),
    }
}

fn remove<S: AsRef<str>>(doc: &mut Value, tokens: &[S]) -> Result<(), PatchErrorKind> {
    let Some((last, parent)) = tokens.split_last() else {
        return Err(PatchErrorKind::InvalidPointer);
    };
    match resolve_mut(doc, parent).ok_or(PatchErrorKind::InvalidPointer)? {
        Value::Object(m) => m
            .remove(last.as_ref())
            .map(drop)
            .ok_or(PatchErrorKind::InvalidPointer),
        Value::Array(a) => {
            let i = to_index(last.as_ref(), a.len(), false)?;
            a.remove(i);
            Ok(())
        }
        _ => Err(PatchErrorKind::InvalidPointer),
    }
}

/// The array position `tok` names: up to `len` inclusive (`-` is `len`) for an
/// insertion, below `len` for a removal.
fn to_index(tok: &str, len: usize, inserting: bool) -> Result<usize, PatchErrorKind> {
    let i = match tok
        .parse::<Index>()
        .map_err(|_| PatchErrorKind::InvalidPointer)?
    {
        Index::Num(i) => i,
        Index::Next if inserting => len,
        Index::Next => return Err(PatchErrorKind::InvalidPointer),
    };
    if i < len || (inserting && i == len) {
        Ok(i)
    } else {
        Err(PatchErrorKind::InvalidPointer)
    }
}

#[cfg(test)]
mod tests {
    use super::apply;
    use json_patch::PatchOperation;
    use serde_json::{json, Value};

    /// Every op of `ops` on a copy of `doc`, here and through `json_patch`, one op at a
    /// time: the documents and the error kinds (as text) must agree.
    fn agree(doc: &Value, op: Value) {
        let op: PatchOperation = serde_json::from_value(op).expect("op");
        let mut ours = doc.clone();
        let mut theirs = doc.clone();
        let a = apply(&mut ours, &op).map_err(|e| e.to_string());
        let b = json_patch::patch(&mut theirs, std::slice::from_ref(&op))
            .map_err(|e| e.kind.to_string());
        assert_eq!(a, b, "outcome of {op:?} on {doc}");
        assert_eq!(ours, theirs, "document after {op:?} on {doc}");
    }

    #[test]
    fn agrees_with_json_patch() {
        let doc = json!({
            "spec": {
                "files": [{"path": "/a"}, {"path": "/b"}],
                "a~b": {"c/d": 1},
                "n": null,
                "s": "x",
                "": {"empty": true},
                "m": {"0": "zero", "01": "one"}
            }
        });
        let paths = [
            "",
            "/",
            "/spec",
            "/spec/files",
            "/spec/files/0",
            "/spec/files/1",
            "/spec/files/2",
            "/spec/files/3",
            "/spec/files/-",
            "/spec/files/00",
            "/spec/files/01",
            "/spec/files/+1",
            "/spec/files/-1",
            "/spec/files/x",
            "/spec/files/0/path",
            "/spec/files/-/path",
            "/spec/files/1/new",
            "/spec/files/18446744073709551616",
            "/spec/a~0b",
            "/spec/a~0b/c~1d",
            "/spec/a~1b",
            "/spec/n",
            "/spec/n/x",
            "/spec/s",
            "/spec/s/0",
            "/spec//empty",
            "/spec/",
            "/spec/m/0",
            "/spec/m/01",
            "/spec/m/-",
            "/missing/x",
            "/spec/new",
            "/spec/new/deeper",
        ];
        for p in paths {
            agree(&doc, json!({"op": "add", "path": p, "value": {"v": 1}}));
            agree(&doc, json!({"op": "replace", "path": p, "value": [1, 2]}));
            agree(&doc, json!({"op": "remove", "path": p}));
        }
        for top in [json!([1, 2]), json!("s"), json!(null), json!({})] {
            for p in ["", "/0", "/-", "/1", "/2", "/a"] {
                agree(&top, json!({"op": "add", "path": p, "value": 3}));
                agree(&top, json!({"op": "replace", "path": p, "value": 3}));
                agree(&top, json!({"op": "remove", "path": p}));
            }
        }
    }

    #[test]
    fn other_ops_go_through_the_library() {
        let doc = json!({"a": 1});
        agree(&doc, json!({"op": "test", "path": "/a", "value": 1}));
        agree(&doc, json!({"op": "test", "path": "/a", "value": 2}));
        agree(&doc, json!({"op": "copy", "from": "/a", "path": "/b"}));
        agree(&doc, json!({"op": "move", "from": "/a", "path": "/b"}));
    }
}

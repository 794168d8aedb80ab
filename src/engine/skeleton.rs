//! The part of a template that a list of JSON patch ops can reach, built as a tree.
//!
//! The engine applies every op to a copy of its template, to fail where CAPI would.
//! Whether an add, replace or remove succeeds depends only on the nodes along its path:
//! each parent's presence and type, an array's length, the target's presence. So only
//! those nodes are built; every other value is read as strictly as building it would
//! read it (a number beyond `f64`, a lone surrogate escape, nesting deeper than serde's
//! limit fail the same way, at the same place) and then dropped. An array that a path
//! goes through keeps every element whole, since an insertion or removal before an
//! element moves it under another index. A node no path goes below is kept as `null`:
//! its key or place is all an op looks at.
//!
//! Building the whole template, and dropping it after, was the larger part of checking
//! the ops of a request that misses the answer cache.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::sdk::topology::{Key, RawObject};

/// The paths of a list of ops, as a tree of decoded tokens.
#[derive(Debug, Default)]
pub struct Paths<'o> {
    next: Vec<(&'o str, Paths<'o>)>,
}

impl<'o> Paths<'o> {
    /// From each op's path as decoded tokens.
    pub fn of<S: AsRef<str> + 'o>(paths: impl IntoIterator<Item = &'o [S]>) -> Paths<'o> {
        let mut root = Paths::default();
        for tokens in paths {
            let mut node = &mut root;
            for key in tokens.iter().map(AsRef::as_ref) {
                let i = match node.next.iter().position(|(k, _)| *k == key) {
                    Some(i) => i,
                    None => {
                        node.next.push((key, Paths::default()));
                        node.next.len() - 1
                    }
                };
                node = &mut node.next[i].1;
            }
        }
        root
    }

    fn child(&self, key: &str) -> Option<&Paths<'o>> {
        self.next.iter().find(|(k, _)| *k == key).map(|(_, n)| n)
    }

    /// No path goes below this node's children.
    fn ends_below(&self) -> bool {
        self.next.iter().all(|(_, n)| n.next.is_empty())
    }
}

/// A template given as its top-level fields: the part `paths` reach. Fields are read in
/// order and a repeated key keeps its last value, as building the template does.
pub fn build_fields(fields: &RawObject<'_>, paths: &Paths<'_>) -> Result<Value, serde_json::Error> {
    let mut m = Map::new();
    for (k, v) in &fields.0 {
        match paths.child(k) {
            Some(node) => {
                m.insert(k.to_string(), build_text(v, node)?);
            }
            None => check_text(v)?,
        }
    }
    Ok(Value::Object(m))
}

/// A template given as JSON text: the part `paths` reach.
pub fn build_raw(raw: &RawValue, paths: &Paths<'_>) -> Result<Value, serde_json::Error> {
    build_text(raw, paths)
}

fn build_text(raw: &RawValue, node: &Paths<'_>) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let v = Reach(node).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

fn check_text(raw: &RawValue) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    Check.deserialize(&mut de)?;
    de.end()
}

/// Builds the nodes of one value that a [`Paths`] node reaches.
struct Reach<'n, 'o>(&'n Paths<'o>);

impl<'de> DeserializeSeed<'de> for Reach<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0.next.is_empty() {
            Check.deserialize(d)?;
            return Ok(Value::Null);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reach<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        if self.0.ends_below() {
            // Only positions matter: the elements are checked and kept as placeholders.
            while seq.next_element_seed(Check)?.is_some() {
                out.push(Value::Null);
            }
        } else {
            while let Some(v) = seq.next_element::<Value>()? {
                out.push(v);
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut m = Map::new();
        let mut first = true;
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            if std::mem::take(&mut first) && k == RAW_VALUE_KEY {
                return raw_value_object(&mut map);
            }
            match self.0.child(&k) {
                Some(node) => {
                    let v = map.next_value_seed(Reach(node))?;
                    m.insert(k.into_owned(), v);
                }
                None => map.next_value_seed(Check)?,
            }
        }
        Ok(Value::Object(m))
    }
}

/// Reads a value as building it would, keeping nothing. Unlike
/// [`serde::de::IgnoredAny`], which
/// skips numbers and strings without decoding them, every scalar is decoded.
struct Check;

impl<'de> DeserializeSeed<'de> for Check {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Check)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Keys are strings: decoding one as a string checks it as building would.
        let Some(Key(first)) = map.next_key::<Key<'de>>()? else {
            return Ok(());
        };
        if first == RAW_VALUE_KEY {
            return raw_value_object(&mut map).map(drop);
        }
        map.next_value_seed(Check)?;
        while map.next_key_seed(Check)?.is_some() {
            map.next_value_seed(Check)?;
        }
        Ok(())
    }
}

/// serde_json's `raw_value` feature (on here) makes `Value` read an object whose first
/// key is this as the JSON text held in that key's value. Templates never hold such a
/// key, but the skeleton reads what building reads, so it does the same.
const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// The rest of an object whose first key is [`RAW_VALUE_KEY`], read as `Value` reads
/// it: the value must be a string, parsed as JSON; any member after it is left for
/// serde_json to refuse at the object's end.
fn raw_value_object<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Value, A::Error> {
    struct Text;
    impl<'de> DeserializeSeed<'de> for Text {
        type Value = String;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("raw value")
        }
        fn visit_str<E>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    let text = map.next_value_seed(Text)?;
    serde_json::from_str(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::apply::{apply, decoded_tokens};
    use json_patch::PatchOperation;
    use serde_json::json;

    /// The tokens of each op's path.
    fn tokens(ops: &[PatchOperation]) -> Vec<Vec<String>> {
        ops.iter()
            .map(|o| {
                decoded_tokens(o.path())
                    .into_iter()
                    .map(String::from)
                    .collect()
            })
            .collect()
    }

    fn paths(tokens: &[Vec<String>]) -> Paths<'_> {
        Paths::of(tokens.iter().map(Vec::as_slice))
    }

    fn op(v: Value) -> PatchOperation {
        serde_json::from_value(v).expect("op")
    }

    fn fields(text: &str) -> RawObject<'_> {
        serde_json::from_str(text).expect("object")
    }

    /// Each op applied in turn to the whole template and to what its ops reach: the
    /// outcomes must agree, and so must every value an op put in place.
    fn agree(text: &str, ops: &[PatchOperation]) {
        let mut whole: Value = serde_json::from_str(text).unwrap();
        let mut reached = build_fields(&fields(text), &paths(&tokens(ops))).unwrap();
        for op in ops {
            let a = apply(&mut whole, op).map_err(|e| e.to_string());
            let b = apply(&mut reached, op).map_err(|e| e.to_string());
            assert_eq!(a, b, "{op:?} on {text}");
            if a.is_ok() && !matches!(op, PatchOperation::Remove(_)) {
                let p = op.path().as_str();
                assert_eq!(whole.pointer(p), reached.pointer(p), "{op:?} on {text}");
            }
        }
    }

    #[test]
    fn ops_succeed_and_fail_as_on_the_whole_template() {
        let text = r#"{
            "apiVersion": "v1", "kind": "T", "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {
                "files": [{"path": "/a"}, {"path": "/b", "content": "x"}],
                "s": "string", "n": null, "e": {},
                "a~b": {"c/d": 1},
                "deep": {"x": {"y": [1, 2, {"z": true}]}}
            }
        }"#;
        let paths = [
            "",
            "/spec",
            "/spec/files",
            "/spec/files/0",
            "/spec/files/1/content",
            "/spec/files/-",
            "/spec/files/2",
            "/spec/files/3",
            "/spec/s",
            "/spec/s/x",
            "/spec/n",
            "/spec/n/x",
            "/spec/e/new",
            "/spec/missing/x",
            "/spec/a~0b/c~1d",
            "/spec/deep/x/y/2/z",
            "/spec/deep/x/y/-",
            "/spec/deep/x/y/0",
            "/metadata/labels/a",
            "/metadata/name",
            "/kind",
        ];
        for p in paths {
            for o in ["add", "replace", "remove"] {
                agree(text, &[op(json!({"op": o, "path": p, "value": {"v": 1}}))]);
            }
        }
        // Sequences whose later ops go through what earlier ones put or moved.
        let seqs = [
            vec![
                json!({"op": "add", "path": "/spec/files/0", "value": {"path": "/new"}}),
                json!({"op": "replace", "path": "/spec/files/1/content", "value": "y"}),
                json!({"op": "remove", "path": "/spec/files/2/content"}),
            ],
            vec![
                json!({"op": "remove", "path": "/spec/files/0"}),
                json!({"op": "replace", "path": "/spec/files/0/content", "value": "y"}),
            ],
            vec![
                json!({"op": "add", "path": "/spec/e/new", "value": {"k": [1]}}),
                json!({"op": "add", "path": "/spec/e/new/k/-", "value": 2}),
                json!({"op": "replace", "path": "/spec/e/new/k/1", "value": 3}),
            ],
            vec![
                json!({"op": "remove", "path": "/spec/deep"}),
                json!({"op": "add", "path": "/spec/deep/x", "value": 1}),
            ],
            vec![
                json!({"op": "add", "path": "/spec/files/-", "value": {"path": "/c"}}),
                json!({"op": "remove", "path": "/spec/files/0"}),
                json!({"op": "replace", "path": "/spec/files/2", "value": {}}),
            ],
        ];
        // An object that serde_json reads as raw JSON text (see `RAW_VALUE_KEY`).
        let raw = r#"{"spec": {"x": {"$serde_json::private::RawValue": "{\"a\": [1]}"}}}"#;
        for o in ["add", "replace", "remove"] {
            for p in [
                "/spec/x/a",
                "/spec/x/a/0",
                "/spec/x/$serde_json::private::RawValue",
            ] {
                agree(raw, &[op(json!({"op": o, "path": p, "value": 2}))]);
            }
        }
        for seq in seqs {
            let ops: Vec<PatchOperation> = seq.into_iter().map(op).collect();
            agree(text, &ops);
        }
    }

    #[test]
    fn only_what_the_paths_reach_is_built() {
        let text = r#"{"kind": "T", "metadata": {"name": "n"},
            "spec": {"big": {"k": [1, 2, 3]}, "files": [{"a": 1}, {"b": 2}], "x": {"y": 1}}}"#;
        let ops = [
            op(json!({"op": "add", "path": "/spec/files/-", "value": {}})),
            op(json!({"op": "replace", "path": "/spec/x/y", "value": 2})),
        ];
        let got = build_fields(&fields(text), &paths(&tokens(&ops))).unwrap();
        // Elements of an array no path goes through keep only their places; a target
        // keeps only its key.
        assert_eq!(
            got,
            json!({"spec": {"files": [null, null], "x": {"y": null}}})
        );
        // A path through an element keeps the whole array.
        let ops = [op(json!({"op": "remove", "path": "/spec/files/1/b"}))];
        let got = build_fields(&fields(text), &paths(&tokens(&ops))).unwrap();
        assert_eq!(got, json!({"spec": {"files": [{"a": 1}, {"b": 2}]}}));
    }

    #[test]
    fn values_no_tree_can_hold_fail_as_building_fails() {
        let ops = [op(json!({"op": "add", "path": "/spec/x", "value": 1}))];
        let cases = [
            r#"{"spec": {}, "other": {"n": 1e400}}"#,
            r#"{"spec": {"deep": [1, -1e999]}}"#,
            r#"{"spec": {}, "other": "\ud800"}"#,
            r#"{"spec": {"\udc00": 1}}"#,
            r#"{"metadata": {"labels": {"k\ud800": "v"}}, "spec": {}}"#,
            r#"{"spec": {}, "o": {"$serde_json::private::RawValue": 1}}"#,
            r#"{"spec": {"x": {"$serde_json::private::RawValue": "1e400"}}}"#,
            r#"{"spec": {"x": [{"$serde_json::private::RawValue": "[1,"}]}}"#,
            r#"{"spec": {}, "o": {"$serde_json::private::RawValue": "1", "b": 2}}"#,
        ];
        for text in cases {
            let whole = fields(text).build().expect_err(text).to_string();
            let reached = build_fields(&fields(text), &paths(&tokens(&ops)))
                .expect_err(text)
                .to_string();
            assert_eq!(whole, reached, "{text}");
        }
        let nested = format!(
            r#"{{"spec": {{}}, "other": {}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let whole = fields(&nested).build().expect_err("nesting").to_string();
        let reached = build_fields(&fields(&nested), &paths(&tokens(&ops)))
            .expect_err("nesting")
            .to_string();
        assert_eq!(whole, reached);
        // The same text as one value.
        let raw: &RawValue = serde_json::from_str(r#"{"spec": {}, "o": 1e400}"#).unwrap();
        assert!(build_raw(raw, &paths(&tokens(&ops))).is_err());
    }
}

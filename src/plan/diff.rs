//! Field-by-field differences of two JSON values, as `a.b[2].c` paths.

use serde_json::Value;

/// One differing field; `None` is "absent".
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FieldChange {
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

/// The leaves where `old` and `new` differ, in path order. Lists of the same length
/// are compared item by item; lists of different lengths are one change (an added
/// item shifts every index after it, which would only be noise).
pub fn diff(prefix: &str, old: Option<&Value>, new: Option<&Value>) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk(prefix, old, new, &mut out);
    out
}

fn join(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (prefix.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{prefix}.{key}"),
        // Label keys hold dots and slashes: quoted, as kubectl's jsonpath does.
        (_, false) => format!("{prefix}[{}]", Value::from(key)),
    }
}

fn walk(path: &str, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<FieldChange>) {
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                walk(&join(path, k), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(&format!("{path}[{i}]"), Some(x), Some(y), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            path: path.to_string(),
            old: a.cloned(),
            new: b.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leaves_and_label_keys() {
        let a = json!({"spec": {"flavor": "m1", "list": [1, 2], "x": {"y": 1}},
                       "labels": {"a.io/b": "1"}});
        let b = json!({"spec": {"flavor": "m2", "list": [1, 3], "z": true},
                       "labels": {"a.io/b": "2"}});
        let d = diff("", Some(&a), Some(&b));
        let paths: Vec<&str> = d.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "labels[\"a.io/b\"]",
                "spec.flavor",
                "spec.list[1]",
                "spec.x",
                "spec.z"
            ]
        );
        assert_eq!(d[3].new, None);
        assert_eq!(d[4].old, None);
    }

    #[test]
    fn lists_of_other_lengths_are_one_change() {
        let d = diff("l", Some(&json!([1])), Some(&json!([1, 2])));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].path, "l");
        assert!(diff("", Some(&json!({"a": 1})), Some(&json!({"a": 1}))).is_empty());
    }
}

//! Variable values as a patch sees them: global values merged with per-item values,
//! and CAPI's dotted path syntax for `valueFrom.variable`.

use serde_json::{Map, Value};

use crate::sdk::common::Variable;

/// The name CAPI reserves for its builtin variable.
pub const BUILTIN: &str = "builtin";

/// Merges global and per-item variables the way CAPI's `MergeVariableMaps` does:
/// a per-item value (an MD/MP/CP override) replaces the global one of the same name,
/// except `builtin`, whose two halves (`cluster` globally, `machineDeployment` etc.
/// per item) are deep-merged.
pub fn merge(global: &[Variable], item: &[Variable]) -> Map<String, Value> {
    let mut out = Map::new();
    for v in global.iter().chain(item) {
        match out.get_mut(&v.name) {
            Some(existing) if v.name == BUILTIN => deep_merge(existing, &v.value),
            _ => {
                out.insert(v.name.clone(), v.value.clone());
            }
        }
    }
    out
}

/// [`merge`] taking the values: no copies.
pub fn merge_owned(vars: Vec<Variable>) -> Map<String, Value> {
    let mut out = Map::new();
    for v in vars {
        match out.get_mut(&v.name) {
            Some(existing) if v.name == BUILTIN => deep_merge(existing, &v.value),
            _ => {
                out.insert(v.name, v.value);
            }
        }
    }
    out
}

/// Objects merge key by key; anything else is replaced (as Go's JSON decoding into
/// an existing struct does).
pub fn deep_merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => deep_merge(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, from) => *into = from.clone(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariableError {
    #[error("variable {0:?} not found")]
    NotFound(String),
    #[error("variable path {path:?}: {problem}")]
    Path { path: String, problem: String },
}

/// Reads `name`, `name.key.key`, `name[0].key[2]` from the merged variables.
/// Keys containing `.` cannot be addressed, as in CAPI.
pub fn lookup<'a>(vars: &'a Map<String, Value>, path: &str) -> Result<&'a Value, VariableError> {
    lookup_in(|name| vars.get(name), path)
}

/// [`lookup`] over any way of finding a top-level variable by name.
pub fn lookup_in<'a>(
    get: impl FnOnce(&str) -> Option<&'a Value>,
    path: &str,
) -> Result<&'a Value, VariableError> {
    let bad = |problem: String| VariableError::Path {
        path: path.to_string(),
        problem,
    };
    let mut segments = path.split('.');
    let first = segments.next().unwrap_or_default();
    let (name, indexes) = split_indexes(first).map_err(bad)?;
    let mut cur = get(name).ok_or_else(|| VariableError::NotFound(name.to_string()))?;
    cur = index_into(cur, name, &indexes).map_err(bad)?;
    for seg in segments {
        let (key, indexes) = split_indexes(seg).map_err(bad)?;
        cur = match cur {
            Value::Object(m) => m.get(key).ok_or_else(|| bad(format!("no field {key:?}")))?,
            _ => return Err(bad(format!("cannot read field {key:?}: not an object"))),
        };
        cur = index_into(cur, key, &indexes).map_err(bad)?;
    }
    Ok(cur)
}

/// `key[1][2]` → (`key`, [1, 2]).
fn split_indexes(seg: &str) -> Result<(&str, Vec<usize>), String> {
    let Some(open) = seg.find('[') else {
        if seg.is_empty() {
            return Err("empty path segment".into());
        }
        return Ok((seg, Vec::new()));
    };
    let key = &seg[..open];
    if key.is_empty() {
        return Err(format!("segment {seg:?} has no name before '['"));
    }
    let mut rest = &seg[open..];
    let mut idx = Vec::new();
    while !rest.is_empty() {
        let inner = rest
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .ok_or_else(|| format!("malformed index in {seg:?}"))?;
        let n = inner.0.parse::<usize>().map_err(|_| {
            format!(
                "index {:?} in {seg:?} is not a non-negative integer",
                inner.0
            )
        })?;
        idx.push(n);
        rest = inner.1;
    }
    Ok((key, idx))
}

fn index_into<'a>(mut v: &'a Value, key: &str, idx: &[usize]) -> Result<&'a Value, String> {
    for &i in idx {
        v = match v {
            Value::Array(a) => a.get(i).ok_or_else(|| {
                format!("index {i} out of range for {key:?} (length {})", a.len())
            })?,
            _ => return Err(format!("cannot index {key:?}: not a list")),
        };
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn var(name: &str, value: Value) -> Variable {
        Variable {
            name: name.into(),
            value,
        }
    }

    #[test]
    fn item_wins_and_builtin_deep_merges() {
        let g = [
            var("a", json!(1)),
            var(
                "builtin",
                json!({"cluster": {"name": "c1", "topology": {"version": "v1"}}}),
            ),
        ];
        let i = [
            var("a", json!(2)),
            var(
                "builtin",
                json!({"machineDeployment": {"class": "w"}, "cluster": {"topology": {"class": "cc"}}}),
            ),
        ];
        let m = merge(&g, &i);
        assert_eq!(m["a"], 2);
        assert_eq!(m["builtin"]["cluster"]["name"], "c1");
        assert_eq!(m["builtin"]["cluster"]["topology"]["version"], "v1");
        assert_eq!(m["builtin"]["cluster"]["topology"]["class"], "cc");
        assert_eq!(m["builtin"]["machineDeployment"]["class"], "w");
    }

    #[test]
    fn paths() {
        let m = merge(&[var("a", json!({"b": [{"c": 1}, {"c": [5, 6]}]}))], &[]);
        assert_eq!(lookup(&m, "a.b[1].c[1]").unwrap(), &json!(6));
        assert_eq!(lookup(&m, "a.b[0]").unwrap(), &json!({"c": 1}));
        assert_eq!(
            lookup(&m, "zz.b").unwrap_err(),
            VariableError::NotFound("zz".into())
        );
        assert!(lookup(&m, "a.b[7]").is_err());
        assert!(lookup(&m, "a.x").is_err());
        assert!(lookup(&m, "a.b[-1]").is_err());
    }
}

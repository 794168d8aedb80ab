//! Template output → JSON the way `sigs.k8s.io/yaml` (go-yaml v2, YAML 1.1) does it.
//!
//! The YAML event stream comes from `granit-parser`; every **plain** scalar is then
//! resolved with go-yaml v2's rules (`yes`/`on`/`y` → true, `010` → 8, `1_000` → 1000,
//! `1.20` → 1.2, `~` → null, timestamps stay strings). Quoted and block scalars stay
//! strings. Only the first document is read, as `yaml.Unmarshal` does.

use std::collections::HashMap;

use granit_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

use super::parse::parse_go_int;
use super::value::format_g;

/// Nodes an output may expand to (aliases included).
const MAX_NODES: usize = 1_000_000;
/// Collection nesting depth.
const MAX_DEPTH: usize = 512;

#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
}

/// go-yaml v2 `resolve` for a plain scalar.
fn resolve_plain(s: &str) -> Scalar {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false)
        }
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    let first = s.as_bytes()[0];
    match first {
        b'.' => {
            if let Ok(f) = s.parse::<f64>() {
                if is_yaml_float(s) {
                    return Scalar::Float(f);
                }
            }
        }
        b'+' | b'-' | b'0'..=b'9' => {
            if is_timestamp(s) {
                return Scalar::Str(s.to_string());
            }
            let plain: String = s.chars().filter(|c| *c != '_').collect();
            if let Some(i) = go_parse_int(&plain) {
                return Scalar::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain) {
                return Scalar::Uint(u);
            }
            if is_yaml_float(&plain) {
                if let Ok(f) = plain.parse::<f64>() {
                    return Scalar::Float(f);
                }
            }
            if let Some(b) = plain.strip_prefix("0b") {
                if let Ok(i) = i64::from_str_radix(b, 2) {
                    return Scalar::Int(i);
                }
            } else if let Some(b) = plain.strip_prefix("-0b") {
                if let Ok(i) = i64::from_str_radix(b, 2) {
                    return Scalar::Int(-i);
                }
            }
        }
        _ => {}
    }
    Scalar::Str(s.to_string())
}

/// `strconv.ParseInt(s, 0, 64)` (underscores already removed).
fn go_parse_int(s: &str) -> Option<i64> {
    if s.is_empty() || s.contains('_') {
        return None;
    }
    parse_go_int(s)
}

fn go_parse_uint(s: &str) -> Option<u64> {
    if s.starts_with(['-', '+']) || s.is_empty() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let (radix, d) = if let Some(r) = lower.strip_prefix("0x") {
        (16, r)
    } else if let Some(r) = lower.strip_prefix("0o") {
        (8, r)
    } else if let Some(r) = lower.strip_prefix("0b") {
        (2, r)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if d.is_empty() {
        return None;
    }
    u64::from_str_radix(d, radix).ok()
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let st = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - st
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// go-yaml v2 timestamp formats: `2006-1-2T15:4:5.999999999Z07:00`,
/// `2006-1-2t15:4:5.999999999Z07:00`, `2006-1-2 15:4:5.999999999`, `2006-1-2`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    // Quick check as in go-yaml: YYYY-
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let (date, rest) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let ok_num = |p: &str, max: usize| {
        !p.is_empty() && p.len() <= max && p.bytes().all(|c| c.is_ascii_digit())
    };
    if parts.len() != 3 || parts[0].len() != 4 || !ok_num(parts[1], 2) || !ok_num(parts[2], 2) {
        return false;
    }
    let (Ok(m), Ok(d)) = (parts[1].parse::<u32>(), parts[2].parse::<u32>()) else {
        return false;
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return false;
    }
    let Some(time) = rest else { return true };
    // h:m:s[.frac][zone]
    let tb = time.as_bytes();
    let mut i = 0;
    let field = |i: &mut usize| {
        let st = *i;
        while *i < tb.len() && tb[*i].is_ascii_digit() {
            *i += 1;
        }
        (1..=2).contains(&(*i - st))
    };
    if !field(&mut i) || tb.get(i) != Some(&b':') {
        return false;
    }
    i += 1;
    if !field(&mut i) || tb.get(i) != Some(&b':') {
        return false;
    }
    i += 1;
    if !field(&mut i) {
        return false;
    }
    if tb.get(i) == Some(&b'.') {
        i += 1;
        while i < tb.len() && tb[i].is_ascii_digit() {
            i += 1;
        }
    }
    let zone = &time[i..];
    if zone.is_empty() {
        return true;
    }
    if s.contains(' ') {
        return false;
    }
    zone == "Z"
        || (zone.len() == 6
            && matches!(zone.as_bytes()[0], b'+' | b'-')
            && zone.as_bytes()[3] == b':'
            && zone[1..3].bytes().all(|c| c.is_ascii_digit())
            && zone[4..].bytes().all(|c| c.is_ascii_digit()))
}

fn scalar_to_json(s: Scalar) -> Result<Value, String> {
    Ok(match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::from(i),
        Scalar::Uint(u) => Value::from(u),
        Scalar::Float(f) => float_json(f)?,
        Scalar::Str(s) => Value::String(s),
    })
}

/// A float64 after `json.Marshal` and decoding: integral values are JSON integers.
fn float_json(f: f64) -> Result<Value, String> {
    if !f.is_finite() {
        return Err(format!("json: unsupported value: {}", format_g(f)));
    }
    if f.fract() == 0.0 && f.abs() < 1e21 {
        if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
            return Ok(Value::from(f as i64));
        }
        if (0.0..1.844_674_407_370_955_2e19).contains(&f) {
            return Ok(Value::from(f as u64));
        }
    }
    Ok(Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null))
}

/// The string form of a non-string map key (sigs.k8s.io/yaml's conversion).
fn key_string(s: &Scalar) -> Result<String, String> {
    Ok(match s {
        Scalar::Str(s) => s.clone(),
        Scalar::Int(i) => i.to_string(),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Float(f) => {
            let g = format_g((*f as f32) as f64);
            match g.as_str() {
                "+Inf" => ".inf".into(),
                "-Inf" => "-.inf".into(),
                "NaN" => ".nan".into(),
                _ => g,
            }
        }
        Scalar::Uint(u) => return Err(format!("unsupported map key of type: uint64, key: {u}")),
        Scalar::Null => return Err("unsupported map key of type: <nil>".into()),
    })
}

enum Frame {
    Seq(Vec<Value>, usize),
    /// Entries, pending key, anchor, keys set by merge (`<<`) that explicit keys may override.
    Map(Map<String, Value>, Option<KeyState>, usize),
}

enum KeyState {
    Key(String),
    Merge,
}

/// Why a text is not YAML, or not YAML that converts to JSON.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct YamlError(String);

/// The first YAML document of `text` as JSON, as `yaml.Unmarshal` reads it.
pub fn to_json(text: &str) -> Result<Value, YamlError> {
    Ok(read(text, false)
        .map_err(YamlError)?
        .into_iter()
        .next()
        .unwrap_or(Value::Null))
}

/// Every non-empty document of a `---`-separated stream, as kubectl reads a manifest
/// file (`sigs.k8s.io/yaml`, so `enabled: yes` is `true` there and here).
pub fn stream_to_json(text: &str) -> Result<Vec<Value>, YamlError> {
    read(text, true).map_err(YamlError)
}

fn read(text: &str, all: bool) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut anchors: HashMap<usize, Value> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut result: Option<Value> = None;
    let mut nodes = 0usize;
    let mut seen_doc = false;
    for ev in Parser::new_from_str(text) {
        let (ev, _span) = ev.map_err(|e| e.to_string())?;
        // A finished value to hand to the parent, and whether it is a scalar key candidate.
        let (value, key_scalar, anchor): (Value, Option<Scalar>, usize) = match ev {
            Event::StreamStart | Event::StreamEnd => continue,
            Event::DocumentStart(..) => {
                if seen_doc && !all {
                    break;
                }
                seen_doc = true;
                continue;
            }
            Event::DocumentEnd => {
                if all {
                    out.extend(result.take().filter(|v| !v.is_null()));
                    anchors.clear();
                    continue;
                }
                if result.is_some() || stack.is_empty() {
                    break;
                }
                continue;
            }
            Event::Alias(id) => {
                let v = anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| "unknown anchor referenced".to_string())?;
                nodes = nodes.saturating_add(count(&v));
                if nodes > MAX_NODES {
                    return Err("document contains excessive aliasing".into());
                }
                let ks = match &v {
                    Value::String(s) => Some(Scalar::Str(s.clone())),
                    _ => None,
                };
                (v, ks, 0)
            }
            Event::Scalar(val, style, anchor, tag) => {
                nodes += 1;
                let explicit_str = tag.as_ref().is_some_and(|t| t.suffix() == "str");
                let sc = if style == ScalarStyle::Plain && !explicit_str {
                    resolve_plain(&val)
                } else {
                    Scalar::Str(val.into_owned())
                };
                let is_merge =
                    style == ScalarStyle::Plain && matches!(&sc, Scalar::Str(s) if s == "<<");
                let v = scalar_to_json(sc.clone());
                // A scalar in key position is converted differently (and may be `<<`).
                if let Some(Frame::Map(_, pending @ None, _)) = stack.last_mut() {
                    *pending = Some(if is_merge {
                        KeyState::Merge
                    } else {
                        KeyState::Key(key_string(&sc)?)
                    });
                    continue;
                }
                let v = v?;
                if anchor != 0 {
                    anchors.insert(anchor, v.clone());
                }
                (v, Some(sc), 0)
            }
            Event::SequenceStart(_, anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err("yaml nested too deeply".into());
                }
                if let Some(Frame::Map(_, None, _)) = stack.last() {
                    return Err("invalid map key: a sequence".into());
                }
                stack.push(Frame::Seq(Vec::new(), anchor));
                continue;
            }
            Event::MappingStart(_, anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err("yaml nested too deeply".into());
                }
                if let Some(Frame::Map(_, None, _)) = stack.last() {
                    return Err("invalid map key: a mapping".into());
                }
                stack.push(Frame::Map(Map::new(), None, anchor));
                continue;
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items, anchor)) => (Value::Array(items), None, anchor),
                _ => return Err("unexpected sequence end".into()),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(m, _, anchor)) => (Value::Object(m), None, anchor),
                _ => return Err("unexpected mapping end".into()),
            },
            _ => continue,
        };
        if anchor != 0 {
            anchors.insert(anchor, value.clone());
        }
        let _ = key_scalar;
        match stack.last_mut() {
            None => {
                result = Some(value);
            }
            Some(Frame::Seq(items, _)) => items.push(value),
            Some(Frame::Map(m, pending, _)) => match pending.take() {
                None => {
                    // An alias used as a key.
                    match value {
                        Value::String(s) => *pending = Some(KeyState::Key(s)),
                        Value::Bool(b) => *pending = Some(KeyState::Key(b.to_string())),
                        Value::Number(n) => *pending = Some(KeyState::Key(n.to_string())),
                        _ => return Err("invalid map key".into()),
                    }
                }
                Some(KeyState::Key(k)) => {
                    m.insert(k, value);
                }
                Some(KeyState::Merge) => {
                    let sources = match value {
                        Value::Object(o) => vec![o],
                        Value::Array(a) => {
                            let mut v = Vec::new();
                            for x in a {
                                match x {
                                    Value::Object(o) => v.push(o),
                                    _ => return Err(
                                        "map merge requires map or sequence of maps as the value"
                                            .into(),
                                    ),
                                }
                            }
                            v
                        }
                        _ => {
                            return Err(
                                "map merge requires map or sequence of maps as the value".into()
                            )
                        }
                    };
                    for src in sources {
                        for (k, v) in src {
                            m.entry(k).or_insert(v);
                        }
                    }
                }
            },
        }
    }
    out.extend(result.filter(|v| !all || !v.is_null()));
    Ok(out)
}

fn count(v: &Value) -> usize {
    let mut n = 0usize;
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        n += 1;
        if n > MAX_NODES {
            return n;
        }
        match x {
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn y(s: &str) -> Value {
        match to_json(s) {
            Ok(v) => v,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    #[test]
    fn streams_keep_every_document_with_its_own_anchors() {
        let docs = stream_to_json(
            "a: &x yes\nb: *x\n---\n# only a comment\n---\nc: [on, '010', 010]\n...\n---\n- 1.20\n",
        )
        .unwrap();
        assert_eq!(
            docs,
            vec![
                json!({"a": true, "b": true}),
                json!({"c": [true, "010", 8]}),
                json!([1.2]),
            ]
        );
        // An anchor does not reach into the next document.
        assert!(stream_to_json("a: &x 1\n---\nb: *x\n").is_err());
        assert_eq!(to_json("a: 1\n---\nb: 2\n").unwrap(), json!({"a": 1}));
    }

    #[test]
    fn yaml11_scalars() {
        for (src, want) in [
            ("yes", json!(true)),
            ("Yes", json!(true)),
            ("on", json!(true)),
            ("y", json!(true)),
            ("no", json!(false)),
            ("off", json!(false)),
            ("N", json!(false)),
            ("true", json!(true)),
            ("1.20", json!(1.2)),
            ("010", json!(8)),
            ("0x1F", json!(31)),
            ("0o17", json!(15)),
            ("1_000", json!(1000)),
            ("1e3", json!(1000)),
            ("1.0", json!(1)),
            ("-5", json!(-5)),
            (".5", json!(0.5)),
            ("~", json!(null)),
            ("null", json!(null)),
            ("\"yes\"", json!("yes")),
            ("'010'", json!("010")),
            ("2001-12-14", json!("2001-12-14")),
            (
                "2001-12-14t21:59:43.10-05:00",
                json!("2001-12-14t21:59:43.10-05:00"),
            ),
            ("1.2.3", json!("1.2.3")),
            ("v1.29.0", json!("v1.29.0")),
            ("18446744073709551615", json!(18446744073709551615u64)),
            ("0b101", json!(5)),
            ("hello world", json!("hello world")),
            ("!!str 10", json!("10")),
        ] {
            assert_eq!(y(src), want, "{src}");
        }
    }

    #[test]
    fn yaml11_collections() {
        assert_eq!(
            y("a: yes\nb: [1, on, \"x\"]\n3: x\ntrue: y\n"),
            json!({"a": true, "b": [1, true, "x"], "3": "x", "true": true})
        );
        // `y` is a YAML 1.1 boolean, also as a key.
        assert_eq!(y("y: 1\n"), json!({"true": 1}));
        assert_eq!(y("{\"a\": 1.5}"), json!({"a": 1.5}));
        assert_eq!(
            y("base: &b {p: 1, q: 2}\nderived:\n  <<: *b\n  q: 3\n"),
            json!({"base": {"p": 1, "q": 2}, "derived": {"p": 1, "q": 3}})
        );
        assert_eq!(y("- a\n- b\n---\n- c\n"), json!(["a", "b"]));
        assert_eq!(y("# only a comment\n"), json!(null));
    }

    #[test]
    fn yaml11_errors() {
        assert!(to_json(".inf").is_err());
        assert!(to_json("a: [1, 2").is_err());
        assert!(to_json("~: 1").is_err());
    }
}

//! The Go value model the executor works on, and Go's `fmt` printing of it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;

use serde_json::Value as Json;

/// Element type of a slice or map, which Go's type checks and `typeOf` can see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// `interface {}`
    Any,
    /// `string`
    Str,
    /// `int`
    Int,
}

impl Elem {
    fn name(self) -> &'static str {
        match self {
            Elem::Any => "interface {}",
            Elem::Str => "string",
            Elem::Int => "int",
        }
    }
}

pub type MapRef = Rc<RefCell<BTreeMap<String, V>>>;

/// A parsed semantic version, as sprig's `semver` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct SemverVal {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pub pre: String,
    pub meta: String,
    pub original: String,
}

impl SemverVal {
    pub fn canonical(&self) -> String {
        let mut s = format!("{}.{}.{}", self.major, self.minor, self.patch);
        if !self.pre.is_empty() {
            s.push('-');
            s.push_str(&self.pre);
        }
        if !self.meta.is_empty() {
            s.push('+');
            s.push_str(&self.meta);
        }
        s
    }
}

/// A Go value as `text/template` sees it after `encoding/json` decoding into `interface{}`.
#[derive(Debug, Clone)]
pub enum V {
    /// The invalid `reflect.Value`: a missing map key. Prints `<no value>`.
    Missing,
    /// A nil `interface{}`. Prints `<nil>`.
    Nil,
    Bool(bool),
    /// Go `int`.
    Int(i64),
    /// Go `int64`.
    Int64(i64),
    Float(f64),
    Str(Rc<str>),
    List(Rc<Vec<V>>, Elem),
    Map(MapRef, Elem),
    Semver(Rc<SemverVal>),
}

pub const MAX_PRINT_DEPTH: usize = 64;

impl V {
    pub fn str(s: impl Into<Rc<str>>) -> V {
        V::Str(s.into())
    }

    pub fn list(items: Vec<V>) -> V {
        V::List(Rc::new(items), Elem::Any)
    }

    pub fn str_list(items: Vec<String>) -> V {
        V::List(Rc::new(items.into_iter().map(V::str).collect()), Elem::Str)
    }

    pub fn map(m: BTreeMap<String, V>) -> V {
        V::Map(Rc::new(RefCell::new(m)), Elem::Any)
    }

    pub fn from_json(v: &Json) -> V {
        match v {
            Json::Null => V::Nil,
            Json::Bool(b) => V::Bool(*b),
            Json::Number(n) => V::Float(n.as_f64().unwrap_or(0.0)),
            Json::String(s) => V::str(s.as_str()),
            Json::Array(a) => V::list(a.iter().map(V::from_json).collect()),
            Json::Object(o) => V::map(
                o.iter()
                    .map(|(k, v)| (k.clone(), V::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// Whether this is a nil or missing value.
    pub fn is_nil(&self) -> bool {
        matches!(self, V::Nil | V::Missing)
    }

    /// Go's type name, as `%T` and `typeOf` print it.
    pub fn type_name(&self) -> String {
        match self {
            V::Missing | V::Nil => "<nil>".into(),
            V::Bool(_) => "bool".into(),
            V::Int(_) => "int".into(),
            V::Int64(_) => "int64".into(),
            V::Float(_) => "float64".into(),
            V::Str(_) => "string".into(),
            V::List(_, e) => format!("[]{}", e.name()),
            V::Map(_, e) => format!("map[string]{}", e.name()),
            V::Semver(_) => "*semver.Version".into(),
        }
    }

    /// Go's `reflect.Kind` name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            V::Missing | V::Nil => "invalid",
            V::Bool(_) => "bool",
            V::Int(_) => "int",
            V::Int64(_) => "int64",
            V::Float(_) => "float64",
            V::Str(_) => "string",
            V::List(..) => "slice",
            V::Map(..) => "map",
            V::Semver(_) => "ptr",
        }
    }

    /// `text/template` truthiness.
    pub fn truth(&self) -> bool {
        match self {
            V::Missing | V::Nil => false,
            V::Bool(b) => *b,
            V::Int(i) | V::Int64(i) => *i != 0,
            V::Float(f) => *f != 0.0,
            V::Str(s) => !s.is_empty(),
            V::List(l, _) => !l.is_empty(),
            V::Map(m, _) => !m.borrow().is_empty(),
            V::Semver(_) => true,
        }
    }

    /// `fmt.Sprint(v)` / `%v`.
    pub fn go_string(&self) -> String {
        let mut s = String::new();
        write_v(&mut s, self, 0);
        s
    }
}

fn write_v(out: &mut String, v: &V, depth: usize) {
    if depth > MAX_PRINT_DEPTH {
        out.push_str("...");
        return;
    }
    match v {
        V::Missing | V::Nil => out.push_str("<nil>"),
        V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        V::Int(i) | V::Int64(i) => {
            let _ = write!(out, "{i}");
        }
        V::Float(f) => out.push_str(&format_g(*f)),
        V::Str(s) => out.push_str(s),
        V::List(l, _) => {
            out.push('[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, x, depth + 1);
            }
            out.push(']');
        }
        V::Map(m, _) => {
            out.push_str("map[");
            if let Ok(m) = m.try_borrow() {
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    write_v(out, x, depth + 1);
                }
            }
            out.push(']');
        }
        V::Semver(s) => out.push_str(&s.canonical()),
    }
}

/// Sprig's `strval`: strings as is, everything else through `%v`.
pub fn strval(v: &V) -> String {
    match v {
        V::Str(s) => s.to_string(),
        other => other.go_string(),
    }
}

/// Split a finite non-negative float into its shortest decimal digits and the
/// decimal exponent of the first digit (`d.ddd × 10^exp`).
fn shortest_digits(f: f64) -> (String, i32) {
    let s = format!("{:e}", f);
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    (digits, exp.parse().unwrap_or(0))
}

fn exp_suffix(exp: i32, out: &mut String) {
    out.push('e');
    out.push(if exp < 0 { '-' } else { '+' });
    let a = exp.unsigned_abs();
    if a < 10 {
        out.push('0');
    }
    let _ = write!(out, "{a}");
}

/// `strconv.FormatFloat(f, 'g', -1, 64)`, which is also what `%v` prints.
pub fn format_g(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    let a = f.abs();
    if a == 0.0 {
        out.push('0');
        return out;
    }
    let (digits, exp) = shortest_digits(a);
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        exp_suffix(exp, &mut out);
    } else {
        let _ = write!(out, "{a}");
    }
    out
}

/// `strconv.FormatFloat(f, 'e', prec, 64)`.
pub fn format_e(f: f64, prec: usize) -> String {
    let s = format!("{:.*e}", prec, f);
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let mut out = mant.to_string();
    exp_suffix(exp.parse().unwrap_or(0), &mut out);
    out
}

/// How Go's `encoding/json` writes a float64.
pub fn format_json_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let mut out = String::new();
        if f < 0.0 {
            out.push('-');
        }
        let (digits, exp) = shortest_digits(a);
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let _ = write!(out, "{}", exp.unsigned_abs());
        out
    } else if f == 0.0 {
        if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        }
    } else {
        format!("{f}")
    }
}

/// Go `encoding/json` marshalling of a value. `escape_html` as `json.Marshal` does.
pub fn to_json(v: &V, escape_html: bool, indent: Option<&str>) -> Result<String, String> {
    let mut out = String::new();
    json_write(&mut out, v, escape_html, indent, 0)?;
    Ok(out)
}

fn json_str(out: &mut String, s: &str, escape_html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' if escape_html => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn newline(out: &mut String, indent: Option<&str>, depth: usize) {
    if let Some(ind) = indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn json_write(
    out: &mut String,
    v: &V,
    esc: bool,
    indent: Option<&str>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_PRINT_DEPTH {
        return Err("json: value nested too deeply".into());
    }
    match v {
        V::Missing | V::Nil => out.push_str("null"),
        V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        V::Int(i) | V::Int64(i) => {
            let _ = write!(out, "{i}");
        }
        V::Float(f) => {
            if !f.is_finite() {
                return Err(format!("json: unsupported value: {}", format_g(*f)));
            }
            out.push_str(&format_json_float(*f));
        }
        V::Str(s) => json_str(out, s, esc),
        V::List(l, _) => {
            if l.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                json_write(out, x, esc, indent, depth + 1)?;
            }
            newline(out, indent, depth);
            out.push(']');
        }
        V::Map(m, _) => {
            let m = m.try_borrow().map_err(|_| "json: map in use".to_string())?;
            if m.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                json_str(out, k, esc);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                json_write(out, x, esc, indent, depth + 1)?;
            }
            newline(out, indent, depth);
            out.push('}');
        }
        V::Semver(s) => {
            // *semver.Version marshals as its string form.
            json_str(out, &s.canonical(), esc);
        }
    }
    Ok(())
}

/// `reflect.DeepEqual` on this value model.
pub fn deep_equal(a: &V, b: &V, depth: usize) -> bool {
    if depth > MAX_PRINT_DEPTH {
        return false;
    }
    match (a, b) {
        (V::Missing | V::Nil, V::Missing | V::Nil) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(x), V::Int(y)) | (V::Int64(x), V::Int64(y)) => x == y,
        (V::Float(x), V::Float(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::List(x, ex), V::List(y, ey)) => {
            ex == ey
                && x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| deep_equal(p, q, depth + 1))
        }
        (V::Map(x, ex), V::Map(y, ey)) => {
            if Rc::ptr_eq(x, y) {
                return ex == ey;
            }
            let (Ok(x), Ok(y)) = (x.try_borrow(), y.try_borrow()) else {
                return false;
            };
            ex == ey
                && x.len() == y.len()
                && x.iter().all(|(k, p)| {
                    y.get(k)
                        .map(|q| deep_equal(p, q, depth + 1))
                        .unwrap_or(false)
                })
        }
        (V::Semver(x), V::Semver(y)) => x == y,
        _ => false,
    }
}

/// A deep copy (maps are reference values in Go; this breaks the sharing).
pub fn deep_copy(v: &V, depth: usize) -> V {
    if depth > MAX_PRINT_DEPTH {
        return V::Nil;
    }
    match v {
        V::List(l, e) => V::List(
            Rc::new(l.iter().map(|x| deep_copy(x, depth + 1)).collect()),
            *e,
        ),
        V::Map(m, e) => {
            let copied = match m.try_borrow() {
                Ok(m) => m
                    .iter()
                    .map(|(k, x)| (k.clone(), deep_copy(x, depth + 1)))
                    .collect(),
                Err(_) => BTreeMap::new(),
            };
            V::Map(Rc::new(RefCell::new(copied)), *e)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_g_formatting_matches_go() {
        // strconv.FormatFloat(f, 'g', -1, 64) results.
        for (f, want) in [
            (3.0, "3"),
            (1.5, "1.5"),
            (1e6, "1e+06"),
            (100000.0, "100000"),
            (123456.7, "123456.7"),
            (1234567.5, "1.2345675e+06"),
            (1e21, "1e+21"),
            (1e20, "1e+20"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (0.0, "0"),
            (1e100, "1e+100"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(format_g(f), want, "{f}");
        }
    }

    #[test]
    fn json_float_formatting_matches_go() {
        for (f, want) in [
            (1e6, "1000000"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5, "1.5"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (3.0, "3"),
        ] {
            assert_eq!(format_json_float(f), want, "{f}");
        }
    }

    #[test]
    fn prints_like_fmt() {
        let v = V::from_json(&serde_json::json!({"b": [1, "x", null], "a": {"c": true}}));
        assert_eq!(v.go_string(), "map[a:map[c:true] b:[1 x <nil>]]");
        assert_eq!(V::list(vec![]).go_string(), "[]");
    }
}

//! Go's builtin template functions (`and`, `or`, `len`, `index`, `print…`, the
//! comparisons, the escapers and `call`).

use super::func::{Register, P};
use super::gofmt;
use super::neturl::query_escape;
use super::value::{strval, Elem, V};

use P::{Any, Str as S, Val};

/// Register the builtins with their Go signatures.
pub fn register(add: &mut Register) {
    // Go builtins ("and"/"or" are handled by the executor).
    add("and", &[Val], Some(Val), |_| Ok(V::Missing));
    add("or", &[Val], Some(Val), |_| Ok(V::Missing));
    add("not", &[Val], None, |a| Ok(V::Bool(!a[0].truth())));
    add("len", &[Val], None, builtin_len);
    add("index", &[Val], Some(Val), builtin_index);
    add("print", &[], Some(Any), |a| Ok(V::str(gofmt::sprint(&a))));
    add("println", &[], Some(Any), |a| {
        Ok(V::str(gofmt::sprintln(&a)))
    });
    add("printf", &[S], Some(Any), |a| {
        Ok(V::str(gofmt::sprintf(&strval(&a[0]), &a[1..])))
    });
    add("eq", &[Val], Some(Val), builtin_eq);
    add("ne", &[Val, Val], None, |a| {
        builtin_eq(a).map(|v| V::Bool(!v.truth()))
    });
    add("lt", &[Val, Val], None, |a| {
        cmp(&a[0], &a[1]).map(|o| V::Bool(o.is_lt()))
    });
    add("le", &[Val, Val], None, |a| le(&a[0], &a[1]).map(V::Bool));
    add("gt", &[Val, Val], None, |a| {
        le(&a[0], &a[1]).map(|b| V::Bool(!b))
    });
    add("ge", &[Val, Val], None, |a| {
        cmp(&a[0], &a[1]).map(|o| V::Bool(!o.is_lt()))
    });
    add("html", &[], Some(Any), |a| {
        Ok(V::str(html_escape(&eval_args(&a))))
    });
    add("js", &[], Some(Any), |a| {
        Ok(V::str(js_escape(&eval_args(&a))))
    });
    add("urlquery", &[], Some(Any), |a| {
        Ok(V::str(query_escape(&eval_args(&a))))
    });
    add("call", &[Val], Some(Val), |a| {
        Err(format!("non-function of type {}", a[0].type_name()))
    });
}

fn eval_args(a: &[V]) -> String {
    if let [V::Str(s)] = a {
        return s.to_string();
    }
    gofmt::sprint(a)
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn builtin_len(a: Vec<V>) -> Result<V, String> {
    match &a[0] {
        V::Str(s) => Ok(V::Int(s.len() as i64)),
        V::List(l, _) => Ok(V::Int(l.len() as i64)),
        V::Map(m, _) => Ok(V::Int(m.try_borrow().map(|m| m.len()).unwrap_or(0) as i64)),
        V::Nil | V::Missing => Err("len of nil pointer".into()),
        other => Err(format!("len of type {}", other.type_name())),
    }
}

fn index_int(v: &V, what: &str) -> Result<i64, String> {
    match v {
        V::Int(i) | V::Int64(i) => Ok(*i),
        V::Nil | V::Missing => Err(format!("cannot index {what} with nil")),
        other => Err(format!(
            "cannot index {what} with type {}",
            other.type_name()
        )),
    }
}

fn builtin_index(a: Vec<V>) -> Result<V, String> {
    let mut item = a[0].clone();
    for ix in &a[1..] {
        item = match &item {
            V::List(l, _) => {
                let i = index_int(ix, "slice/array")?;
                if i < 0 || i as usize >= l.len() {
                    return Err(format!("index out of range: {i}"));
                }
                l[i as usize].clone()
            }
            V::Str(s) => {
                let i = index_int(ix, "slice/array")?;
                match s.as_bytes().get(usize::try_from(i).unwrap_or(usize::MAX)) {
                    Some(b) => V::Int(*b as i64),
                    None => return Err(format!("index out of range: {i}")),
                }
            }
            V::Map(m, elem) => match ix {
                V::Str(k) => {
                    let got = m.try_borrow().ok().and_then(|m| m.get(&**k).cloned());
                    match got {
                        Some(v) => v,
                        None if *elem == Elem::Str => V::str(""),
                        None => V::Nil,
                    }
                }
                V::Nil | V::Missing => V::Nil,
                other => {
                    return Err(format!(
                        "value has type {}; should be string",
                        other.type_name()
                    ))
                }
            },
            V::Nil | V::Missing => return Err("index of untyped nil".into()),
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Kind {
    Bool,
    Int,
    Float,
    Str,
    Invalid,
    Other,
}

fn kind(v: &V) -> Kind {
    match v {
        V::Bool(_) => Kind::Bool,
        V::Int(_) | V::Int64(_) => Kind::Int,
        V::Float(_) => Kind::Float,
        V::Str(_) => Kind::Str,
        V::Nil | V::Missing => Kind::Invalid,
        _ => Kind::Other,
    }
}

fn eq1(a: &V, b: &V) -> Result<bool, String> {
    let (ka, kb) = (kind(a), kind(b));
    if ka != kb {
        if ka != Kind::Invalid && kb != Kind::Invalid {
            return Err("incompatible types for comparison".into());
        }
        return Ok(false);
    }
    Ok(match (a, b) {
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(x) | V::Int64(x), V::Int(y) | V::Int64(y)) => x == y,
        (V::Float(x), V::Float(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::Nil | V::Missing, V::Nil | V::Missing) => true,
        (V::Semver(x), V::Semver(y)) => std::ptr::eq(&**x, &**y),
        _ => {
            return Err(format!(
                "non-comparable types {}: {}, {}: {}",
                a.go_string(),
                a.type_name(),
                b.type_name(),
                b.go_string()
            ))
        }
    })
}

fn builtin_eq(a: Vec<V>) -> Result<V, String> {
    if a.len() < 2 {
        return Err("missing argument for comparison".into());
    }
    for b in &a[1..] {
        if eq1(&a[0], b)? {
            return Ok(V::Bool(true));
        }
    }
    Ok(V::Bool(false))
}

fn cmp(a: &V, b: &V) -> Result<std::cmp::Ordering, String> {
    let (ka, kb) = (kind(a), kind(b));
    if matches!(ka, Kind::Invalid | Kind::Other) || matches!(kb, Kind::Invalid | Kind::Other) {
        return Err("invalid type for comparison".into());
    }
    if ka != kb {
        return Err("incompatible types for comparison".into());
    }
    match (a, b) {
        (V::Int(x) | V::Int64(x), V::Int(y) | V::Int64(y)) => Ok(x.cmp(y)),
        (V::Float(x), V::Float(y)) => Ok(x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Greater)),
        (V::Str(x), V::Str(y)) => Ok(x.cmp(y)),
        _ => Err("invalid type for comparison".into()),
    }
}

fn le(a: &V, b: &V) -> Result<bool, String> {
    let o = cmp(a, b)?;
    if o.is_lt() {
        return Ok(true);
    }
    eq1(a, b)
}

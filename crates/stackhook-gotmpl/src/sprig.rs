//! Sprig v3 hermetic text functions (`sprig.HermeticTxtFuncMap()`).

use std::collections::BTreeMap;
use std::rc::Rc;

use sha2::Digest as _;

use super::encoding;
use super::func::{Register, P};
use super::gofmt::go_quote;
use super::neturl::{escape, unescape};
use super::parse::parse_go_int;
use super::semver::{parse_semver, semver_compare};
use super::value::{deep_copy, deep_equal, strval as s, to_json, Elem, V};
use super::{MAX_LIST, MAX_STRING};
use P::{Any, Bool as B, Float as F, Int as I, Map as M, Str as S};

type R = Result<V, String>;

fn int(v: &V) -> i64 {
    match v {
        V::Int(i) => *i,
        _ => 0,
    }
}

fn guard_len(n: usize) -> Result<(), String> {
    if n > MAX_STRING {
        return Err(format!("result exceeds the limit of {MAX_STRING} bytes"));
    }
    Ok(())
}

fn st(x: impl Into<Rc<str>>) -> R {
    Ok(V::Str(x.into()))
}

/// `cast.ToInt64`.
pub fn to_i64(v: &V) -> i64 {
    match v {
        V::Int(i) | V::Int64(i) => *i,
        V::Float(f) => {
            if f.is_nan() {
                i64::MIN
            } else {
                *f as i64
            }
        }
        V::Bool(b) => i64::from(*b),
        V::Str(s) => parse_go_int(&trim_zero_decimal(s)).unwrap_or(0),
        _ => 0,
    }
}

fn trim_zero_decimal(s: &str) -> String {
    let b = s.as_bytes();
    let mut found_zero = false;
    for i in (1..=b.len()).rev() {
        match b[i - 1] {
            b'.' => {
                if found_zero {
                    return s[..i - 1].to_string();
                }
            }
            b'0' => found_zero = true,
            _ => return s.to_string(),
        }
    }
    s.to_string()
}

/// `cast.ToFloat64`.
pub fn to_f64(v: &V) -> f64 {
    match v {
        V::Int(i) | V::Int64(i) => *i as f64,
        V::Float(f) => *f,
        V::Bool(b) => f64::from(u8::from(*b)),
        V::Str(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|_| !s.is_empty())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

/// Sprig's `empty`.
fn is_empty(v: &V) -> bool {
    !v.truth()
}

/// `strslice`.
fn strslice(v: &V) -> Vec<String> {
    match v {
        V::List(l, Elem::Any) => l.iter().filter(|x| !x.is_nil()).map(s).collect(),
        V::List(l, _) => l.iter().map(s).collect(),
        V::Nil | V::Missing => vec![],
        other => vec![s(other)],
    }
}

fn list_of(v: &V, fname: &str) -> Result<Rc<Vec<V>>, String> {
    match v {
        V::List(l, _) => Ok(l.clone()),
        other => Err(format!("Cannot find {fname} on type {}", other.kind_name())),
    }
}

fn map_get(m: &V) -> BTreeMap<String, V> {
    match m {
        V::Map(m, _) => m.try_borrow().map(|m| m.clone()).unwrap_or_default(),
        _ => BTreeMap::new(),
    }
}

fn byte_slice(s: &str, a: usize, b: usize) -> Result<String, String> {
    let bytes = s.as_bytes();
    if a > b || b > bytes.len() {
        return Err(format!("slice bounds out of range [{a}:{b}]"));
    }
    Ok(String::from_utf8_lossy(&bytes[a..b]).into_owned())
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_sep = true;
    for c in s.chars() {
        if prev_sep {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_sep = if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else {
            c.is_whitespace()
        };
    }
    out
}

fn untitle(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_space = true;
    for c in s.chars() {
        if prev_space {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
        prev_space = c.is_whitespace();
    }
    out
}

fn initials(s: &str) -> String {
    s.split_whitespace()
        .filter_map(|w| w.chars().next())
        .collect()
}

fn swapcase(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_uppercase() {
                c.to_lowercase().collect::<Vec<_>>()
            } else if c.is_lowercase() {
                c.to_uppercase().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Split an identifier into words the way xstrings does for snake/kebab case
/// (case changes and `_`, `-`, space separators).
fn words(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' || c == '-' || c.is_whitespace() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c.is_uppercase() && !cur.is_empty() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower) {
                out.push(std::mem::take(&mut cur));
            }
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn delimited(s: &str, sep: &str) -> String {
    words(s)
        .iter()
        .map(|w| w.to_lowercase())
        .collect::<Vec<_>>()
        .join(sep)
}

fn camelcase(s: &str) -> String {
    let mut out = String::new();
    for part in s.split(['_', '-', ' ']) {
        let mut cs = part.chars();
        if let Some(f) = cs.next() {
            out.extend(f.to_uppercase());
            out.push_str(cs.as_str());
        }
    }
    out
}

fn wrap_custom(s: &str, len: i64, nl: &str, long_words: bool) -> String {
    if s.is_empty() {
        return String::new();
    }
    let nl = if nl.is_empty() { "\n" } else { nl };
    let wl = len.max(1) as usize;
    let b = s.as_bytes();
    let n = b.len();
    let mut off = 0usize;
    let mut out: Vec<u8> = Vec::new();
    while n - off > wl {
        if b[off] == b' ' {
            off += 1;
            continue;
        }
        let end = (wl + off + 1).min(n);
        let space = b[off..end].iter().rposition(|c| *c == b' ');
        if let Some(sp) = space.map(|p| p + off) {
            out.extend_from_slice(&b[off..sp]);
            out.extend_from_slice(nl.as_bytes());
            off = sp + 1;
        } else if long_words {
            out.extend_from_slice(&b[off..wl + off]);
            out.extend_from_slice(nl.as_bytes());
            off += wl;
        } else {
            let end = wl + off;
            match b[end..].iter().position(|c| *c == b' ') {
                None => {
                    out.extend_from_slice(&b[off..]);
                    off = n;
                }
                Some(ix) => {
                    let sp = ix + end;
                    out.extend_from_slice(&b[off..sp]);
                    out.extend_from_slice(nl.as_bytes());
                    off = sp + 1;
                }
            }
        }
    }
    out.extend_from_slice(&b[off..]);
    String::from_utf8_lossy(&out).into_owned()
}

fn abbreviate_full(s: &str, offset: i64, max: i64) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    if max < 4 {
        return Err("minimum abbreviation width is 4".into());
    }
    let len = s.len() as i64;
    if len <= max {
        return Ok(s.to_string());
    }
    let mut offset = offset.min(len);
    if len - offset < max - 3 {
        offset = len - (max - 3);
    }
    if offset <= 4 {
        return Ok(format!("{}...", byte_slice(s, 0, (max - 3) as usize)?));
    }
    if max < 7 {
        return Err("minimum abbreviation width with offset is 7".into());
    }
    if offset + max - 3 < len {
        let rest = byte_slice(s, offset as usize, s.len())?;
        return Ok(format!("...{}", abbreviate_full(&rest, 0, max - 3)?));
    }
    Ok(format!(
        "...{}",
        byte_slice(s, (len - (max - 3)) as usize, s.len())?
    ))
}

fn indent(n: i64, s: &str) -> Result<String, String> {
    let n = n.max(0) as usize;
    let pad = " ".repeat(n.min(MAX_STRING));
    let out = format!("{pad}{}", s.replace('\n', &format!("\n{pad}")));
    guard_len(out.len())?;
    Ok(out)
}

fn regex(re: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(re)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("error parsing regexp: {e}"))
}

fn quote_meta(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Go `regexp.Split`.
fn regex_split(re: &regex::Regex, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return vec![];
    }
    if re.as_str().is_empty() {
        // Go splits into characters.
        let mut chars: Vec<String> = s.chars().map(|c| c.to_string()).collect();
        if n > 0 && chars.len() > n as usize {
            let tail: String = chars[n as usize - 1..].concat();
            chars.truncate(n as usize - 1);
            chars.push(tail);
        }
        return chars;
    }
    let mut out = Vec::new();
    let mut beg = 0;
    for m in re.find_iter(s) {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        let end = m.start();
        if m.end() == 0 {
            continue;
        }
        out.push(s[beg..end].to_string());
        beg = m.end();
    }
    out.push(s[beg..].to_string());
    out
}

fn split_map(parts: Vec<&str>) -> V {
    let m: BTreeMap<String, V> = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("_{i}"), V::str(p)))
        .collect();
    V::Map(Rc::new(std::cell::RefCell::new(m)), Elem::Str)
}

/// Go `strings.Split` (an empty separator splits into UTF-8 characters).
fn go_split(s: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return vec![];
    }
    if sep.is_empty() {
        let mut chars: Vec<String> = s.chars().map(|c| c.to_string()).collect();
        if n > 0 && chars.len() > n as usize {
            let tail: String = chars[n as usize - 1..].concat();
            chars.truncate(n as usize - 1);
            chars.push(tail);
        }
        return chars;
    }
    if n < 0 {
        s.split(sep).map(str::to_string).collect()
    } else {
        s.splitn(n as usize, sep).map(str::to_string).collect()
    }
}

fn until_step(start: i64, stop: i64, step: i64) -> Result<Vec<V>, String> {
    let mut v = Vec::new();
    let mut push = |i: i64| -> Result<(), String> {
        if v.len() >= MAX_LIST {
            return Err(format!("list exceeds the limit of {MAX_LIST} elements"));
        }
        v.push(V::Int(i));
        Ok(())
    };
    if stop < start {
        if step >= 0 {
            return Ok(vec![]);
        }
        let mut i = start;
        while i > stop {
            push(i)?;
            i = i.saturating_add(step);
        }
        return Ok(v);
    }
    if step <= 0 {
        return Ok(vec![]);
    }
    let mut i = start;
    while i < stop {
        push(i)?;
        i = i.saturating_add(step);
    }
    Ok(v)
}

fn seq(p: &[V]) -> R {
    let p: Vec<i64> = p.iter().map(int).collect();
    let items = match p.as_slice() {
        [end] => {
            let start = 1;
            let inc = if *end < start { -1 } else { 1 };
            until_step(start, end + inc, inc)?
        }
        [start, end] => {
            let inc = if end < start { -1 } else { 1 };
            until_step(*start, end + inc, inc)?
        }
        [start, step, end] => {
            let mut inc = 1;
            if end < start {
                inc = -1;
                if *step > 0 {
                    return st("");
                }
            }
            until_step(*start, end + inc, *step)?
        }
        _ => return st(""),
    };
    st(items.iter().map(s).collect::<Vec<_>>().join(" "))
}

/// A small decimal for sprig's `addf`/`subf`/`mulf`, which use shopspring/decimal.
fn dec(f: f64) -> Option<(i128, i32)> {
    if !f.is_finite() {
        return None;
    }
    let txt = format!("{:e}", f);
    let (mant, exp) = txt.split_once('e')?;
    let exp: i32 = exp.parse().ok()?;
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let frac = digits.len() as i32 - 1;
    let m: i128 = digits.parse().ok()?;
    Some((if neg { -m } else { m }, exp - frac))
}

fn dec_op(a: f64, b: f64, op: char) -> f64 {
    let fallback = match op {
        '+' => a + b,
        '-' => a - b,
        _ => a * b,
    };
    let (Some((ma, ea)), Some((mb, eb))) = (dec(a), dec(b)) else {
        return fallback;
    };
    let (m, e) = if op == '*' {
        match ma.checked_mul(mb) {
            Some(m) => (m, ea + eb),
            None => return fallback,
        }
    } else {
        let e = ea.min(eb);
        let scale = |m: i128, from: i32| -> Option<i128> {
            let d = u32::try_from(from - e).ok()?;
            if d > 30 {
                return None;
            }
            m.checked_mul(10i128.checked_pow(d)?)
        };
        let (Some(x), Some(y)) = (scale(ma, ea), scale(mb, eb)) else {
            return fallback;
        };
        let m = if op == '+' {
            x.checked_add(y)
        } else {
            x.checked_sub(y)
        };
        match m {
            Some(m) => (m, e),
            None => return fallback,
        }
    };
    format!("{m}e{e}").parse().unwrap_or(fallback)
}

fn float_fold(a: &[V], op: char) -> R {
    let mut acc = to_f64(&a[0]);
    for x in &a[1..] {
        let y = to_f64(x);
        acc = match op {
            '/' => acc / y,
            'M' => acc.max(y),
            'm' => acc.min(y),
            o => dec_op(acc, y, o),
        };
    }
    Ok(V::Float(acc))
}

fn round(a: &[V]) -> R {
    let val = to_f64(&a[0]);
    let places = int(&a[1]) as f64;
    let round_on = a.get(2).map(to_f64).unwrap_or(0.5);
    let pow = 10f64.powf(places);
    let digit = pow * val;
    let div = digit.fract();
    let r = if div >= round_on {
        digit.ceil()
    } else {
        digit.floor()
    };
    Ok(V::Float(r / pow))
}

fn in_list(l: &[V], x: &V) -> bool {
    l.iter().any(|y| deep_equal(x, y, 0))
}

fn json_decode(s: &str) -> R {
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| e.to_string())?;
    Ok(V::from_json(&v))
}

fn to_json_fn(v: &V, esc: bool, indent: Option<&str>) -> Result<String, String> {
    let out = to_json(v, esc, indent)?;
    guard_len(out.len())?;
    Ok(out)
}

fn is_empty_mergo(v: &V) -> bool {
    match v {
        V::Map(m, _) => m.try_borrow().map(|m| m.is_empty()).unwrap_or(false),
        other => !other.truth(),
    }
}

fn merge_into(dst: &V, src: &V, overwrite: bool, depth: usize) -> Result<(), String> {
    if depth > super::value::MAX_PRINT_DEPTH {
        return Err("merge nested too deeply".into());
    }
    let (V::Map(d, _), V::Map(s_, _)) = (dst, src) else {
        return Ok(());
    };
    if Rc::ptr_eq(d, s_) {
        return Ok(());
    }
    let src_items: Vec<(String, V)> = s_
        .try_borrow()
        .map_err(|_| "map in use".to_string())?
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, sv) in src_items {
        let dv = d.try_borrow().map_err(|_| "map in use")?.get(&k).cloned();
        match dv {
            Some(dv @ V::Map(..)) if matches!(sv, V::Map(..)) => {
                merge_into(&dv, &sv, overwrite, depth + 1)?;
            }
            Some(dv) => {
                if (is_empty_mergo(&dv) || overwrite) && !is_empty_mergo(&sv) {
                    d.try_borrow_mut().map_err(|_| "map in use")?.insert(k, sv);
                } else if is_empty_mergo(&dv) && !overwrite {
                    d.try_borrow_mut().map_err(|_| "map in use")?.insert(k, sv);
                }
            }
            None => {
                d.try_borrow_mut().map_err(|_| "map in use")?.insert(k, sv);
            }
        }
    }
    Ok(())
}

fn merge(a: Vec<V>, overwrite: bool) -> R {
    let dst = a[0].clone();
    for src in &a[1..] {
        merge_into(&dst, src, overwrite, 0)?;
    }
    Ok(dst)
}

/// Go `path.Clean`.
fn path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|l| *l != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            x => out.push(x),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

fn path_base(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/".into();
    }
    t.rsplit('/').next().unwrap_or(t).to_string()
}

fn path_dir(p: &str) -> String {
    let dir = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    path_clean(dir)
}

fn path_ext(p: &str) -> String {
    for (i, c) in p.char_indices().rev() {
        if c == '/' {
            break;
        }
        if c == '.' {
            return p[i..].to_string();
        }
    }
    String::new()
}

fn url_parse(u: &str) -> R {
    let (rest, fragment) = match u.split_once('#') {
        Some((a, f)) => (a, unescape(f)),
        None => (u, String::new()),
    };
    let mut scheme = String::new();
    let mut rest = rest.to_string();
    if let Some(i) = rest.find(':') {
        let cand = &rest[..i];
        if !cand.is_empty()
            && cand.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && cand
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            scheme = cand.to_ascii_lowercase();
            rest = rest[i + 1..].to_string();
        }
    }
    let (rest, query) = match rest.split_once('?') {
        Some((a, q)) => (a.to_string(), q.to_string()),
        None => (rest, String::new()),
    };
    let (mut host, mut userinfo, mut path, mut opaque) =
        (String::new(), String::new(), String::new(), String::new());
    if let Some(r) = rest.strip_prefix("//") {
        let (auth, p) = match r.find('/') {
            Some(i) => (&r[..i], &r[i..]),
            None => (r, ""),
        };
        let auth = match auth.rsplit_once('@') {
            Some((ui, h)) => {
                userinfo = ui.to_string();
                h
            }
            None => auth,
        };
        host = auth.to_string();
        path = unescape(p);
    } else if !scheme.is_empty() && !rest.starts_with('/') {
        opaque = rest;
    } else {
        path = unescape(&rest);
    }
    let hostname = if host.starts_with('[') {
        host.split(']')
            .next()
            .unwrap_or("")
            .trim_start_matches('[')
            .to_string()
    } else {
        host.split(':').next().unwrap_or("").to_string()
    };
    let mut m = BTreeMap::new();
    m.insert("scheme".into(), V::str(scheme));
    m.insert("host".into(), V::str(host));
    m.insert("hostname".into(), V::str(hostname));
    m.insert("path".into(), V::str(path));
    m.insert("query".into(), V::str(query));
    m.insert("opaque".into(), V::str(opaque));
    m.insert("fragment".into(), V::str(fragment));
    m.insert("userinfo".into(), V::str(userinfo));
    Ok(V::map(m))
}

fn url_join(d: &V) -> R {
    let m = map_get(d);
    let g = |k: &str| m.get(k).map(s).unwrap_or_default();
    let mut out = String::new();
    let scheme = g("scheme");
    if !scheme.is_empty() {
        out.push_str(&scheme);
        out.push(':');
    }
    let opaque = g("opaque");
    if !opaque.is_empty() {
        out.push_str(&opaque);
    } else {
        let host = g("host");
        let ui = g("userinfo");
        if !host.is_empty() || !ui.is_empty() || !scheme.is_empty() {
            if !host.is_empty() || !g("path").is_empty() || !ui.is_empty() {
                out.push_str("//");
            }
            if !ui.is_empty() {
                out.push_str(&ui);
                out.push('@');
            }
            out.push_str(&host);
        }
        let path = g("path");
        if !path.is_empty() && !path.starts_with('/') && !host.is_empty() {
            out.push('/');
        }
        out.push_str(&escape(&path, false));
    }
    let q = g("query");
    if !q.is_empty() {
        out.push('?');
        out.push_str(&q);
    }
    let f = g("fragment");
    if !f.is_empty() {
        out.push('#');
        out.push_str(&escape(&f, false));
    }
    st(out)
}

/// Lower-case hex, as sprig prints digests.
fn hex(digest: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(digest)
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + x as u32) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

fn kind_of(v: &V) -> String {
    v.kind_name().to_string()
}

fn dig(a: &[V]) -> R {
    if a.len() < 3 {
        return Err(format!(
            "wrong number of args for dig: want at least 3 got {}",
            a.len()
        ));
    }
    let dict = &a[a.len() - 1];
    let default = &a[a.len() - 2];
    let keys = &a[..a.len() - 2];
    let mut cur = dict.clone();
    for (i, k) in keys.iter().enumerate() {
        let V::Str(k) = k else {
            return Err(format!(
                "interface conversion: interface {{}} is {}, not string",
                k.type_name()
            ));
        };
        let next = match &cur {
            V::Map(m, _) => m.try_borrow().ok().and_then(|m| m.get(&**k).cloned()),
            _ => {
                return Err(format!(
                    "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                    cur.type_name()
                ))
            }
        };
        match next {
            Some(n) => cur = n,
            None => return Ok(default.clone()),
        }
        let _ = i;
    }
    Ok(cur)
}

fn list_elem(v: &V) -> Elem {
    match v {
        V::List(_, e) => *e,
        _ => Elem::Any,
    }
}

fn sprig_slice(a: &[V]) -> R {
    let l = match &a[0] {
        V::List(l, _) => l.clone(),
        other => {
            return Err(format!(
                "list should be type of slice or array but {}",
                other.kind_name()
            ))
        }
    };
    let n = l.len() as i64;
    let (lo, hi) = match a.len() {
        1 => (0, n),
        2 => (to_i64(&a[1]), n),
        _ => (to_i64(&a[1]), to_i64(&a[2])),
    };
    if lo < 0 || hi < lo || hi > n {
        return Err(format!("slice bounds out of range [{lo}:{hi}]"));
    }
    Ok(V::List(
        Rc::new(l[lo as usize..hi as usize].to_vec()),
        list_elem(&a[0]),
    ))
}

/// Register every sprig function with its Go signature.
pub fn register(add: &mut Register) {
    // Strings.
    add("trim", &[S], None, |a| st(s(&a[0]).trim()));
    add("trimAll", &[S, S], None, |a| {
        let cut: Vec<char> = s(&a[0]).chars().collect();
        st(s(&a[1]).trim_matches(cut.as_slice()))
    });
    add("trimPrefix", &[S, S], None, |a| {
        let (p, x) = (s(&a[0]), s(&a[1]));
        st(x.strip_prefix(p.as_str()).unwrap_or(&x))
    });
    add("trimSuffix", &[S, S], None, |a| {
        let (p, x) = (s(&a[0]), s(&a[1]));
        st(x.strip_suffix(p.as_str()).unwrap_or(&x))
    });
    add("upper", &[S], None, |a| st(s(&a[0]).to_uppercase()));
    add("lower", &[S], None, |a| st(s(&a[0]).to_lowercase()));
    add("title", &[S], None, |a| st(title(&s(&a[0]))));
    add("untitle", &[S], None, |a| st(untitle(&s(&a[0]))));
    add("substr", &[I, I, S], None, |a| {
        let (start, end, x) = (int(&a[0]), int(&a[1]), s(&a[2]));
        let n = x.len() as i64;
        let r = if start < 0 {
            byte_slice(
                &x,
                0,
                usize::try_from(end).map_err(|_| "slice bounds out of range")?,
            )?
        } else if end < 0 || end > n {
            byte_slice(&x, usize::try_from(start).unwrap_or(0), x.len())?
        } else {
            byte_slice(&x, start as usize, end as usize)?
        };
        st(r)
    });
    add("repeat", &[I, S], None, |a| {
        let (n, x) = (int(&a[0]), s(&a[1]));
        if n < 0 {
            return Err("strings: negative Repeat count".into());
        }
        guard_len((n as usize).saturating_mul(x.len()))?;
        st(x.repeat(n as usize))
    });
    add("nospace", &[S], None, |a| {
        st(s(&a[0])
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>())
    });
    add("trunc", &[I, S], None, |a| {
        let (c, x) = (int(&a[0]), s(&a[1]));
        let n = x.len() as i64;
        if c < 0 && n + c > 0 {
            return st(byte_slice(&x, (n + c) as usize, x.len())?);
        }
        if c >= 0 && n > c {
            return st(byte_slice(&x, 0, c as usize)?);
        }
        st(x)
    });
    add("abbrev", &[I, S], None, |a| {
        let (w, x) = (int(&a[0]), s(&a[1]));
        if w < 4 {
            return st(x);
        }
        st(abbreviate_full(&x, 0, w)?)
    });
    add("abbrevboth", &[I, I, S], None, |a| {
        let (l, r, x) = (int(&a[0]), int(&a[1]), s(&a[2]));
        if r < 4 || (l > 0 && r < 7) {
            return st(x);
        }
        st(abbreviate_full(&x, l, r)?)
    });
    add("initials", &[S], None, |a| st(initials(&s(&a[0]))));
    add("swapcase", &[S], None, |a| st(swapcase(&s(&a[0]))));
    add("snakecase", &[S], None, |a| st(delimited(&s(&a[0]), "_")));
    add("kebabcase", &[S], None, |a| st(delimited(&s(&a[0]), "-")));
    add("camelcase", &[S], None, |a| st(camelcase(&s(&a[0]))));
    add("wrap", &[I, S], None, |a| {
        st(wrap_custom(&s(&a[1]), int(&a[0]), "", false))
    });
    add("wrapWith", &[I, S, S], None, |a| {
        st(wrap_custom(&s(&a[2]), int(&a[0]), &s(&a[1]), true))
    });
    add("contains", &[S, S], None, |a| {
        Ok(V::Bool(s(&a[1]).contains(&s(&a[0]))))
    });
    add("hasPrefix", &[S, S], None, |a| {
        Ok(V::Bool(s(&a[1]).starts_with(&s(&a[0]))))
    });
    add("hasSuffix", &[S, S], None, |a| {
        Ok(V::Bool(s(&a[1]).ends_with(&s(&a[0]))))
    });
    add("quote", &[], Some(Any), |a| {
        st(a.iter()
            .filter(|x| !x.is_nil())
            .map(|x| go_quote(&s(x)))
            .collect::<Vec<_>>()
            .join(" "))
    });
    add("squote", &[], Some(Any), |a| {
        st(a.iter()
            .filter(|x| !x.is_nil())
            .map(|x| format!("'{}'", s(x)))
            .collect::<Vec<_>>()
            .join(" "))
    });
    add("cat", &[], Some(Any), |a| {
        st(a.iter()
            .filter(|x| !x.is_nil())
            .map(s)
            .collect::<Vec<_>>()
            .join(" "))
    });
    add("indent", &[I, S], None, |a| {
        st(indent(int(&a[0]), &s(&a[1]))?)
    });
    add("nindent", &[I, S], None, |a| {
        st(format!("\n{}", indent(int(&a[0]), &s(&a[1]))?))
    });
    add("replace", &[S, S, S], None, |a| {
        let (old, new, src) = (s(&a[0]), s(&a[1]), s(&a[2]));
        let out = if old.is_empty() {
            // Go inserts the replacement around every character.
            let mut o = new.clone();
            for c in src.chars() {
                o.push(c);
                o.push_str(&new);
            }
            o
        } else {
            src.replace(&old, &new)
        };
        guard_len(out.len())?;
        st(out)
    });
    add("plural", &[S, S, I], None, |a| {
        if int(&a[2]) == 1 {
            Ok(a[0].clone())
        } else {
            Ok(a[1].clone())
        }
    });
    add("sha1sum", &[S], None, |a| {
        st(hex(&sha1::Sha1::digest(s(&a[0]).as_bytes())))
    });
    add("sha256sum", &[S], None, |a| {
        st(hex(&sha2::Sha256::digest(s(&a[0]).as_bytes())))
    });
    add("sha512sum", &[S], None, |a| {
        st(hex(&sha2::Sha512::digest(s(&a[0]).as_bytes())))
    });
    add("adler32sum", &[S], None, |a| {
        st(adler32(s(&a[0]).as_bytes()).to_string())
    });
    add("toString", &[Any], None, |a| st(s(&a[0])));
    add("regexMatch", &[S, S], None, |a| {
        Ok(V::Bool(regex(&s(&a[0]))?.is_match(&s(&a[1]))))
    });
    add("mustRegexMatch", &[S, S], None, |a| {
        Ok(V::Bool(regex(&s(&a[0]))?.is_match(&s(&a[1]))))
    });
    fn find_all(a: Vec<V>) -> R {
        let re = regex(&s(&a[0]))?;
        let x = s(&a[1]);
        let n = int(&a[2]);
        let it = re.find_iter(&x).map(|m| m.as_str().to_string());
        let v: Vec<String> = if n < 0 {
            it.collect()
        } else {
            it.take(n as usize).collect()
        };
        Ok(V::str_list(v))
    }
    add("regexFindAll", &[S, S, I], None, find_all);
    add("mustRegexFindAll", &[S, S, I], None, find_all);
    fn find(a: Vec<V>) -> R {
        let re = regex(&s(&a[0]))?;
        let x = s(&a[1]);
        st(re
            .find(&x)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default())
    }
    add("regexFind", &[S, S], None, find);
    add("mustRegexFind", &[S, S], None, find);
    fn replace_all(a: Vec<V>) -> R {
        let re = regex(&s(&a[0]))?;
        let out = re.replace_all(&s(&a[1]), s(&a[2]).as_str()).into_owned();
        guard_len(out.len())?;
        st(out)
    }
    add("regexReplaceAll", &[S, S, S], None, replace_all);
    add("mustRegexReplaceAll", &[S, S, S], None, replace_all);
    fn replace_lit(a: Vec<V>) -> R {
        let re = regex(&s(&a[0]))?;
        let out = re
            .replace_all(&s(&a[1]), regex::NoExpand(&s(&a[2])))
            .into_owned();
        guard_len(out.len())?;
        st(out)
    }
    add("regexReplaceAllLiteral", &[S, S, S], None, replace_lit);
    add("mustRegexReplaceAllLiteral", &[S, S, S], None, replace_lit);
    fn rsplit(a: Vec<V>) -> R {
        let re = regex(&s(&a[0]))?;
        Ok(V::str_list(regex_split(&re, &s(&a[1]), int(&a[2]))))
    }
    add("regexSplit", &[S, S, I], None, rsplit);
    add("mustRegexSplit", &[S, S, I], None, rsplit);
    add("regexQuoteMeta", &[S], None, |a| st(quote_meta(&s(&a[0]))));
    add("split", &[S, S], None, |a| {
        let (sep, x) = (s(&a[0]), s(&a[1]));
        let parts = go_split(&x, &sep, -1);
        Ok(split_map(parts.iter().map(String::as_str).collect()))
    });
    add("splitn", &[S, I, S], None, |a| {
        let (sep, n, x) = (s(&a[0]), int(&a[1]), s(&a[2]));
        let parts = go_split(&x, &sep, n);
        Ok(split_map(parts.iter().map(String::as_str).collect()))
    });
    add("splitList", &[S, S], None, |a| {
        Ok(V::str_list(go_split(&s(&a[1]), &s(&a[0]), -1)))
    });
    add("join", &[S, Any], None, |a| {
        let out = strslice(&a[1]).join(&s(&a[0]));
        guard_len(out.len())?;
        st(out)
    });
    add("sortAlpha", &[Any], None, |a| {
        let mut v = match &a[0] {
            V::List(..) => strslice(&a[0]),
            other => vec![s(other)],
        };
        v.sort();
        Ok(V::str_list(v))
    });
    add("toStrings", &[Any], None, |a| {
        Ok(V::str_list(strslice(&a[0])))
    });
    add("b64enc", &[S], None, |a| st(encoding::b64enc(&s(&a[0]))));
    add("b64dec", &[S], None, |a| {
        st(match encoding::b64dec(&s(&a[0]))? {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => e,
        })
    });
    add("b32enc", &[S], None, |a| st(encoding::b32enc(&s(&a[0]))));
    add("b32dec", &[S], None, |a| {
        st(match encoding::b32dec(&s(&a[0]))? {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => e,
        })
    });

    // Defaults and flow.
    add("default", &[Any], Some(Any), |a| {
        if a.len() < 2 || is_empty(&a[1]) {
            Ok(a[0].clone())
        } else {
            Ok(a[1].clone())
        }
    });
    add("empty", &[Any], None, |a| Ok(V::Bool(is_empty(&a[0]))));
    add("coalesce", &[], Some(Any), |a| {
        Ok(a.iter().find(|x| !is_empty(x)).cloned().unwrap_or(V::Nil))
    });
    add("all", &[], Some(Any), |a| {
        Ok(V::Bool(a.iter().all(|x| !is_empty(x))))
    });
    add("any", &[], Some(Any), |a| {
        Ok(V::Bool(a.iter().any(|x| !is_empty(x))))
    });
    fn compact(a: Vec<V>) -> R {
        let l = match &a[0] {
            V::List(l, _) => l.clone(),
            other => return Err(format!("Cannot compact on type {}", other.kind_name())),
        };
        Ok(V::list(
            l.iter().filter(|x| !is_empty(x)).cloned().collect(),
        ))
    }
    add("compact", &[Any], None, compact);
    add("mustCompact", &[Any], None, compact);
    add("ternary", &[Any, Any, B], None, |a| {
        Ok(if a[2].truth() {
            a[0].clone()
        } else {
            a[1].clone()
        })
    });
    add("fromJson", &[S], None, |a| {
        Ok(json_decode(&s(&a[0])).unwrap_or(V::Nil))
    });
    add("mustFromJson", &[S], None, |a| json_decode(&s(&a[0])));
    add("toJson", &[Any], None, |a| {
        st(to_json_fn(&a[0], true, None).unwrap_or_default())
    });
    add("mustToJson", &[Any], None, |a| {
        st(to_json_fn(&a[0], true, None)?)
    });
    add("toPrettyJson", &[Any], None, |a| {
        st(to_json_fn(&a[0], true, Some("  ")).unwrap_or_default())
    });
    add("mustToPrettyJson", &[Any], None, |a| {
        st(to_json_fn(&a[0], true, Some("  "))?)
    });
    add("toRawJson", &[Any], None, |a| {
        st(to_json_fn(&a[0], false, None).unwrap_or_default())
    });
    add("mustToRawJson", &[Any], None, |a| {
        st(to_json_fn(&a[0], false, None)?)
    });
    add("deepCopy", &[Any], None, |a| Ok(deep_copy(&a[0], 0)));
    add("mustDeepCopy", &[Any], None, |a| {
        if a[0].is_nil() {
            return Err("copy: Must not be nil".into());
        }
        Ok(deep_copy(&a[0], 0))
    });
    add("fail", &[S], None, |a| Err(s(&a[0])));

    // Reflection.
    add("typeOf", &[Any], None, |a| st(a[0].type_name()));
    add("typeIs", &[S, Any], None, |a| {
        Ok(V::Bool(s(&a[0]) == a[1].type_name()))
    });
    add("typeIsLike", &[S, Any], None, |a| {
        let t = a[1].type_name();
        let want = s(&a[0]);
        Ok(V::Bool(want == t || want == format!("*{t}")))
    });
    add("kindOf", &[Any], None, |a| st(kind_of(&a[0])));
    add("kindIs", &[S, Any], None, |a| {
        Ok(V::Bool(s(&a[0]) == kind_of(&a[1])))
    });
    add("deepEqual", &[Any, Any], None, |a| {
        Ok(V::Bool(deep_equal(&a[0], &a[1], 0)))
    });

    // Paths.
    for name in ["base", "osBase"] {
        add(name, &[S], None, |a| st(path_base(&s(&a[0]))));
    }
    for name in ["dir", "osDir"] {
        add(name, &[S], None, |a| st(path_dir(&s(&a[0]))));
    }
    for name in ["clean", "osClean"] {
        add(name, &[S], None, |a| st(path_clean(&s(&a[0]))));
    }
    for name in ["ext", "osExt"] {
        add(name, &[S], None, |a| st(path_ext(&s(&a[0]))));
    }
    for name in ["isAbs", "osIsAbs"] {
        add(name, &[S], None, |a| Ok(V::Bool(s(&a[0]).starts_with('/'))));
    }

    // Math.
    add("add1", &[Any], None, |a| {
        Ok(V::Int64(to_i64(&a[0]).wrapping_add(1)))
    });
    add("add", &[], Some(Any), |a| {
        Ok(V::Int64(
            a.iter().fold(0i64, |acc, x| acc.wrapping_add(to_i64(x))),
        ))
    });
    add("sub", &[Any, Any], None, |a| {
        Ok(V::Int64(to_i64(&a[0]).wrapping_sub(to_i64(&a[1]))))
    });
    add("div", &[Any, Any], None, |a| {
        let d = to_i64(&a[1]);
        if d == 0 {
            return Err("runtime error: integer divide by zero".into());
        }
        Ok(V::Int64(to_i64(&a[0]).wrapping_div(d)))
    });
    add("mod", &[Any, Any], None, |a| {
        let d = to_i64(&a[1]);
        if d == 0 {
            return Err("runtime error: integer divide by zero".into());
        }
        Ok(V::Int64(to_i64(&a[0]).wrapping_rem(d)))
    });
    add("mul", &[Any], Some(Any), |a| {
        Ok(V::Int64(
            a[1..]
                .iter()
                .fold(to_i64(&a[0]), |acc, x| acc.wrapping_mul(to_i64(x))),
        ))
    });
    for name in ["max", "biggest"] {
        add(name, &[Any], Some(Any), |a| {
            Ok(V::Int64(a.iter().map(to_i64).max().unwrap_or(0)))
        });
    }
    add("min", &[Any], Some(Any), |a| {
        Ok(V::Int64(a.iter().map(to_i64).min().unwrap_or(0)))
    });
    add("ceil", &[Any], None, |a| Ok(V::Float(to_f64(&a[0]).ceil())));
    add("floor", &[Any], None, |a| {
        Ok(V::Float(to_f64(&a[0]).floor()))
    });
    add("round", &[Any, I], Some(F), |a| round(&a));
    add("int", &[Any], None, |a| Ok(V::Int(to_i64(&a[0]))));
    add("int64", &[Any], None, |a| Ok(V::Int64(to_i64(&a[0]))));
    add("float64", &[Any], None, |a| Ok(V::Float(to_f64(&a[0]))));
    add("atoi", &[S], None, |a| {
        let x = s(&a[0]);
        let v = if x.starts_with(['+', '-']) || x.bytes().all(|b| b.is_ascii_digit()) {
            x.parse::<i64>().unwrap_or(0)
        } else {
            0
        };
        Ok(V::Int(v))
    });
    add("toDecimal", &[Any], None, |a| {
        Ok(V::Int64(i64::from_str_radix(&s(&a[0]), 8).unwrap_or(0)))
    });
    add("seq", &[], Some(I), |a| seq(&a));
    add("until", &[I], None, |a| {
        let c = int(&a[0]);
        let step = if c < 0 { -1 } else { 1 };
        Ok(V::List(Rc::new(until_step(0, c, step)?), Elem::Int))
    });
    add("untilStep", &[I, I, I], None, |a| {
        Ok(V::List(
            Rc::new(until_step(int(&a[0]), int(&a[1]), int(&a[2]))?),
            Elem::Int,
        ))
    });
    add("addf", &[], Some(Any), |a| {
        let mut v = vec![V::Float(0.0)];
        v.extend(a);
        float_fold(&v, '+')
    });
    add("add1f", &[Any], None, |a| {
        float_fold(&[a[0].clone(), V::Int(1)], '+')
    });
    add("subf", &[Any], Some(Any), |a| float_fold(&a, '-'));
    add("mulf", &[Any], Some(Any), |a| float_fold(&a, '*'));
    add("divf", &[Any], Some(Any), |a| float_fold(&a, '/'));
    add("maxf", &[Any], Some(Any), |a| float_fold(&a, 'M'));
    add("minf", &[Any], Some(Any), |a| float_fold(&a, 'm'));

    // Lists.
    for name in ["list", "tuple"] {
        add(name, &[], Some(Any), |a| Ok(V::list(a)));
    }
    fn first(a: Vec<V>) -> R {
        Ok(list_of(&a[0], "first")?.first().cloned().unwrap_or(V::Nil))
    }
    add("first", &[Any], None, first);
    add("mustFirst", &[Any], None, first);
    fn last(a: Vec<V>) -> R {
        Ok(list_of(&a[0], "last")?.last().cloned().unwrap_or(V::Nil))
    }
    add("last", &[Any], None, last);
    add("mustLast", &[Any], None, last);
    fn rest(a: Vec<V>) -> R {
        let l = list_of(&a[0], "rest")?;
        if l.is_empty() {
            return Ok(V::Nil);
        }
        Ok(V::list(l[1..].to_vec()))
    }
    add("rest", &[Any], None, rest);
    add("mustRest", &[Any], None, rest);
    fn initial(a: Vec<V>) -> R {
        let l = list_of(&a[0], "initial")?;
        if l.is_empty() {
            return Ok(V::Nil);
        }
        Ok(V::list(l[..l.len() - 1].to_vec()))
    }
    add("initial", &[Any], None, initial);
    add("mustInitial", &[Any], None, initial);
    fn push(a: Vec<V>) -> R {
        let mut l = list_of(&a[0], "push")
            .map_err(|_| format!("Cannot push on type {}", a[0].kind_name()))?
            .to_vec();
        if l.len() >= MAX_LIST {
            return Err(format!("list exceeds the limit of {MAX_LIST} elements"));
        }
        l.push(a[1].clone());
        Ok(V::list(l))
    }
    for name in ["append", "push", "mustAppend", "mustPush"] {
        add(name, &[Any, Any], None, push);
    }
    fn prepend(a: Vec<V>) -> R {
        let l = list_of(&a[0], "prepend")
            .map_err(|_| format!("Cannot prepend on type {}", a[0].kind_name()))?;
        let mut out = vec![a[1].clone()];
        out.extend(l.iter().cloned());
        Ok(V::list(out))
    }
    add("prepend", &[Any, Any], None, prepend);
    add("mustPrepend", &[Any, Any], None, prepend);
    add("concat", &[], Some(Any), |a| {
        let mut out = Vec::new();
        for x in &a {
            match x {
                V::List(l, _) => out.extend(l.iter().cloned()),
                other => return Err(format!("Cannot concat type {} as list", other.kind_name())),
            }
            if out.len() > MAX_LIST {
                return Err(format!("list exceeds the limit of {MAX_LIST} elements"));
            }
        }
        Ok(V::list(out))
    });
    fn reverse(a: Vec<V>) -> R {
        let mut l = list_of(&a[0], "reverse")
            .map_err(|_| format!("Cannot find reverse on type {}", a[0].kind_name()))?
            .to_vec();
        l.reverse();
        Ok(V::list(l))
    }
    add("reverse", &[Any], None, reverse);
    add("mustReverse", &[Any], None, reverse);
    fn uniq(a: Vec<V>) -> R {
        let l = list_of(&a[0], "uniq")
            .map_err(|_| format!("Cannot find uniq on type {}", a[0].kind_name()))?;
        let mut out: Vec<V> = Vec::new();
        for x in l.iter() {
            if !in_list(&out, x) {
                out.push(x.clone());
            }
        }
        Ok(V::list(out))
    }
    add("uniq", &[Any], None, uniq);
    add("mustUniq", &[Any], None, uniq);
    fn without(a: Vec<V>) -> R {
        let l = list_of(&a[0], "without")
            .map_err(|_| format!("Cannot find without on type {}", a[0].kind_name()))?;
        Ok(V::list(
            l.iter().filter(|x| !in_list(&a[1..], x)).cloned().collect(),
        ))
    }
    add("without", &[Any], Some(Any), without);
    add("mustWithout", &[Any], Some(Any), without);
    fn has(a: Vec<V>) -> R {
        match &a[1] {
            V::Nil | V::Missing => Ok(V::Bool(false)),
            V::List(l, _) => Ok(V::Bool(in_list(l, &a[0]))),
            other => Err(format!("Cannot find has on type {}", other.kind_name())),
        }
    }
    add("has", &[Any, Any], None, has);
    add("mustHas", &[Any, Any], None, has);
    add("slice", &[Any], Some(Any), |a| sprig_slice(&a));
    add("mustSlice", &[Any], Some(Any), |a| sprig_slice(&a));
    fn chunk(a: Vec<V>) -> R {
        let size = int(&a[0]);
        let l = list_of(&a[1], "chunk")
            .map_err(|_| format!("Cannot chunk type {}", a[1].kind_name()))?;
        if size <= 0 {
            return Err("runtime error: integer divide by zero".into());
        }
        Ok(V::list(
            l.chunks(size as usize)
                .map(|c| V::list(c.to_vec()))
                .collect(),
        ))
    }
    add("chunk", &[I, Any], None, chunk);
    add("mustChunk", &[I, Any], None, chunk);

    // Dicts.
    add("dict", &[], Some(Any), |a| {
        let mut m = BTreeMap::new();
        for pair in a.chunks(2) {
            let k = s(&pair[0]);
            m.insert(k, pair.get(1).cloned().unwrap_or_else(|| V::str("")));
        }
        Ok(V::map(m))
    });
    add("get", &[M, S], None, |a| {
        Ok(map_get(&a[0])
            .get(&s(&a[1]))
            .cloned()
            .unwrap_or_else(|| V::str("")))
    });
    add("set", &[M, S, Any], None, |a| {
        if let V::Map(m, _) = &a[0] {
            m.try_borrow_mut()
                .map_err(|_| "map in use".to_string())?
                .insert(s(&a[1]), a[2].clone());
        }
        Ok(a[0].clone())
    });
    add("unset", &[M, S], None, |a| {
        if let V::Map(m, _) = &a[0] {
            m.try_borrow_mut()
                .map_err(|_| "map in use".to_string())?
                .remove(&s(&a[1]));
        }
        Ok(a[0].clone())
    });
    add("hasKey", &[M, S], None, |a| {
        Ok(V::Bool(map_get(&a[0]).contains_key(&s(&a[1]))))
    });
    add("pluck", &[S], Some(M), |a| {
        let k = s(&a[0]);
        Ok(V::list(
            a[1..]
                .iter()
                .filter_map(|m| map_get(m).get(&k).cloned())
                .collect(),
        ))
    });
    add("keys", &[], Some(M), |a| {
        let mut ks: Vec<String> = a.iter().flat_map(|m| map_get(m).into_keys()).collect();
        ks.sort();
        Ok(V::str_list(ks))
    });
    add("values", &[M], None, |a| {
        Ok(V::list(map_get(&a[0]).into_values().collect()))
    });
    add("pick", &[M], Some(S), |a| {
        let m = map_get(&a[0]);
        let out: BTreeMap<String, V> = a[1..]
            .iter()
            .filter_map(|k| {
                let k = s(k);
                m.get(&k).map(|v| (k, v.clone()))
            })
            .collect();
        Ok(V::map(out))
    });
    add("omit", &[M], Some(S), |a| {
        let drop: Vec<String> = a[1..].iter().map(s).collect();
        Ok(V::map(
            map_get(&a[0])
                .into_iter()
                .filter(|(k, _)| !drop.contains(k))
                .collect(),
        ))
    });
    add("merge", &[M], Some(M), |a| merge(a, false));
    add("mustMerge", &[M], Some(M), |a| merge(a, false));
    add("mergeOverwrite", &[M], Some(M), |a| merge(a, true));
    add("mustMergeOverwrite", &[M], Some(M), |a| merge(a, true));
    add("dig", &[], Some(Any), |a| dig(&a));

    // Semver.
    add("semver", &[S], None, |a| {
        Ok(V::Semver(Rc::new(parse_semver(&s(&a[0]))?)))
    });
    add("semverCompare", &[S, S], None, |a| {
        Ok(V::Bool(semver_compare(&s(&a[0]), &s(&a[1]))?))
    });

    // URLs.
    add("urlParse", &[S], None, |a| url_parse(&s(&a[0])));
    add("urlJoin", &[M], None, |a| url_join(&a[0]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_known_value() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E60398);
    }

    #[test]
    fn path_functions() {
        assert_eq!(path_base("/a/b/c.txt"), "c.txt");
        assert_eq!(path_dir("/a/b/c.txt"), "/a/b");
        assert_eq!(path_clean("a//b/../c/."), "a/c");
        assert_eq!(path_ext("x/y.tar.gz"), ".gz");
        assert_eq!(path_base(""), ".");
        assert_eq!(path_dir("abc"), ".");
    }

    #[test]
    fn decimal_float_ops() {
        assert_eq!(dec_op(1.1, 2.2, '+'), 3.3);
        assert_eq!(dec_op(0.3, 0.1, '-'), 0.2);
        assert_eq!(dec_op(1.1, 3.0, '*'), 3.3);
    }
}

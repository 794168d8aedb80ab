//! Masterminds/semver v3 as sprig uses it: parsing, comparing, constraints, and the
//! methods of the `*semver.Version` values `semver` returns.

use super::value::{SemverVal, V};

/// `semver.NewVersion`: a leading `v`, and missing minor or patch parts, are accepted.
pub fn parse_semver(v: &str) -> Result<SemverVal, String> {
    let err = || "Invalid Semantic Version".to_string();
    let orig = v.to_string();
    let t = v.strip_prefix('v').unwrap_or(v);
    let (t, meta) = match t.split_once('+') {
        Some((a, m)) => (a, m.to_string()),
        None => (t, String::new()),
    };
    let (core, pre) = match t.split_once('-') {
        Some((a, p)) => (a, p.to_string()),
        None => (t, String::new()),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(err());
    }
    let mut nums = [0u64; 3];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        nums[i] = p.parse().map_err(|_| err())?;
    }
    let ident_ok = |s: &str| {
        s.is_empty()
            || s.split('.')
                .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    if !ident_ok(&pre) || !ident_ok(&meta) {
        return Err(err());
    }
    Ok(SemverVal {
        major: nums[0],
        minor: nums[1],
        patch: nums[2],
        pre,
        meta,
        original: orig,
    })
}

fn cmp_pre(a: &str, b: &str) -> i32 {
    if a == b {
        return 0;
    }
    if a.is_empty() {
        return 1;
    }
    if b.is_empty() {
        return -1;
    }
    let (pa, pb): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    for i in 0..pa.len().max(pb.len()) {
        let (Some(x), Some(y)) = (pa.get(i), pb.get(i)) else {
            return if pa.len() < pb.len() { -1 } else { 1 };
        };
        let (nx, ny) = (x.parse::<u64>().ok(), y.parse::<u64>().ok());
        let c = match (nx, ny) {
            (Some(p), Some(q)) => p.cmp(&q),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => x.cmp(y),
        };
        if c.is_ne() {
            return if c.is_lt() { -1 } else { 1 };
        }
    }
    0
}

pub fn semver_cmp(a: &SemverVal, b: &SemverVal) -> i32 {
    let c = (a.major, a.minor, a.patch).cmp(&(b.major, b.minor, b.patch));
    if c.is_ne() {
        return if c.is_lt() { -1 } else { 1 };
    }
    cmp_pre(&a.pre, &b.pre)
}

/// One constraint term: operator, version and which parts were wildcards/missing.
struct Term {
    op: String,
    v: SemverVal,
    /// Number of parts given (1 = major only, 2 = major.minor, 3 = full).
    given: usize,
    any: bool,
}

fn parse_term(t: &str) -> Result<Term, String> {
    let t = t.trim();
    let ops = ["!=", ">=", "=>", "<=", "=<", "~>", ">", "<", "=", "~", "^"];
    let mut op = "";
    let mut rest = t;
    for o in ops {
        if let Some(r) = t.strip_prefix(o) {
            op = o;
            rest = r.trim_start();
            break;
        }
    }
    let op = match op {
        "=>" => ">=",
        "=<" => "<=",
        "~>" => "~",
        o => o,
    }
    .to_string();
    let bad = || format!("improper constraint: {t}");
    let core_end = rest.find(['-', '+']).unwrap_or(rest.len());
    let core = rest[..core_end]
        .strip_prefix('v')
        .unwrap_or(&rest[..core_end]);
    let mut given = 0;
    let mut nums = Vec::new();
    let mut any = false;
    for p in core.split('.') {
        if matches!(p, "x" | "X" | "*") {
            any = given == 0;
            break;
        }
        nums.push(p.to_string());
        given += 1;
    }
    if core.is_empty() {
        return Err(bad());
    }
    let mut vs = nums.join(".");
    if vs.is_empty() {
        vs = "0".into();
    }
    vs.push_str(&rest[core_end..]);
    let v = parse_semver(&vs).map_err(|_| bad())?;
    Ok(Term { op, v, given, any })
}

fn ver(major: u64, minor: u64, patch: u64) -> SemverVal {
    SemverVal {
        major,
        minor,
        patch,
        pre: String::new(),
        meta: String::new(),
        original: String::new(),
    }
}

fn term_check(t: &Term, v: &SemverVal) -> bool {
    if t.any {
        return v.pre.is_empty() || !t.v.pre.is_empty();
    }
    // A prerelease version only satisfies terms that carry a prerelease.
    if !v.pre.is_empty() && t.v.pre.is_empty() {
        return false;
    }
    let c = semver_cmp(v, &t.v);
    let dirty = t.given < 3;
    let upper_minor = ver(t.v.major, t.v.minor.saturating_add(1), 0);
    let upper_major = ver(t.v.major.saturating_add(1), 0, 0);
    match t.op.as_str() {
        "" | "=" => {
            if !dirty {
                return c == 0;
            }
            match t.given {
                1 => v.major == t.v.major,
                _ => v.major == t.v.major && v.minor == t.v.minor,
            }
        }
        "!=" => {
            if !dirty {
                return c != 0;
            }
            match t.given {
                1 => v.major != t.v.major,
                _ => !(v.major == t.v.major && v.minor == t.v.minor),
            }
        }
        ">" => {
            if !dirty {
                c > 0
            } else if t.given == 1 {
                v.major > t.v.major
            } else {
                (v.major, v.minor) > (t.v.major, t.v.minor)
            }
        }
        "<" => c < 0,
        ">=" => c >= 0,
        "<=" => {
            if !dirty {
                c <= 0
            } else if t.given == 1 {
                v.major <= t.v.major
            } else {
                (v.major, v.minor) <= (t.v.major, t.v.minor)
            }
        }
        "~" => {
            c >= 0
                && if t.given == 1 {
                    semver_cmp(v, &upper_major) < 0
                } else {
                    semver_cmp(v, &upper_minor) < 0
                }
        }
        "^" => {
            if c < 0 {
                return false;
            }
            let upper = if t.v.major > 0 || t.given == 1 {
                upper_major
            } else if t.v.minor > 0 || t.given == 2 {
                upper_minor
            } else {
                ver(0, 0, t.v.patch.saturating_add(1))
            };
            semver_cmp(v, &upper) < 0
        }
        _ => false,
    }
}

/// Whether `version` satisfies `constraint` (`semverCompare`).
pub fn semver_compare(constraint: &str, version: &str) -> Result<bool, String> {
    let v = parse_semver(version)?;
    let mut any_ok = false;
    for alt in constraint.split("||") {
        // Hyphen ranges "a - b".
        let alt = alt.trim();
        let mut terms = Vec::new();
        if let Some((lo, hi)) = alt.split_once(" - ") {
            terms.push(parse_term(&format!(">={}", lo.trim()))?);
            let hi_t = parse_term(hi.trim())?;
            let op = if hi_t.given < 3 { "<" } else { "<=" };
            let hi_t = if hi_t.given < 3 {
                let up = if hi_t.given == 1 {
                    ver(hi_t.v.major + 1, 0, 0)
                } else {
                    ver(hi_t.v.major, hi_t.v.minor + 1, 0)
                };
                Term {
                    op: op.into(),
                    v: up,
                    given: 3,
                    any: false,
                }
            } else {
                Term {
                    op: op.into(),
                    ..hi_t
                }
            };
            terms.push(hi_t);
        } else {
            // Terms are separated by commas or spaces; an operator may be followed by a space.
            let normalized = alt.replace(',', " ");
            let mut pending = String::new();
            for tok in normalized.split_whitespace() {
                if matches!(
                    tok,
                    "=" | "!=" | ">" | "<" | ">=" | "<=" | "=>" | "=<" | "~" | "~>" | "^"
                ) {
                    pending = tok.to_string();
                    continue;
                }
                terms.push(parse_term(&format!("{pending}{tok}"))?);
                pending.clear();
            }
            if terms.is_empty() {
                return Err(format!("improper constraint: {alt}"));
            }
        }
        if terms.iter().all(|t| term_check(t, &v)) {
            any_ok = true;
        }
    }
    Ok(any_ok)
}

/// Methods of sprig's `*semver.Version`.
pub fn semver_method(s: &SemverVal, name: &str, args: Vec<V>) -> Result<V, String> {
    let no_args = |v: V| {
        if args.is_empty() {
            Ok(v)
        } else {
            Err(format!(
                "wrong number of args for {name}: want 0 got {}",
                args.len()
            ))
        }
    };
    match name {
        "Major" => no_args(V::Int64(s.major as i64)),
        "Minor" => no_args(V::Int64(s.minor as i64)),
        "Patch" => no_args(V::Int64(s.patch as i64)),
        "Prerelease" => no_args(V::str(s.pre.as_str())),
        "Metadata" => no_args(V::str(s.meta.as_str())),
        "Original" => no_args(V::str(s.original.as_str())),
        "String" => no_args(V::str(s.canonical())),
        "Compare" | "LessThan" | "GreaterThan" | "Equal" => {
            let [V::Semver(o)] = args.as_slice() else {
                return Err(format!(
                    "wrong number of args for {name}: want 1 got {}",
                    args.len()
                ));
            };
            let c = semver_cmp(s, o);
            Ok(match name {
                "Compare" => V::Int(c as i64),
                "LessThan" => V::Bool(c < 0),
                "GreaterThan" => V::Bool(c > 0),
                _ => V::Bool(c == 0),
            })
        }
        _ => Err(format!(
            "can't evaluate field {name} in type *semver.Version"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_constraints() {
        let t = |c: &str, v: &str| semver_compare(c, v).unwrap_or(false);
        assert!(t(">=1.2.3", "1.2.3"));
        assert!(!t(">=1.2.3", "1.2.2"));
        assert!(t("~1.2", "1.2.9"));
        assert!(!t("~1.2", "1.3.0"));
        assert!(t("~1.2.3", "1.2.4"));
        assert!(t("^1.2", "1.9.0"));
        assert!(!t("^1.2", "2.0.0"));
        assert!(t("^0.2.3", "0.2.9"));
        assert!(!t("^0.2.3", "0.3.0"));
        assert!(t(">= 1.2, < 1.4", "1.3.1"));
        assert!(!t(">= 1.2, < 1.4", "1.4.0"));
        assert!(t("<1.0 || >=2.0", "2.1.0"));
        assert!(t("1.2.x", "1.2.7"));
        assert!(t("*", "3.0.0"));
        assert!(t("1.2 - 1.4.5", "1.4.5"));
        assert!(!t("1.2 - 1.4.5", "1.4.6"));
        assert!(t(">=v1.28.0", "v1.29.3"));
        assert!(!t(">=1.0.0", "1.2.0-beta.1"));
        assert!(t(">=1.2.0-0", "1.2.0-beta.1"));
        assert!(semver_compare(">=1.0", "not-a-version").is_err());
    }
}

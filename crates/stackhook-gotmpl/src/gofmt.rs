//! Go `fmt`: `Sprint`, `Sprintln` and `Sprintf` for the common verbs.

use std::fmt::Write as _;

use super::value::{format_e, format_g, V};

/// `fmt.Sprint`: spaces between operands when neither side is a string.
pub fn sprint(args: &[V]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !matches!(a, V::Str(_)) && !matches!(args[i - 1], V::Str(_)) {
            out.push(' ');
        }
        out.push_str(&a.go_string());
    }
    out
}

/// `fmt.Sprintln`: always spaces, and a final newline.
pub fn sprintln(args: &[V]) -> String {
    let parts: Vec<String> = args.iter().map(|a| a.go_string()).collect();
    let mut s = parts.join(" ");
    s.push('\n');
    s
}

/// `strconv.Quote`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            '\u{fffd}' => out.push('\u{fffd}'),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                if (c as u32) < 0x10000 {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                } else {
                    let _ = write!(out, "\\U{:08x}", c as u32);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[derive(Default, Clone, Copy)]
struct Spec {
    minus: bool,
    plus: bool,
    sharp: bool,
    zero: bool,
    space: bool,
    width: Option<usize>,
    prec: Option<usize>,
}

const MAX_WIDTH: usize = 1 << 16;

fn pad(s: String, sp: &Spec, numeric: bool) -> String {
    let Some(w) = sp.width else { return s };
    let n = s.chars().count();
    if n >= w {
        return s;
    }
    let fill = w - n;
    if sp.minus {
        let mut s = s;
        s.extend(std::iter::repeat_n(' ', fill));
        s
    } else if sp.zero && numeric {
        let (sign, rest) = match s.chars().next() {
            Some(c @ ('-' | '+' | ' ')) => (c.to_string(), s[1..].to_string()),
            _ => (String::new(), s.clone()),
        };
        format!("{sign}{}{rest}", "0".repeat(fill))
    } else {
        format!("{}{s}", " ".repeat(fill))
    }
}

fn bad_verb(verb: char, v: &V) -> String {
    match v {
        V::Nil | V::Missing => format!("%!{verb}(<nil>)"),
        _ => format!("%!{verb}({}={})", v.type_name(), v.go_string()),
    }
}

fn fmt_int(i: i64, verb: char, sp: &Spec) -> Option<String> {
    let sign = if i < 0 {
        "-"
    } else if sp.plus {
        "+"
    } else if sp.space {
        " "
    } else {
        ""
    };
    let a = i.unsigned_abs();
    let body = match verb {
        'd' | 'v' => a.to_string(),
        'b' => format!("{a:b}"),
        'o' => {
            if sp.sharp {
                format!("0{a:o}")
            } else {
                format!("{a:o}")
            }
        }
        'O' => format!("0o{a:o}"),
        'x' => {
            if sp.sharp {
                format!("0x{a:x}")
            } else {
                format!("{a:x}")
            }
        }
        'X' => {
            if sp.sharp {
                format!("0X{a:X}")
            } else {
                format!("{a:X}")
            }
        }
        'c' => return Some(char::from_u32(i as u32).unwrap_or('\u{fffd}').to_string()),
        'q' => {
            let c = char::from_u32(i as u32).unwrap_or('\u{fffd}');
            let q = go_quote(&c.to_string());
            let inner = &q[1..q.len() - 1];
            let inner = if inner == "'" {
                "\\'"
            } else if inner == "\\\"" {
                "\""
            } else {
                inner
            };
            return Some(format!("'{inner}'"));
        }
        'U' => return Some(format!("U+{:04X}", i)),
        _ => return None,
    };
    let body = match sp.prec {
        Some(p) if body.len() < p => format!("{}{body}", "0".repeat(p - body.len())),
        _ => body,
    };
    Some(format!("{sign}{body}"))
}

fn strip_g(mant: &str) -> String {
    if mant.contains('.') {
        mant.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        mant.to_string()
    }
}

fn fmt_float(f: f64, verb: char, sp: &Spec) -> Option<String> {
    if !f.is_finite() {
        let s = if f.is_nan() {
            "NaN".to_string()
        } else if f > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        };
        return Some(s);
    }
    let mut s = match verb {
        'v' | 'g' | 'G' => match sp.prec {
            None => format_g(f),
            Some(p) => {
                let p = p.max(1);
                let e = format!("{:.*e}", p - 1, f);
                let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
                let exp: i32 = exp.parse().unwrap_or(0);
                if exp < -4 || exp >= p as i32 {
                    let mut m = strip_g(mant);
                    m.push('e');
                    m.push(if exp < 0 { '-' } else { '+' });
                    let _ = write!(m, "{:02}", exp.unsigned_abs());
                    m
                } else {
                    let decimals = (p as i32 - 1 - exp).max(0) as usize;
                    strip_g(&format!("{:.*}", decimals, f))
                }
            }
        },
        'e' | 'E' => format_e(f, sp.prec.unwrap_or(6)),
        'f' | 'F' => format!("{:.*}", sp.prec.unwrap_or(6), f),
        _ => return None,
    };
    if verb == 'G' || verb == 'E' {
        s = s.to_uppercase();
    }
    if f >= 0.0 && !s.starts_with('-') {
        if sp.plus {
            s.insert(0, '+');
        } else if sp.space {
            s.insert(0, ' ');
        }
    }
    Some(s)
}

fn hex_str(s: &str, upper: bool, sp: &Spec) -> String {
    let mut out = String::new();
    for (i, b) in s.bytes().enumerate() {
        if sp.space && i > 0 {
            out.push(' ');
        }
        if sp.sharp && (sp.space || i == 0) {
            out.push_str(if upper { "0X" } else { "0x" });
        }
        if upper {
            let _ = write!(out, "{b:02X}");
        } else {
            let _ = write!(out, "{b:02x}");
        }
    }
    out
}

/// Format one operand; `None` means a bad verb for its type.
fn fmt_one(v: &V, verb: char, sp: &Spec, depth: usize) -> Option<(String, bool)> {
    if depth > super::value::MAX_PRINT_DEPTH {
        return Some(("...".into(), false));
    }
    match v {
        V::Missing | V::Nil => match verb {
            'v' => Some(("<nil>".into(), false)),
            _ => None,
        },
        V::Bool(b) => match verb {
            't' | 'v' => Some((b.to_string(), false)),
            _ => None,
        },
        V::Int(i) | V::Int64(i) => fmt_int(*i, verb, sp).map(|s| (s, true)),
        V::Float(f) => fmt_float(*f, verb, sp).map(|s| (s, true)),
        V::Str(s) => match verb {
            'v' | 's' => {
                let s: String = match sp.prec {
                    Some(p) => s.chars().take(p).collect(),
                    None => s.to_string(),
                };
                Some((s, false))
            }
            'q' => Some((go_quote(s), false)),
            'x' => Some((hex_str(s, false, sp), false)),
            'X' => Some((hex_str(s, true, sp), false)),
            _ => None,
        },
        V::Semver(s) => match verb {
            'v' | 's' => Some((s.canonical(), false)),
            'q' => Some((go_quote(&s.canonical()), false)),
            _ => None,
        },
        V::List(l, _) => {
            let mut out = String::from("[");
            for (i, x) in l.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                match fmt_one(x, verb, &Spec { width: None, ..*sp }, depth + 1) {
                    Some((s, _)) => out.push_str(&s),
                    None => out.push_str(&bad_verb(verb, x)),
                }
            }
            out.push(']');
            Some((out, false))
        }
        V::Map(m, _) => {
            let mut out = String::from("map[");
            if let Ok(m) = m.try_borrow() {
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let inner = Spec { width: None, ..*sp };
                    match fmt_one(&V::str(k.as_str()), verb, &inner, depth + 1) {
                        Some((s, _)) => out.push_str(&s),
                        None => out.push_str(&bad_verb(verb, &V::str(k.as_str()))),
                    }
                    out.push(':');
                    match fmt_one(x, verb, &inner, depth + 1) {
                        Some((s, _)) => out.push_str(&s),
                        None => out.push_str(&bad_verb(verb, x)),
                    }
                }
            }
            out.push(']');
            Some((out, false))
        }
    }
}

/// `fmt.Sprintf`.
pub fn sprintf(format: &str, args: &[V]) -> String {
    let mut out = String::new();
    let mut argi = 0;
    let chars: Vec<char> = format.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c != '%' {
            out.push(c);
            i += 1;
            continue;
        }
        i += 1;
        let mut sp = Spec::default();
        while i < chars.len() {
            match chars[i] {
                '-' => sp.minus = true,
                '+' => sp.plus = true,
                '#' => sp.sharp = true,
                '0' => sp.zero = true,
                ' ' => sp.space = true,
                _ => break,
            }
            i += 1;
        }
        // Width.
        if i < chars.len() && chars[i] == '*' {
            i += 1;
            match args.get(argi) {
                Some(V::Int(n) | V::Int64(n)) => {
                    let n = *n;
                    if n < 0 {
                        sp.minus = true;
                    }
                    sp.width = Some((n.unsigned_abs() as usize).min(MAX_WIDTH));
                }
                _ => out.push_str("%!(BADWIDTH)"),
            }
            argi += 1;
        } else {
            let mut w: Option<usize> = None;
            while i < chars.len() && chars[i].is_ascii_digit() {
                let d = chars[i] as usize - '0' as usize;
                w = Some((w.unwrap_or(0) * 10 + d).min(MAX_WIDTH));
                i += 1;
            }
            sp.width = w;
        }
        // Precision.
        if i < chars.len() && chars[i] == '.' {
            i += 1;
            if i < chars.len() && chars[i] == '*' {
                i += 1;
                match args.get(argi) {
                    Some(V::Int(n) | V::Int64(n)) if *n >= 0 => {
                        sp.prec = Some((*n as usize).min(MAX_WIDTH))
                    }
                    _ => out.push_str("%!(BADPREC)"),
                }
                argi += 1;
            } else {
                let mut p = 0usize;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    p = (p * 10 + (chars[i] as usize - '0' as usize)).min(MAX_WIDTH);
                    i += 1;
                }
                sp.prec = Some(p);
            }
        }
        if i >= chars.len() {
            out.push_str("%!(NOVERB)");
            break;
        }
        let verb = chars[i];
        i += 1;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(argi) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        argi += 1;
        if verb == 'T' {
            out.push_str(&pad(arg.type_name(), &sp, false));
            continue;
        }
        match fmt_one(arg, verb, &sp, 0) {
            Some((s, numeric)) => out.push_str(&pad(s, &sp, numeric)),
            None => out.push_str(&bad_verb(verb, arg)),
        }
    }
    if argi < args.len() {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> = args[argi..]
            .iter()
            .map(|a| match a {
                V::Nil | V::Missing => "<nil>".to_string(),
                _ => format!("{}={}", a.type_name(), a.go_string()),
            })
            .collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> V {
        V::str(x)
    }

    #[test]
    fn printf_common_verbs() {
        // Expected strings are Go's fmt outputs.
        assert_eq!(sprintf("%s-%d", &[s("a"), V::Int(3)]), "a-3");
        assert_eq!(sprintf("%v", &[V::Float(1e6)]), "1e+06");
        assert_eq!(sprintf("%d", &[V::Float(3.0)]), "%!d(float64=3)");
        assert_eq!(sprintf("%s", &[V::Int(3)]), "%!s(int=3)");
        assert_eq!(sprintf("%q", &[s("a\"b")]), "\"a\\\"b\"");
        assert_eq!(sprintf("%.2f", &[V::Float(1.23456)]), "1.23");
        assert_eq!(sprintf("%f", &[V::Float(1.5)]), "1.500000");
        assert_eq!(sprintf("%x", &[V::Int(255)]), "ff");
        assert_eq!(sprintf("%X", &[s("hi")]), "6869");
        assert_eq!(sprintf("%t", &[V::Bool(true)]), "true");
        assert_eq!(sprintf("100%%", &[]), "100%");
        assert_eq!(
            sprintf("%5d|%-5s|%05d", &[V::Int(42), s("ab"), V::Int(-42)]),
            "   42|ab   |-0042"
        );
        assert_eq!(sprintf("%d", &[]), "%!d(MISSING)");
        assert_eq!(sprintf("x", &[V::Int(1)]), "x%!(EXTRA int=1)");
        assert_eq!(sprintf("%e", &[V::Float(1234.5678)]), "1.234568e+03");
        assert_eq!(sprintf("%g", &[V::Float(0.00001)]), "1e-05");
        assert_eq!(sprintf("%.3g", &[V::Float(1234.5678)]), "1.23e+03");
        assert_eq!(sprintf("%v", &[V::Nil]), "<nil>");
        assert_eq!(sprintf("%T", &[V::Float(1.0)]), "float64");
        assert_eq!(sprintf("%c", &[V::Int(65)]), "A");
        assert_eq!(sprintf("%+d", &[V::Int(5)]), "+5");
    }

    #[test]
    fn sprint_spacing() {
        assert_eq!(sprint(&[s("a"), V::Int(1), V::Int(2), s("b")]), "a1 2b");
        assert_eq!(sprintln(&[s("a"), V::Int(1)]), "a 1\n");
    }
}

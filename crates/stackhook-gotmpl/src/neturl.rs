//! The pieces of Go's `net/url` that the `urlquery` builtin and sprig's URL functions
//! share.

/// Go `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    escape(s, true)
}

/// Go's `url.escape`: query escaping (space as `+`), or path escaping that keeps
/// the path's sub-delimiters.
pub fn escape(s: &str, query: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' if query => out.push('+'),
            b'/' | b':' | b'@' | b'&' | b'=' | b'+' | b'$' | b',' | b';' if !query => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-decoding that keeps malformed escapes as they are.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

//! Request values quoted back in messages: a Failure's message ends up in CAPI's
//! conditions and in our log lines, so a value is shown by a short prefix only, never
//! copied whole (it may be megabytes, or a secret pasted into the wrong variable).
//!
//! A value longer than [`SHOWN_CHARS`] characters is cut on a character boundary and
//! marked with its full size: `"aaaa"…(10000 bytes)` for a string,
//! `{"a":[1,2,…(20480 bytes)` for an object.

use std::borrow::Cow;
use std::io;

use serde_json::Value;

/// How many characters of a value a message shows.
pub const SHOWN_CHARS: usize = 64;

/// `s` whole when it has at most [`SHOWN_CHARS`] characters, else its first
/// [`SHOWN_CHARS`] characters and `…(N bytes)`, N the length of `s`.
pub fn clip(s: &str) -> Cow<'_, str> {
    clip_to(s, SHOWN_CHARS)
}

/// [`clip`] with another limit, for text that holds a value among other words.
pub fn clip_to(s: &str, max_chars: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max_chars) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => Cow::Owned(format!("{}…({} bytes)", &s[..cut], s.len())),
    }
}

/// `s` as a JSON string; when longer than [`SHOWN_CHARS`] characters, its first
/// [`SHOWN_CHARS`] characters quoted and `…(N bytes)`, N the length of `s`.
pub fn quote(s: &str) -> String {
    let (shown, cut) = match s.char_indices().nth(SHOWN_CHARS) {
        None => (s, false),
        Some((cut, _)) => (&s[..cut], true),
    };
    // A `str` always serializes.
    let quoted = serde_json::to_string(shown).unwrap_or_default();
    if cut {
        format!("{quoted}…({} bytes)", s.len())
    } else {
        quoted
    }
}

/// `v` as compact JSON text: a string as [`quote`] shows it, anything else cut after
/// [`SHOWN_CHARS`] characters. A large value is not serialized into memory whole: only
/// its first bytes are kept, the rest is counted.
pub fn clip_json(v: &Value) -> String {
    if let Value::String(s) = v {
        return quote(s);
    }
    let mut head = Head {
        kept: Vec::new(),
        total: 0,
    };
    // Writing to `Head` cannot fail and a `Value` always serializes.
    let _ = serde_json::to_writer(&mut head, v);
    let text = String::from_utf8_lossy(&head.kept);
    match text.char_indices().nth(SHOWN_CHARS) {
        None if head.total == head.kept.len() => text.into_owned(),
        // Only reached when the kept bytes end inside the first characters, which
        // `KEPT` makes impossible; still, say how much there was.
        None => format!("{text}…({} bytes)", head.total),
        Some((cut, _)) => format!("{}…({} bytes)", &text[..cut], head.total),
    }
}

/// Enough bytes for [`SHOWN_CHARS`] characters of up to four bytes each, plus one
/// more character, to tell whether there is more.
const KEPT: usize = 4 * (SHOWN_CHARS + 1);

/// The first [`KEPT`] bytes written, and how many were written in all.
struct Head {
    kept: Vec<u8>,
    total: usize,
}

impl io::Write for Head {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = KEPT.saturating_sub(self.kept.len()).min(buf.len());
        self.kept.extend_from_slice(&buf[..room]);
        self.total += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn short_text_is_shown_whole() {
        assert!(matches!(clip("node-1"), Cow::Borrowed("node-1")));
        let exact = "x".repeat(SHOWN_CHARS);
        assert_eq!(clip(&exact), exact.as_str());
    }

    #[test]
    fn long_text_keeps_a_prefix_and_its_size() {
        let long = "x".repeat(SHOWN_CHARS + 1);
        assert_eq!(
            clip(&long),
            format!("{}…({} bytes)", "x".repeat(SHOWN_CHARS), SHOWN_CHARS + 1)
        );
        // Cut between characters, never inside one.
        let wide = "é".repeat(10_000);
        let shown = clip(&wide);
        assert_eq!(shown, format!("{}…(20000 bytes)", "é".repeat(SHOWN_CHARS)));
        assert_eq!(clip_to("abcdef", 3), "abc…(6 bytes)");
    }

    #[test]
    fn strings_are_quoted_then_marked() {
        let exact = "q".repeat(SHOWN_CHARS);
        assert_eq!(quote(&exact), format!("\"{exact}\""));
        assert_eq!(quote("a\"b"), r#""a\"b""#);
        let long = format!("{exact}\"and more");
        assert_eq!(
            quote(&long),
            format!("\"{exact}\"…({} bytes)", SHOWN_CHARS + 9)
        );
        assert_eq!(clip_json(&json!(long)), quote(&long));
    }

    #[test]
    fn json_values_are_clipped_without_serializing_them_whole() {
        assert_eq!(clip_json(&json!("short")), r#""short""#);
        assert_eq!(clip_json(&json!({"a": [1, 2]})), r#"{"a":[1,2]}"#);
        let big = json!({"k": "v".repeat(10_000)});
        let shown = clip_json(&big);
        let text = big.to_string();
        assert_eq!(
            shown,
            format!("{}…({} bytes)", &text[..SHOWN_CHARS], text.len())
        );
        let wide = json!(["€".repeat(5_000)]);
        let shown = clip_json(&wide);
        assert!(shown.starts_with(&format!("[\"{}…(", "€".repeat(SHOWN_CHARS - 2))));
        assert!(shown.ends_with(&format!("({} bytes)", wide.to_string().len())));
    }
}

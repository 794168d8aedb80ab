//! Lexer for Go `text/template` with the default `{{` `}}` delimiters.

/// A lexical item; `pos` is the byte offset in the source.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub pos: usize,
    pub end: usize,
    pub tok: Tok,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Text(String),
    Left,
    Right,
    Space,
    Ident(String),
    /// `.name` (the name only).
    Field(String),
    Dot,
    /// `$name`, including the `$`.
    Var(String),
    Str(String),
    /// A character constant: Go treats it as an integer.
    Char(char),
    Number(String),
    LParen,
    RParen,
    Pipe,
    Comma,
    Declare,
    Assign,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

pub struct LexError {
    pub pos: usize,
    pub msg: String,
}

/// Tokenise a whole template.
pub fn lex(src: &str) -> Result<Vec<Item>, LexError> {
    let b = src.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    let mut trim_next = false;
    while i < b.len() {
        // Text up to the next "{{".
        let start = i;
        let next = src[i..].find("{{").map(|p| i + p).unwrap_or(b.len());
        let mut text = &src[start..next];
        if trim_next {
            text = text.trim_start_matches([' ', '\t', '\r', '\n']);
            trim_next = false;
        }
        let mut left_trim = false;
        if next < b.len()
            && b.get(next + 2) == Some(&b'-')
            && b.get(next + 3).is_some_and(|c| is_space(*c))
        {
            left_trim = true;
            text = text.trim_end_matches([' ', '\t', '\r', '\n']);
        }
        if !text.is_empty() {
            items.push(Item {
                pos: start,
                end: next,
                tok: Tok::Text(text.to_string()),
            });
        }
        if next >= b.len() {
            break;
        }
        i = next + 2;
        if left_trim {
            i += 2;
        }
        // Comment?
        let mut j = i;
        if left_trim {
            while j < b.len() && is_space(b[j]) {
                j += 1;
            }
        }
        if src[i..].starts_with("/*") || (left_trim && src[j..].starts_with("/*")) {
            let cstart = if src[i..].starts_with("/*") { i } else { j };
            let Some(close) = src[cstart + 2..].find("*/") else {
                return Err(LexError {
                    pos: next,
                    msg: "unclosed comment".into(),
                });
            };
            let mut k = cstart + 2 + close + 2;
            if src[k..].starts_with(" -}}")
                || src[k..].starts_with("\t-}}")
                || src[k..].starts_with("\r-}}")
                || src[k..].starts_with("\n-}}")
            {
                trim_next = true;
                k += 4;
            } else if src[k..].starts_with("}}") {
                k += 2;
            } else {
                return Err(LexError {
                    pos: next,
                    msg: "comment ends before closing delimiter".into(),
                });
            }
            i = k;
            continue;
        }
        items.push(Item {
            pos: next,
            end: i,
            tok: Tok::Left,
        });
        i = lex_action(src, i, &mut items, &mut trim_next)?;
    }
    Ok(items)
}

/// Lex inside an action; returns the offset just after the closing delimiter.
fn lex_action(
    src: &str,
    mut i: usize,
    items: &mut Vec<Item>,
    trim_next: &mut bool,
) -> Result<usize, LexError> {
    let b = src.as_bytes();
    let mut paren = 0i32;
    loop {
        let rest = &src[i..];
        // Closing delimiter, with or without trim marker.
        if rest.starts_with("}}") {
            if paren > 0 {
                return Err(LexError {
                    pos: i,
                    msg: "unclosed left paren".into(),
                });
            }
            items.push(Item {
                pos: i,
                end: i + 2,
                tok: Tok::Right,
            });
            return Ok(i + 2);
        }
        let Some(c) = rest.chars().next() else {
            return Err(LexError {
                pos: i,
                msg: "unclosed action".into(),
            });
        };
        if is_space(c as u8) && c.is_ascii() {
            let start = i;
            while i < b.len() && is_space(b[i]) {
                i += 1;
            }
            if src[i..].starts_with("-}}") {
                *trim_next = true;
                items.push(Item {
                    pos: i,
                    end: i + 3,
                    tok: Tok::Right,
                });
                if paren > 0 {
                    return Err(LexError {
                        pos: i,
                        msg: "unclosed left paren".into(),
                    });
                }
                return Ok(i + 3);
            }
            items.push(Item {
                pos: start,
                end: i,
                tok: Tok::Space,
            });
            continue;
        }
        let start = i;
        let tok = match c {
            '|' => {
                i += 1;
                Tok::Pipe
            }
            ',' => {
                i += 1;
                Tok::Comma
            }
            '(' => {
                i += 1;
                paren += 1;
                Tok::LParen
            }
            ')' => {
                i += 1;
                paren -= 1;
                if paren < 0 {
                    return Err(LexError {
                        pos: start,
                        msg: "unexpected right paren".into(),
                    });
                }
                Tok::RParen
            }
            ':' => {
                if rest.starts_with(":=") {
                    i += 2;
                    Tok::Declare
                } else {
                    return Err(LexError {
                        pos: start,
                        msg: "expected :=".into(),
                    });
                }
            }
            '=' => {
                i += 1;
                Tok::Assign
            }
            '"' => {
                let (s, n) = lex_quoted(src, i, '"')?;
                i = n;
                Tok::Str(s)
            }
            '`' => {
                let Some(close) = src[i + 1..].find('`') else {
                    return Err(LexError {
                        pos: start,
                        msg: "unterminated raw quoted string".into(),
                    });
                };
                let s = src[i + 1..i + 1 + close].replace('\r', "");
                i = i + 1 + close + 1;
                Tok::Str(s)
            }
            '\'' => {
                let (s, n) = lex_quoted(src, i, '\'')?;
                i = n;
                let mut cs = s.chars();
                match (cs.next(), cs.next()) {
                    (Some(ch), None) => Tok::Char(ch),
                    _ => {
                        return Err(LexError {
                            pos: start,
                            msg: format!("malformed character constant: {}", &src[start..i]),
                        })
                    }
                }
            }
            '$' => {
                i += 1;
                while let Some(ch) = src[i..].chars().next() {
                    if !is_alnum(ch) {
                        break;
                    }
                    i += ch.len_utf8();
                }
                Tok::Var(src[start..i].to_string())
            }
            '.' => {
                // A number like .5?
                if b.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                    i = lex_number(src, i)?;
                    Tok::Number(src[start..i].to_string())
                } else {
                    i += 1;
                    let nstart = i;
                    while let Some(ch) = src[i..].chars().next() {
                        if !is_alnum(ch) {
                            break;
                        }
                        i += ch.len_utf8();
                    }
                    if i == nstart {
                        Tok::Dot
                    } else {
                        Tok::Field(src[nstart..i].to_string())
                    }
                }
            }
            '+' | '-' | '0'..='9' => {
                i = lex_number(src, i)?;
                Tok::Number(src[start..i].to_string())
            }
            c if is_alnum(c) => {
                while let Some(ch) = src[i..].chars().next() {
                    if !is_alnum(ch) {
                        break;
                    }
                    i += ch.len_utf8();
                }
                Tok::Ident(src[start..i].to_string())
            }
            c => {
                return Err(LexError {
                    pos: start,
                    msg: format!("unrecognized character in action: {c:?}"),
                })
            }
        };
        // A field directly following an identifier is an error in Go; a field
        // after a variable, a closing paren or another field forms a chain.
        items.push(Item {
            pos: start,
            end: i,
            tok,
        });
    }
}

fn lex_number(src: &str, mut i: usize) -> Result<usize, LexError> {
    let start = i;
    let b = src.as_bytes();
    if matches!(b.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let mut digits: &[u8] = b"0123456789_";
    if b.get(i) == Some(&b'0') && matches!(b.get(i + 1), Some(b'x' | b'X')) {
        i += 2;
        digits = b"0123456789abcdefABCDEF_";
    } else if b.get(i) == Some(&b'0') && matches!(b.get(i + 1), Some(b'o' | b'O')) {
        i += 2;
        digits = b"01234567_";
    } else if b.get(i) == Some(&b'0') && matches!(b.get(i + 1), Some(b'b' | b'B')) {
        i += 2;
        digits = b"01_";
    }
    while b.get(i).is_some_and(|c| digits.contains(c)) {
        i += 1;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| digits.contains(c)) {
            i += 1;
        }
    }
    let hex = digits.len() > 11;
    if (!hex && matches!(b.get(i), Some(b'e' | b'E')))
        || (hex && matches!(b.get(i), Some(b'p' | b'P')))
    {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    if let Some(ch) = src[i..].chars().next() {
        if is_alnum(ch) || ch == '.' {
            let mut j = i;
            while let Some(ch) = src[j..].chars().next() {
                if !(is_alnum(ch) || ch == '.') {
                    break;
                }
                j += ch.len_utf8();
            }
            return Err(LexError {
                pos: start,
                msg: format!("bad number syntax: {:?}", &src[start..j]),
            });
        }
    }
    if i == start || (i == start + 1 && matches!(b[start], b'+' | b'-')) {
        return Err(LexError {
            pos: start,
            msg: format!("bad number syntax: {:?}", &src[start..i.max(start + 1)]),
        });
    }
    Ok(i)
}

/// Lex a Go interpreted string or character literal starting at `i`.
fn lex_quoted(src: &str, i: usize, q: char) -> Result<(String, usize), LexError> {
    let mut out = String::new();
    let mut it = src[i + 1..].char_indices();
    let err = |m: &str| LexError {
        pos: i,
        msg: m.to_string(),
    };
    let unterminated = if q == '"' {
        "unterminated quoted string"
    } else {
        "unterminated character constant"
    };
    loop {
        let Some((off, c)) = it.next() else {
            return Err(err(unterminated));
        };
        match c {
            '\n' => return Err(err(unterminated)),
            c if c == q => return Ok((out, i + 1 + off + 1)),
            '\\' => {
                let Some((_, e)) = it.next() else {
                    return Err(err(unterminated));
                };
                match e {
                    'a' => out.push('\x07'),
                    'b' => out.push('\x08'),
                    'f' => out.push('\x0c'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'v' => out.push('\x0b'),
                    '\\' => out.push('\\'),
                    '\'' if q == '\'' => out.push('\''),
                    '"' if q == '"' => out.push('"'),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let mut v = 0u32;
                        for _ in 0..n {
                            let Some((_, h)) = it.next() else {
                                return Err(err(unterminated));
                            };
                            let Some(d) = h.to_digit(16) else {
                                return Err(err("invalid syntax in quoted string"));
                            };
                            v = v * 16 + d;
                        }
                        if e == 'x' {
                            // A byte; only ASCII bytes keep the string valid UTF-8.
                            out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                        } else {
                            match char::from_u32(v) {
                                Some(ch) => out.push(ch),
                                None => return Err(err("invalid syntax in quoted string")),
                            }
                        }
                    }
                    '0'..='7' => {
                        let mut v = e.to_digit(8).unwrap_or(0);
                        for _ in 0..2 {
                            let Some((_, h)) = it.next() else {
                                return Err(err(unterminated));
                            };
                            let Some(d) = h.to_digit(8) else {
                                return Err(err("invalid syntax in quoted string"));
                            };
                            v = v * 8 + d;
                        }
                        if v > 255 {
                            return Err(err("invalid syntax in quoted string"));
                        }
                        out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                    }
                    _ => return Err(err("invalid syntax in quoted string")),
                }
            }
            c => out.push(c),
        }
    }
}

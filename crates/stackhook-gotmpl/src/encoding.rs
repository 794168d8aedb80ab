//! Go's `encoding/base64` and `encoding/base32` standard encodings, as sprig's
//! `b64dec` and `b32dec` call them: an input Go rejects yields Go's error text
//! (`illegal base64 data at input byte 4`), which sprig returns as the result.

use data_encoding::{Encoding, BASE32, BASE64};

/// Go's decoders ignore the bits past the last whole byte (they are not strict).
fn lenient(e: &Encoding) -> Result<Encoding, String> {
    let mut spec = e.specification();
    spec.check_trailing_bits = false;
    spec.encoding().map_err(|e| e.to_string())
}

pub fn b64enc(s: &str) -> String {
    BASE64.encode(s.as_bytes())
}

pub fn b32enc(s: &str) -> String {
    BASE32.encode(s.as_bytes())
}

/// `base64.StdEncoding.DecodeString`, the error as its text.
pub fn b64dec(s: &str) -> Result<Result<Vec<u8>, String>, String> {
    let src = s.as_bytes();
    if let Some(at) = base64_error(src) {
        return Ok(Err(format!("illegal base64 data at input byte {at}")));
    }
    let clean: Vec<u8> = src
        .iter()
        .copied()
        .filter(|c| !matches!(c, b'\r' | b'\n'))
        .collect();
    Ok(lenient(&BASE64)?
        .decode(&clean)
        .map_err(|e| format!("illegal base64 data at input byte {}", e.position)))
}

/// `base32.StdEncoding.DecodeString`, the error as its text. Go drops newlines first
/// and stops at the end of the padded group.
pub fn b32dec(s: &str) -> Result<Result<Vec<u8>, String>, String> {
    let src: Vec<u8> = s.bytes().filter(|c| !matches!(c, b'\r' | b'\n')).collect();
    let end = match base32_end(&src) {
        Ok(end) => end,
        Err(at) => return Ok(Err(format!("illegal base32 data at input byte {at}"))),
    };
    Ok(lenient(&BASE32)?
        .decode(&src[..end])
        .map_err(|e| format!("illegal base32 data at input byte {}", e.position)))
}

fn is_base64(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'+' || c == b'/'
}

fn is_base32(c: u8) -> bool {
    c.is_ascii_uppercase() || (b'2'..=b'7').contains(&c)
}

fn skip_newlines(src: &[u8], mut i: usize) -> usize {
    while i < src.len() && matches!(src[i], b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// Where Go's `decodeQuantum` loop reports a `CorruptInputError`, if anywhere.
fn base64_error(src: &[u8]) -> Option<usize> {
    let mut si = 0;
    loop {
        // One quantum of four symbols; `j` counts the symbols read so far.
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                return (j > 0).then_some(si - j);
            }
            let c = src[si];
            si += 1;
            if is_base64(c) {
                j += 1;
                continue;
            }
            if matches!(c, b'\r' | b'\n') {
                continue;
            }
            if c != b'=' || j < 2 {
                return Some(si - 1);
            }
            if j == 2 {
                // "==" is expected; the first "=" is read.
                si = skip_newlines(src, si);
                if si == src.len() {
                    return Some(src.len());
                }
                if src[si] != b'=' {
                    return Some(si - 1);
                }
                si += 1;
            }
            si = skip_newlines(src, si);
            return (si < src.len()).then_some(si);
        }
    }
}

/// The end of what Go's base32 `decode` reads from `src` (newlines already dropped),
/// or the offset of its `CorruptInputError`.
fn base32_end(src: &[u8]) -> Result<usize, usize> {
    let olen = src.len();
    let mut rest = src;
    while !rest.is_empty() {
        let mut j = 0;
        while j < 8 {
            let Some((&c, tail)) = rest.split_first() else {
                // The end, with padding missing.
                return Err(olen - j);
            };
            rest = tail;
            if c == b'=' && j >= 2 && rest.len() < 8 {
                if rest.len() + j < 7 {
                    return Err(olen);
                }
                for k in 0..7 - j {
                    if rest.len() > k && rest[k] != b'=' {
                        return Err(olen - rest.len() + k - 1);
                    }
                }
                // 1, 3 and 6 symbols cannot end a group (RFC 4648, section 6).
                if matches!(j, 1 | 3 | 6) {
                    return Err(olen - rest.len() - 1);
                }
                return Ok(olen - rest.len() - j - 1 + 8);
            }
            if !is_base32(c) {
                return Err(olen - rest.len() - 1);
            }
            j += 1;
        }
    }
    Ok(olen)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Offsets and results as Go's encoding/base64 and encoding/base32 give them.
    #[test]
    fn error_offsets_follow_go() {
        assert_eq!(base64_error(b"aGVsbG8="), None);
        assert_eq!(base64_error(b"aGVs\nbG8="), None);
        assert_eq!(base64_error(b"!!!!"), Some(0));
        assert_eq!(base64_error(b"aGVsbG8"), Some(4));
        assert_eq!(base64_error(b"aGVsbG=="), None);
        assert_eq!(base64_error(b"aGVsbG8=x"), Some(8));
        assert_eq!(base64_error(b"aG="), Some(3));
        assert_eq!(base32_end(b"MZXW6==="), Ok(8));
        assert_eq!(base32_end(b"MZXW6"), Err(0));
        assert_eq!(base32_end(b"MZXW6=1="), Err(5));
        assert_eq!(base32_end(b"M1"), Err(1));
        assert_eq!(base32_end(b"MZXW6===MZXW6==="), Err(5));
        // Go stops reading at the end of the padded group.
        assert_eq!(base32_end(b"MY======X"), Ok(8));
    }

    #[test]
    fn decodes_like_go() {
        assert_eq!(b64dec("aGVsbG8="), Ok(Ok(b"hello".to_vec())));
        // Go is not strict about the unused low bits of the last symbol.
        assert_eq!(b64dec("aGVsbG9="), Ok(Ok(b"hello".to_vec())));
        assert_eq!(b32dec("NBSWY3DP"), Ok(Ok(b"hello".to_vec())));
        assert_eq!(b32dec("MZXW6===\n"), Ok(Ok(b"foo".to_vec())));
        assert_eq!(b32dec("MY======X"), Ok(Ok(b"f".to_vec())));
        assert_eq!(b64dec("aGVsbG=="), Ok(Ok(b"hell".to_vec())));
        assert_eq!(
            b64dec("a b"),
            Ok(Err("illegal base64 data at input byte 1".into()))
        );
    }
}

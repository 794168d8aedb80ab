//! Names and uids of rendered objects.
//!
//! CAPI names generated objects `<prefix><5 random characters>`. A renderer used in CI
//! must give the same output for the same input, so the five characters here come
//! from a SHA-256 of the cluster's namespace and name and the object's role
//! (`control-plane`, `md/<name>/bootstrap`, ...), mapped onto the alphabet Kubernetes
//! draws random suffixes from. The names keep CAPI's shape (and length limit) without
//! being the ones a live cluster gets.

use sha2::{Digest, Sha256};

/// Kubernetes' `utilrand` alphabet: no vowels, no confusable characters.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const RANDOM_LENGTH: usize = 5;
const MAX_NAME_LENGTH: usize = 63;

fn digest(seed: &str) -> [u8; 32] {
    Sha256::digest(seed.as_bytes()).into()
}

/// `<prefix><suffix>`, the prefix cut to leave room for the suffix as CAPI does.
pub fn generated(prefix: &str, seed: &str) -> String {
    let max = MAX_NAME_LENGTH - RANDOM_LENGTH;
    let mut base: String = prefix.chars().take(max).collect();
    let d = digest(seed);
    for b in d.iter().take(RANDOM_LENGTH) {
        base.push(ALPHABET[usize::from(*b) % ALPHABET.len()] as char);
    }
    base
}

/// A UUID-shaped request item uid (CAPI uses a fresh UUID per call).
pub fn uid(seed: &str) -> String {
    let d = digest(seed);
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_stability() {
        let a = generated("c1-md-0-", "ns/c1/cc/md-0/bootstrap");
        assert_eq!(a, generated("c1-md-0-", "ns/c1/cc/md-0/bootstrap"));
        assert_ne!(a, generated("c1-md-0-", "ns/c1/cc/md-0/infrastructure"));
        assert_eq!(a.len(), "c1-md-0-".len() + 5);
        assert!(a[8..].bytes().all(|b| ALPHABET.contains(&b)));
        let long = generated(&"x".repeat(80), "s");
        assert_eq!(long.len(), 63);
        let u = uid("s");
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
    }
}

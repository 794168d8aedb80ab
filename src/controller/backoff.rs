//! Per-object exponential requeue delays for transient failures.
//!
//! kube-runtime's `error_policy` returns one `Action` per failure and keeps no
//! memory of earlier ones, so the attempt count per object lives here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Doubles from `base` per consecutive failure of the same object, up to `cap`.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempts: Mutex<HashMap<(String, String), u32>>,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            attempts: Mutex::new(HashMap::new()),
        }
    }

    /// Records one more failure and returns how long to wait before the retry.
    pub fn next(&self, namespace: &str, name: &str) -> Duration {
        let mut map = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        let n = map
            .entry((namespace.to_string(), name.to_string()))
            .or_insert(0);
        let shift = (*n).min(20);
        *n = n.saturating_add(1);
        self.base.saturating_mul(1u32 << shift).min(self.cap)
    }

    /// Forgets the failures of an object after it reconciled.
    pub fn reset(&self, namespace: &str, name: &str) {
        let mut map = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&(namespace.to_string(), name.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_object_up_to_the_cap_and_resets() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(60));
        let seq: Vec<u64> = (0..6).map(|_| b.next("ns", "a").as_secs()).collect();
        assert_eq!(seq, vec![5, 10, 20, 40, 60, 60]);
        assert_eq!(b.next("ns", "b"), Duration::from_secs(5));
        b.reset("ns", "a");
        assert_eq!(b.next("ns", "a"), Duration::from_secs(5));
        for _ in 0..100 {
            b.next("ns", "c");
        }
        assert_eq!(b.next("ns", "c"), Duration::from_secs(60));
    }
}

//! Remembers GeneratePatches results across calls.
//!
//! CAPI's topology controller sends the same GeneratePatches request on every
//! reconcile of an unchanged Cluster, except that each item carries a fresh UID. A
//! pack's patches depend only on the request, so the result for a request that
//! differs only in UIDs is the one already computed: the key is a SHA-256 over the
//! pack, the settings, the variables and every item's holder, object and variables
//! (never the UID), and a hit hands back the stored patches under the new UIDs.
//! Only successful results are kept; failures are computed afresh each time.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::sdk::topology::{GeneratePatchesRequest, GeneratePatchesResponseItem};

/// The patches of one answer, each with the index of the request item it is for.
type Stored = Arc<Vec<(usize, GeneratePatchesResponseItem)>>;

pub struct PatchCache {
    entries: quick_cache::sync::Cache<[u8; 32], Stored>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for PatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchCache")
            .field("len", &self.entries.len())
            .field("hits", &self.hits.load(Ordering::Relaxed))
            .field("misses", &self.misses.load(Ordering::Relaxed))
            .finish()
    }
}

/// Feeds serde_json's writer straight into the hash: no intermediate buffer.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl PatchCache {
    /// Holds up to `entries` answers (one per Cluster and pack in steady state).
    pub fn new(entries: usize) -> PatchCache {
        PatchCache {
            entries: quick_cache::sync::Cache::new(entries.max(1)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// `(hits, misses)` so far.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// The key of a request for `pack`; `None` if it cannot be cached (duplicate
    /// UIDs would make the answer ambiguous to map back).
    pub fn key(pack: &str, req: &GeneratePatchesRequest) -> Option<[u8; 32]> {
        let mut uids: Vec<&str> = req.items.iter().map(|i| i.uid.as_str()).collect();
        uids.sort_unstable();
        if uids.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
        let mut h = Sha256::new();
        // Each part is length-free JSON, so separate them with a byte JSON never holds.
        h.update(pack.as_bytes());
        h.update([0]);
        serde_json::to_writer(HashWriter(&mut h), &req.settings).ok()?;
        h.update([0]);
        serde_json::to_writer(HashWriter(&mut h), &req.variables).ok()?;
        for item in &req.items {
            h.update([0]);
            serde_json::to_writer(HashWriter(&mut h), &item.holder_reference).ok()?;
            h.update([0]);
            serde_json::to_writer(HashWriter(&mut h), &item.object).ok()?;
            h.update([0]);
            serde_json::to_writer(HashWriter(&mut h), &item.variables).ok()?;
        }
        Some(h.finalize().into())
    }

    /// The stored answer for `key`, re-addressed to this request's UIDs.
    pub fn get(
        &self,
        key: &[u8; 32],
        req: &GeneratePatchesRequest,
    ) -> Option<Vec<GeneratePatchesResponseItem>> {
        let Some(stored) = self.entries.get(key) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut out = Vec::with_capacity(stored.len());
        for (index, item) in stored.iter() {
            let uid = req.items.get(*index)?.uid.clone();
            out.push(GeneratePatchesResponseItem {
                uid,
                ..item.clone()
            });
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// Stores a successful answer to `req` under `key`.
    pub fn put(
        &self,
        key: [u8; 32],
        req: &GeneratePatchesRequest,
        items: &[GeneratePatchesResponseItem],
    ) {
        let mut stored = Vec::with_capacity(items.len());
        for item in items {
            let Some(index) = req.items.iter().position(|i| i.uid == item.uid) else {
                return;
            };
            stored.push((index, item.clone()));
        }
        self.entries.insert(key, Arc::new(stored));
    }
}

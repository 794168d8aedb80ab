//! Remembers GeneratePatches results across calls.
//!
//! CAPI's topology controller sends the same GeneratePatches request on every
//! reconcile of an unchanged Cluster, except that each item carries a fresh UID and
//! the items may come in another order. A pack's patches depend only on the request's
//! content, so an answer is stored under the pack and the request's [`Fingerprint`]
//! (items as a set), and a hit hands the stored patches back under the new UIDs.
//! Only successful results are kept; failures are computed afresh each time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::fingerprint::Fingerprint;
use crate::sdk::topology::GeneratePatchesResponseItem;

/// The patches of one answer, each with the fingerprint of the item it is for.
type Stored = Arc<Vec<([u8; 32], GeneratePatchesResponseItem)>>;

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

    /// The key of a request for `pack`; `None` if it cannot be cached: two items with
    /// the same content, or the same UID, could not be told apart when handing the
    /// answer back.
    pub fn key(pack: &str, fp: &Fingerprint, uids: &[&str]) -> Option<[u8; 32]> {
        let mut items = fp.items.clone();
        items.sort_unstable();
        let mut sorted_uids = uids.to_vec();
        sorted_uids.sort_unstable();
        if items.windows(2).any(|w| w[0] == w[1])
            || sorted_uids.windows(2).any(|w| w[0] == w[1])
            || uids.len() != items.len()
        {
            return None;
        }
        let mut h = Sha256::new();
        h.update(pack.as_bytes());
        h.update([0]);
        h.update(fp.request);
        for i in &items {
            h.update(i);
        }
        Some(h.finalize().into())
    }

    /// The stored answer for `key`, re-addressed to this request's UIDs (`uids[i]` is
    /// the UID of the item whose fingerprint is `fp.items[i]`).
    pub fn get(
        &self,
        key: &[u8; 32],
        fp: &Fingerprint,
        uids: &[&str],
    ) -> Option<Vec<GeneratePatchesResponseItem>> {
        let Some(stored) = self.entries.get(key) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut out = Vec::with_capacity(stored.len());
        for (item_fp, item) in stored.iter() {
            let index = fp.items.iter().position(|f| f == item_fp)?;
            out.push(GeneratePatchesResponseItem {
                uid: uids.get(index)?.to_string(),
                patch_type: item.patch_type,
                patch: item.patch.clone(),
            });
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// Stores a successful answer under `key`; `uids` as for [`PatchCache::get`].
    pub fn put(
        &self,
        key: [u8; 32],
        fp: &Fingerprint,
        uids: &[&str],
        items: &[GeneratePatchesResponseItem],
    ) {
        let mut stored = Vec::with_capacity(items.len());
        for item in items {
            let Some(index) = uids.iter().position(|u| *u == item.uid) else {
                return;
            };
            let Some(item_fp) = fp.items.get(index) else {
                return;
            };
            stored.push((*item_fp, item.clone()));
        }
        self.entries.insert(key, Arc::new(stored));
    }
}

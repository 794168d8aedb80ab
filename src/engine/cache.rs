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

/// The patches of one answer, each with the fingerprint of the item it is for, and
/// what it weighs in the cache.
struct Answer {
    items: Vec<([u8; 32], GeneratePatchesResponseItem)>,
    weight: u64,
}

type Stored = Arc<Answer>;

/// The default bound: room for the default 1,024 answers of a 12-template Cluster
/// (about 3 KB each with the `openstack-v1` pack) and some larger ones, so the cache
/// stays a small part of a 64 MiB pod. Larger answers (many templates, long patch
/// values) fit fewer; `--patch-cache-bytes` trades memory for hits.
pub const DEFAULT_BYTES: u64 = 4 * 1024 * 1024;

/// How much the cache may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    /// How many answers to expect (one per Cluster and pack in steady state): sizes
    /// the table; 0 turns the cache off.
    pub entries: usize,
    /// The bound: bytes of all stored answers together.
    pub bytes: u64,
    /// An answer larger than this is never stored.
    pub max_answer_bytes: u64,
}

impl CacheLimits {
    /// Sized for `entries` answers, within [`DEFAULT_BYTES`], none over 1 MiB.
    pub fn entries(entries: usize) -> CacheLimits {
        CacheLimits {
            entries,
            bytes: DEFAULT_BYTES,
            max_answer_bytes: 1024 * 1024,
        }
    }
}

/// An answer weighs the bytes it keeps in memory, so the cache's weight limit is a
/// memory limit.
#[derive(Clone, Copy)]
struct ByBytes;

impl quick_cache::Weighter<[u8; 32], Stored> for ByBytes {
    fn weight(&self, _key: &[u8; 32], answer: &Stored) -> u64 {
        answer.weight
    }
}

pub struct PatchCache {
    entries: quick_cache::sync::Cache<[u8; 32], Stored, ByBytes>,
    limits: CacheLimits,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Memory of one stored answer beyond its items: key, `Arc`, vector header and the
/// cache's own slot, rounded up.
const ANSWER_OVERHEAD: u64 = 128;

/// Bytes an item's patch and UID take in memory, with the fingerprint and the
/// vector slot around them.
fn item_bytes(item: &GeneratePatchesResponseItem) -> u64 {
    (item.patch.0.len() + item.uid.len() + 32 + std::mem::size_of::<GeneratePatchesResponseItem>())
        as u64
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
    /// Holds answers within `limits` (see [`CacheLimits`]).
    pub fn new(limits: CacheLimits) -> PatchCache {
        let bytes = limits.bytes.max(1);
        // The weight limit is split evenly between shards, and a shard cannot hold an
        // answer larger than its share: fewer shards, each room for several answers
        // of the largest size.
        let shards = (bytes / limits.max_answer_bytes.max(1).saturating_mul(8)).clamp(1, 16);
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(limits.entries.max(1))
            .weight_capacity(bytes)
            .shards(shards as usize)
            .build();
        PatchCache {
            entries: match options {
                Ok(options) => quick_cache::sync::Cache::with_options(
                    options,
                    ByBytes,
                    Default::default(),
                    Default::default(),
                ),
                // Only when the options contradict each other, which they cannot here.
                Err(_) => {
                    quick_cache::sync::Cache::with_weighter(limits.entries.max(1), bytes, ByBytes)
                }
            },
            limits,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Answers stored now, and the bytes they hold.
    pub fn usage(&self) -> (usize, u64) {
        (self.entries.len(), self.entries.weight())
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
        let mut out = Vec::with_capacity(stored.items.len());
        for (item_fp, item) in stored.items.iter() {
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
        let bytes = ANSWER_OVERHEAD + items.iter().map(item_bytes).sum::<u64>();
        if bytes > self.limits.max_answer_bytes {
            return;
        }
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
        self.entries.insert(
            key,
            Arc::new(Answer {
                items: stored,
                weight: bytes,
            }),
        );
    }
}

//! The byte-weighted cache under both caches: a quick_cache sync cache weighed in bytes, with
//! an optional exact entry cap, counters and process-wide gauges (see the crate's "Memory
//! accounting").

use std::sync::Mutex;

use mmcache_metrics::counted::Level;
use mmcache_scope::CacheIdentity;
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};

/// Bytes charged to each cache entry on top of its payload.
///
/// What an entry costs beyond its payload, measured on `quick_cache` 0.7, 64-bit:
///
/// - 64: its slab slot (the 32-byte key, the value's `Arc`, our 8-byte weight, the entry's
///   state and clock counter, two list links);
/// - 32: half a slot more for "ghost" keys (recently evicted keys kept to re-admit them as
///   hot; up to half the estimated entry count);
/// - 20: its hash-table share (a 4-byte slot index and a control byte per bucket, 1.5 buckets
///   per entry counting ghosts, at most 7/8 full and rounded up to a power of two);
/// - 64: the `Arc`'s allocation (two counts and the `DecodedImage` header: dimensions,
///   format, `Vec`) as a 64-byte malloc chunk;
/// - 16: malloc's header and rounding on the pixel buffer;
/// - 48: slab growth headroom (its `Vec` doubles, so on average it holds half again the 96
///   bytes of slots in use).
///
/// That is 244 bytes, rounded up to 256. An embedding's `Arc<[T]>` is 8 bytes wider in the
/// slot but has no separate header allocation, so it costs less. A unit test checks that the
/// cache's own structures stay within their 116 (+48) bytes.
pub const ENTRY_OVERHEAD_BYTES: u64 = 256;

/// A 32-byte digest key (blake3 of the cache identity).
pub(crate) type Key = [u8; 32];

/// The digest a cache is keyed by.
pub(crate) fn identity_key(identity: &CacheIdentity) -> Key {
    identity.digest()
}

/// quick_cache's share of a shard kept for entries that were hit since they came in (its
/// default). A value heavier than this share of its shard's budget is refused.
const HOT_ALLOCATION: f64 = 0.97;

/// The most entries quick_cache is told to expect. It keeps ghost keys for half as many, in
/// memory only [`ENTRY_OVERHEAD_BYTES`] accounts for, so a huge budget must not inflate it.
const MAX_ESTIMATED_ENTRIES: u64 = 1 << 20;

/// What a cache expects of its entries, to size quick_cache's shards and tables.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
    /// Assumed average weight: quick_cache expects budget / this entries (or the cap, when
    /// smaller).
    pub(crate) typical_entry: u64,
    /// The heaviest entry that must stay admissible when the budget allows it: shards are
    /// never made so small that it would exceed a shard's hot share.
    pub(crate) largest_entry: u64,
}

/// A cached value and its weight (payload plus [`ENTRY_OVERHEAD_BYTES`]).
#[derive(Clone)]
struct Entry<V> {
    value: V,
    weight: u64,
}

/// Weighs an entry for the budget: its real weight, but at least `min`, the charge that
/// enforces the entry cap.
#[derive(Clone, Copy)]
struct Charge {
    min: u64,
}

impl<V> Weighter<Key, Entry<V>> for Charge {
    fn weight(&self, _key: &Key, entry: &Entry<V>) -> u64 {
        entry.weight.max(self.min)
    }
}

/// Counts what leaves the cache. quick_cache reports through `on_evict` every value that goes
/// out other than by `remove`/`drain`: evicted ones, one replaced by an insert under its key,
/// and a new one refused as too heavy.
#[derive(Clone, Copy)]
struct Accounting;

/// What one operation evicted. It keeps up to two of the values so that their (possibly last)
/// `Arc` is dropped after the shard lock is released.
struct Evicted<V> {
    entries: i64,
    weight: i64,
    values: [Option<V>; 2],
}

impl<V> Default for Evicted<V> {
    fn default() -> Self {
        Self {
            entries: 0,
            weight: 0,
            values: [None, None],
        }
    }
}

impl<V> Lifecycle<Key, Entry<V>> for Accounting {
    type RequestState = Evicted<V>;

    fn on_evict(&self, state: &mut Evicted<V>, _key: Key, entry: Entry<V>) {
        state.entries += 1;
        state.weight += signed(entry.weight);
        if let Some(slot) = state.values.iter_mut().find(|v| v.is_none()) {
            *slot = Some(entry.value);
        }
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A change in entries and bytes held, applied to the levels (the stats and the gauges).
#[derive(Debug, Clone, Copy, Default)]
struct Change {
    entries: i64,
    bytes: i64,
}

/// Gauges that several caches of one kind in a process add to (they move by deltas); a cache
/// holds each as a [`Level`], its own share.
#[derive(Debug)]
pub(crate) struct Gauges {
    pub(crate) entries: metrics::Gauge,
    pub(crate) bytes: metrics::Gauge,
}

impl Gauges {
    pub(crate) fn new(entries: &'static str, bytes: &'static str) -> Self {
        Self {
            entries: metrics::gauge!(entries),
            bytes: metrics::gauge!(bytes),
        }
    }
}

type Inner<V> = Cache<Key, Entry<V>, Charge, DefaultHashBuilder, Accounting>;

/// A byte-weighted quick_cache with an optional exact entry cap, counters and gauges.
pub(crate) struct WeightedCache<V> {
    /// `None` when an entry cap of 0 turns the cache off.
    cache: Option<Inner<V>>,
    /// This cache's share of the gauges, which its stats read: each change is applied once
    /// (see `mmcache_metrics::counted`), and the share leaves the gauges when the cache drops.
    /// Updated after each operation, so a concurrent eviction of an entry whose insert is not
    /// yet counted can briefly take it below zero.
    entries: Level,
    bytes: Level,
    /// Serialise [`WeightedCache::insert_if_absent`] per key (a stripe by the key's first byte).
    insert_locks: [Mutex<()>; INSERT_LOCKS],
}

/// Stripes of insert-if-absent locks: inserts of different keys rarely wait for each other.
const INSERT_LOCKS: usize = 64;

impl<V: Clone> WeightedCache<V> {
    pub(crate) fn new(
        max_bytes: u64,
        max_entries: Option<usize>,
        sizing: Sizing,
        gauges: Gauges,
    ) -> Self {
        let cache = (max_entries != Some(0)).then(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
            // quick_cache's default of 4 shards per core, fewer if `largest_entry` would not fit.
            let mut shards = (cores * 4).next_power_of_two();
            while shards > 1 && hot_share(max_bytes / shards) < sizing.largest_entry {
                shards /= 2;
            }
            // A multiple of the shard count, so the shards' shares add up to no more than the
            // budget (quick_cache rounds each share up). It stays one if quick_cache halves the
            // shard count, which it does until each expects at least 32 entries.
            let capacity = max_bytes / shards * shards;
            let max_entries = max_entries.map(|n| u64::try_from(n).unwrap_or(u64::MAX));
            let by_bytes = max_bytes / sizing.typical_entry;
            let estimated = max_entries
                .map_or(by_bytes, |n| n.min(by_bytes))
                .clamp(1, MAX_ESTIMATED_ENTRIES);
            // `n` entries each charged over `capacity / (n + 1)` weigh more than `capacity`
            // when n exceeds the cap. The charge stays under a shard's hot share: with one
            // shard it is at most half the capacity plus one; with more, quick_cache gives
            // each shard at least 32 expected entries, so the cap is at least 32 per shard.
            let min = max_entries.map_or(0, |n| capacity / n.saturating_add(1) + 1);
            let options = OptionsBuilder::new()
                .shards(shards as usize)
                .hot_allocation(HOT_ALLOCATION)
                .estimated_items_capacity(estimated as usize)
                .weight_capacity(capacity)
                .build()
                .expect("both required options are set");
            Cache::with_options(
                options,
                Charge { min },
                DefaultHashBuilder::default(),
                Accounting,
            )
        });
        Self {
            cache,
            entries: Level::new(gauges.entries),
            bytes: Level::new(gauges.bytes),
            insert_locks: std::array::from_fn(|_| Mutex::new(())),
        }
    }

    fn apply(&self, change: Change) {
        self.entries.add(change.entries);
        self.bytes.add(change.bytes);
    }

    pub(crate) fn get(&self, key: &Key) -> Option<V> {
        Some(self.cache.as_ref()?.get(key)?.value)
    }

    /// Returns how many entries left (evicted, or this one refused as too heavy).
    pub(crate) fn insert(&self, key: Key, value: V, payload: u64) -> u64 {
        let Some(cache) = &self.cache else { return 0 };
        let weight = payload.saturating_add(ENTRY_OVERHEAD_BYTES);
        let mut evicted = Evicted::default();
        cache.insert_with_lifecycle(key, Entry { value, weight }, &mut evicted);
        // Count the insert, then whatever `Accounting` saw leave (which includes this value
        // when it was refused as too heavy).
        self.apply(Change {
            entries: 1 - evicted.entries,
            bytes: signed(weight) - evicted.weight,
        });
        u64::try_from(evicted.entries).unwrap_or(0)
    }

    /// Inserts `value` under `key` unless a value is there already, evicting entries as
    /// needed, and returns the value held under `key` (the one there, or `value`). Atomic per
    /// key: racing inserts of one key take turns, so they all get one copy. `None` when
    /// `value` was refused as too heavy.
    pub(crate) fn insert_if_absent(&self, key: Key, value: V, payload: u64) -> Option<V> {
        // A stripe of locks rather than quick_cache's placeholder guard: its insert evicts
        // after linking, and could evict the value it just admitted, where `insert` does not.
        let stripe = &self.insert_locks[usize::from(key[0]) % INSERT_LOCKS];
        let _turn = stripe.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = self.get(&key) {
            return Some(held);
        }
        self.insert(key, value.clone(), payload);
        self.contains(&key).then_some(value)
    }

    /// Replaces the value under `key` with `value` if one is held there and `replaces` says so
    /// of it; atomic with [`WeightedCache::insert_if_absent`]. Whether `value` is held now.
    pub(crate) fn replace_if(
        &self,
        key: Key,
        replaces: impl FnOnce(&V) -> bool,
        value: V,
        payload: u64,
    ) -> bool {
        let stripe = &self.insert_locks[usize::from(key[0]) % INSERT_LOCKS];
        let _turn = stripe.lock().unwrap_or_else(|p| p.into_inner());
        match self.get(&key) {
            Some(held) if replaces(&held) => self.remove(&key),
            _ => return false,
        }
        self.insert(key, value, payload);
        self.contains(&key)
    }

    pub(crate) fn contains(&self, key: &Key) -> bool {
        self.cache.as_ref().is_some_and(|c| c.contains_key(key))
    }

    pub(crate) fn remove(&self, key: &Key) {
        let Some(cache) = &self.cache else { return };
        if let Some((_, entry)) = cache.remove(key) {
            self.apply(Change {
                entries: -1,
                bytes: -signed(entry.weight),
            });
        }
    }

    pub(crate) fn clear(&self) {
        let Some(cache) = &self.cache else { return };
        // `drain` rather than `clear`, which would not say what it dropped.
        let mut change = Change::default();
        for (_, entry) in cache.drain() {
            change.entries -= 1;
            change.bytes -= signed(entry.weight);
        }
        self.apply(change);
    }

    /// The shards and the entries quick_cache holds, for tests.
    #[cfg(test)]
    pub(crate) fn shards_and_len(&self) -> (usize, usize) {
        let cache = self.cache.as_ref().expect("a cache that is on");
        (cache.num_shards(), cache.len())
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            entries: usize::try_from(self.entries.get()).unwrap_or(0),
            bytes: u64::try_from(self.bytes.get()).unwrap_or(0),
        }
    }
}

/// The weight a shard of `shard_bytes` admits at most.
fn hot_share(shard_bytes: u64) -> u64 {
    (shard_bytes as f64 * HOT_ALLOCATION) as u64
}

/// Entries and weighed bytes held by a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheStats {
    /// Number of entries.
    pub entries: usize,
    /// Sum of entry weights (payload plus [`ENTRY_OVERHEAD_BYTES`] each).
    pub bytes: u64,
}

/// The counters agree with what quick_cache holds, and both limits hold.
#[cfg(test)]
pub(crate) fn assert_consistent<V: Clone>(cache: &WeightedCache<V>, max_bytes: u64) {
    let stats = cache.stats();
    let inner = cache.cache.as_ref().unwrap();
    let real: u64 = inner.iter().map(|(_, e)| e.weight).sum();
    assert_eq!(stats.entries, inner.len());
    assert_eq!(stats.bytes, real);
    assert!(
        inner.weight() <= max_bytes,
        "{} > {max_bytes}",
        inner.weight()
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::image::DecodedImage;

    #[test]
    fn cache_structures_stay_within_their_overhead_share() {
        // Expect as many entries as fit, so the ghost list fills too (the worst case).
        let per = 12 + ENTRY_OVERHEAD_BYTES;
        let sizing = Sizing {
            typical_entry: per,
            largest_entry: per,
        };
        let gauges = Gauges::new("test_entries", "test_bytes");
        let cache = WeightedCache::new(per * 4096, None, sizing, gauges);
        for i in 0..50_000 {
            let id = CacheIdentity::unscoped(&format!("https://e.com/{i}"));
            let image = Arc::new(DecodedImage::blank(2, 2, &[]));
            cache.insert(identity_key(&id), image, 12);
        }
        let inner = cache.cache.as_ref().unwrap();
        let per_entry = inner.memory_used().total() as u64 / inner.len() as u64;
        // The rest of the overhead is the `Arc` allocation (64), malloc slack on the pixels
        // (16), and the slab's growth headroom, which `memory_used` does not see.
        assert!(
            per_entry <= ENTRY_OVERHEAD_BYTES - 64 - 16 - 48,
            "{per_entry} bytes"
        );
    }
}

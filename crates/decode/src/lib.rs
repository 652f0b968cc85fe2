//! Image decoding with hard limits, and the byte-weighted caches that keep decoded results.
//!
//! - [`decode`] sniffs JPEG, PNG, WebP or GIF from the bytes (never from a URL) and returns
//!   the RGB8 pixels of Pillow's `Image.open(b).convert("RGB")`, byte for byte: JPEG through
//!   libjpeg-turbo (loaded at run time, see [`select_jpeg_decoder`]; a pure-Rust decoder
//!   otherwise), PNG row by row, GIF's first frame composed as Pillow composes it, WebP
//!   through `image`.
//! - [`probe`] reads the headers first and refuses, before any allocation, an image over
//!   [`DecodeLimits::max_pixels`] or one whose coded data cannot back its declared size, and
//!   estimates the memory its decode will hold ([`Probe::memory_bytes`]).
//! - [`DecodedCache`] keeps `Arc<DecodedImage>` values in a cache weighed in bytes, keyed by a
//!   blake3 digest of the [`CacheIdentity`] (so it is partitioned by scope exactly as the
//!   identity is).
//! - [`EmbeddingStore`] keeps [`Embedding`] tensors (dtype, shape, aligned bytes, metadata)
//!   keyed by an [`EmbeddingKey`](mmcache_scope::EmbeddingKey); the loader's
//!   `get_or_compute` fills it.
//!
//! This crate knows nothing of HTTP or Redis. Single-flight of concurrent misses lives in the
//! loader, which joins loads of one identity before they reach this cache.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use mmcache_decode::{decode, DecodeLimits, DecodedCache};
//! use mmcache_scope::{CacheIdentity, ContentKey};
//!
//! // A 4×3 RGB PNG, encoded with the `png` crate.
//! let mut png = Vec::new();
//! let mut encoder = png::Encoder::new(&mut png, 4, 3);
//! encoder.set_color(png::ColorType::Rgb);
//! encoder.write_header().unwrap().write_image_data(&[7; 36]).unwrap();
//!
//! let image = Arc::new(decode(&png, &DecodeLimits::default()).unwrap());
//! assert_eq!((image.width(), image.height(), image.pixels().len()), (4, 3, 36));
//!
//! let cache = DecodedCache::new(1 << 20, None);
//! let id = CacheIdentity::unscoped("https://example.com/a.png");
//! cache.insert(&id, image.clone());
//! assert!(Arc::ptr_eq(&cache.get(&id).unwrap(), &image)); // a hit is the same Arc, no copy
//!
//! // Anything that is not a supported raster image is a typed 415.
//! let err = decode(b"<svg/>", &DecodeLimits::default()).unwrap_err();
//! assert_eq!(err.http_status(), 415);
//! ```
//!
//! # Memory accounting
//!
//! Both caches are [`quick_cache`] sync caches: sharded, each shard behind its own read-write
//! lock (a hit takes only a read lock and bumps a counter), with O(1) eviction by a
//! CLOCK-PRO-like policy. That policy is not strict LRU: once the cache is full a new entry
//! starts "cold" and is the first to go unless it is hit again, so a scan of one-off loads
//! cannot flush the entries in use.
//!
//! - An entry weighs its payload (pixel bytes, or an embedding's bytes) plus
//!   [`ENTRY_OVERHEAD_BYTES`]; [`CacheStats::bytes`] and the `*_bytes` gauges report that sum.
//! - The budget bounds the sum of weights. It is split evenly between the shards, each of which
//!   keeps its share, so a value heavier than the whole budget is never stored; nor is one
//!   heavier than 97% of a shard's share, which is why the decoded cache uses no more shards
//!   than keep an image at the default [`DEFAULT_MAX_PIXELS`] admissible (a 1 GiB budget has
//!   two shards of 512 MiB; a budget under about 620 MB has one).
//! - The entry cap (`max_entries`) is held exactly by charging every entry at least
//!   `budget / (max_entries + 1) + 1` bytes against the budget: `max_entries + 1` entries would
//!   then weigh more than the budget. Only the budget check sees that charge; the stats and
//!   gauges count real weights. With a cap, a mix of many small and a few large entries may
//!   therefore hold fewer of both than either limit alone would allow.

mod embedding;
mod embedding_wire;
mod error;
mod gif;
mod image;
mod jpeg;
mod png;
mod turbo;
mod vllm;
mod webp;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use mmcache_scope::{CacheIdentity, ContentKey};
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};

pub use crate::embedding::{
    DEFAULT_EMBEDDING_CACHE_BYTES, DType, Embedding, EmbeddingStore, Inserted,
    MAX_EMBEDDING_METADATA_BYTES, TensorError,
};
pub use crate::embedding_wire::{
    DEFAULT_EMBEDDING_CHUNK_BYTES, DEFAULT_EMBEDDING_MAX_VALUE_BYTES, EMBEDDING_FORMAT_VERSION,
    MANIFEST_BYTES, MAX_DIMS, MAX_EMBEDDING_CHUNKS, Manifest, ValueBuf, WireError, decode_value,
    encode_value,
};
pub use crate::error::{Error, Result};
pub use crate::image::{
    DEFAULT_MAX_PIXELS, DecodeLimits, DecodedImage, ImageFormat, ImageFormats, JpegDecoder,
    JpegDecoderChoice, JpegSelection, Probe, decode, decode_probed, probe, select_jpeg_decoder,
    sniff,
};

/// Default byte budget of the decoded-image cache: 1 GiB (`MMCACHE_DECODED_CACHE_BYTES`).
pub const DEFAULT_DECODED_CACHE_BYTES: u64 = 1 << 30;

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
type Key = [u8; 32];

/// The digest a cache is keyed by.
fn identity_key(identity: &CacheIdentity) -> Key {
    *blake3::hash(identity.as_str().as_bytes()).as_bytes()
}

/// quick_cache's share of a shard kept for entries that were hit since they came in (its
/// default). A value heavier than this share of its shard's budget is refused.
const HOT_ALLOCATION: f64 = 0.97;

/// The most entries quick_cache is told to expect. It keeps ghost keys for half as many, in
/// memory only [`ENTRY_OVERHEAD_BYTES`] accounts for, so a huge budget must not inflate it.
const MAX_ESTIMATED_ENTRIES: u64 = 1 << 20;

/// What a cache expects of its entries, to size quick_cache's shards and tables.
#[derive(Debug, Clone, Copy)]
struct Sizing {
    /// Assumed average weight: quick_cache expects budget / this entries (or the cap, when
    /// smaller).
    typical_entry: u64,
    /// The heaviest entry that must stay admissible when the budget allows it: shards are
    /// never made so small that it would exceed a shard's hot share.
    largest_entry: u64,
}

/// Decoded images: a typical 300 x 300 RGB image is 264 KiB; the largest is an image at the
/// default pixel limit (300 MB).
const DECODED_SIZING: Sizing = Sizing {
    typical_entry: 256 << 10,
    largest_entry: DEFAULT_MAX_PIXELS * 3 + ENTRY_OVERHEAD_BYTES,
};

/// Embeddings: typically a 2,048-wide f32 vector (8 KiB); at most a vision model's per-image
/// token embeddings, e.g. 2,880 tokens x 4,096 dims x 2 bytes (23 MiB).
const EMBEDDING_SIZING: Sizing = Sizing {
    typical_entry: 8 << 10,
    largest_entry: 32 << 20,
};

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

/// A change in entries and bytes held, applied to the counters and the gauges.
#[derive(Debug, Clone, Copy, Default)]
struct Change {
    entries: i64,
    bytes: i64,
}

/// Gauges that several caches of one kind in a process add to (they move by deltas).
#[derive(Debug)]
struct Gauges {
    entries: metrics::Gauge,
    bytes: metrics::Gauge,
}

impl Gauges {
    fn new(entries: &'static str, bytes: &'static str) -> Self {
        Self {
            entries: metrics::gauge!(entries),
            bytes: metrics::gauge!(bytes),
        }
    }
}

type Inner<V> = Cache<Key, Entry<V>, Charge, DefaultHashBuilder, Accounting>;

/// A byte-weighted quick_cache with an optional exact entry cap, counters and gauges.
struct WeightedCache<V> {
    /// `None` when an entry cap of 0 turns the cache off.
    cache: Option<Inner<V>>,
    /// This cache's share of the gauges. Updated after each operation, so a concurrent
    /// eviction of an entry whose insert is not yet counted can briefly take it below zero.
    entries: AtomicI64,
    bytes: AtomicI64,
    gauges: Gauges,
}

impl<V: Clone> WeightedCache<V> {
    fn new(max_bytes: u64, max_entries: Option<usize>, sizing: Sizing, gauges: Gauges) -> Self {
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
            entries: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
            gauges,
        }
    }

    fn apply(&self, change: Change) {
        if change.entries != 0 {
            self.entries.fetch_add(change.entries, Ordering::Relaxed);
            self.gauges.entries.increment(change.entries as f64);
        }
        if change.bytes != 0 {
            self.bytes.fetch_add(change.bytes, Ordering::Relaxed);
            self.gauges.bytes.increment(change.bytes as f64);
        }
    }

    fn get(&self, key: &Key) -> Option<V> {
        Some(self.cache.as_ref()?.get(key)?.value)
    }

    /// Returns how many entries left (evicted, or this one refused as too heavy).
    fn insert(&self, key: Key, value: V, payload: u64) -> u64 {
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

    fn contains(&self, key: &Key) -> bool {
        self.cache.as_ref().is_some_and(|c| c.contains_key(key))
    }

    fn remove(&self, key: &Key) {
        let Some(cache) = &self.cache else { return };
        if let Some((_, entry)) = cache.remove(key) {
            self.apply(Change {
                entries: -1,
                bytes: -signed(entry.weight),
            });
        }
    }

    fn clear(&self) {
        let Some(cache) = &self.cache else { return };
        // `drain` rather than `clear`, which would not say what it dropped.
        let mut change = Change::default();
        for (_, entry) in cache.drain() {
            change.entries -= 1;
            change.bytes -= signed(entry.weight);
        }
        self.apply(change);
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            entries: usize::try_from(self.entries.load(Ordering::Relaxed)).unwrap_or(0),
            bytes: u64::try_from(self.bytes.load(Ordering::Relaxed)).unwrap_or(0),
        }
    }
}

/// The weight a shard of `shard_bytes` admits at most.
fn hot_share(shard_bytes: u64) -> u64 {
    (shard_bytes as f64 * HOT_ALLOCATION) as u64
}

impl<V> Drop for WeightedCache<V> {
    fn drop(&mut self) {
        // Take this cache's share out of the process-wide gauges.
        self.gauges
            .entries
            .decrement(*self.entries.get_mut() as f64);
        self.gauges.bytes.decrement(*self.bytes.get_mut() as f64);
    }
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

/// The worker's decoded-image cache: `Arc<DecodedImage>` values, weighed in bytes.
///
/// Images are held once per content: by the content key of their encoded bytes within the
/// identity's scope (scoped identities of one scope share, unscoped identities share among
/// themselves, never across). Each identity is an alias to its image, so the same bytes under
/// two URLs are one `Arc` and are weighed once. The budget, entry cap and stats count images;
/// the aliases are a bounded index beside them (see [`DecodedCache::with_max_pixels`]).
///
/// Gauges: `mmcache_decoded_cache_entries`, `mmcache_decoded_cache_bytes`.
pub struct DecodedCache {
    inner: WeightedCache<Arc<DecodedImage>>,
    /// Identity key → content slot. An alias whose image was evicted is a miss (and is
    /// dropped when found); evicting an alias frees nothing but that key.
    aliases: Option<Cache<Key, Key>>,
}

impl std::fmt::Debug for DecodedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedCache")
            .field("stats", &self.stats())
            .finish()
    }
}

/// The most aliases the index holds: identities that name a cached image (a 64-byte key and
/// value, about 100 bytes with quick_cache's slot, outside the byte budget: 25 MiB at most).
const MAX_ALIASES: u64 = 1 << 18;
/// The entry weight the alias index is sized for when no entry cap is set.
const ALIAS_SIZING_ENTRY: u64 = 4 << 10;

impl DecodedCache {
    /// A cache holding at most `max_bytes` of weighed entries and, when given, at most
    /// `max_entries` entries (`Some(0)` turns it off, as `DYN_MM_IMAGE_CACHE_SIZE=0` does).
    /// The cap is held by a minimum charge per entry; see the crate's "Memory accounting".
    pub fn new(max_bytes: u64, max_entries: Option<usize>) -> Self {
        Self::with_max_pixels(max_bytes, max_entries, DEFAULT_MAX_PIXELS)
    }

    /// Like [`DecodedCache::new`] for a pixel limit other than the default: the largest image
    /// it lets through stays admissible (shards are sized so that it fits one).
    ///
    /// The alias index holds two identities per 4 KiB of budget (or per entry of the entry
    /// cap), at least 1024 and at most 262,144: beyond that the least used identities lose
    /// their alias and load again below memory (their bytes then find the image by content,
    /// without a second decode).
    pub fn with_max_pixels(max_bytes: u64, max_entries: Option<usize>, max_pixels: u64) -> Self {
        let gauges = Gauges::new(
            "mmcache_decoded_cache_entries",
            "mmcache_decoded_cache_bytes",
        );
        let sizing = Sizing {
            largest_entry: max_pixels
                .saturating_mul(3)
                .saturating_add(ENTRY_OVERHEAD_BYTES),
            ..DECODED_SIZING
        };
        // Sized for small images too (a 4 KiB entry is about 37 x 37 px): sized by the
        // typical entry alone, a budget full of thumbnails would lose its aliases and load
        // them again below memory.
        let images = max_entries.map_or(max_bytes / ALIAS_SIZING_ENTRY, |n| n as u64);
        let aliases = (max_entries != Some(0))
            .then(|| Cache::new(images.saturating_mul(2).clamp(1024, MAX_ALIASES) as usize));
        Self {
            inner: WeightedCache::new(max_bytes, max_entries, sizing, gauges),
            aliases,
        }
    }

    /// The image cached for `identity`; a hit counts as a use, which protects it from eviction.
    pub fn get(&self, identity: &CacheIdentity) -> Option<Arc<DecodedImage>> {
        let aliases = self.aliases.as_ref()?;
        let id = identity_key(identity);
        let slot = aliases.get(&id)?;
        let image = self.inner.get(&slot);
        if image.is_none() {
            aliases.remove(&id); // its image was evicted
        }
        image
    }

    /// The image of the encoded bytes whose content key is `content`, cached under any
    /// identity of `identity`'s scope (or under any unscoped identity, for an unscoped one).
    pub fn get_content(
        &self,
        identity: &CacheIdentity,
        content: &ContentKey,
    ) -> Option<Arc<DecodedImage>> {
        self.inner.get(&content_slot(identity, content))
    }

    /// Caches `image` for `identity` (replacing what `identity` named), evicting entries as
    /// needed, and returns the image now held for it: an image of the same content already
    /// cached in the scope is kept and shared, and returned instead of `image`. An image too
    /// heavy for the budget is not stored, and `identity` then names nothing.
    pub fn insert(&self, identity: &CacheIdentity, image: Arc<DecodedImage>) -> Arc<DecodedImage> {
        let Some(aliases) = &self.aliases else {
            return image;
        };
        let id = identity_key(identity);
        let slot = content_slot(identity, &image.content_key());
        if let Some(old) = aliases.get(&id).filter(|old| *old != slot) {
            self.inner.remove(&old); // what `identity` named before goes, as without sharing
        }
        let held = match self.inner.get(&slot) {
            Some(shared) => shared,
            None => {
                let weight = image.byte_len() as u64;
                self.inner.insert(slot, image.clone(), weight);
                if !self.inner.contains(&slot) {
                    aliases.remove(&id); // too heavy: not stored
                    return image;
                }
                image
            }
        };
        aliases.insert(id, slot);
        held
    }

    /// Forgets `identity` and its image (so its memory is freed); other identities of the same
    /// content then miss and load it again.
    pub fn remove(&self, identity: &CacheIdentity) {
        if let Some((_, slot)) = self
            .aliases
            .as_ref()
            .and_then(|a| a.remove(&identity_key(identity)))
        {
            self.inner.remove(&slot);
        }
    }

    /// Forgets everything.
    pub fn clear(&self) {
        if let Some(aliases) = &self.aliases {
            aliases.clear();
        }
        self.inner.clear();
    }

    /// Images and bytes held now (an operation still running on another thread may not be
    /// counted yet). An image shared by several identities counts once.
    pub fn stats(&self) -> CacheStats {
        self.inner.stats()
    }
}

/// Where the image of `content` lives for `identity`: its scope digest (or none) and the
/// content key, hashed under a context of our own so a slot never equals an identity key.
fn content_slot(identity: &CacheIdentity, content: &ContentKey) -> Key {
    let mut h = blake3::Hasher::new_derive_key("mmcache 2026-12 decoded content slot v1");
    match identity.scope_digest() {
        None => h.update(&[0]),
        Some(digest) => h.update(&[1]).update(digest.as_bytes()),
    };
    *h.update(content.as_bytes()).finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use super::*;
    use mmcache_scope::Scope;

    /// A `w` x `h` image whose content key is unique to this call, so that each is its own
    /// content in the cache.
    fn img(w: u32, h: u32) -> Arc<DecodedImage> {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed).to_le_bytes();
        Arc::new(DecodedImage::blank(w, h, &call))
    }

    fn id(i: usize) -> CacheIdentity {
        CacheIdentity::unscoped(&format!("https://e.com/{i}"))
    }

    /// The counters agree with what quick_cache holds, and both limits hold.
    fn assert_consistent<V: Clone>(cache: &WeightedCache<V>, max_bytes: u64) {
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

    #[test]
    fn a_budget_of_small_images_keeps_every_alias() {
        // 30,000 small images (about 3 KiB each, 90 MiB) in the default 1 GiB budget: each is
        // still a memory hit under its URL.
        let cache = DecodedCache::new(1 << 30, None);
        let n = 30_000;
        for i in 0..n {
            cache.insert(&id(i), img(30, 30));
        }
        let hits = (0..n).filter(|&i| cache.get(&id(i)).is_some()).count();
        assert_eq!(hits, n);
    }

    #[test]
    fn decoded_cache_weighs_bytes_and_keeps_what_was_hit() {
        let one = img(10, 10); // 300 bytes + overhead
        let per = 300 + ENTRY_OVERHEAD_BYTES;
        let cache = DecodedCache::new(per * 3, None);
        cache.insert(&id(0), one.clone());
        for i in 1..3 {
            cache.insert(&id(i), img(one.width(), one.height()));
        }
        assert!(Arc::ptr_eq(&cache.get(&id(0)).unwrap(), &one)); // a hit is the same Arc
        cache.insert(&id(3), img(one.width(), one.height()));
        assert!(cache.get(&id(0)).is_some(), "the entry that was hit stays");
        assert!(cache.get(&id(3)).is_some(), "the new entry is in");
        let gone = (1..3).filter(|&i| cache.get(&id(i)).is_none()).count();
        assert_eq!(gone, 1);
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 3,
                bytes: per * 3
            }
        );
        assert_consistent(&cache.inner, per * 3);
    }

    #[test]
    fn one_content_under_two_identities_is_one_entry_weighed_once() {
        let one = img(10, 10);
        let per = 300 + ENTRY_OVERHEAD_BYTES;
        let cache = DecodedCache::new(per * 2, None);
        let same = Arc::new((*one).clone()); // another decode of the same bytes
        assert!(Arc::ptr_eq(&cache.insert(&id(0), one.clone()), &one));
        assert!(
            Arc::ptr_eq(&cache.insert(&id(1), same), &one),
            "the held copy is shared"
        );
        assert!(Arc::ptr_eq(&cache.get(&id(1)).unwrap(), &one));
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 1,
                bytes: per
            }
        );
        // Forgetting one identity frees the image: the other misses too.
        cache.remove(&id(0));
        assert!(cache.get(&id(0)).is_none() && cache.get(&id(1)).is_none());
        assert_eq!(cache.stats(), CacheStats::default());
        cache.insert(&id(1), one.clone());
        // Evicting the image: every identity of it misses, and nothing stays counted.
        cache.insert(&id(2), img(10, 10));
        cache.insert(&id(3), img(10, 10));
        cache.insert(&id(4), img(10, 10));
        if cache.get_content(&id(1), &one.content_key()).is_none() {
            assert!(cache.get(&id(1)).is_none());
        }
        assert!(cache.stats().bytes <= per * 2);
        assert_consistent(&cache.inner, per * 2);
    }

    #[test]
    fn content_is_shared_within_a_scope_only() {
        let one = img(4, 4);
        let cache = DecodedCache::new(1 << 20, None);
        let (a, b) = (Scope::new("a").unwrap(), Scope::new("b").unwrap());
        let url = |n: u32| format!("https://e.com/{n}.png");
        cache.insert(&CacheIdentity::scoped(&a, &url(0)), one.clone());
        let key = one.content_key();
        assert!(
            cache
                .get_content(&CacheIdentity::scoped(&a, &url(1)), &key)
                .is_some()
        );
        assert!(
            cache
                .get_content(&CacheIdentity::scoped(&b, &url(0)), &key)
                .is_none()
        );
        assert!(
            cache
                .get_content(&CacheIdentity::unscoped(&url(0)), &key)
                .is_none()
        );
        let other = Arc::new((*one).clone());
        let held = cache.insert(&CacheIdentity::scoped(&b, &url(0)), other.clone());
        assert!(Arc::ptr_eq(&held, &other), "scope b keeps its own copy");
        assert_eq!(cache.stats().entries, 2);
    }

    #[test]
    fn hot_entry_survives_a_scan_of_one_off_inserts() {
        let one = img(10, 10);
        let per = 300 + ENTRY_OVERHEAD_BYTES;
        let cache = DecodedCache::new(per * 10, None);
        cache.insert(&id(0), img(one.width(), one.height()));
        for _ in 0..3 {
            assert!(cache.get(&id(0)).is_some());
        }
        // Strict LRU would have evicted id 0 at the 10th one-off insert.
        for i in 1..=100 {
            cache.insert(&id(i), img(one.width(), one.height()));
        }
        assert!(cache.get(&id(0)).is_some());
        assert!(cache.get(&id(100)).is_some());
        assert_eq!(cache.stats().entries, 10);
        assert_consistent(&cache.inner, per * 10);
    }

    #[test]
    fn entry_cap_is_exact() {
        let one = img(2, 2);
        let per = 12 + ENTRY_OVERHEAD_BYTES;
        let cache = DecodedCache::new(1 << 20, Some(2));
        for i in 0..3 {
            cache.insert(&id(i), img(one.width(), one.height()));
        }
        assert!(cache.get(&id(2)).is_some());
        // Real weights are reported, not the minimum charge that holds the cap.
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 2,
                bytes: 2 * per
            }
        );

        let single = DecodedCache::new(1 << 20, Some(1));
        single.insert(&id(0), img(one.width(), one.height()));
        single.insert(&id(1), img(one.width(), one.height()));
        assert!(single.get(&id(1)).is_some());
        assert_eq!(single.stats().entries, 1);

        let seven = DecodedCache::new(1 << 20, Some(7));
        for i in 0..500 {
            seven.insert(&id(i), img(one.width(), one.height()));
            if i % 3 == 0 {
                seven.get(&id(i / 2));
            }
            assert!(seven.stats().entries <= 7);
        }
        assert_eq!(
            seven.stats().entries,
            7,
            "the cap, not the charge, is the limit"
        );
        assert_consistent(&seven.inner, 1 << 20);

        // Sharded: each shard holds its share of the cap.
        let sharded = DecodedCache::new(1 << 30, Some(1000));
        assert!(sharded.inner.cache.as_ref().unwrap().num_shards() > 1);
        for i in 0..5000 {
            sharded.insert(&id(i), img(one.width(), one.height()));
        }
        assert!(sharded.stats().entries <= 1000);
        assert_consistent(&sharded.inner, 1 << 30);
    }

    #[test]
    fn entry_cap_zero_disables() {
        let cache = DecodedCache::new(1 << 30, Some(0));
        let id = CacheIdentity::unscoped("https://e.com/x");
        cache.insert(&id, img(2, 2));
        assert!(cache.get(&id).is_none());
        assert_eq!(cache.stats(), CacheStats::default());
    }

    #[test]
    fn too_heavy_is_not_stored_and_drops_the_older_value() {
        let per = 300 + ENTRY_OVERHEAD_BYTES;
        let cache = DecodedCache::new(per * 3, None);
        cache.insert(&id(0), img(10, 10));
        cache.insert(&id(0), img(30, 30)); // 2,700 bytes: over the whole budget
        assert!(cache.get(&id(0)).is_none());
        assert_eq!(cache.stats(), CacheStats::default());
    }

    #[test]
    fn remove_and_clear() {
        let one = img(2, 2);
        let cache = DecodedCache::new(1 << 20, None);
        for i in 0..5 {
            cache.insert(&id(i), img(one.width(), one.height()));
        }
        cache.remove(&id(1));
        cache.remove(&id(99)); // absent: no change
        assert!(cache.get(&id(1)).is_none());
        assert_eq!(cache.stats().entries, 4);
        assert_consistent(&cache.inner, 1 << 20);
        cache.clear();
        assert!((0..5).all(|i| cache.get(&id(i)).is_none()));
        assert_eq!(cache.stats(), CacheStats::default());
        assert_eq!(cache.inner.cache.as_ref().unwrap().len(), 0);
    }

    #[test]
    fn scoped_identities_do_not_collide() {
        let cache = DecodedCache::new(1 << 20, None);
        let url = "https://e.com/x.png";
        let a = CacheIdentity::scoped(&Scope::new("a").unwrap(), url);
        let b = CacheIdentity::scoped(&Scope::new("b").unwrap(), url);
        cache.insert(&a, img(2, 2));
        assert!(cache.get(&a).is_some());
        assert!(cache.get(&b).is_none());
        assert!(cache.get(&CacheIdentity::unscoped(url)).is_none());
    }

    /// Gauges as `f64` bits, per name; every cache registered under it adds to them.
    #[derive(Default)]
    struct GaugeRecorder(Mutex<HashMap<String, Arc<AtomicU64>>>);

    impl GaugeRecorder {
        fn value(&self, name: &str) -> f64 {
            let gauges = self.0.lock().unwrap();
            f64::from_bits(gauges[name].load(Ordering::Relaxed))
        }
    }

    impl metrics::Recorder for GaugeRecorder {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            metrics::Counter::noop()
        }
        fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            let mut gauges = self.0.lock().unwrap();
            metrics::Gauge::from_arc(gauges.entry(key.name().to_owned()).or_default().clone())
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    #[test]
    fn gauges_follow_the_caches_and_return_to_zero_on_drop() {
        let recorder = GaugeRecorder::default();
        let per = 300 + ENTRY_OVERHEAD_BYTES;
        let (a, b) = metrics::with_local_recorder(&recorder, || {
            (
                DecodedCache::new(per * 4, None),
                DecodedCache::new(1 << 20, Some(3)),
            )
        });
        let gauges = || {
            (
                recorder.value("mmcache_decoded_cache_entries"),
                recorder.value("mmcache_decoded_cache_bytes"),
            )
        };
        let sum = |caches: &[&DecodedCache]| {
            let entries = caches.iter().map(|c| c.stats().entries as f64).sum::<f64>();
            let bytes = caches.iter().map(|c| c.stats().bytes as f64).sum::<f64>();
            (entries, bytes)
        };
        // Inserts that evict, a replacement, a refused value, a remove and a clear.
        for i in 0..10 {
            a.insert(&id(i), img(10, 10));
            b.insert(&id(i), img(2, 2));
        }
        a.insert(&id(9), img(5, 5));
        a.insert(&id(8), img(40, 40));
        b.remove(&id(9));
        assert!(sum(&[&a, &b]).0 > 0.0);
        assert_eq!(gauges(), sum(&[&a, &b]));
        assert_consistent(&a.inner, per * 4);
        assert_consistent(&b.inner, 1 << 20);
        b.clear();
        assert_eq!(gauges(), sum(&[&a]));
        b.insert(&id(0), img(2, 2));
        drop(a);
        assert_eq!(gauges(), sum(&[&b]));
        drop(b);
        assert_eq!(gauges(), (0.0, 0.0));
    }

    #[test]
    fn many_tiny_entries_keep_the_budget() {
        // The hand-written LRU scanned every entry per eviction: seconds per insert at this size.
        let one = img(1, 1);
        let budget = 1 << 20;
        for max_entries in [None, Some(1000)] {
            let cache = DecodedCache::new(budget, max_entries);
            for i in 0..200_000 {
                cache.insert(&id(i), img(one.width(), one.height()));
                if i % 20_000 == 0 {
                    assert!(cache.stats().bytes <= budget);
                }
            }
            let stats = cache.stats();
            assert!(stats.bytes <= budget, "{stats:?}");
            // Full up to whichever limit binds.
            match max_entries {
                Some(cap) => assert_eq!(stats.entries, cap),
                None => assert!(stats.bytes > budget / 2, "{stats:?}"),
            }
            assert!(cache.get(&id(199_999)).is_some());
            assert_consistent(&cache.inner, budget);
        }
    }

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
        let one = img(2, 2);
        for i in 0..50_000 {
            cache.insert(identity_key(&id(i)), img(one.width(), one.height()), 12);
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

//! Image decoding with hard limits, and the byte-weighted caches that keep decoded results.
//!
//! - [`decode`] sniffs JPEG, PNG, WebP or GIF from the bytes (never from a URL) and returns
//!   the RGB8 pixels of Pillow's `Image.open(b).convert("RGB")`, byte for byte: JPEG through
//!   libjpeg-turbo (loaded at run time, see [`select_jpeg_decoder`]; a pure-Rust decoder
//!   otherwise), PNG row by row, WebP and GIF through `image`.
//! - [`probe`] reads the headers first and refuses, before any allocation, an image over
//!   [`DecodeLimits::max_pixels`] or one whose coded data cannot back its declared size, and
//!   estimates the memory its decode will hold ([`Probe::memory_bytes`]).
//! - [`DecodedCache`] keeps `Arc<DecodedImage>` values in an LRU weighed in bytes, keyed by a
//!   blake3 digest of the [`CacheIdentity`] (so it is partitioned by scope exactly as the
//!   identity is).
//! - [`EmbeddingCache`] does the same for embeddings, keyed by (identity, model id).
//!
//! This crate knows nothing of HTTP or Redis. Single-flight of concurrent misses lives in the
//! loader, which joins loads of one identity before they reach this cache.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use mmcache_decode::{decode, DecodeLimits, DecodedCache};
//! use mmcache_scope::CacheIdentity;
//!
//! let png = mmcache_test_support::images::png(4, 3, 7);
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
//! An entry weighs its pixel bytes plus [`ENTRY_OVERHEAD_BYTES`] for the node, the `Arc`
//! and the index. The budget bounds the sum of weights; a value heavier than the whole budget
//! is never stored.

mod error;
mod image;
mod jpeg;
mod lru;
mod png;
mod turbo;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use mmcache_scope::CacheIdentity;

pub use crate::error::{Error, Result};
pub use crate::image::{
    DEFAULT_MAX_PIXELS, DecodeLimits, DecodedImage, ImageFormat, JpegDecoder, JpegDecoderChoice,
    JpegSelection, Probe, decode, decode_probed, probe, select_jpeg_decoder, sniff,
};

/// Default byte budget of the decoded-image cache: 1 GiB (`MMCACHE_DECODED_CACHE_BYTES`).
pub const DEFAULT_DECODED_CACHE_BYTES: u64 = 1 << 30;

/// Bytes charged to each cache entry on top of its payload.
pub const ENTRY_OVERHEAD_BYTES: u64 = 128;

/// The digest a cache is keyed by.
fn identity_key(identity: &CacheIdentity) -> lru::Key {
    *blake3::hash(identity.as_str().as_bytes()).as_bytes()
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

    fn apply(&self, change: lru::Change) {
        if change.entries != 0 {
            self.entries.increment(change.entries as f64);
        }
        if change.weight != 0 {
            self.bytes.increment(change.weight as f64);
        }
    }
}

/// A byte-weighted LRU of values under a read-write lock (hits only read), with gauges.
struct WeightedCache<V> {
    lru: RwLock<lru::Lru<V>>,
    gauges: Gauges,
}

impl<V: Clone> WeightedCache<V> {
    fn new(max_bytes: u64, max_entries: Option<usize>, gauges: Gauges) -> Self {
        let lru = lru::Lru::new(max_bytes, max_entries.unwrap_or(usize::MAX));
        Self {
            lru: RwLock::new(lru),
            gauges,
        }
    }

    // A panic while holding a lock leaves every entry whole (the map is updated in one step);
    // keep serving rather than poisoning every later load.
    fn read(&self) -> RwLockReadGuard<'_, lru::Lru<V>> {
        self.lru.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, lru::Lru<V>> {
        self.lru.write().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: &lru::Key) -> Option<V> {
        self.read().get(key)
    }

    fn insert(&self, key: lru::Key, value: V, weight: u64) {
        let change = self
            .write()
            .insert(key, value, weight + ENTRY_OVERHEAD_BYTES);
        self.gauges.apply(change);
    }

    fn remove(&self, key: &lru::Key) {
        let change = self.write().remove(key);
        self.gauges.apply(change);
    }

    fn clear(&self) {
        let change = self.write().clear();
        self.gauges.apply(change);
    }

    fn stats(&self) -> CacheStats {
        let lru = self.read();
        CacheStats {
            entries: lru.len(),
            bytes: lru.weight(),
        }
    }
}

impl<V> Drop for WeightedCache<V> {
    fn drop(&mut self) {
        // Take this cache's share out of the process-wide gauges.
        let lru = self.lru.get_mut().unwrap_or_else(|p| p.into_inner());
        self.gauges.entries.decrement(lru.len() as f64);
        self.gauges.bytes.decrement(lru.weight() as f64);
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

/// The worker's decoded-image cache: `Arc<DecodedImage>` values in a byte-weighted LRU.
///
/// Gauges: `mmcache_decoded_cache_entries`, `mmcache_decoded_cache_bytes`.
pub struct DecodedCache {
    inner: WeightedCache<Arc<DecodedImage>>,
}

impl std::fmt::Debug for DecodedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl DecodedCache {
    /// A cache holding at most `max_bytes` of weighed entries and, when given, at most
    /// `max_entries` entries (`Some(0)` turns it off, as `DYN_MM_IMAGE_CACHE_SIZE=0` does).
    pub fn new(max_bytes: u64, max_entries: Option<usize>) -> Self {
        let gauges = Gauges::new(
            "mmcache_decoded_cache_entries",
            "mmcache_decoded_cache_bytes",
        );
        Self {
            inner: WeightedCache::new(max_bytes, max_entries, gauges),
        }
    }

    /// The image cached for `identity`, marked most recently used.
    pub fn get(&self, identity: &CacheIdentity) -> Option<Arc<DecodedImage>> {
        self.inner.get(&identity_key(identity))
    }

    /// Caches `image` for `identity`, evicting least recently used entries as needed.
    pub fn insert(&self, identity: &CacheIdentity, image: Arc<DecodedImage>) {
        let weight = image.byte_len() as u64;
        self.inner.insert(identity_key(identity), image, weight);
    }

    /// Forgets `identity`.
    pub fn remove(&self, identity: &CacheIdentity) {
        self.inner.remove(&identity_key(identity));
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.inner.clear();
    }

    /// Entries and bytes held now.
    pub fn stats(&self) -> CacheStats {
        self.inner.stats()
    }
}

/// Something stored in the [`EmbeddingCache`]: it says how many bytes it holds.
pub trait Weighted {
    /// Heap and inline bytes of this value, used against the cache budget.
    fn weight_bytes(&self) -> u64;
}

impl<T> Weighted for Arc<[T]> {
    fn weight_bytes(&self) -> u64 {
        std::mem::size_of_val::<[T]>(self) as u64
    }
}

impl<T> Weighted for Arc<Vec<T>> {
    fn weight_bytes(&self) -> u64 {
        (self.capacity() * std::mem::size_of::<T>()) as u64
    }
}

/// A byte-weighted LRU of embeddings keyed by (image identity, model id). The identity carries
/// the scope digest in scoped mode, so the cache is partitioned by scope exactly like the
/// image cache; a load without a usable scope has no identity and does not reach it.
///
/// Gauges: `mmcache_embedding_cache_entries`, `mmcache_embedding_cache_bytes`.
pub struct EmbeddingCache<E> {
    inner: WeightedCache<E>,
}

impl<E> std::fmt::Debug for EmbeddingCache<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingCache").finish_non_exhaustive()
    }
}

impl<E: Weighted + Clone> EmbeddingCache<E> {
    /// A cache holding at most `max_bytes` of weighed entries.
    pub fn new(max_bytes: u64) -> Self {
        let gauges = Gauges::new(
            "mmcache_embedding_cache_entries",
            "mmcache_embedding_cache_bytes",
        );
        Self {
            inner: WeightedCache::new(max_bytes, None, gauges),
        }
    }

    fn key(identity: &CacheIdentity, model: &str) -> lru::Key {
        let mut h = blake3::Hasher::new();
        // Length-prefixed so ("ab", "c") and ("a", "bc") differ.
        h.update(&(identity.as_str().len() as u64).to_le_bytes());
        h.update(identity.as_str().as_bytes());
        h.update(model.as_bytes());
        *h.finalize().as_bytes()
    }

    /// The embedding of `identity` under `model`, marked most recently used.
    pub fn get(&self, identity: &CacheIdentity, model: &str) -> Option<E> {
        self.inner.get(&Self::key(identity, model))
    }

    /// Caches an embedding.
    pub fn insert(&self, identity: &CacheIdentity, model: &str, embedding: E) {
        let weight = embedding.weight_bytes();
        self.inner
            .insert(Self::key(identity, model), embedding, weight);
    }

    /// Entries and bytes held now.
    pub fn stats(&self) -> CacheStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmcache_scope::Scope;

    fn img(w: u32, h: u32) -> Arc<DecodedImage> {
        Arc::new(
            decode(
                &mmcache_test_support::images::png(w, h, 1),
                &DecodeLimits::default(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn decoded_cache_weighs_bytes_and_keeps_recency() {
        let one = img(10, 10); // 300 bytes + overhead
        let per = 300 + ENTRY_OVERHEAD_BYTES;
        let cache = DecodedCache::new(per * 3, None);
        let ids: Vec<_> = (0..4)
            .map(|i| CacheIdentity::unscoped(&format!("https://e.com/{i}")))
            .collect();
        for id in &ids[..3] {
            cache.insert(id, one.clone());
        }
        assert!(cache.get(&ids[0]).is_some()); // 0 most recent; 1 least
        cache.insert(&ids[3], one.clone());
        assert!(cache.get(&ids[1]).is_none());
        assert!(cache.get(&ids[0]).is_some() && cache.get(&ids[2]).is_some());
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 3,
                bytes: per * 3
            }
        );
    }

    #[test]
    fn entry_cap_zero_disables() {
        let cache = DecodedCache::new(1 << 30, Some(0));
        let id = CacheIdentity::unscoped("https://e.com/x");
        cache.insert(&id, img(2, 2));
        assert!(cache.get(&id).is_none());
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

    #[test]
    fn embedding_cache_keys_by_identity_and_model() {
        let cache: EmbeddingCache<Arc<[f32]>> = EmbeddingCache::new(64 + 2 * ENTRY_OVERHEAD_BYTES);
        let id = CacheIdentity::unscoped("https://e.com/x.png");
        let v: Arc<[f32]> = Arc::from(vec![1.0f32; 8]); // 32 bytes
        cache.insert(&id, "clip", v.clone());
        assert_eq!(cache.get(&id, "clip").as_deref(), Some(&v[..]));
        assert!(cache.get(&id, "siglip").is_none());
        let scoped = CacheIdentity::scoped(&Scope::new("s").unwrap(), "https://e.com/x.png");
        assert!(cache.get(&scoped, "clip").is_none());
        cache.insert(&id, "siglip", v.clone());
        cache.insert(&scoped, "clip", v.clone()); // third entry evicts the least recent
        assert_eq!(cache.stats().entries, 2);
        assert!(cache.get(&id, "clip").is_none());
    }
}

//! The decoded-image cache: images held once per content within a scope, each identity an
//! alias to its image.

use std::sync::Arc;

use mmcache_scope::{CacheIdentity, ContentKey};
use quick_cache::sync::Cache;

use crate::cache::{
    CacheStats, ENTRY_OVERHEAD_BYTES, Gauges, Key, Sizing, WeightedCache, identity_key,
};
use crate::image::DecodedImage;
use crate::layout::PixelLayout;
use crate::limits::DEFAULT_MAX_PIXELS;
use crate::profile::Variant;

/// Default byte budget of the decoded-image cache: 1 GiB (`MMCACHE_DECODED_CACHE_BYTES`).
pub const DEFAULT_DECODED_CACHE_BYTES: u64 = 1 << 30;

/// Decoded images: a typical 300 x 300 RGB image is 264 KiB; the largest is an image at the
/// default pixel limit in the widest layout (400 MB).
const DECODED_SIZING: Sizing = Sizing {
    typical_entry: 256 << 10,
    largest_entry: DEFAULT_MAX_PIXELS * PixelLayout::MAX_BYTES_PER_PIXEL as u64
        + ENTRY_OVERHEAD_BYTES,
};

/// The worker's decoded-image cache: `Arc<DecodedImage>` values, weighed in bytes.
///
/// Images are held once per content: by the content key of their encoded bytes within the
/// identity's scope (scoped identities of one scope share, unscoped identities share among
/// themselves, never across). Each identity is an alias to its image, so the same bytes under
/// two URLs are one `Arc` and are weighed once. The budget, entry cap and stats count images;
/// the aliases are a bounded index beside them (see [`DecodedCache::with_max_pixels`]).
///
/// Gauges: [`DECODED_CACHE_ENTRIES`](crate::metrics::DECODED_CACHE_ENTRIES),
/// [`DECODED_CACHE_BYTES`](crate::metrics::DECODED_CACHE_BYTES).
pub struct DecodedCache {
    inner: WeightedCache<Arc<DecodedImage>>,
    /// Identity key → content slot. An alias whose image was evicted is a miss (and is
    /// dropped when found); evicting an alias frees nothing but that key.
    aliases: Option<Cache<Key, Key>>,
    max_bytes: u64,
    /// What a mapped image's bytes are charged, per byte: this cache's budget over the host
    /// pixel tier's, at most 1 (see [`DecodedCache::with_host_budget`]).
    mapped_rate: f64,
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
            crate::metrics::DECODED_CACHE_ENTRIES.name,
            crate::metrics::DECODED_CACHE_BYTES.name,
        );
        let sizing = Sizing {
            largest_entry: max_pixels
                .saturating_mul(PixelLayout::MAX_BYTES_PER_PIXEL as u64)
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
            mapped_rate: 1.0,
            max_bytes,
        }
    }

    /// This cache, charging the images it maps from a host pixel tier of `host_bytes` (shared
    /// with the host's other processes, counted in that tier's budget) not their bytes but
    /// their share of that tier: bytes x this budget / `host_bytes` (never more than their
    /// bytes). Its own pixels are charged in full as always. So a process holds at most its
    /// budget of pixels of its own, or the host tier's whole size in mapped ones, or the same
    /// share of each: what it maps is not counted twice, and what it keeps mapped after the
    /// host tier evicted it stays bounded.
    pub fn with_host_budget(mut self, host_bytes: u64) -> Self {
        self.mapped_rate = (self.max_bytes as f64 / host_bytes.max(1) as f64).min(1.0);
        self
    }

    /// What `image` is charged (before the per-entry overhead).
    fn weight(&self, image: &DecodedImage) -> u64 {
        let mapped = (image.mapped_len() as f64 * self.mapped_rate).ceil() as u64;
        image.private_len() as u64 + mapped
    }

    /// The image cached for `identity`; a hit counts as a use, which protects it from eviction.
    pub fn get(&self, identity: &CacheIdentity) -> Option<Arc<DecodedImage>> {
        self.get_as(identity, Variant::DEFAULT)
    }

    /// The image cached for `identity` in the decode profile of `variant`
    /// ([`DecodeProfile::variant`](crate::DecodeProfile::variant)).
    pub fn get_as(&self, identity: &CacheIdentity, variant: Variant) -> Option<Arc<DecodedImage>> {
        let aliases = self.aliases.as_ref()?;
        let id = variant.apply(identity_key(identity));
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
        self.get_content_as(identity, content, Variant::DEFAULT)
    }

    /// [`DecodedCache::get_content`] in the decode profile of `variant`.
    pub fn get_content_as(
        &self,
        identity: &CacheIdentity,
        content: &ContentKey,
        variant: Variant,
    ) -> Option<Arc<DecodedImage>> {
        self.inner
            .get(&variant.apply(content_slot(identity, content)))
    }

    /// Caches `image` for `identity` (replacing what `identity` named), evicting entries as
    /// needed, and returns the image now held for it: an image of the same content already
    /// cached in the scope is kept and shared, and returned instead of `image`. An image too
    /// heavy for the budget is not stored, and `identity` then names nothing.
    pub fn insert(&self, identity: &CacheIdentity, image: Arc<DecodedImage>) -> Arc<DecodedImage> {
        self.insert_as(identity, Variant::DEFAULT, image)
    }

    /// [`DecodedCache::insert`] in the decode profile of `variant`. An image weighs its
    /// pixels, kept encoded bytes and metadata ([`DecodedImage::memory_len`]).
    pub fn insert_as(
        &self,
        identity: &CacheIdentity,
        variant: Variant,
        image: Arc<DecodedImage>,
    ) -> Arc<DecodedImage> {
        let Some(aliases) = &self.aliases else {
            return image;
        };
        let id = variant.apply(identity_key(identity));
        let slot = variant.apply(content_slot(identity, &image.content_key()));
        if let Some(old) = aliases.get(&id).filter(|old| *old != slot) {
            self.inner.remove(&old); // what `identity` named before goes, as without sharing
        }
        // Insert-if-absent: of racing inserts of one content, all get the first copy.
        let weight = self.weight(&image);
        let Some(held) = self.inner.insert_if_absent(slot, image.clone(), weight) else {
            aliases.remove(&id); // too heavy: not stored
            return image;
        };
        aliases.insert(id, slot);
        held
    }

    /// Swaps `own`, an image a load decoded into this process's memory and inserted for
    /// `identity`, for `mapped`, the same image mapped from the host pixel tier once it was
    /// written there: every identity that named `own` then names `mapped`, and `own`'s pixels
    /// are freed when the last caller drops them. Only where the cache still holds `own` itself:
    /// an image evicted, removed or replaced since stays so. Whether `mapped` is held now.
    pub fn adopt_mapped_as(
        &self,
        identity: &CacheIdentity,
        variant: Variant,
        own: &Arc<DecodedImage>,
        mapped: Arc<DecodedImage>,
    ) -> bool {
        if self.aliases.is_none() || own.content_key() != mapped.content_key() {
            return false;
        }
        let slot = variant.apply(content_slot(identity, &mapped.content_key()));
        let weight = self.weight(&mapped);
        self.inner
            .replace_if(slot, |held| Arc::ptr_eq(held, own), mapped, weight)
    }

    /// Forgets `identity` and its image (so its memory is freed); other identities of the same
    /// content then miss and load it again.
    pub fn remove(&self, identity: &CacheIdentity) {
        self.remove_as(identity, Variant::DEFAULT);
    }

    /// [`DecodedCache::remove`] in the decode profile of `variant`.
    pub fn remove_as(&self, identity: &CacheIdentity, variant: Variant) {
        if let Some((_, slot)) = self
            .aliases
            .as_ref()
            .and_then(|a| a.remove(&variant.apply(identity_key(identity))))
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
#[path = "decoded_cache_tests.rs"]
mod tests;

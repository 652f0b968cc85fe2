//! The memory step: the decoded cache's lookup, counted as a memory hit, and the insert of
//! the image a load task filled.

use std::sync::Arc;

use ::metrics::Counter;
use mmcache_decode::{DecodedCache, DecodedImage, Variant};
use mmcache_scope::CacheIdentity;

use crate::loaded::Source;
use crate::metrics;

/// The process's decoded-image cache.
pub(crate) struct MemoryStep {
    /// Shared with the decode step, which looks up content there.
    cache: Arc<DecodedCache>,
    /// [`metrics::LOADS`] of source `memory`, outcome `ok`.
    hits: Counter,
}

impl MemoryStep {
    pub(crate) fn new(cache: Arc<DecodedCache>) -> Self {
        Self {
            cache,
            hits: ::metrics::counter!(metrics::LOADS.name, "source" => Source::Memory.as_str(), "outcome" => metrics::Outcome::Ok.as_str()),
        }
    }

    pub(crate) fn cache(&self) -> &DecodedCache {
        &self.cache
    }

    /// The image of `identity` in the profile of `variant`, counted as a memory hit.
    pub(super) fn get(
        &self,
        identity: &CacheIdentity,
        variant: Variant,
    ) -> Option<Arc<DecodedImage>> {
        let image = self.cache.get_as(identity, variant)?;
        self.hits.increment(1);
        Some(image)
    }

    /// Keeps a load's image (not bytes handed back as refused). Returns the image to hand
    /// out: the cache may already hold this content (a concurrent load of another URL), and
    /// every waiter gets the one copy it keeps.
    pub(super) fn insert(
        &self,
        identity: &CacheIdentity,
        variant: Variant,
        image: Arc<DecodedImage>,
    ) -> Arc<DecodedImage> {
        if !super::keepable(&image) {
            return image;
        }
        self.cache.insert_as(identity, variant, image)
    }
}

//! Content dedup on the load path: bytes whose content key is already decoded in the load's
//! scope (under another URL) are not decoded again; the load shares the image.
//!
//! The identity a load task fills is set for the task (a task-local), so every tier's bytes
//! (disk, shared, origin) are checked in `Tiers::decode` without threading it
//! through each call. Work outside a load task (data URLs, loads bypassing the caches) sees
//! no identity and never shares.

use std::future::Future;
use std::sync::Arc;

use mmcache_decode::DecodedImage;
use mmcache_scope::{CacheIdentity, ContentKey};

use super::Tiers;

tokio::task_local! {
    /// The identity the current load task fills.
    static FILLING: CacheIdentity;
}

/// Runs `fill` as the load of `identity`: its decodes may share images of its scope.
pub(super) async fn filling<F: Future>(identity: CacheIdentity, fill: F) -> F::Output {
    FILLING.scope(identity, fill).await
}

impl Tiers {
    /// The image decoded from bytes of `content` within this load's scope, if one is cached.
    pub(super) fn shared_content(&self, content: &ContentKey) -> Option<Arc<DecodedImage>> {
        let image = FILLING
            .try_with(|identity| self.decoded.get_content(identity, content))
            .ok()
            .flatten()?;
        self.metrics.content_shared.increment(1);
        Some(image)
    }
}

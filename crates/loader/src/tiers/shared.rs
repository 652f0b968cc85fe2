//! The shared step: decode a value the shared cache gave (a value that is not an image is
//! deleted), and store what the origin gave (only bytes that decoded), in both cache tiers.

use std::time::Duration;

use bytes::Bytes;
use mmcache_origin::Admitted;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{SharedCache, WriteOutcome};

use super::Tiers;
use super::origin::FromOrigin;
use crate::error::{Error, Result};
use crate::loaded::{Loaded, Outcome, Source};

impl Tiers {
    /// Decodes a cached value. Bytes that are not a valid image are deleted (`Ok(None)`: the
    /// load goes to the origin). A limit of this worker's own (pixels, decode budget) is the
    /// load's error: the entry may serve workers with other limits, so it stays.
    pub(super) async fn decode_cached(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        bytes: Bytes,
    ) -> Result<Option<Loaded>> {
        let len = bytes.len();
        match self.decode(bytes.clone()).await {
            Ok(image) => {
                // A shared hit fills the host's tier too.
                self.write_disk(identity, self.disk_copy(&bytes));
                Ok(Some(Loaded::decoded(image, Source::Shared, len)))
            }
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                self.metrics.corrupt.increment(1);
                tracing::debug!(error = %e, "shared cache value did not decode; deleting it");
                shared.delete(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Origin, decode, then SET (or queue it, with write-behind) only the bytes that decoded.
    pub(super) async fn fill_from_origin(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
    ) -> Outcome {
        let fetched = self.fetch_and_decode_bytes(url).await?;
        self.stored(shared, identity, fetched).await
    }

    /// Writes what the origin gave (only bytes that decoded reach here). With hedging on, the
    /// load waits for its SET at most the hedge budget; the write then goes on in the
    /// background, bounded by the I/O timeout and the write-behind queue's limits.
    pub(super) async fn stored(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        fetched: FromOrigin,
    ) -> Outcome {
        self.stored_with(shared, identity, fetched).await.0
    }

    /// [`Tiers::stored`], also saying how the SET ended (`Pending`: still on its way).
    pub(super) async fn stored_with(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        FromOrigin {
            image,
            bytes,
            shareable,
            hedged,
        }: FromOrigin,
    ) -> (Outcome, WriteOutcome) {
        let len = bytes.len();
        if !shareable {
            return (
                Ok(Loaded::decoded(image, Source::Origin, len)),
                WriteOutcome::Skipped,
            );
        }
        // The writes hold a copy under the write memory, not this load's download reservation
        // (released when the load is done with its bytes); no room: neither write is made.
        let copy = self.write_memory.copy(&bytes);
        drop(bytes);
        self.write_disk(identity, copy.clone());
        let Some(bytes) = copy else {
            return (
                Ok(Loaded::decoded(image, Source::Origin, len)),
                WriteOutcome::Skipped,
            );
        };
        let wrote = if self.hedge.enabled() {
            shared
                .store_within(
                    identity,
                    bytes,
                    if hedged {
                        Duration::ZERO
                    } else {
                        self.hedge.set_wait()
                    },
                )
                .await
        } else {
            shared.store(identity, bytes).await
        };
        (Ok(Loaded::decoded(image, Source::Origin, len)), wrote)
    }
}

//! The shared step: the fleet's cache of encoded bytes. A look is the hedged GET (`race`:
//! the origin fetch starts beside a GET that is late) and, on a miss, the stampede lease
//! (`lease`); its values are decoded (a value that is not an image is deleted); what the
//! origin gave is stored with a SET. The origin fetch and the decode are the caller's,
//! handed in as closures.

mod lease;
mod race;

use std::sync::Arc;
use std::time::Duration;

use ::metrics::Counter;
use bytes::Bytes;
use mmcache_decode::DecodedImage;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{GetOutcome, SharedCache, WriteOutcome};

use super::{Decode, Fetch};
use crate::config::{LeaseConfig, SharedCacheConfig};
use crate::error::{Error, Result};
use crate::hedge::Hedge;
use crate::metrics::{self, PerLabel};
use race::Raced;

pub(super) use lease::Lease;

/// The shared cache, its hedge and its lease.
pub(crate) struct SharedStep {
    cache: SharedCache,
    hedge: Arc<Hedge>,
    lease: LeaseConfig,
    /// SETs are queued (write-behind): a SET that succeeded is queued, not yet written.
    write_behind: bool,
    /// [`metrics::LEASES`] by outcome.
    leases: PerLabel<Counter>,
    /// [`metrics::SHARED_CORRUPT`].
    corrupt: Counter,
    /// [`metrics::SHARED_OVERSIZED`].
    oversized: Counter,
}

/// A value of the shared cache that decoded.
pub(super) struct Hit {
    pub(super) image: Arc<DecodedImage>,
    pub(super) bytes: Bytes,
}

/// What a look in the shared cache gave a load.
pub(super) enum Got<T> {
    Hit(Hit),
    /// The origin's answer (`T`, or its error), fetched beside a GET late at the hedge delay
    /// or instead of one whose node is routed around: its SET goes to the background at once
    /// instead of waiting on that node too.
    Origin(Result<T>),
    /// Nothing usable (a miss, the lease's wait in vain, a failure, a value over the download
    /// cap or not an image): the origin decides.
    Miss,
}

impl SharedStep {
    pub(crate) fn new(cache: SharedCache, hedge: &Arc<Hedge>, config: &SharedCacheConfig) -> Self {
        Self {
            cache,
            hedge: hedge.clone(),
            lease: config.lease,
            write_behind: config.write_behind.enabled,
            leases: PerLabel::new(
                metrics::LeaseOutcome::ALL,
                |o: metrics::LeaseOutcome| ::metrics::counter!(metrics::LEASES.name, "outcome" => o.as_str()),
            ),
            corrupt: ::metrics::counter!(metrics::SHARED_CORRUPT.name),
            oversized: ::metrics::counter!(metrics::SHARED_OVERSIZED.name),
        }
    }

    pub(crate) fn cache(&self) -> &SharedCache {
        &self.cache
    }

    /// The hedged GET of `identity` (`origin` starts the fetch beside it when it is late),
    /// then, on a miss with the lease on, the lease. Also the lease when this load holds it:
    /// [`SharedStep::release`] it once the entry is written.
    pub(super) async fn look<T>(
        &self,
        identity: &CacheIdentity,
        origin: impl Fetch<T>,
        decode: impl Decode,
    ) -> Result<(Got<T>, Option<Lease>)> {
        let raced = self.get_or_hedge(identity, origin, decode).await;
        match &raced {
            Raced::Cache(None, GetOutcome::Oversized) => {
                // Larger than this worker may download, so larger than it may hold. Another
                // worker with a larger cap may have written it legitimately: leave it, and let
                // the origin (same cap) decide.
                self.oversized.increment(1);
                tracing::debug!("shared cache value over the download cap; not read");
            }
            Raced::Cache(None, GetOutcome::Miss) if self.lease.enabled => {
                return self.lease(identity, origin, decode).await;
            }
            _ => {}
        }
        Ok((self.got(identity, raced, decode).await?, None))
    }

    /// What a hedged GET gave: a value it read is decoded here.
    async fn got<T>(
        &self,
        identity: &CacheIdentity,
        raced: Raced<T>,
        decode: impl Decode,
    ) -> Result<Got<T>> {
        Ok(match raced {
            Raced::Cache(Some(bytes), _) => self
                .hit(identity, bytes, decode)
                .await?
                .map_or(Got::Miss, Got::Hit),
            Raced::Cache(None, _) => Got::Miss,
            Raced::Hit(hit) => Got::Hit(hit),
            Raced::Origin(fetched) => Got::Origin(fetched),
        })
    }

    /// Decodes a cached value. Bytes that are not a valid image are deleted (`Ok(None)`: the
    /// load goes to the origin). A limit of this worker's own (pixels, decode budget) is the
    /// load's error: the entry may serve workers with other limits, so it stays.
    async fn hit(
        &self,
        identity: &CacheIdentity,
        bytes: Bytes,
        decode: impl Decode,
    ) -> Result<Option<Hit>> {
        match decode.decode(bytes.clone()).await {
            Ok(image) => Ok(Some(Hit { image, bytes })),
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                self.corrupt.increment(1);
                tracing::debug!(error = %e, "shared cache value did not decode; deleting it");
                self.cache.delete(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// SETs bytes that decoded (or queues them, with write-behind). With hedging on, the load
    /// waits for its SET at most the hedge budget (`hedged`: not at all, its node is slow);
    /// the write then goes on in the background, bounded by the I/O timeout and the
    /// write-behind queue's limits.
    pub(super) async fn store(
        &self,
        identity: &CacheIdentity,
        bytes: Bytes,
        hedged: bool,
    ) -> WriteOutcome {
        if !self.hedge.enabled() {
            return self.cache.store(identity, bytes).await;
        }
        let wait = if hedged {
            Duration::ZERO
        } else {
            self.hedge.set_wait()
        };
        self.cache.store_within(identity, bytes, wait).await
    }
}

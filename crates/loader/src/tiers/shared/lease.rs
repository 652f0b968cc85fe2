//! The stampede lease on a shared miss: one worker of the fleet fills the entry, the others
//! poll for it.

use std::time::{Duration, Instant};

use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{GetOutcome, LeaseOutcome, WriteOutcome};

use super::{Got, SharedStep};
use crate::error::Result;
use crate::metrics::LeaseOutcome as LeaseLabel;
use crate::tiers::{Decode, Fetch};

/// A lease this load holds: it fills the entry, then gives the lease back
/// ([`SharedStep::release`]). Dropped (the load deadline), it is left to expire.
pub(in crate::tiers) struct Lease(u64);

impl SharedStep {
    /// On a miss, one worker of the fleet takes the lease and fills the entry; the others poll
    /// for it with backoff, bounded by the lease wait, then fetch from the origin themselves.
    /// A waiter that finds the lease released or expired (its holder failed or died) takes it
    /// over at once. Any lease failure falls back to the origin.
    pub(super) async fn lease<T>(
        &self,
        identity: &CacheIdentity,
        origin: impl Fetch<T>,
        decode: impl Decode,
    ) -> Result<(Got<T>, Option<Lease>)> {
        let deadline = Instant::now() + self.lease.wait;
        let mut pause = Duration::from_millis(5);
        let mut waited = false;
        loop {
            match self.cache.try_lease(identity, self.lease.ttl).await {
                LeaseOutcome::Won(token) => {
                    self.record_lease(if waited {
                        LeaseLabel::TookOver
                    } else {
                        LeaseLabel::Won
                    });
                    return self.hold(identity, Lease(token), origin, decode).await;
                }
                LeaseOutcome::Held => {}
                _ => {
                    self.record_lease(LeaseLabel::Error);
                    return Ok((Got::Miss, None));
                }
            }
            // Held by another worker: wait a little, then look for its entry.
            if Instant::now() + pause >= deadline {
                self.record_lease(LeaseLabel::WaitedTimeout);
                return Ok((Got::Miss, None));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            waited = true;
            let (cached, outcome) = self.cache.get_with_outcome(identity).await;
            if let Some(bytes) = cached {
                let Some(hit) = self.hit(identity, bytes, decode).await? else {
                    return Ok((Got::Miss, None));
                };
                self.record_lease(LeaseLabel::WaitedHit);
                return Ok((Got::Hit(hit), None));
            }
            if outcome != GetOutcome::Miss {
                return Ok((Got::Miss, None)); // the cache failed
            }
            // Still a miss: try the lease again (taken over if its holder let it go).
        }
    }

    /// The lease holder looks once more (the previous holder may have filled the entry and
    /// released the lease between our GET and our lease); the load then fills the entry and
    /// releases the lease.
    async fn hold<T>(
        &self,
        identity: &CacheIdentity,
        lease: Lease,
        origin: impl Fetch<T>,
        decode: impl Decode,
    ) -> Result<(Got<T>, Option<Lease>)> {
        let raced = self.get_or_hedge(identity, origin, decode).await;
        match self.got(identity, raced, decode).await {
            Ok(got) => Ok((got, Some(lease))),
            Err(e) => {
                self.release(identity, lease, WriteOutcome::Skipped).await;
                Err(e)
            }
        }
    }

    /// Gives the lease back once the load is done, so after a hit, a completed SET or a
    /// failure (`wrote`: how its SET ended, `Skipped` for none) the waiters look again at once
    /// instead of sleeping out the lease. An entry still on its way (write-behind, or a SET
    /// left to the background) keeps the lease (it expires), so waiters poll for the entry
    /// instead of taking over and fetching again.
    pub(in crate::tiers) async fn release(
        &self,
        identity: &CacheIdentity,
        Lease(token): Lease,
        wrote: WriteOutcome,
    ) {
        let pending = match wrote {
            WriteOutcome::Pending => true,
            WriteOutcome::Success => self.write_behind,
            _ => false,
        };
        if !pending {
            self.cache.release_lease(identity, token).await;
        }
    }

    fn record_lease(&self, outcome: LeaseLabel) {
        self.leases.get(outcome as usize).increment(1);
    }
}

//! The stampede lease on a shared miss: one worker of the fleet fills the entry, the others
//! poll for it.

use std::time::{Duration, Instant};

use mmcache_origin::Admitted;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{GetOutcome, LeaseOutcome, SharedCache, WriteOutcome};

use super::Tiers;
use super::race::Raced;
use crate::loaded::Outcome;
use crate::metrics::LeaseOutcome as LeaseLabel;

impl Tiers {
    /// On a miss, one worker of the fleet takes the lease and fills the entry; the others poll
    /// for it with backoff, bounded by the lease wait, then fetch from the origin themselves.
    /// A waiter that finds the lease released or expired (its holder failed or died) takes it
    /// over at once. Any lease failure falls back to the origin.
    pub(super) async fn fill_with_lease(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
    ) -> Outcome {
        let lease = self.config.shared.lease;
        let deadline = Instant::now() + lease.wait;
        let mut pause = Duration::from_millis(5);
        let mut waited = false;
        loop {
            match shared.try_lease(identity, lease.ttl).await {
                LeaseOutcome::Won(token) => {
                    self.record_lease(if waited {
                        LeaseLabel::TookOver
                    } else {
                        LeaseLabel::Won
                    });
                    return self
                        .fill_as_lease_holder(shared, identity, url, token)
                        .await;
                }
                LeaseOutcome::Held => {}
                _ => {
                    self.record_lease(LeaseLabel::Error);
                    return self.fill_from_origin(shared, identity, url).await;
                }
            }
            // Held by another worker: wait a little, then look for its entry.
            if Instant::now() + pause >= deadline {
                self.record_lease(LeaseLabel::WaitedTimeout);
                return self.fill_from_origin(shared, identity, url).await;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            waited = true;
            let (cached, outcome) = shared.get_with_outcome(identity).await;
            if let Some(bytes) = cached {
                if let Some(hit) = self.decode_cached(shared, identity, bytes).await? {
                    self.record_lease(LeaseLabel::WaitedHit);
                    return Ok(hit);
                }
                return self.fill_from_origin(shared, identity, url).await;
            }
            if outcome != GetOutcome::Miss {
                return self.fill_from_origin(shared, identity, url).await; // the cache failed
            }
            // Still a miss: try the lease again (taken over if its holder let it go).
        }
    }

    /// The lease holder: looks once more (the previous holder may have filled the entry and
    /// released the lease between our GET and our lease), fills from the origin, and releases
    /// the lease, so after a failure the waiters take over at once instead of sleeping out
    /// the lease.
    async fn fill_as_lease_holder(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
        token: u64,
    ) -> Outcome {
        let (result, wrote) = async {
            let fetched = match self.get_or_hedge(shared, identity, url).await {
                Raced::Hit(hit) => return (Ok(hit), None),
                Raced::Origin(fetched) => fetched,
                Raced::Cache(Some(bytes), _) => {
                    match self.decode_cached(shared, identity, bytes).await {
                        Ok(Some(hit)) => return (Ok(hit), None),
                        Err(e) => return (Err(e), None),
                        Ok(None) => self.fetch_and_decode_bytes(url).await,
                    }
                }
                Raced::Cache(None, _) => self.fetch_and_decode_bytes(url).await,
            };
            match fetched {
                Ok(fetched) => {
                    let (outcome, wrote) = self.stored_with(shared, identity, fetched).await;
                    (outcome, Some(wrote))
                }
                Err(e) => (Err(e), None),
            }
        }
        .await;
        // The entry is still on its way (write-behind, or a SET left to the background): keep
        // the lease (it expires) so waiters poll for the entry instead of taking over and
        // fetching again. Otherwise release it: after a hit, a completed SET, or a failure,
        // waiters look again at once.
        let pending = match wrote {
            Some(WriteOutcome::Pending) => true,
            Some(WriteOutcome::Success) => self.config.shared.write_behind.enabled,
            _ => false,
        };
        if !pending {
            shared.release_lease(identity, token).await;
        }
        result
    }

    fn record_lease(&self, outcome: LeaseLabel) {
        self.metrics.lease(outcome).increment(1);
    }
}

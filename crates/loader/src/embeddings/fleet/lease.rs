//! The lease of a key: one compute per key per fleet.
//!
//! - On a shared miss a process takes the key's lease and computes. It renews the lease while
//!   the compute and the writes run (every third of the TTL), so waiters wait for a live
//!   holder however long its compute takes, and take over only from a dead one, whose lease
//!   lapses within a TTL.
//! - A holder whose value will not be stored (it cannot be encoded, is over the cap, found no
//!   room in the write bounds, or its write failed) replaces its lease with a marker for one
//!   TTL: its waiters, and processes that miss meanwhile, compute at once instead of waiting
//!   for it one after another.
//! - The others poll the shared cache for the value (5 ms, doubling to 100 ms) and, each
//!   poll, try the lease again, for at most as long as a live holder may hold it.

use std::time::{Duration, Instant};

use mmcache_scope::EmbeddingKey;
use mmcache_shared_cache::{LeaseHolder, LeaseOutcome, SharedCache};

use super::read::Found;
use super::{Before, Fleet, Held, lease_key};
use crate::embeddings::EmbeddingSource;
use crate::metrics::embeddings::{LeaseOutcome as LeaseLabel, LeaseWait};

/// Longest pause between two polls of a lease waiter.
const MAX_POLL: Duration = Duration::from_millis(100);
/// Renewals per lease TTL.
const RENEWALS_PER_TTL: u32 = 3;
/// Shortest pause between two renewals, unless half the TTL is shorter still (a renewal must
/// come before the lease lapses); 1 ms at the least (no busy loop).
const MIN_RENEWAL_PERIOD: Duration = Duration::from_millis(10);

/// A lease this process holds, renewed in a task of its own until it is given back (or this
/// is dropped: a holder that dies stops renewing, and its lease lapses).
pub(crate) struct HeldLease {
    shared: SharedCache,
    key: String,
    token: u64,
    ttl: Duration,
    renewal: tokio::task::JoinHandle<()>,
}

impl HeldLease {
    fn start(shared: &SharedCache, key: String, token: u64, ttl: Duration) -> Self {
        let (s, k) = (shared.clone(), key.clone());
        let renewal = tokio::spawn(async move {
            // On a fixed cadence, each renewal bounded by the period: one slow answer must not
            // push the next renewal past the lease's expiry (after a renewal that timed out,
            // the next one starts at once). After a stall (a starved runtime) it is one
            // renewal, not a burst of the missed ones; a tiny TTL makes no busy loop, and a
            // TTL under 20 ms is still renewed before it lapses.
            let period = (ttl / RENEWALS_PER_TTL)
                .max(MIN_RENEWAL_PERIOD)
                .min(ttl / 2)
                .max(Duration::from_millis(1));
            let mut next = tokio::time::Instant::now();
            loop {
                next = (next + period).max(tokio::time::Instant::now());
                tokio::time::sleep_until(next).await;
                let renewed = tokio::time::timeout(period, s.renew_lease_key(&k, token, ttl));
                // Someone else's, or lapsed: nothing left to renew. No answer: try again.
                if renewed.await.ok().flatten() == Some(false) {
                    return;
                }
            }
        });
        Self {
            shared: shared.clone(),
            key,
            token,
            ttl,
            renewal,
        }
    }

    /// Gives the lease back (the value is stored, or the compute failed: the next caller
    /// takes it and computes).
    pub(super) async fn release(self) {
        self.renewal.abort();
        self.shared.release_lease_key(&self.key, self.token).await;
    }

    /// The value will not be stored: the lease becomes the marker that stops the waiters.
    pub(super) async fn abandon(self) {
        self.renewal.abort();
        self.shared
            .abandon_lease_key(&self.key, self.token, self.ttl)
            .await;
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

impl Fleet {
    /// Takes the lease of `key` and computes, or waits for its holder's value.
    pub(super) async fn lease_or_wait(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
        ttl: Duration,
        mut held: Held,
    ) -> Before {
        let lease = lease_key(key);
        match shared.try_lease_key(&lease, ttl).await {
            LeaseOutcome::Won(token) => {
                self.m.lease(LeaseLabel::Won);
                held.lease = Some(HeldLease::start(shared, lease, token, ttl));
                return Before::Compute(held);
            }
            LeaseOutcome::Held => self.m.lease(LeaseLabel::Held),
            _ => {
                self.m.lease(LeaseLabel::Unavailable);
                return Before::Compute(held);
            }
        }
        let limit = Instant::now() + self.wait_limit;
        let mut pause = Duration::from_millis(5);
        loop {
            if shared.lease_holder(&lease).await == LeaseHolder::NotStored {
                self.m.lease_wait(LeaseWait::NotStored);
                return Before::Compute(held);
            }
            if Instant::now() >= limit {
                self.m.lease_wait(LeaseWait::TimedOut);
                return Before::Compute(held);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
            match self.read_shared(shared, key, model).await {
                Found::Hit(e, value) => {
                    self.m.lease_wait(LeaseWait::Hit);
                    self.shared_hit_to_disk(key, value, &mut held);
                    return Before::Hit(e, EmbeddingSource::Shared);
                }
                // Stored in a form this reader cannot use: not stored for it.
                Found::Kept => {
                    self.m.lease_wait(LeaseWait::NotStored);
                    held.keep_shared = true;
                    return Before::Compute(held);
                }
                Found::Miss => {}
            }
            match shared.try_lease_key(&lease, ttl).await {
                // The holder died (its lease lapsed) or gave up without a value.
                LeaseOutcome::Won(token) => {
                    self.m.lease_wait(LeaseWait::TookOver);
                    held.lease = Some(HeldLease::start(shared, lease, token, ttl));
                    return Before::Compute(held);
                }
                LeaseOutcome::Held => {}
                _ => {
                    self.m.lease_wait(LeaseWait::Unavailable);
                    return Before::Compute(held);
                }
            }
        }
    }
}

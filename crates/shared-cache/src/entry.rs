//! The image entries: the keys of an identity, GET, SET (awaited, queued or bounded by a
//! wait), DEL, and the breaker state of an entry's node.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;

use crate::breaker::BreakerState;
use crate::client::SharedCache;
use crate::commands;
use crate::conn::Failure;
use crate::metrics::{GetOutcome, Op, SkipReason, WriteOutcome};
use crate::read::Read;
use crate::stats::bump;

/// The Redis key of an identity: `dynamo:mm:image:{<sha256hex(identity)>}:bytes`. The whole
/// digest is the hash tag, so related keys of one entry share its slot.
pub fn entry_key(identity: &CacheIdentity) -> String {
    format!("dynamo:mm:image:{{{}}}:bytes", identity.sha256_hex())
}

/// The stampede-lease key of an identity: `dynamo:mm:image:{<sha256hex(identity)>}:lease`,
/// in the same slot as the entry.
pub fn lease_key(identity: &CacheIdentity) -> String {
    format!("dynamo:mm:image:{{{}}}:lease", identity.sha256_hex())
}

impl SharedCache {
    /// The entry for `identity`, or `None` on a miss or any failure.
    pub async fn get(&self, identity: &CacheIdentity) -> Option<Bytes> {
        self.get_with_outcome(identity).await.0
    }

    /// Like [`SharedCache::get`], also saying how it ended.
    pub async fn get_with_outcome(&self, identity: &CacheIdentity) -> (Option<Bytes>, GetOutcome) {
        let key = entry_key(identity);
        let started = Instant::now();
        // The length and a first step in one round trip, within the read memory (`read`); a
        // hostile or foreign value costs at most the cap.
        let result = self
            .read_value(Op::Get, &key, self.inner.config.max_read_bytes)
            .await;
        let (value, outcome) = match result {
            Ok(Read::Miss) => (None, GetOutcome::Miss),
            Ok(Read::Oversized) => (None, GetOutcome::Oversized),
            Ok(Read::Value(v)) => (Some(v), GetOutcome::Hit),
            Ok(Read::NoMemory) => {
                self.inner
                    .metrics
                    .record_skip(Op::Get, SkipReason::NoMemory);
                (None, GetOutcome::NoMemory)
            }
            Err(Failure::Skipped) => (None, GetOutcome::Skipped),
            Err(Failure::Failed(_)) => (None, GetOutcome::Error),
        };
        self.inner
            .metrics
            .record_get(outcome, value.as_ref().map(Bytes::len), started.elapsed());
        (value, outcome)
    }

    /// Whether a value of `len` bytes is over the write cap: then its write is skipped and
    /// counted (`reason="too_large"`), whichever way it was to be written.
    fn skips_too_large(&self, len: usize) -> bool {
        let over = len > self.inner.config.max_value_bytes;
        if over {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::TooLarge);
        }
        over
    }

    /// Stores `bytes` for `identity` with the configured TTL (`SET key bytes EX ttl`).
    /// Values over [`SharedCacheConfig::max_value_bytes`](crate::SharedCacheConfig::max_value_bytes) are skipped.
    pub async fn set(&self, identity: &CacheIdentity, bytes: Bytes) -> WriteOutcome {
        let len = bytes.len();
        if self.skips_too_large(len) {
            return WriteOutcome::Skipped;
        }
        let key = entry_key(identity);
        let ttl = self.inner.ttl_secs;
        let started = Instant::now();
        let result = self
            .run(Op::Set, commands::SET, &key, |mut conn, key| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(&bytes[..])
                    .arg("EX")
                    .arg(ttl)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await;
        let outcome = match result {
            Ok(()) => WriteOutcome::Success,
            Err(Failure::Skipped) => WriteOutcome::Skipped,
            Err(Failure::Failed(_)) => WriteOutcome::Error,
        };
        self.inner
            .metrics
            .record_set(outcome, len, started.elapsed());
        outcome
    }

    /// Stores `bytes` like [`SharedCache::set`], through the write-behind queue when it is
    /// enabled: returns at once; a full queue drops the write ([`WriteOutcome::Skipped`],
    /// counted in `mmcache_shared_cache_skipped_total{op="set",reason="queue_full"}`).
    pub async fn store(&self, identity: &CacheIdentity, bytes: Bytes) -> WriteOutcome {
        if !self.inner.config.write_behind.enabled {
            return self.set(identity, bytes).await;
        }
        let len = bytes.len();
        if self.skips_too_large(len) {
            return WriteOutcome::Skipped;
        }
        let (cache, identity) = (self.clone(), identity.clone());
        let write = async move {
            cache.set(&identity, bytes).await;
        };
        if self.inner.queue.push(len, write) {
            WriteOutcome::Success
        } else {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::QueueFull);
            WriteOutcome::Skipped
        }
    }

    /// Stores `bytes` like [`SharedCache::set`], waiting for the write at most `wait`: a write
    /// still running then goes on in the background, bounded by the I/O timeout and by the
    /// write-behind queue's limits (a full queue drops it, as [`SharedCache::store`] does).
    /// With write-behind enabled it returns at once, like [`SharedCache::store`].
    pub async fn store_within(
        &self,
        identity: &CacheIdentity,
        bytes: Bytes,
        wait: Duration,
    ) -> WriteOutcome {
        if self.inner.config.write_behind.enabled {
            return self.store(identity, bytes).await;
        }
        if bytes.len() > self.inner.config.max_value_bytes {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::TooLarge);
            return WriteOutcome::Skipped;
        }
        let Some(room) = self.inner.queue.reserve(bytes.len()) else {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::QueueFull);
            return WriteOutcome::Skipped;
        };
        // The SET runs here, in the load's task (no hop in the common case); if the wait
        // ends first, the same future moves to a task of its own and finishes there.
        let (cache, identity) = (self.clone(), identity.clone());
        let mut write = Box::pin(async move {
            let outcome = cache.set(&identity, bytes).await;
            drop(room);
            outcome
        });
        match tokio::time::timeout(wait, &mut write).await {
            Ok(outcome) => outcome,
            Err(_) => {
                tokio::spawn(write);
                bump(&self.inner.counters.set_backgrounded);
                WriteOutcome::Pending
            }
        }
    }

    /// Deletes the entry for `identity` (used when a cached value fails to decode).
    pub async fn delete(&self, identity: &CacheIdentity) -> WriteOutcome {
        let key = entry_key(identity);
        let result = self
            .run(Op::Del, commands::DEL, &key, |mut conn, key| async move {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await;
        let outcome = match result {
            Ok(_) => WriteOutcome::Success,
            Err(Failure::Skipped) => WriteOutcome::Skipped,
            Err(Failure::Failed(_)) => WriteOutcome::Error,
        };
        self.inner.metrics.record_delete(outcome);
        outcome
    }

    /// The node serving `identity`'s key (`host:port` from the cluster's slot map), or `None`
    /// while the map does not know it (before it is first read). Cheap: a slot computation
    /// and a shared string.
    pub fn node_of(&self, identity: &CacheIdentity) -> Option<std::sync::Arc<str>> {
        self.inner.slots.known_node_for(&entry_key(identity))
    }

    /// The masters of the cluster's slot map as last read (0 until it is first read).
    pub fn masters(&self) -> usize {
        self.inner.slots.masters()
    }

    /// The breaker state of the node serving `identity`'s key (for tests and dashboards).
    pub fn breaker_state(&self, identity: &CacheIdentity) -> BreakerState {
        let node = self.inner.slots.node_for(&entry_key(identity));
        self.inner.breakers.state(&node)
    }
}

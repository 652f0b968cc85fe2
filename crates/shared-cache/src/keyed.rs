//! Operations on keys of the caller's own (embeddings), beside the image entries: the same
//! connections, deadlines and per-node breakers, but none of the image metrics or counters
//! (the caller counts its own). The caller owns the key space and checks the values.

use std::time::Duration;

use bytes::Bytes;

use crate::conn::Failure;
use crate::metrics::Op;
use crate::read::Read;
use crate::{GetOutcome, LeaseOutcome, SharedCache, WriteOutcome, lease_token};

impl SharedCache {
    /// The value of `key`, read like an image entry (within the read memory; a hostile value
    /// costs at most `max` bytes): [`GetOutcome::Oversized`] when longer than `max`, a miss
    /// when absent or empty, `None` on any failure (an open breaker: [`GetOutcome::Skipped`];
    /// no room in the read memory: [`GetOutcome::NoMemory`]).
    pub async fn get_key(&self, key: &str, max: usize) -> (Option<Bytes>, GetOutcome) {
        match self.read_value(Op::Get, key, max).await {
            Ok(Read::Miss) => (None, GetOutcome::Miss),
            Ok(Read::Oversized) => (None, GetOutcome::Oversized),
            Ok(Read::Value(v)) => (Some(v), GetOutcome::Hit),
            Ok(Read::NoMemory) => (None, GetOutcome::NoMemory),
            Err(Failure::Skipped) => (None, GetOutcome::Skipped),
            Err(Failure::Failed(_)) => (None, GetOutcome::Error),
        }
    }

    /// `SET key bytes PX ttl`. No size cap of the image entries applies: the caller bounds
    /// its own values.
    pub async fn set_key(&self, key: &str, bytes: Bytes, ttl: Duration) -> WriteOutcome {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let result = self
            .run(Op::Set, key, |mut conn, key| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(&bytes[..])
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await;
        write_outcome(result.map(|()| 0))
    }

    /// `DEL key` (one key: keys of one caller may sit in different slots).
    pub async fn delete_key(&self, key: &str) -> WriteOutcome {
        let result = self
            .run(Op::Del, key, |mut conn, key| async move {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await;
        write_outcome(result)
    }

    /// Tries to take the lease `key` for `ttl` (`SET key token NX PX ttl`), as
    /// [`SharedCache::try_lease`] does for an image entry.
    pub async fn try_lease_key(&self, key: &str, ttl: Duration) -> LeaseOutcome {
        let token = lease_token();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let result = self
            .run(Op::Lease, key, |mut conn, key| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await;
        match result {
            Ok(Some(_)) => LeaseOutcome::Won(token),
            Ok(None) => LeaseOutcome::Held,
            Err(_) => LeaseOutcome::Unavailable,
        }
    }

    /// Gives the lease `key` back if it is still `token`'s, as [`SharedCache::release_lease`]
    /// does (a compare-and-delete script: a holder whose work outlived the TTL never deletes
    /// the next holder's lease).
    pub async fn release_lease_key(&self, key: &str, token: u64) {
        const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
        let _ = self
            .run(Op::Lease, key, |mut conn, key| async move {
                redis::cmd("EVAL")
                    .arg(RELEASE)
                    .arg(1)
                    .arg(key)
                    .arg(token.to_string())
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await;
    }
}

fn write_outcome(result: Result<i64, Failure>) -> WriteOutcome {
    match result {
        Ok(_) => WriteOutcome::Success,
        Err(Failure::Skipped) => WriteOutcome::Skipped,
        Err(Failure::Failed(_)) => WriteOutcome::Error,
    }
}

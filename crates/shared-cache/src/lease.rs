//! The stampede lease: on a miss, one worker of the fleet takes the entry's lease
//! (`SET lease token NX PX ttl`) and fills the entry; the others wait for it. Released by
//! compare-and-delete, so a holder never deletes the next holder's lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mmcache_scope::CacheIdentity;

use crate::client::SharedCache;
use crate::commands;
use crate::conn::Failure;
use crate::entry::lease_key;
use crate::metrics::{Op, WriteOutcome};

/// How an attempt to take the stampede lease of an entry ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseOutcome {
    /// This worker holds the lease (with this token) and should fill the entry.
    Won(u64),
    /// Another worker holds it: wait for the entry.
    Held,
    /// The lease could not be taken or checked (failure or open breaker): go on without it.
    Unavailable,
}

impl SharedCache {
    /// Tries to take the stampede lease of `identity` for `ttl` (`SET lease NX PX ttl`).
    pub async fn try_lease(&self, identity: &CacheIdentity, ttl: Duration) -> LeaseOutcome {
        self.try_lease_key(&lease_key(identity), ttl).await
    }

    /// Gives the lease back (best effort: it expires anyway), only if it is still this
    /// holder's: a holder whose fill outlived the lease TTL must not delete the next holder's
    /// lease. A compare-and-delete script (`GET` = token, then `DEL`), which Redis, Valkey and
    /// Dragonfly all run. [`WriteOutcome::Success`] when the script ran (whether or not the
    /// lease was still this holder's).
    pub async fn release_lease(&self, identity: &CacheIdentity, token: u64) -> WriteOutcome {
        self.release_lease_key(&lease_key(identity), token).await
    }

    /// Tries to take the lease `key` for `ttl` (`SET key token NX PX ttl`), as
    /// [`SharedCache::try_lease`] does for an image entry.
    pub async fn try_lease_key(&self, key: &str, ttl: Duration) -> LeaseOutcome {
        let token = lease_token();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let result = self
            .run(Op::Lease, commands::SET, key, |mut conn, key| async move {
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
    /// the next holder's lease). How it ended, as [`SharedCache::release_lease`] says.
    pub async fn release_lease_key(&self, key: &str, token: u64) -> WriteOutcome {
        const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
        let result = self
            .run(
                Op::Lease,
                commands::RELEASE,
                key,
                |mut conn, key| async move {
                    redis::cmd("EVAL")
                        .arg(RELEASE)
                        .arg(1)
                        .arg(key)
                        .arg(token.to_string())
                        .query_async::<i64>(&mut conn)
                        .await
                },
            )
            .await;
        match result {
            Ok(_) => WriteOutcome::Success,
            Err(Failure::Skipped) => WriteOutcome::Skipped,
            Err(Failure::Failed(_)) => WriteOutcome::Error,
        }
    }
}

/// A token that tells this lease holder apart from others (time and a process counter).
fn lease_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed)
}

//! The stampede lease: on a miss, one worker of the fleet takes the entry's lease
//! (`SET lease token NX PX ttl`) and fills the entry; the others wait for it. Released by
//! compare-and-delete, so a holder never deletes the next holder's lease; renewed by
//! compare-and-expire while the work lasts; given up with a marker when the work will not be
//! stored, so that waiters stop waiting at once.
//!
//! Every script here runs `GET` and one of `DEL`, `PEXPIRE`, `SET` on its one key, under
//! `EVAL` (what an ACL must allow: see docs/deployment.md).

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
        let result = self
            .compare_and_delete(Op::Lease, key, token.to_string().as_bytes())
            .await;
        match result {
            Ok(_) => WriteOutcome::Success,
            Err(Failure::Skipped) => WriteOutcome::Skipped,
            Err(Failure::Failed(_)) => WriteOutcome::Error,
        }
    }

    /// Extends the lease `key` to `ttl` from now if it is still `token`'s (a holder whose work
    /// outlasts the TTL renews it, so that waiters keep waiting for a live holder and take over
    /// only from a dead one). Whether it is still this holder's: `false` when another holds it
    /// or it lapsed; `None` when the cache did not answer.
    pub async fn renew_lease_key(&self, key: &str, token: u64, ttl: Duration) -> Option<bool> {
        const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
            return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.run(
            Op::Lease,
            commands::RENEW,
            key,
            |mut conn, key| async move {
                redis::cmd("EVAL")
                    .arg(RENEW)
                    .arg(1)
                    .arg(key)
                    .arg(token.to_string())
                    .arg(ms)
                    .query_async::<i64>(&mut conn)
                    .await
            },
        )
        .await
        .ok()
        .map(|n| n == 1)
    }

    /// Replaces the lease `key`, if it is still `token`'s, by [`LEASE_NOT_STORED`] for `ttl`:
    /// this holder's work will not be stored (too large, a failed write), so its waiters stop
    /// waiting for it at once ([`SharedCache::lease_holder`]), and so do callers that miss
    /// while the marker lives. No one takes the lease while it lives.
    pub async fn abandon_lease_key(&self, key: &str, token: u64, ttl: Duration) {
        const ABANDON: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
            redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0";
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .run(
                Op::Lease,
                commands::ABANDON,
                key,
                |mut conn, key| async move {
                    redis::cmd("EVAL")
                        .arg(ABANDON)
                        .arg(1)
                        .arg(key)
                        .arg(token.to_string())
                        .arg(LEASE_NOT_STORED)
                        .arg(ms)
                        .query_async::<i64>(&mut conn)
                        .await
                },
            )
            .await;
    }

    /// Who holds the lease `key` now.
    pub async fn lease_holder(&self, key: &str) -> LeaseHolder {
        match self.get_key(key, 64).await {
            (Some(v), _) if v[..] == *LEASE_NOT_STORED.as_bytes() => LeaseHolder::NotStored,
            (Some(v), _) => LeaseHolder::Token(v),
            (None, crate::metrics::GetOutcome::Miss) => LeaseHolder::Free,
            (None, _) => LeaseHolder::Unknown,
        }
    }

    /// Deletes `key` if it holds exactly `expected`; the number of keys deleted (0 or 1).
    pub(crate) async fn compare_and_delete(
        &self,
        op: Op,
        key: &str,
        expected: &[u8],
    ) -> Result<i32, crate::conn::Failure> {
        const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
            return redis.call('DEL', KEYS[1]) end return 0";
        self.run(op, commands::RELEASE, key, |mut conn, key| async move {
            redis::cmd("EVAL")
                .arg(COMPARE_AND_DELETE)
                .arg(1)
                .arg(key)
                .arg(expected)
                .query_async::<i32>(&mut conn)
                .await
        })
        .await
    }
}

/// The value of a lease whose holder's work will not be stored
/// ([`SharedCache::abandon_lease_key`]); tokens are decimal numbers, never this.
pub const LEASE_NOT_STORED: &str = "not-stored";

/// Who holds a lease ([`SharedCache::lease_holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseHolder {
    /// No one.
    Free,
    /// A holder, by its token.
    Token(bytes::Bytes),
    /// The last holder's work will not be stored: do not wait for it.
    NotStored,
    /// The cache did not answer.
    Unknown,
}

/// A token that tells this lease holder apart from others: a process counter and the time,
/// under std's randomly keyed hasher (pids repeat across containers; the keys do not).
fn lease_token() -> u64 {
    use std::hash::BuildHasher;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::collections::hash_map::RandomState::new().hash_one((n, std::time::SystemTime::now()))
}

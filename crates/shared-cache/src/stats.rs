//! The counters of one cache instance, as [`SharedCache::stats`](crate::SharedCache::stats)
//! reports them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one cache instance (the `metrics` facade has the process-wide view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedCacheStats {
    /// GETs that found the entry.
    pub get_hits: u64,
    /// GETs that found nothing.
    pub get_misses: u64,
    /// GETs that failed.
    pub get_errors: u64,
    /// SETs written.
    pub set_ok: u64,
    /// SETs that failed.
    pub set_errors: u64,
    /// DELs done.
    pub del_ok: u64,
    /// DELs that failed.
    pub del_errors: u64,
    /// Warnings emitted (first failure, then at most one per minute).
    pub warnings: u64,
    /// Times the connection was rebuilt through the discovery URL.
    pub rediscoveries: u64,
    /// Operations skipped because a breaker was open.
    pub skipped: u64,
    /// Times a breaker opened.
    pub breaker_opens: u64,
    /// Operations answered with an error reply (WRONGTYPE, OOM...): counted in the op's
    /// errors too, but not as node failures.
    pub error_replies: u64,
    /// Write-behind SETs dropped because the queue was full.
    pub write_behind_dropped: u64,
    /// Bounded stores ([`SharedCache::store_within`](crate::SharedCache::store_within)) the load stopped waiting for; the SET
    /// went on in the background.
    pub set_backgrounded: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) get_hits: AtomicU64,
    pub(crate) get_misses: AtomicU64,
    pub(crate) get_errors: AtomicU64,
    pub(crate) set_ok: AtomicU64,
    pub(crate) set_errors: AtomicU64,
    pub(crate) del_ok: AtomicU64,
    pub(crate) del_errors: AtomicU64,
    pub(crate) warnings: AtomicU64,
    pub(crate) rediscoveries: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) breaker_opens: AtomicU64,
    pub(crate) error_replies: AtomicU64,
    pub(crate) write_behind_dropped: AtomicU64,
    pub(crate) set_backgrounded: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// What they hold now.
    pub(crate) fn snapshot(&self) -> SharedCacheStats {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SharedCacheStats {
            get_hits: load(&self.get_hits),
            get_misses: load(&self.get_misses),
            get_errors: load(&self.get_errors),
            set_ok: load(&self.set_ok),
            set_errors: load(&self.set_errors),
            del_ok: load(&self.del_ok),
            del_errors: load(&self.del_errors),
            warnings: load(&self.warnings),
            rediscoveries: load(&self.rediscoveries),
            skipped: load(&self.skipped),
            breaker_opens: load(&self.breaker_opens),
            error_replies: load(&self.error_replies),
            write_behind_dropped: load(&self.write_behind_dropped),
            set_backgrounded: load(&self.set_backgrounded),
        }
    }
}

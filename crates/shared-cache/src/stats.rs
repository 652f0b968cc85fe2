//! The counters of one cache instance, as [`SharedCache::stats`](crate::SharedCache::stats)
//! reports them. Each event is counted once: where a metric records the event, the stat is
//! read from the count its handle keeps for this cache (`mmcache_metrics::counted`), which also
//! counts when no recorder is installed; only events without a metric have a counter here.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::breaker::BreakerState;
use crate::error::FailureKind;
use crate::metrics::{DeleteLabel, Event, GetLabel, Handles, Op, SkipReason, WriteLabel};

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
    /// Operations the server denied (NOPERM, NOAUTH, WRONGPASS): counted in the op's errors
    /// too, but not as node failures.
    pub denied: u64,
    /// Operations not sent because one of their commands (or the connect) was denied within
    /// the cool-down.
    pub denied_skips: u64,
    /// Write-behind SETs dropped because the queue was full.
    pub write_behind_dropped: u64,
    /// Bounded stores ([`SharedCache::store_within`](crate::SharedCache::store_within)) the load stopped waiting for; the SET
    /// went on in the background.
    pub set_backgrounded: u64,
}

/// The events that have no metric: counted here alone. Every other field of
/// [`SharedCacheStats`] is read from the metric handles' own counts.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) warnings: AtomicU64,
    pub(crate) rediscoveries: AtomicU64,
    pub(crate) set_backgrounded: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// The stats of the cache that records through `handles` and counts here.
    pub(crate) fn snapshot(&self, handles: &Handles) -> SharedCacheStats {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let n = |event| handles.count(event);
        SharedCacheStats {
            // An oversized entry is a hit (recorded under `hit`, size bucket `unknown`).
            get_hits: n(Event::Get(GetLabel::Hit)),
            get_misses: n(Event::Get(GetLabel::Miss)),
            get_errors: n(Event::Get(GetLabel::Error)),
            set_ok: n(Event::Set(WriteLabel::Success)),
            set_errors: n(Event::Set(WriteLabel::Error)),
            del_ok: n(Event::Delete(DeleteLabel::Success)),
            del_errors: n(Event::Delete(DeleteLabel::Error)),
            warnings: load(&self.warnings),
            rediscoveries: load(&self.rediscoveries),
            skipped: n(Event::Skip(SkipReason::BreakerOpen)),
            breaker_opens: n(Event::Transition(BreakerState::Closed, BreakerState::Open)),
            error_replies: n(Event::Error(FailureKind::Reply)),
            denied: n(Event::Error(FailureKind::Denied)),
            denied_skips: n(Event::Skip(SkipReason::Denied)),
            write_behind_dropped: n(Event::SkipOf(Op::Set, SkipReason::QueueFull)),
            set_backgrounded: load(&self.set_backgrounded),
        }
    }
}

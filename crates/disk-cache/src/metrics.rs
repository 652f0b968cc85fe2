//! The metrics of the disk tier and of the host pixel tier, declared once; docs/metrics.md is
//! generated from them.

use std::sync::atomic::{AtomicU64, Ordering};

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Declares one family of the metrics below: the disk tier's (`mmcache_disk_cache_*`) or the
/// host pixel tier's (`mmcache_host_pixels_*`), which are the same operations on another
/// directory.
macro_rules! family {
    ($(#[$doc:meta])* $module:ident, $prefix:literal, $What:literal, $what:literal, $hits:literal) => {
        $(#[$doc])*
        pub mod $module {
            use mmcache_metrics::metric::{Kind, Metric, Unit};

            use crate::metrics::{EvictReason, ReadOutcome, SkipReason, WriteOutcome};

            /// Reads by `outcome`.
            pub const READS: Metric = Metric::new(
                concat!($prefix, "_reads_total"),
                Kind::Counter,
                concat!($What, " reads by outcome"),
            )
            .labels(&[ReadOutcome::LABEL])
            .note(
                "`no_memory`: an entry not read, no room in the download budget within its \
                 wait; `invalid`: a host pixel entry that failed its checks (removed); \
                 `refused`: a valid host pixel entry this process's limits refuse",
            );
            /// Bytes read from hits.
            pub const READ_BYTES: Metric = Metric::new(
                concat!($prefix, "_read_bytes_total"),
                Kind::Counter,
                concat!("Bytes read from ", $hits, " hits"),
            )
            .unit(Unit::Bytes)
            .note(concat!(
                "loads served from the tier count as `mmcache_loads_total{source=\"",
                stringify!($module),
                "\"}`"
            ));
            /// Writes by `outcome`.
            pub const WRITES: Metric = Metric::new(
                concat!($prefix, "_writes_total"),
                Kind::Counter,
                concat!($What, " writes by outcome"),
            )
            .labels(&[WriteOutcome::LABEL])
            .note("`skipped`: empty or over the entry cap (the disk tier's is the download cap)");
            /// Bytes written.
            pub const WRITTEN_BYTES: Metric = Metric::new(
                concat!($prefix, "_written_bytes_total"),
                Kind::Counter,
                concat!("Bytes written to the ", $what),
            )
            .unit(Unit::Bytes);
            /// Entries removed by `reason`.
            pub const EVICTIONS: Metric = Metric::new(
                concat!($prefix, "_evictions_total"),
                Kind::Counter,
                concat!($What, " entries removed, by reason"),
            )
            .labels(&[EvictReason::LABEL])
            .note("`corrupt`: did not decode or failed its check; `partial`: left by a writer that died");
            /// Names and operations skipped, by `reason`.
            pub const SKIPPED: Metric = Metric::new(
                concat!($prefix, "_skipped_total"),
                Kind::Counter,
                concat!($What, " names and operations skipped, by reason (not ours, or a bound)"),
            )
            .labels(&[SkipReason::LABEL])
            .note(
                "`not_regular`: FIFO, socket, device, or a folder where a file should be; \
                 `foreign`: owned by another user outside the group; `writable`: an entry to \
                 map that someone may write; `busy`: no slot for a blocking disk operation \
                 within 100 ms; `stalled`: no slot in time, every one held by an operation past \
                 its deadline (counts toward the breaker); `timeout`: past the tier's operation \
                 deadline",
            );
            /// Times the breaker opened (the directory kept timing out or failing).
            pub const BREAKER_OPENS: Metric = Metric::new(
                concat!($prefix, "_breaker_opens_total"),
                Kind::Counter,
                concat!("Times the ", $what, " was skipped for a cool-down after failures in a row"),
            )
            .note("skipped for 5 s after 5 timeouts, `EIO`s or `stalled` in a row; `busy` does not count");

            /// Every metric above.
            pub const ALL: &[Metric] = &[
                READS,
                READ_BYTES,
                WRITES,
                WRITTEN_BYTES,
                EVICTIONS,
                SKIPPED,
                BREAKER_OPENS,
            ];
        }
    };
}

family!(
    /// The disk tier's metrics (encoded bytes on a local disk).
    disk,
    "mmcache_disk_cache",
    "Disk tier",
    "disk tier",
    "disk-tier"
);
family!(
    /// The host pixel tier's metrics (decoded pixels on a memory file system).
    host,
    "mmcache_host_pixels",
    "Host pixel tier",
    "host pixel tier",
    "host-pixel-tier"
);

pub use disk::{ALL, BREAKER_OPENS, EVICTIONS, READ_BYTES, READS, SKIPPED, WRITES, WRITTEN_BYTES};

mmcache_metrics::label_values! {
    /// The `outcome` label of [`READS`].
    pub enum ReadOutcome: "outcome" {
        Hit = "hit",
        Miss = "miss",
        Expired = "expired",
        Error = "error",
        NoMemory = "no_memory",
        Invalid = "invalid",
        Refused = "refused",
    }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`WRITES`].
    pub enum WriteOutcome: "outcome" { Success = "success", Error = "error", Skipped = "skipped" }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`EVICTIONS`].
    pub enum EvictReason: "reason" {
        Budget = "budget",
        Expired = "expired",
        Corrupt = "corrupt",
        Partial = "partial",
    }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`SKIPPED`].
    pub enum SkipReason: "reason" {
        Link = "link",
        NotRegular = "not_regular",
        Foreign = "foreign",
        Writable = "writable",
        UntrustedDir = "untrusted_dir",
        Busy = "busy",
        Stalled = "stalled",
        Timeout = "timeout",
        BreakerOpen = "breaker_open",
        Panicked = "panicked",
    }
}

/// One cache's handles, one per label combination, resolved when the cache is built, and the
/// instance's [`DiskCacheStats`](crate::DiskCacheStats) counters: each event is one call here,
/// which counts it in both (the facade's view is process-wide, the stats are this instance's).
#[derive(Debug)]
pub(crate) struct Handles {
    pub(crate) stats: crate::config::Counters,
    reads: Vec<::metrics::Counter>,
    pub(crate) read_bytes: ::metrics::Counter,
    writes: Vec<::metrics::Counter>,
    pub(crate) written_bytes: ::metrics::Counter,
    evictions: Vec<::metrics::Counter>,
    skipped: Vec<::metrics::Counter>,
    pub(crate) breaker_opens: ::metrics::Counter,
}

impl Handles {
    pub(crate) fn new(tier: crate::config::Tier) -> Self {
        let m = match tier {
            crate::config::Tier::Disk => disk::ALL,
            crate::config::Tier::Host => host::ALL,
        };
        let [
            reads,
            read_bytes,
            writes,
            written,
            evictions,
            skipped,
            breaker,
        ] = [0, 1, 2, 3, 4, 5, 6].map(|i| m[i].name);
        fn each<E: Copy>(
            all: &[E],
            make: impl Fn(E) -> ::metrics::Counter,
        ) -> Vec<::metrics::Counter> {
            all.iter().map(|e| make(*e)).collect()
        }
        Self {
            stats: crate::config::Counters::default(),
            reads: each(
                ReadOutcome::ALL,
                |o| ::metrics::counter!(reads, "outcome" => o.as_str()),
            ),
            read_bytes: ::metrics::counter!(read_bytes),
            writes: each(
                WriteOutcome::ALL,
                |o| ::metrics::counter!(writes, "outcome" => o.as_str()),
            ),
            written_bytes: ::metrics::counter!(written),
            evictions: each(
                EvictReason::ALL,
                |r| ::metrics::counter!(evictions, "reason" => r.as_str()),
            ),
            skipped: each(
                SkipReason::ALL,
                |r| ::metrics::counter!(skipped, "reason" => r.as_str()),
            ),
            breaker_opens: ::metrics::counter!(breaker),
        }
    }

    /// A read's outcome: a hit, or a miss (an error is also a miss in the stats).
    pub(crate) fn read(&self, outcome: ReadOutcome) {
        let s = &self.stats;
        match outcome {
            ReadOutcome::Hit => bump(&s.hits),
            ReadOutcome::Miss
            | ReadOutcome::Expired
            | ReadOutcome::NoMemory
            | ReadOutcome::Invalid
            | ReadOutcome::Refused => bump(&s.misses),
            ReadOutcome::Error => {
                bump(&s.errors);
                bump(&s.misses);
            }
        }
        self.reads[outcome as usize].increment(1);
    }

    /// A write's outcome. A skipped one is neither a write nor an error in the stats (a bound
    /// or a name that stopped it counts as `skipped` there).
    pub(crate) fn write(&self, outcome: WriteOutcome) {
        match outcome {
            WriteOutcome::Success => bump(&self.stats.writes),
            WriteOutcome::Error => bump(&self.stats.errors),
            WriteOutcome::Skipped => {}
        }
        self.writes[outcome as usize].increment(1);
    }

    pub(crate) fn evicted(&self, reason: EvictReason) {
        bump(&self.stats.evictions);
        self.evictions[reason as usize].increment(1);
    }

    pub(crate) fn skipped(&self, reason: SkipReason) {
        self.skipped[reason as usize].increment(1);
    }
}

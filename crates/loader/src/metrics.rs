//! Metric names of the loader, and the histogram buckets to apply where an exporter is built.
//!
//! The library records through the `metrics` facade and never installs an exporter. Install
//! your recorder **before** building a [`crate::Loader`]: the hot-path counters are resolved
//! once, at build time. No label ever holds a URL, a key or a scope.

use std::sync::OnceLock;

use ::metrics::{Counter, Histogram};

pub use mmcache_shared_cache::metrics as shared_cache;

/// Loads by `source` (`memory`, `inflight`, `disk`, `shared`, `origin`, `data`) and `outcome`
/// (`ok`, `error`).
pub const LOADS: &str = "mmcache_loads_total";
/// Duration of loads that missed the decoded cache; label `source`.
pub const LOAD_DURATION: &str = "mmcache_load_duration_seconds";
/// Origin fetch duration; label `outcome` (`ok`, `error`).
pub const ORIGIN_FETCH_DURATION: &str = "mmcache_origin_fetch_duration_seconds";
/// Bytes downloaded from origins.
pub const ORIGIN_FETCH_BYTES: &str = "mmcache_origin_fetch_bytes_total";
/// Decode duration; label `format`.
pub const DECODE_DURATION: &str = "mmcache_decode_duration_seconds";
/// Loads whose bytes were already decoded in their scope under another URL: the image was
/// shared, not decoded again (counter).
pub const CONTENT_SHARED: &str = "mmcache_decoded_content_shared_total";
/// The JPEG decoder in use (gauge, 1); label `decoder` (`libjpeg-turbo`, `pure-rust`).
pub const JPEG_DECODER_INFO: &str = "mmcache_jpeg_decoder_info";
/// The libjpeg-turbo in use (gauge, 1); labels `linkage` (`vendored`, `run-time`) and
/// `version` (`unknown` for a library loaded at run time).
pub const LIBJPEG_TURBO_INFO: &str = "mmcache_libjpeg_turbo_info";
/// Decode-budget reservations by `outcome` (`acquired`, `timeout`, `over_budget`).
pub const DECODE_BUDGET: &str = "mmcache_decode_budget_total";
/// Loads that bypassed every cache; label `reason` (`no_scope`).
pub const BYPASSES: &str = "mmcache_cache_bypass_total";
/// Shared-cache values that did not decode and were deleted.
pub const SHARED_CORRUPT: &str = "mmcache_shared_cache_corrupt_total";
/// Shared-cache values longer than the download cap, left unread (the load went to the origin).
pub const SHARED_OVERSIZED: &str = "mmcache_shared_cache_oversized_total";
/// Hedged shared-cache GETs by `outcome`: `origin_won` (the origin answered first),
/// `cache_won` (a late hit decoded first), `over_budget` (no hedge: the budget was spent).
pub const HEDGES: &str = "mmcache_shared_cache_hedges_total";
/// Stampede leases by `outcome` (`won`, `took_over` (a waiter took a released or expired
/// lease), `waited_hit`, `waited_timeout`, `error`).
pub const LEASES: &str = "mmcache_shared_cache_lease_total";
/// Loads whose cache writes (disk and shared) were skipped: the write memory, a quarter of
/// the download budget, had no room for a copy of their bytes.
pub const WRITES_SKIPPED: &str = "mmcache_cache_writes_skipped_total";
/// Loads that reached their overall deadline (`MMCACHE_LOAD_TIMEOUT_SECS`) and failed with 408.
pub const LOAD_TIMEOUTS: &str = "mmcache_load_timeouts_total";
/// Decoded-cache entries (gauge).
pub const DECODED_CACHE_ENTRIES: &str = mmcache_decode::metrics::DECODED_CACHE_ENTRIES;
/// Decoded-cache weighed bytes (gauge).
pub const DECODED_CACHE_BYTES: &str = mmcache_decode::metrics::DECODED_CACHE_BYTES;

/// Buckets for the loader's duration histograms, in seconds (100 µs to 30 s).
pub const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0, 30.0,
];

/// Every histogram with the buckets it should get, for the exporter's builder:
///
/// ```
/// for (name, buckets) in mmcache_loader::metrics::histogram_buckets() {
///     assert!(!buckets.is_empty(), "{name}");
/// }
/// ```
pub fn histogram_buckets() -> Vec<(&'static str, &'static [f64])> {
    let mut out: Vec<(&'static str, &'static [f64])> = vec![
        (LOAD_DURATION, &DURATION_BUCKETS),
        (ORIGIN_FETCH_DURATION, &DURATION_BUCKETS),
        (DECODE_DURATION, &DURATION_BUCKETS),
    ];
    for name in shared_cache::HISTOGRAMS {
        out.push((name, &shared_cache::LATENCY_BUCKETS));
    }
    out.push((
        crate::embeddings::metrics::COMPUTE_DURATION,
        &crate::embeddings::metrics::COMPUTE_DURATION_BUCKETS,
    ));
    out
}

/// Registers descriptions of every loader and shared-cache metric with the installed recorder.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    crate::embeddings::metrics::describe();
    describe_counter!(LOADS, "Image loads by source and outcome");
    describe_histogram!(
        LOAD_DURATION,
        Unit::Seconds,
        "Duration of loads that missed the decoded cache"
    );
    describe_histogram!(
        ORIGIN_FETCH_DURATION,
        Unit::Seconds,
        "Origin download duration"
    );
    describe_counter!(
        ORIGIN_FETCH_BYTES,
        Unit::Bytes,
        "Bytes downloaded from origins"
    );
    describe_histogram!(DECODE_DURATION, Unit::Seconds, "Image decode duration");
    describe_counter!(BYPASSES, "Loads that bypassed every cache");
    describe_counter!(
        LOAD_TIMEOUTS,
        "Loads that reached their overall deadline (408)"
    );
    describe_gauge!(JPEG_DECODER_INFO, "The JPEG decoder in use (label decoder)");
    describe_gauge!(
        LIBJPEG_TURBO_INFO,
        "The libjpeg-turbo in use (labels linkage, version)"
    );
    describe_counter!(
        DECODE_BUDGET,
        "Decode-budget reservations by outcome (acquired, timeout, over_budget)"
    );
    describe_counter!(
        SHARED_CORRUPT,
        "Shared-cache values that failed to decode and were deleted"
    );
    describe_counter!(
        SHARED_OVERSIZED,
        "Shared-cache values longer than the download cap, left unread"
    );
    describe_counter!(HEDGES, "Hedged shared-cache GETs by outcome");
    {
        use mmcache_disk_cache::metrics as disk;
        describe_counter!(disk::READS, "Disk tier reads by outcome");
        describe_counter!(
            disk::READ_BYTES,
            Unit::Bytes,
            "Bytes read from disk-tier hits"
        );
        describe_counter!(disk::WRITES, "Disk tier writes by outcome");
        describe_counter!(
            disk::WRITTEN_BYTES,
            Unit::Bytes,
            "Bytes written to the disk tier"
        );
        describe_counter!(disk::EVICTIONS, "Disk tier entries removed, by reason");
        describe_counter!(
            disk::SKIPPED,
            "Disk tier names and operations skipped, by reason (not ours, or a bound)"
        );
        describe_counter!(
            disk::BREAKER_OPENS,
            "Times the disk tier was skipped for a cool-down after failures in a row"
        );
    }
    describe_counter!(LEASES, "Stampede leases on shared-cache misses by outcome");
    describe_counter!(
        shared_cache::BREAKER_TRANSITIONS,
        "Shared image cache breaker transitions"
    );
    describe_gauge!(
        shared_cache::BREAKERS_OPEN,
        "Shared image cache breakers open or half-open"
    );
    describe_gauge!(DECODED_CACHE_ENTRIES, "Entries in the decoded-image cache");
    describe_gauge!(
        DECODED_CACHE_BYTES,
        Unit::Bytes,
        "Weighed bytes in the decoded-image cache"
    );
    describe_histogram!(
        shared_cache::GET_DURATION,
        Unit::Seconds,
        "Shared image cache GET latency"
    );
    describe_histogram!(
        shared_cache::SET_DURATION,
        Unit::Seconds,
        "Shared image cache SET latency"
    );
    describe_counter!(shared_cache::DELETES, "Shared image cache DELs by outcome");
    describe_counter!(
        shared_cache::ERRORS,
        "Shared image cache failures by operation and kind"
    );
    describe_counter!(
        shared_cache::SKIPPED,
        "Shared image cache operations not attempted"
    );
}

/// One metric's handles by the value of its one label, each registered with the recorder on
/// first use and reused after: no registry lookup and no label allocation per load. A value
/// outside the known set still records (registered each time).
pub(crate) struct Labeled<T: Clone, const N: usize> {
    values: [&'static str; N],
    slots: [OnceLock<T>; N],
    make: fn(&'static str) -> T,
}

impl<T: Clone, const N: usize> std::fmt::Debug for Labeled<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Labeled")
            .field("values", &self.values)
            .finish_non_exhaustive()
    }
}

impl<T: Clone, const N: usize> Labeled<T, N> {
    pub(crate) fn new(values: [&'static str; N], make: fn(&'static str) -> T) -> Self {
        Self {
            values,
            slots: std::array::from_fn(|_| OnceLock::new()),
            make,
        }
    }

    pub(crate) fn get(&self, value: &'static str) -> T {
        match self.values.iter().position(|v| *v == value) {
            Some(i) => self.slots[i].get_or_init(|| (self.make)(value)).clone(),
            None => (self.make)(value),
        }
    }
}

/// Source label values.
const SOURCES: [&str; 6] = ["memory", "inflight", "disk", "shared", "origin", "data"];

/// The loader's metric handles.
pub(crate) struct Handles {
    pub(crate) loads_ok: Labeled<Counter, 6>,
    pub(crate) loads_error: Labeled<Counter, 6>,
    pub(crate) load_duration: Labeled<Histogram, 6>,
    pub(crate) decode_duration: Labeled<Histogram, 4>,
    pub(crate) origin_duration: Labeled<Histogram, 2>,
    pub(crate) hedges: Labeled<Counter, 3>,
    pub(crate) leases: Labeled<Counter, 5>,
    origin_bytes: OnceLock<Counter>,
    corrupt: OnceLock<Counter>,
    oversized: OnceLock<Counter>,
    bypass: OnceLock<Counter>,
    load_timeouts: OnceLock<Counter>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}

impl Handles {
    pub(crate) fn new() -> Self {
        Self {
            loads_ok: Labeled::new(
                SOURCES,
                |s| ::metrics::counter!(LOADS, "source" => s, "outcome" => "ok"),
            ),
            loads_error: Labeled::new(
                SOURCES,
                |s| ::metrics::counter!(LOADS, "source" => s, "outcome" => "error"),
            ),
            load_duration: Labeled::new(
                SOURCES,
                |s| ::metrics::histogram!(LOAD_DURATION, "source" => s),
            ),
            decode_duration: Labeled::new(
                ["jpeg", "png", "webp", "gif"],
                |f| ::metrics::histogram!(DECODE_DURATION, "format" => f),
            ),
            origin_duration: Labeled::new(
                ["ok", "error"],
                |o| ::metrics::histogram!(ORIGIN_FETCH_DURATION, "outcome" => o),
            ),
            hedges: Labeled::new(
                ["origin_won", "cache_won", "over_budget"],
                |o| ::metrics::counter!(HEDGES, "outcome" => o),
            ),
            leases: Labeled::new(
                ["won", "took_over", "waited_hit", "waited_timeout", "error"],
                |o| ::metrics::counter!(LEASES, "outcome" => o),
            ),
            origin_bytes: OnceLock::new(),
            corrupt: OnceLock::new(),
            oversized: OnceLock::new(),
            bypass: OnceLock::new(),
            load_timeouts: OnceLock::new(),
        }
    }

    pub(crate) fn origin_bytes(&self) -> &Counter {
        self.origin_bytes
            .get_or_init(|| ::metrics::counter!(ORIGIN_FETCH_BYTES))
    }

    pub(crate) fn corrupt(&self) -> &Counter {
        self.corrupt
            .get_or_init(|| ::metrics::counter!(SHARED_CORRUPT))
    }

    pub(crate) fn oversized(&self) -> &Counter {
        self.oversized
            .get_or_init(|| ::metrics::counter!(SHARED_OVERSIZED))
    }

    pub(crate) fn load_timeouts(&self) -> &Counter {
        self.load_timeouts
            .get_or_init(|| ::metrics::counter!(LOAD_TIMEOUTS))
    }

    pub(crate) fn bypass(&self) -> &Counter {
        self.bypass
            .get_or_init(|| ::metrics::counter!(BYPASSES, "reason" => "no_scope"))
    }
}

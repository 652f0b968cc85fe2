//! The loader's metrics, declared once, and the handles a loader records through.
//!
//! The library records through the `metrics` facade and never installs an exporter. Install
//! your recorder **before** building a [`crate::Loader`]: every handle is resolved once, when
//! the loader is built. No label ever holds a URL, a key or a scope. [`ALL`] gathers the
//! declarations of every crate; the descriptions, the exporter's buckets and docs/metrics.md
//! derive from it.

use ::metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use mmcache_decode::{ImageFormat, JpegDecoder};
use mmcache_metrics::metric::{Kind, Label, Metric, Unit};

use crate::loaded::Source;

mod doc_tables;
pub mod embeddings;

pub(crate) use crate::metric_labels::PerLabel;
pub use crate::metric_labels::{BypassReason, Outcome};
pub use doc_tables::doc_tables;
pub use metrics_exporter_prometheus as prometheus;
pub use mmcache_shared_cache::metrics as shared_cache;

/// Loads by `source` and `outcome`.
pub const LOADS: Metric = Metric::new(
    "mmcache_loads_total",
    Kind::Counter,
    "Image loads by source and outcome",
)
.labels(&[Source::LABEL, Outcome::LABEL]);
/// Duration of loads that missed the decoded cache; label `source`.
pub const LOAD_DURATION: Metric = Metric::new(
    "mmcache_load_duration_seconds",
    Kind::Histogram,
    "Duration of loads that missed the decoded cache",
)
.unit(Unit::Seconds)
.labels(&[Source::LABEL])
.buckets(&DURATION_BUCKETS);
/// Origin fetch duration; label `outcome`.
pub const ORIGIN_FETCH_DURATION: Metric = Metric::new(
    "mmcache_origin_fetch_duration_seconds",
    Kind::Histogram,
    "Origin download duration",
)
.unit(Unit::Seconds)
.labels(&[Outcome::LABEL])
.buckets(&DURATION_BUCKETS);
/// Bytes downloaded from origins.
pub const ORIGIN_FETCH_BYTES: Metric = Metric::new(
    "mmcache_origin_fetch_bytes_total",
    Kind::Counter,
    "Bytes downloaded from origins",
)
.unit(Unit::Bytes);
/// Decode duration (probe, budget wait and decode); label `format`.
pub const DECODE_DURATION: Metric = Metric::new(
    "mmcache_decode_duration_seconds",
    Kind::Histogram,
    "Image decode duration",
)
.unit(Unit::Seconds)
.labels(&[ImageFormat::LABEL])
.buckets(&DURATION_BUCKETS)
.note("probe, budget wait and decode");
/// Loads whose bytes were already decoded in their scope under another URL: the image was
/// shared, not decoded again (counter).
pub const CONTENT_SHARED: Metric = Metric::new(
    "mmcache_decoded_content_shared_total",
    Kind::Counter,
    "Loads whose bytes were already decoded in their scope under another URL",
)
.note("the image was shared, not decoded again");
/// The JPEG decoder in use (gauge, 1); label `decoder`.
pub const JPEG_DECODER_INFO: Metric = Metric::new(
    "mmcache_jpeg_decoder_info",
    Kind::Gauge,
    "The JPEG decoder in use (label decoder)",
)
.labels(&[JpegDecoder::LABEL])
.note("1 for the JPEG decoder in use");
/// The libjpeg-turbo in use (gauge, 1); labels `linkage` and `version`.
pub const LIBJPEG_TURBO_INFO: Metric = Metric::new(
    "mmcache_libjpeg_turbo_info",
    Kind::Gauge,
    "The libjpeg-turbo in use (labels linkage, version)",
)
.labels(&[
    Linkage::LABEL,
    Label {
        name: "version",
        values: &[],
    },
])
.note(
    "1; `vendored`: linked in, built from source; `run-time`: a library loaded at run time; \
     `version` e.g. `3.1.0`, or `unknown` for a library loaded at run time; set only while \
     libjpeg-turbo is the JPEG decoder",
);
/// Decode-budget reservations by `outcome`.
pub const DECODE_BUDGET: Metric = Metric::new(
    "mmcache_decode_budget_total",
    Kind::Counter,
    "Decode-budget reservations by outcome (acquired, timeout, over_budget)",
)
.labels(&[BudgetOutcome::LABEL])
.note("`timeout`: 503; `over_budget`: 413");
/// Loads that bypassed every cache; label `reason`.
pub const BYPASSES: Metric = Metric::new(
    "mmcache_cache_bypass_total",
    Kind::Counter,
    "Loads that bypassed every cache",
)
.labels(&[BypassReason::LABEL]);
/// Loads that reached their overall deadline (`MMCACHE_LOAD_TIMEOUT_SECS`) and failed with 408.
pub const LOAD_TIMEOUTS: Metric = Metric::new(
    "mmcache_load_timeouts_total",
    Kind::Counter,
    "Loads that reached their overall deadline (408)",
)
.note("loads that reached `MMCACHE_LOAD_TIMEOUT_SECS`; each waiter got 408");
/// Shared-cache values that did not decode and were deleted.
pub const SHARED_CORRUPT: Metric = Metric::new(
    "mmcache_shared_cache_corrupt_total",
    Kind::Counter,
    "Shared-cache values that failed to decode and were deleted",
);
/// Shared-cache values longer than the download cap, left unread (the load went to the origin).
pub const SHARED_OVERSIZED: Metric = Metric::new(
    "mmcache_shared_cache_oversized_total",
    Kind::Counter,
    "Shared-cache values longer than the download cap, left unread",
)
.note("the load went to the origin");
/// Hedged shared-cache GETs by `outcome`.
pub const HEDGES: Metric = Metric::new(
    "mmcache_shared_cache_hedges_total",
    Kind::Counter,
    "Hedged shared-cache GETs by outcome",
)
.labels(&[HedgeOutcome::LABEL])
.note(
    "`origin_won`: the origin answered first; `cache_won`: a late hit decoded first; \
     `over_budget`: budget spent, the load waited for its GET up to the hedge cap, then \
     fetched from the origin all the same; `routed_around`: the key's node was late on most \
     of its recent GETs, so the load skipped the GET and fetched from the origin at once",
);
/// Stampede leases by `outcome`.
pub const LEASES: Metric = Metric::new(
    "mmcache_shared_cache_lease_total",
    Kind::Counter,
    "Stampede leases on shared-cache misses by outcome",
)
.labels(&[LeaseOutcome::LABEL])
.note("`took_over`: a waiter took a released or expired lease");
/// Loads whose cache writes (disk and shared) were skipped: the write memory, a quarter of
/// the download budget, had no room for a copy of their bytes.
pub const WRITES_SKIPPED: Metric = Metric::new(
    "mmcache_cache_writes_skipped_total",
    Kind::Counter,
    "Loads whose cache writes were skipped for want of write memory",
)
.note("the write memory is a quarter of `MMCACHE_DOWNLOAD_MEMORY_BYTES`; the entry is simply not written");
/// Decoded-cache entries (gauge), recorded by `mmcache_decode`.
pub const DECODED_CACHE_ENTRIES: Metric = mmcache_decode::metrics::DECODED_CACHE_ENTRIES;
/// Decoded-cache weighed bytes (gauge), recorded by `mmcache_decode`.
pub const DECODED_CACHE_BYTES: Metric = mmcache_decode::metrics::DECODED_CACHE_BYTES;

/// The loader's own metrics.
pub const LOADER: &[Metric] = &[
    LOADS,
    LOAD_DURATION,
    ORIGIN_FETCH_DURATION,
    ORIGIN_FETCH_BYTES,
    DECODE_DURATION,
    CONTENT_SHARED,
    JPEG_DECODER_INFO,
    LIBJPEG_TURBO_INFO,
    DECODE_BUDGET,
    BYPASSES,
    LOAD_TIMEOUTS,
    SHARED_CORRUPT,
    SHARED_OVERSIZED,
    HEDGES,
    LEASES,
    WRITES_SKIPPED,
];

/// Every crate's metrics, by section of docs/metrics.md: (section, metrics).
pub const ALL: &[(&str, &[Metric])] = &[
    ("Shared cache", shared_cache::ALL),
    ("Loader", LOADER),
    (
        "Decoded and embedding caches (recorded by mmcache-decode)",
        mmcache_decode::metrics::ALL,
    ),
    ("Host pixel tier", mmcache_disk_cache::metrics::host::ALL),
    ("Disk tier", mmcache_disk_cache::metrics::ALL),
    ("Embeddings", embeddings::ALL),
];

/// Every declared metric, in [`ALL`]'s order.
pub fn all() -> impl Iterator<Item = &'static Metric> {
    ALL.iter().flat_map(|(_, metrics)| metrics.iter())
}

/// Buckets for the loader's duration histograms, in seconds (100 µs to 30 s).
pub const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0, 30.0,
];

mmcache_metrics::label_values! {
    /// The `linkage` label of [`LIBJPEG_TURBO_INFO`].
    pub enum Linkage: "linkage" { Vendored = "vendored", RunTime = "run-time" }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`DECODE_BUDGET`].
    pub enum BudgetOutcome: "outcome" {
        Acquired = "acquired",
        Timeout = "timeout",
        OverBudget = "over_budget",
    }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`HEDGES`].
    pub enum HedgeOutcome: "outcome" {
        OriginWon = "origin_won",
        CacheWon = "cache_won",
        OverBudget = "over_budget",
        RoutedAround = "routed_around",
    }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`LEASES`].
    pub enum LeaseOutcome: "outcome" {
        Won = "won",
        TookOver = "took_over",
        WaitedHit = "waited_hit",
        WaitedTimeout = "waited_timeout",
        Error = "error",
    }
}

/// Every histogram with the buckets it should get, for the exporter's builder:
///
/// ```
/// for (name, buckets) in mmcache_loader::metrics::histogram_buckets() {
///     assert!(!buckets.is_empty(), "{name}");
/// }
/// ```
pub fn histogram_buckets() -> Vec<(&'static str, &'static [f64])> {
    all()
        .filter(|m| m.kind == Kind::Histogram)
        .map(|m| (m.name, m.buckets))
        .collect()
}

/// Registers descriptions of every declared metric with the installed recorder.
pub fn describe() {
    for m in all() {
        let unit = m.unit.map(|u| match u {
            Unit::Seconds => ::metrics::Unit::Seconds,
            Unit::Bytes => ::metrics::Unit::Bytes,
        });
        let key = ::metrics::KeyName::from_const_str(m.name);
        let help = ::metrics::SharedString::const_str(m.help);
        ::metrics::with_recorder(|r| match m.kind {
            Kind::Counter => r.describe_counter(key, unit, help),
            Kind::Gauge => r.describe_gauge(key, unit, help),
            Kind::Histogram => r.describe_histogram(key, unit, help),
        });
    }
}

/// The metric handles of a load as a whole (each tier's step holds its own), one per label
/// combination, resolved when the loader is built: no registry lookup and no label
/// allocation per load.
pub(crate) struct Handles {
    loads_ok: PerLabel<Counter>,
    loads_error: PerLabel<Counter>,
    load_duration: PerLabel<Histogram>,
    pub(crate) bypass: Counter,
    pub(crate) load_timeouts: Counter,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}

impl Handles {
    pub(crate) fn new() -> Self {
        let loads = |o: Outcome| {
            PerLabel::new(
                Source::ALL,
                move |s: Source| ::metrics::counter!(LOADS.name, "source" => s.as_str(), "outcome" => o.as_str()),
            )
        };
        Self {
            loads_ok: loads(Outcome::Ok),
            loads_error: loads(Outcome::Error),
            load_duration: PerLabel::new(
                Source::ALL,
                |s: Source| ::metrics::histogram!(LOAD_DURATION.name, "source" => s.as_str()),
            ),
            bypass: ::metrics::counter!(
                BYPASSES.name,
                "reason" => BypassReason::NoScope.as_str()
            ),
            load_timeouts: ::metrics::counter!(LOAD_TIMEOUTS.name),
        }
    }

    /// The load counter of `source` and `outcome`.
    pub(crate) fn loads(&self, source: Source, outcome: Outcome) -> &Counter {
        match outcome {
            Outcome::Ok => self.loads_ok.get(source as usize),
            Outcome::Error => self.loads_error.get(source as usize),
        }
    }

    pub(crate) fn load_duration(&self, source: Source) -> &Histogram {
        self.load_duration.get(source as usize)
    }
}

/// The Prometheus exporter's builder with every declared histogram's buckets set: the one place
/// a recorder is configured (the CLI, the Python package, xtask and the tests build theirs
/// here). Nothing is installed.
pub fn prometheus_builder() -> PrometheusBuilder {
    histogram_buckets()
        .into_iter()
        .fold(PrometheusBuilder::new(), |builder, (name, buckets)| {
            builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
                .expect("every declared histogram has buckets")
        })
}

/// Installs [`prometheus_builder`]'s recorder as the process's recorder and registers every
/// description. Call it before building a [`crate::Loader`].
///
/// # Errors
///
/// When a recorder is installed already.
pub fn install_prometheus() -> Result<PrometheusHandle, BuildError> {
    let handle = prometheus_builder().install_recorder()?;
    describe();
    Ok(handle)
}

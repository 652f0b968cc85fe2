//! The crate's metrics, declared once (names, labels and buckets compatible with the Python
//! implementation), and the handles a cache records through.
//!
//! The library records through the `metrics` facade and never installs an exporter. Labels
//! never hold a URL, a key or a scope.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use mmcache_metrics::counted::Counted;
use mmcache_metrics::metric::{Kind, Label, Metric, Unit};

use crate::breaker::BreakerState;
use crate::error::FailureKind;
use crate::samples::{SampleOp, Samples};

/// GET latency histogram; labels `outcome` and `size_bucket`.
pub const GET_DURATION: Metric = Metric::new(
    "dynamo_component_image_shared_cache_get_duration_seconds",
    Kind::Histogram,
    "Shared image cache GET latency",
)
.unit(Unit::Seconds)
.labels(&[GetLabel::LABEL, SizeBucket::LABEL])
.buckets(&LATENCY_BUCKETS)
.note("`size_bucket` is `unknown` for misses and errors");
/// SET latency histogram; labels `outcome` and `size_bucket`.
pub const SET_DURATION: Metric = Metric::new(
    "dynamo_component_image_shared_cache_set_duration_seconds",
    Kind::Histogram,
    "Shared image cache SET latency",
)
.unit(Unit::Seconds)
.labels(&[WriteLabel::LABEL, SizeBucket::LABEL])
.buckets(&LATENCY_BUCKETS);
/// DEL counter; label `outcome`.
pub const DELETES: Metric = Metric::new(
    "mmcache_shared_cache_deletes_total",
    Kind::Counter,
    "Shared image cache DELs by outcome",
)
.labels(&[DeleteLabel::LABEL])
.note("`skipped`: breaker open");
/// Failure counter; labels `op` and `kind`.
pub const ERRORS: Metric = Metric::new(
    "mmcache_shared_cache_errors_total",
    Kind::Counter,
    "Shared image cache failures by operation and kind",
)
.labels(&[Op::LABEL, FailureKind::LABEL])
.note(
    "`reply`: an error reply such as WRONGTYPE or OOM from a node that answered; it opens \
     no breaker and triggers no rediscovery. `denied`: NOPERM, NOAUTH or WRONGPASS (the user \
     of `DYN_MM_SHARED_IMAGE_CACHE_URL` lacks a permission of the ACL recipe, or its password \
     is wrong): logged at error level, and the command is not sent again on that key space \
     for a cool-down (`mmcache_shared_cache::DENIED_COOLDOWN`; meanwhile \
     `skipped_total{reason=\"denied\"}`)",
);
/// Operations not attempted; labels `op` and `reason`.
pub const SKIPPED: Metric = Metric::new(
    "mmcache_shared_cache_skipped_total",
    Kind::Counter,
    "Shared image cache operations not attempted",
)
.labels(&[Op::LABEL, SkipReason::LABEL])
.note("`denied`: an operation whose command the server denied, within the denial's cool-down (see `errors_total{kind=\"denied\"}`); `no_memory`: the value not read: its length (and first step) came back, but no room for it in the download budget within the wait");
/// Breaker transitions; labels `from` and `to`.
pub const BREAKER_TRANSITIONS: Metric = Metric::new(
    "mmcache_shared_cache_breaker_transitions_total",
    Kind::Counter,
    "Shared image cache breaker transitions",
)
.labels(&[
    Label {
        name: "from",
        values: BreakerState::LABEL.values,
    },
    BreakerState::LABEL,
]);
/// Breakers currently open or half-open (gauge).
pub const BREAKERS_OPEN: Metric = Metric::new(
    "mmcache_shared_cache_breakers_open",
    Kind::Gauge,
    "Shared image cache breakers open or half-open",
);

/// Every metric this crate records.
pub const ALL: &[Metric] = &[
    GET_DURATION,
    SET_DURATION,
    DELETES,
    ERRORS,
    SKIPPED,
    BREAKER_TRANSITIONS,
    BREAKERS_OPEN,
];

/// Latency buckets in seconds, 1 ms to 4 s.
pub const LATENCY_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0,
];

mmcache_metrics::label_values! {
    /// The `size_bucket` label: a value's length (inclusive upper bounds).
    pub enum SizeBucket: "size_bucket" {
        Le64Kib = "le_64kib",
        Le256Kib = "le_256kib",
        Le1Mib = "le_1mib",
        Le4Mib = "le_4mib",
        Le16Mib = "le_16mib",
        Le32Mib = "le_32mib",
        Gt32Mib = "gt_32mib",
        /// GET misses and errors.
        Unknown = "unknown",
    }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`GET_DURATION`].
    pub enum GetLabel: "outcome" { Hit = "hit", Miss = "miss", Error = "error" }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`SET_DURATION`].
    pub enum WriteLabel: "outcome" { Success = "success", Error = "error" }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`DELETES`].
    pub enum DeleteLabel: "outcome" { Success = "success", Error = "error", Skipped = "skipped" }
}

mmcache_metrics::label_values! {
    /// The `op` label: which operation.
    pub enum Op: "op" { Get = "get", Set = "set", Del = "del", Lease = "lease" }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`SKIPPED`].
    pub enum SkipReason: "reason" {
        BreakerOpen = "breaker_open",
        TooLarge = "too_large",
        QueueFull = "queue_full",
        NoMemory = "no_memory",
        Denied = "denied",
    }
}

impl SizeBucket {
    /// The bucket of a value of `len` bytes (`None`: unknown).
    pub fn of(len: Option<usize>) -> Self {
        const KIB: usize = 1024;
        const MIB: usize = 1024 * KIB;
        match len {
            None => Self::Unknown,
            Some(n) if n <= 64 * KIB => Self::Le64Kib,
            Some(n) if n <= 256 * KIB => Self::Le256Kib,
            Some(n) if n <= MIB => Self::Le1Mib,
            Some(n) if n <= 4 * MIB => Self::Le4Mib,
            Some(n) if n <= 16 * MIB => Self::Le16Mib,
            Some(n) if n <= 32 * MIB => Self::Le32Mib,
            Some(_) => Self::Gt32Mib,
        }
    }
}

/// The `size_bucket` label of a value of `len` bytes (inclusive upper bounds).
pub fn size_bucket(len: Option<usize>) -> &'static str {
    SizeBucket::of(len).as_str()
}

/// How a GET ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GetOutcome {
    /// The entry was there.
    Hit,
    /// No entry.
    Miss,
    /// The operation failed (and the load went on without the cache).
    Error,
    /// Not attempted (circuit breaker open).
    Skipped,
    /// The entry is longer than [`crate::SharedCacheConfig::max_read_bytes`]: not read, no
    /// value returned. Recorded as a `hit` with size bucket `unknown`.
    Oversized,
    /// Not read: the read memory ([`crate::SharedCacheConfig::read_memory`]) had no room
    /// within its wait. Counted in `mmcache_shared_cache_skipped_total{reason="no_memory"}`.
    NoMemory,
}

impl GetOutcome {
    /// The metric label value. An oversized entry is a `hit` (the entry was there): the
    /// design's labels are `hit`, `miss` and `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit | Self::Oversized => "hit",
            Self::Miss => "miss",
            Self::Error => "error",
            Self::Skipped | Self::NoMemory => "skipped",
        }
    }
}

/// How a SET or DEL ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// Written (or deleted).
    Success,
    /// The operation failed.
    Error,
    /// Not attempted (breaker open, value over the size cap, write queue full).
    Skipped,
    /// Still running in the background: a bounded store whose wait ended first
    /// ([`crate::SharedCache::store_within`]). Its real outcome is recorded when it ends.
    Pending,
}

impl WriteOutcome {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Skipped => "skipped",
            Self::Pending => "pending",
        }
    }
}

/// What [`Handles::count`] counts: the events of one series, or of every series of a label
/// value summed over the other label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// GETs by outcome (every size bucket).
    Get(GetLabel),
    /// SETs by outcome (every size bucket).
    Set(WriteLabel),
    /// DELs by outcome.
    Delete(DeleteLabel),
    /// Failures of one kind (every operation).
    Error(FailureKind),
    /// Operations not attempted for one reason (every operation).
    Skip(SkipReason),
    /// Operations of one kind not attempted for one reason.
    SkipOf(Op, SkipReason),
    /// Breaker transitions from one state to another.
    Transition(BreakerState, BreakerState),
}

/// A histogram or counter per value of two labels, resolved when built.
struct Grid<T> {
    cells: Vec<T>,
    cols: usize,
}

impl<T> Grid<T> {
    fn new<A: Copy, B: Copy>(rows: &[A], cols: &[B], make: impl Fn(A, B) -> T) -> Self {
        let cells = rows
            .iter()
            .flat_map(|a| cols.iter().map(|b| make(*a, *b)).collect::<Vec<_>>())
            .collect();
        Self {
            cells,
            cols: cols.len(),
        }
    }

    fn get(&self, row: usize, col: usize) -> &T {
        &self.cells[row * self.cols + col]
    }

    fn row(&self, row: usize) -> &[T] {
        &self.cells[row * self.cols..][..self.cols]
    }

    fn col(&self, col: usize) -> impl Iterator<Item = &T> {
        self.cells.iter().skip(col).step_by(self.cols)
    }
}

impl<M> Grid<Counted<M>> {
    fn row_count(&self, row: usize) -> u64 {
        self.row(row).iter().map(Counted::count).sum()
    }

    fn col_count(&self, col: usize) -> u64 {
        self.col(col).map(Counted::count).sum()
    }
}

/// The metric handles of one cache, one per label combination, resolved when the cache is
/// built: no registry lookup and no label allocation per operation. Each also counts what this
/// cache recorded through it, and the cache's stats are read from those counts
/// ([`Handles::count`]): an event is recorded once (see `mmcache_metrics::counted`).
pub(crate) struct Handles {
    get: Grid<Counted<Histogram>>,
    set: Grid<Counted<Histogram>>,
    deletes: Vec<Counted<Counter>>,
    errors: Grid<Counted<Counter>>,
    skips: Grid<Counted<Counter>>,
    transitions: Grid<Counted<Counter>>,
    breakers_open: Gauge,
    /// Raw GET/SET samples for a scraping exporter; set once enabled (see `samples.rs`).
    pub(crate) samples: OnceLock<Samples>,
}

impl Default for Handles {
    fn default() -> Self {
        Self {
            get: Grid::new(
                GetLabel::ALL,
                SizeBucket::ALL,
                |o: GetLabel, b: SizeBucket| {
                    Counted::new(
                        metrics::histogram!(GET_DURATION.name, "outcome" => o.as_str(), "size_bucket" => b.as_str()),
                    )
                },
            ),
            set: Grid::new(
                WriteLabel::ALL,
                SizeBucket::ALL,
                |o: WriteLabel, b: SizeBucket| {
                    Counted::new(
                        metrics::histogram!(SET_DURATION.name, "outcome" => o.as_str(), "size_bucket" => b.as_str()),
                    )
                },
            ),
            deletes: DeleteLabel::ALL
                .iter()
                .map(|o| Counted::new(metrics::counter!(DELETES.name, "outcome" => o.as_str())))
                .collect(),
            errors: Grid::new(Op::ALL, FailureKind::ALL, |op: Op, k: FailureKind| {
                Counted::new(
                    metrics::counter!(ERRORS.name, "op" => op.as_str(), "kind" => k.as_str()),
                )
            }),
            skips: Grid::new(Op::ALL, SkipReason::ALL, |op: Op, r: SkipReason| {
                Counted::new(
                    metrics::counter!(SKIPPED.name, "op" => op.as_str(), "reason" => r.as_str()),
                )
            }),
            transitions: Grid::new(
                BreakerState::ALL,
                BreakerState::ALL,
                |f: BreakerState, t: BreakerState| {
                    Counted::new(
                        metrics::counter!(BREAKER_TRANSITIONS.name, "from" => f.as_str(), "to" => t.as_str()),
                    )
                },
            ),
            breakers_open: metrics::gauge!(BREAKERS_OPEN.name),
            samples: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}

impl Handles {
    pub(crate) fn record_get(&self, outcome: GetOutcome, len: Option<usize>, elapsed: Duration) {
        let label = match outcome {
            GetOutcome::Skipped | GetOutcome::NoMemory => return,
            GetOutcome::Hit | GetOutcome::Oversized => GetLabel::Hit,
            GetOutcome::Miss => GetLabel::Miss,
            GetOutcome::Error => GetLabel::Error,
        };
        let bucket = if outcome == GetOutcome::Hit {
            SizeBucket::of(len)
        } else {
            SizeBucket::Unknown
        };
        self.get
            .get(label as usize, bucket as usize)
            .record(elapsed.as_secs_f64());
        if let Some(samples) = self.samples.get() {
            samples.record(SampleOp::Get, label.as_str(), bucket.as_str(), elapsed);
        }
    }

    pub(crate) fn record_set(&self, outcome: WriteOutcome, len: usize, elapsed: Duration) {
        let label = match outcome {
            WriteOutcome::Skipped | WriteOutcome::Pending => return,
            WriteOutcome::Success => WriteLabel::Success,
            WriteOutcome::Error => WriteLabel::Error,
        };
        let bucket = SizeBucket::of(Some(len));
        self.set
            .get(label as usize, bucket as usize)
            .record(elapsed.as_secs_f64());
        if let Some(samples) = self.samples.get() {
            samples.record(SampleOp::Set, label.as_str(), bucket.as_str(), elapsed);
        }
    }

    pub(crate) fn record_delete(&self, outcome: WriteOutcome) {
        let label = match outcome {
            WriteOutcome::Success => DeleteLabel::Success,
            WriteOutcome::Error => DeleteLabel::Error,
            WriteOutcome::Skipped | WriteOutcome::Pending => DeleteLabel::Skipped,
        };
        self.deletes[label as usize].increment();
    }

    pub(crate) fn record_error(&self, op: Op, kind: FailureKind) {
        self.errors.get(op as usize, kind as usize).increment();
    }

    pub(crate) fn record_skip(&self, op: Op, reason: SkipReason) {
        self.skips.get(op as usize, reason as usize).increment();
    }

    /// How many `event`s this cache recorded.
    pub(crate) fn count(&self, event: Event) -> u64 {
        match event {
            Event::Get(label) => self.get.row_count(label as usize),
            Event::Set(label) => self.set.row_count(label as usize),
            Event::Delete(label) => self.deletes[label as usize].count(),
            Event::Error(kind) => self.errors.col_count(kind as usize),
            Event::Skip(reason) => self.skips.col_count(reason as usize),
            Event::SkipOf(op, reason) => self.skips.get(op as usize, reason as usize).count(),
            Event::Transition(from, to) => self.transitions.get(from as usize, to as usize).count(),
        }
    }

    pub(crate) fn record_breaker(&self, from: BreakerState, to: BreakerState) {
        self.transitions.get(from as usize, to as usize).increment();
        match (from, to) {
            (BreakerState::Closed, _) => self.breakers_open.increment(1.0),
            (_, BreakerState::Closed) => self.breakers_open.decrement(1.0),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets_have_inclusive_bounds() {
        const KIB: usize = 1024;
        let cases = [
            (None, "unknown"),
            (Some(0), "le_64kib"),
            (Some(64 * KIB), "le_64kib"),
            (Some(64 * KIB + 1), "le_256kib"),
            (Some(256 * KIB), "le_256kib"),
            (Some(1024 * KIB), "le_1mib"),
            (Some(1024 * KIB + 1), "le_4mib"),
            (Some(4 * 1024 * KIB), "le_4mib"),
            (Some(16 * 1024 * KIB), "le_16mib"),
            (Some(32 * 1024 * KIB), "le_32mib"),
            (Some(32 * 1024 * KIB + 1), "gt_32mib"),
        ];
        for (len, want) in cases {
            assert_eq!(size_bucket(len), want, "{len:?}");
        }
    }

    #[test]
    fn buckets_span_1ms_to_4s() {
        assert_eq!(LATENCY_BUCKETS.first(), Some(&0.001));
        assert_eq!(LATENCY_BUCKETS.last(), Some(&4.0));
        assert!(LATENCY_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}

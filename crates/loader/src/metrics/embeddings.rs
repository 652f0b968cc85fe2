//! The embedding caches' metrics, declared once, and the handles they record through. No
//! label ever holds a key, a model id or a scope.

use ::metrics::{Counter, Histogram};
use mmcache_decode::WireErrorKind;
use mmcache_decode::metrics::MemoryTier;
use mmcache_metrics::metric::{Kind, Metric, Unit};

use crate::metric_labels::PerLabel;

/// Lookups that found an entry; label `tier`.
pub const HITS: Metric = Metric::new(
    "mmcache_embedding_cache_hits_total",
    Kind::Counter,
    "Embedding-cache lookups that hit, by tier",
)
.labels(&[Tier::LABEL])
.note("fleet tiers: values that verified");
/// Lookups that found none; label `tier`.
pub const MISSES: Metric = Metric::new(
    "mmcache_embedding_cache_misses_total",
    Kind::Counter,
    "Embedding-cache lookups that missed, by tier",
)
.labels(&[Tier::LABEL])
.note("fleet tiers: absent, failed, or refused");
/// Entries that left to make room; label `tier`.
pub const EVICTIONS: Metric = Metric::new(
    "mmcache_embedding_cache_evictions_total",
    Kind::Counter,
    "Embedding-cache entries evicted, by tier",
)
.labels(&[MemoryTier::LABEL])
.note("entries that left to make room");
/// Entries not stored because heavier than the budget (or a budget of 0); label `tier`.
pub const NOT_STORED: Metric = Metric::new(
    "mmcache_embedding_cache_not_stored_total",
    Kind::Counter,
    "Embeddings not stored (over budget), by tier",
)
.labels(&[MemoryTier::LABEL])
.note("entries heavier than the budget, or a budget of 0");
/// Entries held (gauge); label `tier`. Recorded by `mmcache_decode::EmbeddingStore`.
pub const ENTRIES: Metric = mmcache_decode::metrics::EMBEDDING_CACHE_ENTRIES;
/// Weighed bytes held (gauge); label `tier`. Recorded by `mmcache_decode::EmbeddingStore`.
pub const BYTES: Metric = mmcache_decode::metrics::EMBEDDING_CACHE_BYTES;
/// Computes run, by `outcome`.
pub const COMPUTES: Metric = Metric::new(
    "mmcache_embedding_computes_total",
    Kind::Counter,
    "Embedding computes run, by outcome",
)
.labels(&[ComputeOutcome::LABEL])
.note("`timeout`: past `MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`");
/// Compute duration in seconds; label `outcome` (as [`COMPUTES`]).
pub const COMPUTE_DURATION: Metric = Metric::new(
    "mmcache_embedding_compute_duration_seconds",
    Kind::Histogram,
    "Embedding compute duration, by outcome",
)
.unit(Unit::Seconds)
.labels(&[ComputeOutcome::LABEL])
.buckets(&COMPUTE_DURATION_BUCKETS);
/// Callers that joined a compute already in flight.
pub const COALESCED: Metric = Metric::new(
    "mmcache_embedding_coalesced_total",
    Kind::Counter,
    "Callers that joined an embedding compute in flight",
);
/// Calls that bypassed every cache and join; label `reason`.
pub const BYPASSES: Metric = Metric::new(
    "mmcache_embedding_bypass_total",
    Kind::Counter,
    "Embedding calls that bypassed every cache",
)
.labels(&[crate::metric_labels::BypassReason::LABEL]);
/// Bytes read from a fleet tier in values that verified; label `tier`.
pub const READ_BYTES: Metric = Metric::new(
    "mmcache_embedding_cache_read_bytes_total",
    Kind::Counter,
    "Embedding bytes read from a fleet tier",
)
.unit(Unit::Bytes)
.labels(&[FleetTier::LABEL]);
/// Bytes of values written to a fleet tier; label `tier`.
pub const WRITTEN_BYTES: Metric = Metric::new(
    "mmcache_embedding_cache_written_bytes_total",
    Kind::Counter,
    "Embedding bytes written to a fleet tier",
)
.unit(Unit::Bytes)
.labels(&[FleetTier::LABEL]);
/// Values written to a fleet tier; labels `tier`, `outcome`.
pub const WRITES: Metric = Metric::new(
    "mmcache_embedding_cache_writes_total",
    Kind::Counter,
    "Embedding values written to a fleet tier",
)
.labels(&[FleetTier::LABEL, crate::metric_labels::Outcome::LABEL]);
/// Values refused on read and deleted from their tier; labels `tier`, `reason`.
pub const DELETED: Metric = Metric::new(
    "mmcache_embedding_cache_deleted_total",
    Kind::Counter,
    "Bad embedding values deleted from a fleet tier",
)
.labels(&[FleetTier::LABEL, DeleteReason::LABEL])
.note("bad for every reader; deleted only if still the value read, then recomputed");
/// Values this reader could not use but others may, left in place; labels `tier`, `reason`.
pub const KEPT: Metric = Metric::new(
    "mmcache_embedding_cache_kept_total",
    Kind::Counter,
    "Embedding values left in a fleet tier that this reader cannot use",
)
.labels(&[FleetTier::LABEL, KeptReason::LABEL])
.note(
    "over this reader's `MMCACHE_EMBEDDING_MAX_VALUE_BYTES`, or a newer format version: a \
     miss, nothing deleted or overwritten",
);
/// Writes to a fleet tier not made or not finished; labels `tier`, `reason`.
pub const WRITES_DROPPED: Metric = Metric::new(
    "mmcache_embedding_cache_writes_dropped_total",
    Kind::Counter,
    "Embedding writes to a fleet tier dropped",
)
.labels(&[FleetTier::LABEL, DropReason::LABEL])
.note(
    "`queue_full`, `no_memory`: over the write bounds; `too_large`: over \
     `DYN_MM_MAX_FILE_SIZE_MB`; `deadline`: a chunked write past its deadline; `skipped`: the \
     disk tier skipped it",
);
/// Computed values not written to the fleet tiers; label `reason`.
pub const FLEET_NOT_STORED: Metric = Metric::new(
    "mmcache_embedding_fleet_not_stored_total",
    Kind::Counter,
    "Embeddings not written to the fleet tiers",
)
.labels(&[NotStoredReason::LABEL]);
/// Lease attempts on a shared miss; label `outcome`.
pub const LEASES: Metric = Metric::new(
    "mmcache_embedding_lease_total",
    Kind::Counter,
    "Embedding lease attempts, by outcome",
)
.labels(&[LeaseOutcome::LABEL]);
/// How the waits for another process's compute ended; label `outcome`.
pub const LEASE_WAITS: Metric = Metric::new(
    "mmcache_embedding_lease_waits_total",
    Kind::Counter,
    "Waits for another process's embedding compute",
)
.labels(&[LeaseWait::LABEL])
.note(
    "`hit`: its value came, the fleet's coalesced join; `took_over`: its lease expired and \
     this process computes; `not_stored`: its value will not be stored, so this process \
     computes at once",
);

/// Every embedding metric the loader records ([`ENTRIES`] and [`BYTES`] are
/// `mmcache_decode`'s).
pub const ALL: &[Metric] = &[
    HITS,
    MISSES,
    EVICTIONS,
    NOT_STORED,
    COMPUTES,
    COMPUTE_DURATION,
    COALESCED,
    BYPASSES,
    READ_BYTES,
    WRITTEN_BYTES,
    WRITES,
    DELETED,
    KEPT,
    WRITES_DROPPED,
    FLEET_NOT_STORED,
    LEASES,
    LEASE_WAITS,
];

/// Compute-duration buckets, in seconds: a vision encoder takes milliseconds to seconds.
pub const COMPUTE_DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

mmcache_metrics::label_values! {
    /// The `tier` label of hits and misses.
    pub enum Tier: "tier" { Memory = "memory", Disk = "disk", Shared = "shared" }
}

mmcache_metrics::label_values! {
    /// The `tier` label of the fleet tiers' metrics.
    pub enum FleetTier: "tier" { Disk = "disk", Shared = "shared" }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`COMPUTES`] and [`COMPUTE_DURATION`].
    pub enum ComputeOutcome: "outcome" {
        Ok = "ok",
        Error = "error",
        Panic = "panic",
        Cancelled = "cancelled",
        Timeout = "timeout",
    }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`DELETED`]: why a value read from a tier is bad for every
    /// reader (`foreign`: not ours at all).
    pub enum DeleteReason: "reason" {
        Truncated = "truncated",
        Corrupt = "corrupt",
        Foreign = "foreign",
        OtherKey = "other_key",
    }
}

impl DeleteReason {
    /// The reason of a value refused on read; `None` for a size (only ever over this reader's
    /// cap, never deleted). Reading never finds a value unencodable; were it to, the value
    /// is one this process cannot use: corrupt.
    pub(crate) fn of(kind: WireErrorKind) -> Option<Self> {
        match kind {
            WireErrorKind::Truncated => Some(Self::Truncated),
            WireErrorKind::Foreign => Some(Self::Foreign),
            WireErrorKind::Corrupt | WireErrorKind::Unencodable => Some(Self::Corrupt),
            WireErrorKind::OtherKey => Some(Self::OtherKey),
            WireErrorKind::Oversized => None,
        }
    }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`KEPT`].
    pub enum KeptReason: "reason" { Oversized = "oversized", Version = "version" }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`WRITES_DROPPED`].
    pub enum DropReason: "reason" {
        QueueFull = "queue_full",
        NoMemory = "no_memory",
        TooLarge = "too_large",
        Deadline = "deadline",
        Skipped = "skipped",
    }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`FLEET_NOT_STORED`]: why a computed value was not written.
    pub enum NotStoredReason: "reason" { Oversized = "oversized", Unencodable = "unencodable" }
}

impl NotStoredReason {
    /// The reason of a value that did not encode (encoding fails only by size or by content).
    pub(crate) fn of(kind: WireErrorKind) -> Self {
        match kind {
            WireErrorKind::Oversized => Self::Oversized,
            WireErrorKind::Truncated
            | WireErrorKind::Foreign
            | WireErrorKind::Corrupt
            | WireErrorKind::OtherKey
            | WireErrorKind::Unencodable => Self::Unencodable,
        }
    }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`LEASES`].
    pub enum LeaseOutcome: "outcome" { Won = "won", Held = "held", Unavailable = "unavailable" }
}

mmcache_metrics::label_values! {
    /// The `outcome` label of [`LEASE_WAITS`].
    pub enum LeaseWait: "outcome" {
        Hit = "hit",
        TookOver = "took_over",
        NotStored = "not_stored",
        TimedOut = "timed_out",
        Unavailable = "unavailable",
    }
}

/// The embedding store's handles, resolved when the loader is built.
#[derive(Debug)]
pub(crate) struct Handles {
    pub(crate) hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) evictions: Counter,
    pub(crate) not_stored: Counter,
    pub(crate) coalesced: Counter,
    pub(crate) bypasses: Counter,
    computes: PerLabel<Counter>,
    compute_duration: PerLabel<Histogram>,
}

impl Handles {
    pub(crate) fn new() -> Self {
        let memory = Tier::Memory.as_str();
        Self {
            hits: ::metrics::counter!(HITS.name, "tier" => memory),
            misses: ::metrics::counter!(MISSES.name, "tier" => memory),
            evictions: ::metrics::counter!(EVICTIONS.name, "tier" => memory),
            not_stored: ::metrics::counter!(NOT_STORED.name, "tier" => memory),
            coalesced: ::metrics::counter!(COALESCED.name),
            bypasses: ::metrics::counter!(
                BYPASSES.name,
                "reason" => crate::metric_labels::BypassReason::NoScope.as_str()
            ),
            computes: PerLabel::new(
                ComputeOutcome::ALL,
                |o: ComputeOutcome| ::metrics::counter!(COMPUTES.name, "outcome" => o.as_str()),
            ),
            compute_duration: PerLabel::new(
                ComputeOutcome::ALL,
                |o: ComputeOutcome| ::metrics::histogram!(COMPUTE_DURATION.name, "outcome" => o.as_str()),
            ),
        }
    }

    /// Records one compute's outcome and duration.
    pub(crate) fn computed(&self, outcome: ComputeOutcome, seconds: f64) {
        self.computes.get(outcome as usize).increment(1);
        self.compute_duration.get(outcome as usize).record(seconds);
    }
}

/// A counter's handles by `tier`, then by `reason`.
type ByTierAndReason = PerLabel<PerLabel<Counter>>;

fn by_tier_and_reason<R: Copy>(
    name: &'static str,
    reasons: &'static [R],
    label: fn(R) -> &'static str,
) -> ByTierAndReason {
    PerLabel::new(FleetTier::ALL, |t: FleetTier| {
        PerLabel::new(
            reasons,
            move |r: R| ::metrics::counter!(name, "tier" => t.as_str(), "reason" => label(r)),
        )
    })
}

fn bump(counters: &ByTierAndReason, tier: FleetTier, reason: usize) {
    counters.get(tier as usize).get(reason).increment(1);
}

/// The fleet tiers' handles, resolved when the loader is built.
#[derive(Debug)]
pub(crate) struct FleetMetrics {
    hits: PerLabel<Counter>,
    misses: PerLabel<Counter>,
    read_bytes: PerLabel<Counter>,
    written_bytes: PerLabel<Counter>,
    writes_ok: PerLabel<Counter>,
    writes_error: PerLabel<Counter>,
    deleted: ByTierAndReason,
    kept: ByTierAndReason,
    dropped: ByTierAndReason,
    not_stored: PerLabel<Counter>,
    leases: PerLabel<Counter>,
    lease_waits: PerLabel<Counter>,
}

impl FleetMetrics {
    pub(crate) fn new() -> Self {
        use crate::metric_labels::Outcome;
        let per_tier = |name: &'static str| {
            PerLabel::new(
                FleetTier::ALL,
                move |t: FleetTier| ::metrics::counter!(name, "tier" => t.as_str()),
            )
        };
        let writes = |o: Outcome| {
            PerLabel::new(
                FleetTier::ALL,
                move |t: FleetTier| ::metrics::counter!(WRITES.name, "tier" => t.as_str(), "outcome" => o.as_str()),
            )
        };
        Self {
            hits: per_tier(HITS.name),
            misses: per_tier(MISSES.name),
            read_bytes: per_tier(READ_BYTES.name),
            written_bytes: per_tier(WRITTEN_BYTES.name),
            writes_ok: writes(Outcome::Ok),
            writes_error: writes(Outcome::Error),
            deleted: by_tier_and_reason(DELETED.name, DeleteReason::ALL, DeleteReason::as_str),
            kept: by_tier_and_reason(KEPT.name, KeptReason::ALL, KeptReason::as_str),
            dropped: by_tier_and_reason(WRITES_DROPPED.name, DropReason::ALL, DropReason::as_str),
            not_stored: PerLabel::new(
                NotStoredReason::ALL,
                |r: NotStoredReason| ::metrics::counter!(FLEET_NOT_STORED.name, "reason" => r.as_str()),
            ),
            leases: PerLabel::new(
                LeaseOutcome::ALL,
                |o: LeaseOutcome| ::metrics::counter!(LEASES.name, "outcome" => o.as_str()),
            ),
            lease_waits: PerLabel::new(
                LeaseWait::ALL,
                |o: LeaseWait| ::metrics::counter!(LEASE_WAITS.name, "outcome" => o.as_str()),
            ),
        }
    }
    pub(crate) fn hit(&self, tier: FleetTier, bytes: usize) {
        self.hits.get(tier as usize).increment(1);
        self.read_bytes.get(tier as usize).increment(bytes as u64);
    }
    pub(crate) fn miss(&self, tier: FleetTier) {
        self.misses.get(tier as usize).increment(1);
    }
    pub(crate) fn written(&self, tier: FleetTier, bytes: usize) {
        self.writes_ok.get(tier as usize).increment(1);
        self.written_bytes
            .get(tier as usize)
            .increment(bytes as u64);
    }
    pub(crate) fn write_failed(&self, tier: FleetTier) {
        self.writes_error.get(tier as usize).increment(1);
    }
    pub(crate) fn deleted(&self, tier: FleetTier, reason: WireErrorKind) {
        if let Some(reason) = DeleteReason::of(reason) {
            bump(&self.deleted, tier, reason as usize);
        }
    }
    pub(crate) fn kept(&self, tier: FleetTier, reason: KeptReason) {
        bump(&self.kept, tier, reason as usize);
    }
    pub(crate) fn dropped(&self, tier: FleetTier, reason: DropReason) {
        bump(&self.dropped, tier, reason as usize);
    }
    pub(crate) fn not_stored(&self, reason: WireErrorKind) {
        let reason = NotStoredReason::of(reason);
        self.not_stored.get(reason as usize).increment(1);
    }
    pub(crate) fn lease(&self, outcome: LeaseOutcome) {
        self.leases.get(outcome as usize).increment(1);
    }
    pub(crate) fn lease_wait(&self, outcome: LeaseWait) {
        self.lease_waits.get(outcome as usize).increment(1);
    }
}

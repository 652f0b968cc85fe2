//! Metric names of the embedding caches. Label `tier` is `memory`, `disk` or `shared`. No
//! label ever holds a key, a model id or a scope.

use ::metrics::{Counter, Histogram};

/// Lookups that found an entry; label `tier`.
pub const HITS: &str = "mmcache_embedding_cache_hits_total";
/// Lookups that found none; label `tier`.
pub const MISSES: &str = "mmcache_embedding_cache_misses_total";
/// Entries that left to make room; label `tier`.
pub const EVICTIONS: &str = "mmcache_embedding_cache_evictions_total";
/// Entries not stored because heavier than the budget (or a budget of 0); label `tier`.
pub const NOT_STORED: &str = "mmcache_embedding_cache_not_stored_total";
/// Entries held (gauge); label `tier`. Recorded by `mmcache_decode::EmbeddingStore`.
pub const ENTRIES: &str = mmcache_decode::metrics::EMBEDDING_CACHE_ENTRIES;
/// Weighed bytes held (gauge); label `tier`. Recorded by `mmcache_decode::EmbeddingStore`.
pub const BYTES: &str = mmcache_decode::metrics::EMBEDDING_CACHE_BYTES;
/// Computes run, by `outcome` (`ok`, `error`, `panic`, `cancelled`, `timeout`: past
/// `MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`).
pub const COMPUTES: &str = "mmcache_embedding_computes_total";
/// Callers that joined a compute already in flight.
pub const COALESCED: &str = "mmcache_embedding_coalesced_total";
/// Calls that bypassed every cache and join; label `reason` (`no_scope`).
pub const BYPASSES: &str = "mmcache_embedding_bypass_total";
/// Compute duration in seconds; label `outcome` (as [`COMPUTES`]).
pub const COMPUTE_DURATION: &str = "mmcache_embedding_compute_duration_seconds";

/// Compute-duration buckets, in seconds: a vision encoder takes milliseconds to seconds.
pub const COMPUTE_DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Registers descriptions of the embedding metrics with the installed recorder.
pub fn describe() {
    describe_fleet();
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(HITS, "Embedding-cache lookups that hit, by tier");
    describe_counter!(MISSES, "Embedding-cache lookups that missed, by tier");
    describe_counter!(EVICTIONS, "Embedding-cache entries evicted, by tier");
    describe_counter!(NOT_STORED, "Embeddings not stored (over budget), by tier");
    describe_gauge!(ENTRIES, "Entries in the embedding cache, by tier");
    describe_gauge!(BYTES, Unit::Bytes, "Weighed bytes in the embedding cache");
    describe_counter!(COMPUTES, "Embedding computes run, by outcome");
    describe_counter!(
        COALESCED,
        "Callers that joined an embedding compute in flight"
    );
    describe_counter!(BYPASSES, "Embedding calls that bypassed every cache");
    describe_histogram!(
        COMPUTE_DURATION,
        Unit::Seconds,
        "Embedding compute duration, by outcome"
    );
}

/// Handles resolved once, when the loader is built.
#[derive(Debug)]
pub(crate) struct Handles {
    pub(crate) hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) evictions: Counter,
    pub(crate) not_stored: Counter,
    pub(crate) coalesced: Counter,
    pub(crate) bypasses: Counter,
}

impl Handles {
    pub(crate) fn new() -> Self {
        let tier = || [("tier", "memory")];
        Self {
            hits: ::metrics::counter!(HITS, &tier()),
            misses: ::metrics::counter!(MISSES, &tier()),
            evictions: ::metrics::counter!(EVICTIONS, &tier()),
            not_stored: ::metrics::counter!(NOT_STORED, &tier()),
            coalesced: ::metrics::counter!(COALESCED),
            bypasses: ::metrics::counter!(BYPASSES, "reason" => "no_scope"),
        }
    }

    /// Records one compute's outcome and duration.
    pub(crate) fn computed(&self, outcome: &'static str, seconds: f64) {
        ::metrics::counter!(COMPUTES, "outcome" => outcome).increment(1);
        let h: Histogram = ::metrics::histogram!(COMPUTE_DURATION, "outcome" => outcome);
        h.record(seconds);
    }
}

/// Bytes read from a fleet tier in values that verified; label `tier` (`disk`, `shared`).
pub const READ_BYTES: &str = "mmcache_embedding_cache_read_bytes_total";
/// Bytes of values written to a fleet tier; label `tier`.
pub const WRITTEN_BYTES: &str = "mmcache_embedding_cache_written_bytes_total";
/// Values written to a fleet tier; labels `tier`, `outcome` (`ok`, `error`).
pub const WRITES: &str = "mmcache_embedding_cache_writes_total";
/// Values refused on read and deleted from their tier; labels `tier`, `reason` (`truncated`,
/// `corrupt`, `foreign`, `other_key`, `oversized`).
pub const DELETED: &str = "mmcache_embedding_cache_deleted_total";
/// Computed values not written to the fleet tiers; label `reason` (`oversized`,
/// `unencodable`).
pub const FLEET_NOT_STORED: &str = "mmcache_embedding_fleet_not_stored_total";
/// Lease attempts on a shared miss; label `outcome` (`won`, `held`, `unavailable`).
pub const LEASES: &str = "mmcache_embedding_lease_total";
/// How the waits for another process's compute ended; label `outcome` (`hit`: its value
/// came, the fleet's coalesced join; `took_over`: its lease expired and this process
/// computes; `timed_out`; `unavailable`).
pub const LEASE_WAITS: &str = "mmcache_embedding_lease_waits_total";

/// Registers descriptions of the fleet-tier metrics.
pub fn describe_fleet() {
    use ::metrics::{Unit, describe_counter};
    describe_counter!(
        READ_BYTES,
        Unit::Bytes,
        "Embedding bytes read from a fleet tier"
    );
    describe_counter!(
        WRITTEN_BYTES,
        Unit::Bytes,
        "Embedding bytes written to a fleet tier"
    );
    describe_counter!(WRITES, "Embedding values written to a fleet tier");
    describe_counter!(DELETED, "Bad embedding values deleted from a fleet tier");
    describe_counter!(
        FLEET_NOT_STORED,
        "Embeddings not written to the fleet tiers"
    );
    describe_counter!(LEASES, "Embedding lease attempts, by outcome");
    describe_counter!(LEASE_WAITS, "Waits for another process's embedding compute");
}

/// Fleet-tier counters (labels are fixed sets: resolved per call, cheaply).
#[derive(Debug, Clone, Default)]
pub(crate) struct FleetMetrics;

impl FleetMetrics {
    pub(crate) fn new() -> Self {
        Self
    }
    pub(crate) fn hit(&self, tier: &'static str, bytes: usize) {
        ::metrics::counter!(HITS, "tier" => tier).increment(1);
        ::metrics::counter!(READ_BYTES, "tier" => tier).increment(bytes as u64);
    }
    pub(crate) fn miss(&self, tier: &'static str) {
        ::metrics::counter!(MISSES, "tier" => tier).increment(1);
    }
    pub(crate) fn written(&self, tier: &'static str, bytes: usize) {
        ::metrics::counter!(WRITES, "tier" => tier, "outcome" => "ok").increment(1);
        ::metrics::counter!(WRITTEN_BYTES, "tier" => tier).increment(bytes as u64);
    }
    pub(crate) fn write_failed(&self, tier: &'static str) {
        ::metrics::counter!(WRITES, "tier" => tier, "outcome" => "error").increment(1);
    }
    pub(crate) fn deleted(&self, tier: &'static str, reason: &'static str) {
        ::metrics::counter!(DELETED, "tier" => tier, "reason" => reason).increment(1);
    }
    pub(crate) fn not_stored(&self, reason: &'static str) {
        ::metrics::counter!(FLEET_NOT_STORED, "reason" => reason).increment(1);
    }
    pub(crate) fn lease(&self, outcome: &'static str) {
        ::metrics::counter!(LEASES, "outcome" => outcome).increment(1);
    }
    pub(crate) fn lease_wait(&self, outcome: &'static str) {
        ::metrics::counter!(LEASE_WAITS, "outcome" => outcome).increment(1);
    }
}

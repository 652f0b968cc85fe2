//! Metric names of the embedding caches. Label `tier` is `memory` for now (the fleet tiers
//! will add `disk` and `shared`). No label ever holds a key, a model id or a scope.

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
pub const ENTRIES: &str = "mmcache_embedding_cache_entries";
/// Weighed bytes held (gauge); label `tier`. Recorded by `mmcache_decode::EmbeddingStore`.
pub const BYTES: &str = "mmcache_embedding_cache_bytes";
/// Computes run, by `outcome` (`ok`, `error`, `panic`, `cancelled`).
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

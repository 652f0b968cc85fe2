//! The metrics this crate records, declared once: the gauges of its caches. They move by
//! deltas, so every cache of one kind in a process adds to them, and each cache takes its share
//! out on drop. `mmcache_loader::metrics` describes them; docs/metrics.md is generated from
//! these declarations.

use mmcache_metrics::metric::{Kind, Metric, Unit};

/// Decoded-image cache entries (gauge): images held, an image shared by several identities once.
pub const DECODED_CACHE_ENTRIES: Metric = Metric::new(
    "mmcache_decoded_cache_entries",
    Kind::Gauge,
    "Entries in the decoded-image cache",
);
/// Decoded-image cache weighed bytes (gauge): pixels plus
/// [`ENTRY_OVERHEAD_BYTES`](crate::ENTRY_OVERHEAD_BYTES) per entry.
pub const DECODED_CACHE_BYTES: Metric = Metric::new(
    "mmcache_decoded_cache_bytes",
    Kind::Gauge,
    "Weighed bytes in the decoded-image cache",
)
.unit(Unit::Bytes)
.note("weighed bytes: pixels + 256 per entry");
/// Embedding cache entries (gauge), label `tier` = `memory`.
pub const EMBEDDING_CACHE_ENTRIES: Metric = Metric::new(
    "mmcache_embedding_cache_entries",
    Kind::Gauge,
    "Entries in the embedding cache, by tier",
)
.labels(&[MemoryTier::LABEL]);
/// Embedding cache weighed bytes (gauge), label `tier` = `memory`.
pub const EMBEDDING_CACHE_BYTES: Metric = Metric::new(
    "mmcache_embedding_cache_bytes",
    Kind::Gauge,
    "Weighed bytes in the embedding cache",
)
.unit(Unit::Bytes)
.labels(&[MemoryTier::LABEL])
.note("weighed bytes: tensor + metadata + shape + 320 per entry");

mmcache_metrics::label_values! {
    /// The embedding gauges' `tier` label: only the in-memory
    /// [`EmbeddingStore`](crate::EmbeddingStore) has gauges.
    pub enum MemoryTier: "tier" { Memory = "memory" }
}

/// Every metric above.
pub const ALL: &[Metric] = &[
    DECODED_CACHE_ENTRIES,
    DECODED_CACHE_BYTES,
    EMBEDDING_CACHE_ENTRIES,
    EMBEDDING_CACHE_BYTES,
];

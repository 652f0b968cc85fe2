//! Metric names this crate records: the gauges of its caches. They move by deltas, so every
//! cache of one kind in a process adds to them, and each cache takes its share out on drop.
//! `mmcache_loader::metrics` describes them; docs/metrics.md lists them.

/// Decoded-image cache entries (gauge): images held, an image shared by several identities once.
pub const DECODED_CACHE_ENTRIES: &str = "mmcache_decoded_cache_entries";
/// Decoded-image cache weighed bytes (gauge): pixels plus
/// [`ENTRY_OVERHEAD_BYTES`](crate::ENTRY_OVERHEAD_BYTES) per entry.
pub const DECODED_CACHE_BYTES: &str = "mmcache_decoded_cache_bytes";
/// Embedding cache entries (gauge), label [`TIER`] = [`TIER_MEMORY`].
pub const EMBEDDING_CACHE_ENTRIES: &str = "mmcache_embedding_cache_entries";
/// Embedding cache weighed bytes (gauge), label [`TIER`] = [`TIER_MEMORY`].
pub const EMBEDDING_CACHE_BYTES: &str = "mmcache_embedding_cache_bytes";

/// The embedding gauges' label: which tier holds the entries.
pub const TIER: &str = "tier";
/// [`TIER`]'s value for the in-memory [`EmbeddingStore`](crate::EmbeddingStore).
pub const TIER_MEMORY: &str = "memory";

/// Every metric name above.
pub const ALL: [&str; 4] = [
    DECODED_CACHE_ENTRIES,
    DECODED_CACHE_BYTES,
    EMBEDDING_CACHE_ENTRIES,
    EMBEDDING_CACHE_BYTES,
];

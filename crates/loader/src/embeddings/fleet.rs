//! The fleet tiers of embeddings: the host's disk tier and the shared cache, with the
//! stampede lease, under a key space of our own. The tiers store bytes; the value format is
//! `mmcache_decode`'s (`encode_value` / `decode_value`), checked on every read.
//!
//! One job per module: `read` (reads, and deletes of values bad for every reader), `lease`
//! (taking, renewing and waiting for the lease), `write` (bounded writes of computed values).
//!
//! Keys: shared `mmcache:emb:v1:{<key hex>}` (a value, or the manifest of a chunked value),
//! chunks `mmcache:emb:v1:{<key hex>.<generation>.<i>}:chunk` (each its own hash tag, so the
//! chunks of one value spread over the cluster's slots), the lease
//! `mmcache:emb:v1:{<key hex>}:lease`; disk: an entry named by a blake3 derivation of the key.

mod lease;
mod read;
mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mmcache_decode::Embedding;
use mmcache_disk_cache::{DiskCache, EntryName, Fill, FillLock};
use mmcache_origin::DownloadBudget;
use mmcache_scope::EmbeddingKey;
use mmcache_shared_cache::SharedCache;

use super::EmbeddingSource;
use crate::background::Background;
use crate::config::Config;
use crate::metrics::embeddings::FleetMetrics;
use crate::write_memory::WriteMemory;
use read::Found;
pub use write::FleetWrites;

/// A chunked read or write takes at most this many of the shared cache's operation deadlines
/// in all: one GET or SET at a time, each under the cache's own deadline, could add up to
/// minutes on a master that answers just in time (36 for a 9.3 MB value).
const CHUNKED_DEADLINES: u32 = 2;

/// The fleet tiers of one loader (both `None` when off).
pub(crate) struct Fleet {
    disk: Option<DiskCache>,
    shared: Option<SharedCache>,
    /// The lease TTL, when the lease is on.
    lease: Option<Duration>,
    /// How long a process of the host waits for another's compute (disk fill lock).
    disk_wait: Duration,
    /// The longest a waiter waits for the lease's holder: as long as a live holder may hold it
    /// (the compute deadline, then a write's deadline), and one TTL more.
    wait_limit: Duration,
    ttl: Duration,
    max_value: u64,
    chunk: u64,
    /// The download budget: a chunked read reserves its assembly buffer there.
    read_memory: DownloadBudget,
    /// The write allowance: every write holds its bytes under it.
    write_memory: WriteMemory,
    writes: Arc<write::Writes>,
    background: Arc<Background>,
    m: Arc<FleetMetrics>,
    #[cfg(feature = "test-seams")]
    before_delete: std::sync::Mutex<Option<Seam>>,
}

/// A test seam's hook.
#[cfg(feature = "test-seams")]
pub type Seam = Arc<dyn Fn() + Send + Sync>;

/// What a lookup before the compute found.
pub(crate) enum Before {
    /// A verified value.
    Hit(Embedding, EmbeddingSource),
    /// Nothing: compute, holding these until the value is written.
    Compute(Held),
}

/// What this process holds while it computes, and what it found.
#[derive(Default)]
pub(crate) struct Held {
    disk_lock: Option<FillLock>,
    lease: Option<lease::HeldLease>,
    /// The disk tier holds a value other readers may use (over this one's cap, a newer
    /// format): it is not overwritten.
    keep_disk: bool,
    /// The same, in the shared cache.
    keep_shared: bool,
}

/// The shared-cache key of `key`'s value (or its chunks' manifest):
/// `mmcache:emb:v1:{<key hex>}`.
pub fn shared_key(key: &EmbeddingKey) -> String {
    format!("mmcache:emb:v1:{{{}}}", key.to_hex())
}

pub(crate) fn lease_key(key: &EmbeddingKey) -> String {
    format!("mmcache:emb:v1:{{{}}}:lease", key.to_hex())
}

fn chunk_key(key: &EmbeddingKey, generation: u64, i: u32) -> String {
    format!(
        "mmcache:emb:v1:{{{}.{generation:016x}.{i}}}:chunk",
        key.to_hex()
    )
}

/// The disk-tier entry name of `key` (see `DiskCache::path_of_named` for its file).
pub fn disk_entry_name(key: &EmbeddingKey) -> EntryName {
    const CONTEXT: &str = "mmcache 2026-12 embedding disk entry v1";
    EntryName::from_digest(&blake3::derive_key(CONTEXT, key.as_bytes()))
}

impl Fleet {
    pub(crate) fn new(
        config: &Config,
        disk: &Option<DiskCache>,
        shared: &Option<SharedCache>,
        memory: (&DownloadBudget, &WriteMemory),
        background: &Arc<Background>,
    ) -> Self {
        let on = config.embedding_fleet;
        let lease = config.shared.lease;
        let write_deadline = config
            .shared
            .op_deadline()
            .saturating_mul(CHUNKED_DEADLINES);
        Self {
            disk: disk.clone().filter(|_| on),
            shared: shared.clone().filter(|_| on),
            lease: lease.enabled.then_some(lease.ttl),
            disk_wait: lease.ttl,
            wait_limit: config.embedding_compute_timeout() + write_deadline + lease.ttl,
            ttl: config.shared.ttl,
            max_value: config.embedding_max_value_bytes,
            chunk: config.embedding_chunk_bytes,
            read_memory: memory.0.clone(),
            write_memory: memory.1.clone(),
            writes: Arc::default(),
            background: background.clone(),
            m: Arc::new(FleetMetrics::new()),
            #[cfg(feature = "test-seams")]
            before_delete: std::sync::Mutex::new(None),
        }
    }

    /// Whether any fleet tier is on.
    pub(crate) fn enabled(&self) -> bool {
        self.disk.is_some() || self.shared.is_some()
    }

    /// The deadline of a chunked read or write.
    fn chunked_deadline(shared: &SharedCache) -> Duration {
        shared
            .config()
            .op_deadline()
            .saturating_mul(CHUNKED_DEADLINES)
    }

    /// Disk, then shared cache, then the lease; the caller computes on [`Before::Compute`].
    pub(crate) async fn before_compute(&self, key: &EmbeddingKey, model: &str) -> Before {
        let mut held = Held::default();
        if let Some(disk) = &self.disk {
            match self.read_disk(disk, key, model).await {
                Found::Hit(e, _) => return Before::Hit(e, EmbeddingSource::Disk),
                Found::Kept => held.keep_disk = true,
                Found::Miss => {
                    // One process of the host computes; the others wait for its entry.
                    if let Fill::Locked(lock) =
                        disk.lock_named(&disk_entry_name(key), self.disk_wait).await
                    {
                        held.disk_lock = Some(lock);
                    }
                    match self.read_disk(disk, key, model).await {
                        Found::Hit(e, _) => return Before::Hit(e, EmbeddingSource::Disk),
                        Found::Kept => held.keep_disk = true,
                        Found::Miss => {}
                    }
                }
            }
        }
        let Some(shared) = &self.shared else {
            return Before::Compute(held);
        };
        match self.read_shared(shared, key, model).await {
            Found::Hit(e, value) => {
                self.shared_hit_to_disk(key, value, &mut held);
                return Before::Hit(e, EmbeddingSource::Shared);
            }
            // A value others may use: nothing this process computes will be stored, so
            // nobody waits for it (no lease).
            Found::Kept => {
                held.keep_shared = true;
                return Before::Compute(held);
            }
            Found::Miss => {}
        }
        match self.lease {
            Some(ttl) => self.lease_or_wait(shared, key, model, ttl, held).await,
            None => Before::Compute(held),
        }
    }

    /// Disk, then shared cache, without a lock or a lease: a lookup that never computes. A
    /// shared hit is written to the disk tier too, as it is before a compute.
    pub(crate) async fn lookup(
        &self,
        key: &EmbeddingKey,
        model: &str,
    ) -> Option<(Embedding, EmbeddingSource)> {
        let mut held = Held::default();
        if let Some(disk) = &self.disk {
            match self.read_disk(disk, key, model).await {
                Found::Hit(e, _) => return Some((e, EmbeddingSource::Disk)),
                Found::Kept => held.keep_disk = true,
                Found::Miss => {}
            }
        }
        match self.read_shared(self.shared.as_ref()?, key, model).await {
            Found::Hit(e, value) => {
                self.shared_hit_to_disk(key, value, &mut held);
                Some((e, EmbeddingSource::Shared))
            }
            Found::Kept | Found::Miss => None,
        }
    }

    /// Gives back what a failed compute held (the next caller computes again).
    pub(crate) fn release(&self, held: Held) {
        let Held {
            disk_lock, lease, ..
        } = held;
        drop(disk_lock);
        if let Some(lease) = lease {
            self.background.spawn(async move { lease.release().await });
        }
    }

    /// Runs the test seam before a delete, if one is set.
    async fn before_delete(&self) {
        #[cfg(feature = "test-seams")]
        {
            let hook = self.before_delete.lock().ok().and_then(|h| h.clone());
            if let Some(hook) = hook {
                let _ = tokio::task::spawn_blocking(move || hook()).await;
            }
        }
    }

    /// Test seam: `hook` runs (on the blocking pool) after a value was read and found bad,
    /// before it is deleted, as a writer storing a good value at that moment would.
    #[cfg(feature = "test-seams")]
    pub(crate) fn inject_before_delete(&self, hook: Option<Seam>) {
        if let Ok(mut h) = self.before_delete.lock() {
            *h = hook;
        }
    }
}

/// 64 random bits (std's randomly keyed hasher: no extra dependency).
fn random_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(Instant::now())
}

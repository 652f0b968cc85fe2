//! Embeddings: `get_or_compute` once per key per process, scoped like images.
//!
//! [`Loader::embeddings`](crate::Loader::embeddings) returns the loader's [`Embeddings`] handle. A call
//! [`Embeddings::get_or_compute`] is served, in order, by the in-memory embedding cache, a
//! compute of the same key already in flight in this process (joined), or a new compute.
//!
//! - **Once per key per process**: concurrent callers of one key share one compute.
//! - **Cancel-safe**: the compute runs in a task of its own (as image loads do), so dropping or
//!   aborting any caller, the first included, cancels nothing; the others still get the value,
//!   and it is still cached. Hence the `Send + 'static` bounds on the closure and its future:
//!   move owned inputs (an `Arc` of the encoder, the pixels) into it.
//! - **Failures are not cached**: every waiter of a failed compute gets the same
//!   [`EmbeddingError::Compute`], and the next call computes again. A panic in the compute is
//!   [`EmbeddingError::Panicked`], never a poisoned entry.
//! - **Scoped like images**: in session-scoped mode the scope digest is part of every key, and
//!   a call without a usable scope computes every time, caching and joining nothing. Such a
//!   compute is its caller's alone: dropping the call stops it.
//! - **Byte budget** `MMCACHE_EMBEDDING_CACHE_BYTES` (default 1 GiB): an entry heavier than the
//!   budget is returned but not stored. A budget of 0 stores nothing, but concurrent computes
//!   of one key still join (the join costs nothing and saves an encoder run).
//!
//! - **Deadline** `MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS` (default 60 s): a
//!   compute still running then is dropped, every waiter of its key gets
//!   [`EmbeddingError::Timeout`] (408), a held lease is released, and the next call computes
//!   again. The deadline covers the compute only, not the fleet lookups and lease wait before
//!   it, which have bounds of their own.
//!
//! # Examples
//!
//! ```
//! use mmcache_loader::Loader;
//! use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput, EmbeddingSource};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let loader = Loader::builder().build()?;
//! let key = EmbeddingKeyInput::caller("uuid-of-image-1");
//! // The model id names the processor settings too, so differently configured workers differ.
//! let model = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";
//! let compute = || async { Embedding::from_f32(vec![2, 4], vec![0.5; 8]) };
//!
//! let first = loader.embeddings().get_or_compute(&key, model, None, compute).await?;
//! assert_eq!(first.source, EmbeddingSource::Computed);
//! let again = loader.embeddings().get_or_compute(&key, model, None, compute).await?;
//! assert_eq!(again.source, EmbeddingSource::Memory);
//! assert_eq!(again.embedding.as_f32().unwrap().len(), 8);
//! # Ok(())
//! # }
//! ```

pub(crate) mod fleet;
pub use crate::metrics::embeddings as metrics;

use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;
use mmcache_decode::CacheStats;
use mmcache_scope::Scope;
use tokio::sync::watch;

use crate::config::Config;
use crate::metrics::embeddings::ComputeOutcome;

pub(crate) use fleet::Fleet;
#[cfg(feature = "test-seams")]
pub use fleet::Seam;
pub use fleet::{FleetWrites, disk_entry_name, shared_key};
pub use mmcache_decode::{
    DEFAULT_EMBEDDING_CACHE_BYTES, DType, Embedding, EmbeddingStore, MAX_EMBEDDING_METADATA_BYTES,
    TensorError,
};
pub use mmcache_scope::{EmbeddingKey, EmbeddingKeyInput};

/// Where an embedding came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EmbeddingSource {
    /// The in-memory embedding cache.
    Memory,
    /// A compute of the same key already in flight in this process.
    Inflight,
    /// This call's compute.
    Computed,
    /// The host's disk tier (written by this or another process of the host).
    Disk,
    /// The fleet's shared cache.
    Shared,
}

impl EmbeddingSource {
    /// Lowercase name, for labels and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Inflight => "inflight",
            Self::Computed => "computed",
            Self::Disk => "disk",
            Self::Shared => "shared",
        }
    }
}

/// An embedding and how it was obtained.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbeddingLoaded {
    /// The embedding (its bytes shared with the cache, no copy).
    pub embedding: Embedding,
    /// Where it came from.
    pub source: EmbeddingSource,
}

/// Why [`Embeddings::get_or_compute`] returned no embedding. Clone: every waiter of one
/// compute gets the same error.
///
/// Exhaustive on purpose (not `#[non_exhaustive]`), as [`crate::Error`] is: the Python
/// exception classes map every variant with a `match` the compiler checks.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbeddingError {
    /// The compute returned an error (not cached: the next call computes again).
    #[error("embedding compute failed: {source}")]
    Compute {
        /// The compute's own error.
        #[source]
        source: Arc<dyn StdError + Send + Sync>,
    },
    /// The compute panicked (not cached).
    #[error("embedding compute panicked: {message}")]
    Panicked {
        /// The panic message, when it was a string.
        message: Arc<str>,
    },
    /// The compute's task was cancelled (the runtime is shutting down).
    #[error("embedding compute was cancelled")]
    Cancelled,
    /// The compute ran past its deadline (`MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`): it was
    /// dropped, and every waiter of its key gets this error (408); not cached.
    #[error(
        "embedding compute did not finish within {after:?} (MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS)"
    )]
    Timeout {
        /// The deadline that passed.
        after: std::time::Duration,
    },
}

impl EmbeddingError {
    /// An HTTP status a worker can return: 408 for [`EmbeddingError::Timeout`] (as a load
    /// past its deadline), else 500.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Timeout { .. } => 408,
            Self::Compute { .. } | Self::Panicked { .. } | Self::Cancelled => 500,
        }
    }
}

type Outcome = Result<Embedding, EmbeddingError>;
/// What a key's task publishes: the embedding and where it came from.
type Published = Result<(Embedding, EmbeddingSource), EmbeddingError>;

struct Shared {
    session_scoped: bool,
    /// [`Config::embedding_compute_timeout`].
    compute_timeout: std::time::Duration,
    store: EmbeddingStore,
    inflight: DashMap<[u8; 32], watch::Receiver<Option<Published>>>,
    fleet: Fleet,
    metrics: metrics::Handles,
}

/// The loader's embedding caches. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Embeddings {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("store", &self.shared.store)
            .field("inflight", &self.shared.inflight.len())
            .finish()
    }
}

impl Embeddings {
    pub(crate) fn new(config: &Config, fleet: Fleet) -> Self {
        Self {
            shared: Arc::new(Shared {
                session_scoped: config.session_scoped,
                compute_timeout: config.embedding_compute_timeout(),
                store: EmbeddingStore::new(config.embedding_cache_bytes),
                inflight: DashMap::new(),
                fleet,
                metrics: metrics::Handles::new(),
            }),
        }
    }

    /// The key a call uses, or `None` when it bypasses every cache (scoped mode, no scope).
    pub fn key(
        &self,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
    ) -> Option<EmbeddingKey> {
        EmbeddingKey::resolve(self.shared.session_scoped, input, model, scope)
    }

    /// The embedding of `input` under `model` within `scope`, computing it with `compute` when
    /// no cache has it and no compute of it is in flight. See the [module docs](self).
    ///
    /// `compute` is called at most once, in a task of its own, and only when this call starts
    /// the compute; its error type is anything that converts into a boxed error (a `String`,
    /// an `std::io::Error`, …).
    ///
    /// # Errors
    ///
    /// [`EmbeddingError`]: the compute failed, panicked, ran past its deadline, or was
    /// cancelled by a runtime shutdown.
    pub async fn get_or_compute<F, Fut, E>(
        &self,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
        compute: F,
    ) -> Result<EmbeddingLoaded, EmbeddingError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Embedding, E>> + Send + 'static,
        E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    {
        let s = &self.shared;
        let Some(key) = self.key(input, model, scope) else {
            s.metrics.bypasses.increment(1);
            let embedding = run(self.shared.clone(), compute).await?;
            return Ok(EmbeddingLoaded {
                embedding,
                source: EmbeddingSource::Computed,
            });
        };
        if let Some(embedding) = s.store.get(&key) {
            s.metrics.hits.increment(1);
            return Ok(EmbeddingLoaded {
                embedding,
                source: EmbeddingSource::Memory,
            });
        }
        s.metrics.misses.increment(1);
        let (mut rx, joined) = match s.inflight.entry(*key.as_bytes()) {
            dashmap::Entry::Occupied(slot) => (slot.get().clone(), true),
            dashmap::Entry::Vacant(slot) => {
                // A compute may have finished (cached, then left the map) since our lookup:
                // look again under the map's lock, so one key never computes twice in a row.
                if let Some(embedding) = s.store.get(&key) {
                    return Ok(EmbeddingLoaded {
                        embedding,
                        source: EmbeddingSource::Memory,
                    });
                }
                let (tx, rx) = watch::channel(None);
                slot.insert(rx.clone());
                let shared = self.shared.clone();
                let model = model.to_owned();
                // A task of its own: no caller's cancellation reaches it.
                tokio::spawn(async move {
                    let leave = Leave {
                        shared: &shared,
                        key,
                    };
                    let outcome = shared.fill(key, &model, compute).await;
                    if let Ok((embedding, _)) = &outcome {
                        shared.insert(&key, embedding.clone());
                    }
                    // Leave before publishing: a later call sees the cache or computes again.
                    drop(leave);
                    let _ = tx.send(Some(outcome));
                });
                (rx, false)
            }
        };
        if joined {
            s.metrics.coalesced.increment(1);
        }
        let (embedding, source) = match rx.wait_for(Option::is_some).await {
            Ok(value) => value.clone().unwrap_or(Err(EmbeddingError::Cancelled))?,
            // The task was dropped unfinished (runtime shutdown).
            Err(_) => return Err(EmbeddingError::Cancelled),
        };
        let source = if joined {
            EmbeddingSource::Inflight
        } else {
            source
        };
        Ok(EmbeddingLoaded { embedding, source })
    }

    /// The cached embedding of `input` under `model` within `scope`, from memory, then the
    /// fleet tiers that are on (disk, then shared cache); `None` when none has it, or when the
    /// call would bypass the caches. It never computes, and waits for no compute in flight and
    /// no lease. A tier hit is kept in memory, as a compute's value is.
    pub async fn find(
        &self,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
    ) -> Option<EmbeddingLoaded> {
        let Some(key) = self.key(input, model, scope) else {
            self.shared.metrics.bypasses.increment(1);
            return None;
        };
        if let Some(embedding) = self.memory_get(&key) {
            return Some(EmbeddingLoaded {
                embedding,
                source: EmbeddingSource::Memory,
            });
        }
        let s = &self.shared;
        if !s.fleet.enabled() {
            return None;
        }
        let (embedding, source) = s.fleet.lookup(&key, model).await?;
        s.insert(&key, embedding.clone());
        Some(EmbeddingLoaded { embedding, source })
    }

    /// The embedding of `input` under `model` within `scope` held in memory, without a wait
    /// ([`Embeddings::find`] also reads the fleet tiers); `None` also when the call would
    /// bypass the caches.
    pub fn get(
        &self,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
    ) -> Option<Embedding> {
        let Some(key) = self.key(input, model, scope) else {
            self.shared.metrics.bypasses.increment(1);
            return None;
        };
        self.memory_get(&key)
    }

    /// The memory hit of [`Embeddings::find`] and [`Embeddings::get_or_compute`], without
    /// awaiting: the entry held in memory, counted as a hit; `None` (counting nothing: the call
    /// a caller makes next counts its miss or bypass) when memory does not hold it or the call
    /// would bypass the caches. For callers that can skip a task or a thread hop on a hit.
    pub fn cached(
        &self,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
    ) -> Option<Embedding> {
        let key = self.key(input, model, scope)?;
        let hit = self.shared.store.get(&key)?;
        self.shared.metrics.hits.increment(1);
        Some(hit)
    }

    /// The memory cache's entry for `key`, counted as a hit or a miss.
    fn memory_get(&self, key: &EmbeddingKey) -> Option<Embedding> {
        let hit = self.shared.store.get(key);
        match hit {
            Some(_) => self.shared.metrics.hits.increment(1),
            None => self.shared.metrics.misses.increment(1),
        }
        hit
    }

    /// Caches `embedding` for `input` under `model` within `scope`; returns whether it is
    /// stored (not when heavier than the budget, or when the call would bypass the caches).
    pub fn insert(
        &self,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
        embedding: Embedding,
    ) -> bool {
        match self.key(input, model, scope) {
            Some(key) => self.shared.insert(&key, embedding),
            None => {
                self.shared.metrics.bypasses.increment(1);
                false
            }
        }
    }

    /// Forgets the entry of `input` under `model` within `scope`.
    pub fn remove(&self, input: &EmbeddingKeyInput, model: &str, scope: Option<&Scope>) {
        if let Some(key) = self.key(input, model, scope) {
            self.shared.store.remove(&key);
        }
    }

    /// Entries and weighed bytes in the memory cache now.
    pub fn stats(&self) -> CacheStats {
        self.shared.store.stats()
    }

    /// The memory cache's byte budget.
    pub fn max_bytes(&self) -> u64 {
        self.shared.store.max_bytes()
    }

    /// Computes in flight now.
    pub fn inflight(&self) -> usize {
        self.shared.inflight.len()
    }

    /// The writes to the fleet tiers now and at their peak, which the write bounds hold (see
    /// docs/embeddings.md, "Writes").
    pub fn fleet_writes(&self) -> FleetWrites {
        self.shared.fleet.writes()
    }

    /// Test seam: `hook` runs after a fleet-tier value was read and found bad, before it is
    /// deleted (only with the feature `test-seams`).
    #[cfg(feature = "test-seams")]
    pub fn inject_before_delete(&self, hook: Option<Seam>) {
        self.shared.fleet.inject_before_delete(hook);
    }
}

impl Shared {
    /// The fleet tiers (disk, shared cache, lease), then the compute; a computed value goes
    /// to the fleet tiers off this path.
    async fn fill<F, Fut, E>(
        self: &Arc<Self>,
        key: EmbeddingKey,
        model: &str,
        compute: F,
    ) -> Published
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Embedding, E>> + Send + 'static,
        E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    {
        if !self.fleet.enabled() {
            return run(self.clone(), compute)
                .await
                .map(|e| (e, EmbeddingSource::Computed));
        }
        let held = match self.fleet.before_compute(&key, model).await {
            fleet::Before::Hit(e, source) => return Ok((e, source)),
            fleet::Before::Compute(held) => held,
        };
        match run(self.clone(), compute).await {
            Ok(e) => {
                self.fleet.after_compute(&key, model, &e, held);
                Ok((e, EmbeddingSource::Computed))
            }
            Err(err) => {
                self.fleet.release(held);
                Err(err)
            }
        }
    }

    fn insert(&self, key: &EmbeddingKey, embedding: Embedding) -> bool {
        let r = self.store.insert(key, embedding);
        if r.evicted > 0 {
            self.metrics.evictions.increment(r.evicted);
        }
        if !r.stored {
            self.metrics.not_stored.increment(1);
        }
        r.stored
    }
}

/// Runs `compute` in a task of its own (a panic is caught there) within the compute deadline,
/// turning its error, panic or lateness into an [`EmbeddingError`]. The task lives no longer
/// than this future: late, or with this future dropped (a bypass caller gone), it is aborted
/// and the compute's future dropped.
async fn run<F, Fut, E>(shared: Arc<Shared>, compute: F) -> Outcome
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Embedding, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
{
    let started = Instant::now();
    // The error is converted inside the task: `E` need not be `Send`, the box is.
    let mut task = AbortOnDrop(tokio::spawn(async move {
        compute()
            .await
            .map_err(|e| Arc::<dyn StdError + Send + Sync>::from(e.into()))
    }));
    let after = shared.compute_timeout;
    let Ok(joined) = tokio::time::timeout(after, &mut task.0).await else {
        drop(task);
        shared
            .metrics
            .computed(ComputeOutcome::Timeout, started.elapsed().as_secs_f64());
        return Err(EmbeddingError::Timeout { after });
    };
    let (outcome, label) = match joined {
        Ok(Ok(embedding)) => (Ok(embedding), ComputeOutcome::Ok),
        Ok(Err(source)) => (
            Err(EmbeddingError::Compute { source }),
            ComputeOutcome::Error,
        ),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let message: Arc<str> = match payload.downcast_ref::<&str>() {
                Some(s) => Arc::from(*s),
                None => payload
                    .downcast_ref::<String>()
                    .map_or_else(|| Arc::from("(not a string)"), |s| Arc::from(s.as_str())),
            };
            (
                Err(EmbeddingError::Panicked { message }),
                ComputeOutcome::Panic,
            )
        }
        Err(_) => (Err(EmbeddingError::Cancelled), ComputeOutcome::Cancelled),
    };
    shared
        .metrics
        .computed(label, started.elapsed().as_secs_f64());
    outcome
}

/// Aborts its task when dropped (a no-op once the task has finished).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Removes a key from the in-flight map when dropped, even if the driving task unwinds.
struct Leave<'a> {
    shared: &'a Shared,
    key: EmbeddingKey,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.shared.inflight.remove(self.key.as_bytes());
    }
}

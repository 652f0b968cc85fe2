//! A fail-open shared cache of encoded image bytes on Redis Cluster or Dragonfly.
//!
//! Every worker of a fleet reads and writes the exact origin bytes of an image under a key
//! compatible with the Python implementation in NVIDIA Dynamo
//! (`dynamo:mm:image:{<sha256hex(identity)>}:bytes`), so each image is downloaded once per
//! fleet. Operations never return an error: a read gives `Option<Bytes>`, writes and deletes
//! say how they ended ([`WriteOutcome`], never an error); failures are counted, logged at
//! debug, and warned about at most once a minute.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use mmcache_scope::CacheIdentity;
//! use mmcache_shared_cache::{SharedCache, SharedCacheConfig, entry_key};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let id = CacheIdentity::unscoped("https://example.com/img.png");
//! assert_eq!(
//!     entry_key(&id),
//!     "dynamo:mm:image:{48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0}:bytes"
//! );
//!
//! // Nothing listens on this port: the cache fails open.
//! let mut config = SharedCacheConfig::new("redis://127.0.0.1:1");
//! config.connect_timeout = Duration::from_millis(100);
//! let cache = SharedCache::new(config).unwrap(); // no I/O here
//! assert_eq!(cache.get(&id).await, None);
//! cache.set(&id, bytes::Bytes::from_static(b"\x89PNG...")).await; // no error either
//! assert_eq!(cache.stats().get_errors, 1);
//! # }
//! ```
//!
//! # Connection
//!
//! The configured URL is the discovery endpoint. The client connects on first use, in a
//! background task, and a load waits for that attempt no longer than its own deadline. After
//! a failed attempt the next one waits [`RECONNECT_BACKOFF`]. When every operation has failed
//! for [`REDISCOVER_AFTER`], the connection is dropped and rebuilt through the URL, so a fleet
//! recovers without restarts even after every node came back at a new address.
//!
//! One attempt per operation (no client retries); the connect timeout and the response
//! timeout are separate, and each operation also runs under an overall deadline of both.

mod breaker;
mod config;
mod conn;
mod error;
mod inspect;
mod keyed;
pub mod metrics;
mod read;
mod samples;
mod slots;
mod warn;
mod write_behind;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use crate::conn::{Failure, install_crypto_provider};
use crate::metrics::{Op, SkipReason};
use crate::read::Read;

pub use crate::breaker::{BreakerConfig, BreakerState};
pub use crate::config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_MAX_READ_BYTES, DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_TTL, Field, Invalid, LeaseConfig, MAX_TIMEOUT, MAX_TTL, SharedCacheConfig,
    WriteBehindConfig,
};
pub use crate::error::{Error, FailureKind, Result};
pub use crate::inspect::{CLUSTER_SLOTS, ClusterReport};
pub use crate::metrics::{GetOutcome, WriteOutcome};
pub use crate::read::{BoxFuture, READ_STEP, ReadHold, ReadMemory};
pub use crate::samples::{DrainedSamples, MAX_PENDING_SAMPLES, SampleOp, SampleSeries};
pub use crate::warn::{Clock, ManualClock, SystemClock};

/// Pause after a failed connect before the next attempt.
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(250);
/// After this long with nothing but failures, rediscover through the configured URL.
pub const REDISCOVER_AFTER: Duration = Duration::from_secs(2);
/// The slot map (for per-node breakers) is re-read this often while things work...
const SLOT_MAP_MAX_AGE: Duration = Duration::from_secs(10);
/// ...and this often while operations fail (nodes may have moved).
const SLOT_MAP_MAX_AGE_FAILING: Duration = Duration::from_secs(1);
/// Interval between two failure warnings.
pub const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// The Redis key of an identity: `dynamo:mm:image:{<sha256hex(identity)>}:bytes`. The whole
/// digest is the hash tag, so related keys of one entry share its slot.
pub fn entry_key(identity: &CacheIdentity) -> String {
    format!("dynamo:mm:image:{{{}}}:bytes", identity.sha256_hex())
}

/// The stampede-lease key of an identity: `dynamo:mm:image:{<sha256hex(identity)>}:lease`,
/// in the same slot as the entry.
pub fn lease_key(identity: &CacheIdentity) -> String {
    format!("dynamo:mm:image:{{{}}}:lease", identity.sha256_hex())
}

/// How an attempt to take the stampede lease of an entry ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseOutcome {
    /// This worker holds the lease (with this token) and should fill the entry.
    Won(u64),
    /// Another worker holds it: wait for the entry.
    Held,
    /// The lease could not be taken or checked (failure or open breaker): go on without it.
    Unavailable,
}

/// Counters of one cache instance (the `metrics` facade has the process-wide view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedCacheStats {
    /// GETs that found the entry.
    pub get_hits: u64,
    /// GETs that found nothing.
    pub get_misses: u64,
    /// GETs that failed.
    pub get_errors: u64,
    /// SETs written.
    pub set_ok: u64,
    /// SETs that failed.
    pub set_errors: u64,
    /// DELs done.
    pub del_ok: u64,
    /// DELs that failed.
    pub del_errors: u64,
    /// Warnings emitted (first failure, then at most one per minute).
    pub warnings: u64,
    /// Times the connection was rebuilt through the discovery URL.
    pub rediscoveries: u64,
    /// Operations skipped because a breaker was open.
    pub skipped: u64,
    /// Times a breaker opened.
    pub breaker_opens: u64,
    /// Operations answered with an error reply (WRONGTYPE, OOM...): counted in the op's
    /// errors too, but not as node failures.
    pub error_replies: u64,
    /// Write-behind SETs dropped because the queue was full.
    pub write_behind_dropped: u64,
    /// Bounded stores ([`SharedCache::store_within`]) the load stopped waiting for; the SET
    /// went on in the background.
    pub set_backgrounded: u64,
}

#[derive(Debug, Default)]
struct Counters {
    get_hits: AtomicU64,
    get_misses: AtomicU64,
    get_errors: AtomicU64,
    set_ok: AtomicU64,
    set_errors: AtomicU64,
    del_ok: AtomicU64,
    del_errors: AtomicU64,
    warnings: AtomicU64,
    rediscoveries: AtomicU64,
    skipped: AtomicU64,
    breaker_opens: AtomicU64,
    error_replies: AtomicU64,
    write_behind_dropped: AtomicU64,
    set_backgrounded: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

#[derive(Default)]
struct ConnState {
    conn: Option<ClusterConnection>,
    connecting: bool,
    last_failed_connect: Option<Instant>,
    /// Start of the current run of failures with no success in between.
    failing_since: Option<Instant>,
}

struct Inner {
    client: ClusterClient,
    config: SharedCacheConfig,
    ttl_secs: u64,
    state: Mutex<ConnState>,
    connected: tokio::sync::watch::Sender<u64>,
    warn: warn::WarnLimiter,
    counters: Counters,
    breakers: breaker::Breakers,
    slots: slots::SlotMap,
    queue: write_behind::Queue,
    /// Set by a failure, cleared by the next success (spares successes the state lock).
    failing: std::sync::atomic::AtomicBool,
    metrics: metrics::Handles,
}

/// The shared cache client. Cheap to clone; all clones share one cluster connection.
#[derive(Clone)]
pub struct SharedCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl SharedCache {
    /// Validates the settings and builds the client. Does no I/O: the first operation connects.
    ///
    /// # Errors
    ///
    /// [`Error::Scheme`], [`Error::InvalidUrl`], [`Error::Invalid`] or [`Error::Tls`]. The
    /// messages never echo the URL.
    pub fn new(config: SharedCacheConfig) -> Result<Self> {
        if !(config.url.starts_with("redis://") || config.url.starts_with("rediss://")) {
            return Err(Error::Scheme);
        }
        config.validate()?;
        install_crypto_provider();
        let mut builder = ClusterClient::builder(vec![config.url.as_str()])
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.io_timeout)
            .retries(0);
        if let Some(pem) = &config.tls_root_ca_pem {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            });
        }
        let client = builder.build().map_err(|e| match e.kind() {
            redis::ErrorKind::InvalidClientConfig if config.tls_root_ca_pem.is_some() => {
                Error::Tls("root certificate or URL rejected".into())
            }
            _ => Error::InvalidUrl,
        })?;
        let ttl_secs = config.ttl.as_secs() + u64::from(config.ttl.subsec_nanos() > 0); // <= MAX_TTL
        let warn = warn::WarnLimiter::new(config.clock.clone(), WARN_INTERVAL);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                ttl_secs,
                state: Mutex::new(ConnState::default()),
                connected: tokio::sync::watch::Sender::new(0),
                warn,
                counters: Counters::default(),
                breakers: breaker::Breakers::new(config.breaker),
                slots: slots::SlotMap::default(),
                queue: write_behind::Queue::new(config.write_behind),
                failing: std::sync::atomic::AtomicBool::new(false),
                metrics: metrics::Handles::default(),
                config,
            }),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &SharedCacheConfig {
        &self.inner.config
    }

    /// Counters of this instance.
    pub fn stats(&self) -> SharedCacheStats {
        let c = &self.inner.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SharedCacheStats {
            get_hits: load(&c.get_hits),
            get_misses: load(&c.get_misses),
            get_errors: load(&c.get_errors),
            set_ok: load(&c.set_ok),
            set_errors: load(&c.set_errors),
            del_ok: load(&c.del_ok),
            del_errors: load(&c.del_errors),
            warnings: load(&c.warnings),
            rediscoveries: load(&c.rediscoveries),
            skipped: load(&c.skipped),
            breaker_opens: load(&c.breaker_opens),
            error_replies: load(&c.error_replies),
            write_behind_dropped: load(&c.write_behind_dropped),
            set_backgrounded: load(&c.set_backgrounded),
        }
    }

    /// Connects now (bounded by the operation deadline) and says whether the cluster answered.
    /// Optional: operations connect by themselves.
    /// Also reads the slot map, so per-node breakers know the nodes from the first operation.
    pub async fn connect(&self) -> bool {
        let deadline = self.inner.config.op_deadline();
        let Ok(Ok(mut conn)) = tokio::time::timeout(deadline, self.connection()).await else {
            return false;
        };
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        match tokio::time::timeout(deadline, cmd.query_async::<redis::Value>(&mut conn)).await {
            Ok(Ok(reply)) => {
                self.inner.slots.update(&reply, Instant::now());
                true
            }
            _ => false,
        }
    }

    /// The entry for `identity`, or `None` on a miss or any failure.
    pub async fn get(&self, identity: &CacheIdentity) -> Option<Bytes> {
        self.get_with_outcome(identity).await.0
    }

    /// Like [`SharedCache::get`], also saying how it ended.
    pub async fn get_with_outcome(&self, identity: &CacheIdentity) -> (Option<Bytes>, GetOutcome) {
        let key = entry_key(identity);
        let started = Instant::now();
        // The length and a first step in one round trip, within the read memory (`read`); a
        // hostile or foreign value costs at most the cap.
        let result = self
            .read_value(Op::Get, &key, self.inner.config.max_read_bytes)
            .await;
        let c = &self.inner.counters;
        let (value, outcome) = match result {
            Ok(Read::Miss) => {
                bump(&c.get_misses);
                (None, GetOutcome::Miss)
            }
            Ok(Read::Oversized) => {
                bump(&c.get_hits);
                (None, GetOutcome::Oversized)
            }
            Ok(Read::Value(v)) => {
                bump(&c.get_hits);
                (Some(v), GetOutcome::Hit)
            }
            Ok(Read::NoMemory) => {
                self.inner
                    .metrics
                    .record_skip(Op::Get, SkipReason::NoMemory);
                (None, GetOutcome::NoMemory)
            }
            Err(Failure::Skipped) => (None, GetOutcome::Skipped),
            Err(Failure::Failed(_)) => {
                bump(&c.get_errors);
                (None, GetOutcome::Error)
            }
        };
        self.inner
            .metrics
            .record_get(outcome, value.as_ref().map(Bytes::len), started.elapsed());
        (value, outcome)
    }

    /// Stores `bytes` for `identity` with the configured TTL (`SET key bytes EX ttl`).
    /// Values over [`SharedCacheConfig::max_value_bytes`] are skipped.
    pub async fn set(&self, identity: &CacheIdentity, bytes: Bytes) -> WriteOutcome {
        let len = bytes.len();
        if len > self.inner.config.max_value_bytes {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::TooLarge);
            return WriteOutcome::Skipped;
        }
        let key = entry_key(identity);
        let ttl = self.inner.ttl_secs;
        let started = Instant::now();
        let result = self
            .run(Op::Set, &key, |mut conn, key| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(&bytes[..])
                    .arg("EX")
                    .arg(ttl)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await;
        let outcome = match result {
            Ok(()) => {
                bump(&self.inner.counters.set_ok);
                WriteOutcome::Success
            }
            Err(Failure::Skipped) => WriteOutcome::Skipped,
            Err(Failure::Failed(_)) => {
                bump(&self.inner.counters.set_errors);
                WriteOutcome::Error
            }
        };
        self.inner
            .metrics
            .record_set(outcome, len, started.elapsed());
        outcome
    }

    /// Stores `bytes` like [`SharedCache::set`], through the write-behind queue when it is
    /// enabled: returns at once; a full queue drops the write ([`WriteOutcome::Skipped`],
    /// counted in `mmcache_shared_cache_skipped_total{op="set",reason="queue_full"}`).
    pub async fn store(&self, identity: &CacheIdentity, bytes: Bytes) -> WriteOutcome {
        if !self.inner.config.write_behind.enabled {
            return self.set(identity, bytes).await;
        }
        if bytes.len() > self.inner.config.max_value_bytes {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::TooLarge);
            return WriteOutcome::Skipped;
        }
        if self.inner.queue.push(self, identity.clone(), bytes) {
            WriteOutcome::Success
        } else {
            bump(&self.inner.counters.write_behind_dropped);
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::QueueFull);
            WriteOutcome::Skipped
        }
    }

    /// Stores `bytes` like [`SharedCache::set`], waiting for the write at most `wait`: a write
    /// still running then goes on in the background, bounded by the I/O timeout and by the
    /// write-behind queue's limits (a full queue drops it, as [`SharedCache::store`] does).
    /// With write-behind enabled it returns at once, like [`SharedCache::store`].
    pub async fn store_within(
        &self,
        identity: &CacheIdentity,
        bytes: Bytes,
        wait: Duration,
    ) -> WriteOutcome {
        if self.inner.config.write_behind.enabled {
            return self.store(identity, bytes).await;
        }
        if bytes.len() > self.inner.config.max_value_bytes {
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::TooLarge);
            return WriteOutcome::Skipped;
        }
        let Some(room) = self.inner.queue.reserve(self, bytes.len()) else {
            bump(&self.inner.counters.write_behind_dropped);
            self.inner
                .metrics
                .record_skip(Op::Set, SkipReason::QueueFull);
            return WriteOutcome::Skipped;
        };
        // The SET runs here, in the load's task (no hop in the common case); if the wait
        // ends first, the same future moves to a task of its own and finishes there.
        let (cache, identity) = (self.clone(), identity.clone());
        let mut write = Box::pin(async move {
            let outcome = cache.set(&identity, bytes).await;
            drop(room);
            outcome
        });
        match tokio::time::timeout(wait, &mut write).await {
            Ok(outcome) => outcome,
            Err(_) => {
                tokio::spawn(write);
                bump(&self.inner.counters.set_backgrounded);
                WriteOutcome::Pending
            }
        }
    }

    /// Waits until every queued write is done, at most `deadline`. Returns whether the queue
    /// drained. Call it at shutdown.
    pub async fn flush(&self, deadline: Duration) -> bool {
        self.inner.queue.flush(deadline).await
    }

    /// Tries to take the stampede lease of `identity` for `ttl` (`SET lease NX PX ttl`).
    pub async fn try_lease(&self, identity: &CacheIdentity, ttl: Duration) -> LeaseOutcome {
        self.try_lease_key(&lease_key(identity), ttl).await
    }

    /// Gives the lease back (best effort: it expires anyway), only if it is still this
    /// holder's: a holder whose fill outlived the lease TTL must not delete the next holder's
    /// lease. A compare-and-delete script (`GET` = token, then `DEL`), which Redis, Valkey and
    /// Dragonfly all run.
    pub async fn release_lease(&self, identity: &CacheIdentity, token: u64) {
        self.release_lease_key(&lease_key(identity), token).await;
    }

    /// Deletes the entry for `identity` (used when a cached value fails to decode).
    pub async fn delete(&self, identity: &CacheIdentity) -> WriteOutcome {
        let key = entry_key(identity);
        let result = self
            .run(Op::Del, &key, |mut conn, key| async move {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await;
        let outcome = match result {
            Ok(_) => {
                bump(&self.inner.counters.del_ok);
                WriteOutcome::Success
            }
            Err(Failure::Skipped) => WriteOutcome::Skipped,
            Err(Failure::Failed(_)) => {
                bump(&self.inner.counters.del_errors);
                WriteOutcome::Error
            }
        };
        self.inner.metrics.record_delete(outcome);
        outcome
    }

    /// The breaker state of the node serving `identity`'s key (for tests and dashboards).
    pub fn breaker_state(&self, identity: &CacheIdentity) -> BreakerState {
        let node = self.inner.slots.node_for(&entry_key(identity));
        self.inner.breakers.state(&node)
    }

    /// Every node's breaker state (nodes seen failing only).
    pub fn breaker_states(&self) -> Vec<(String, BreakerState)> {
        self.inner.breakers.states()
    }
}

/// A token that tells this lease holder apart from others (time and a process counter).
fn lease_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed)
}

//! The client: one per configured cluster, cheap to clone, its parts shared by every clone
//! (connection, breakers, slot map, write queue, counters and metric handles). The
//! operations live by job in their own modules: `entry` (image entries), `lease`, `keyed`,
//! `read`, `conn` (one attempt of any operation) and `inspect`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use crate::breaker::{BreakerState, Breakers};
use crate::config::SharedCacheConfig;
use crate::denied::{Denial, Gates};
use crate::error::{Error, Result};
use crate::metrics::Handles;
use crate::samples::{DrainedSamples, Samples};
use crate::slots::SlotMap;
use crate::stats::{Counters, SharedCacheStats};
use crate::warn::{WARN_INTERVAL, WarnLimiter};
use crate::write_behind::Queue;

/// The connection and its attempts, behind one lock (used by `conn`).
#[derive(Default)]
pub(crate) struct ConnState {
    pub(crate) conn: Option<ClusterConnection>,
    pub(crate) connecting: bool,
    pub(crate) last_failed_connect: Option<Instant>,
    /// Start of the current run of failures with no success in between.
    pub(crate) failing_since: Option<Instant>,
    /// The last connect was denied, at this time of the cache's clock (see `denied`).
    pub(crate) denied: Option<(Instant, Denial)>,
}

/// What every clone of a [`SharedCache`] shares.
pub(crate) struct Inner {
    pub(crate) client: ClusterClient,
    pub(crate) config: SharedCacheConfig,
    pub(crate) ttl_secs: u64,
    pub(crate) state: Mutex<ConnState>,
    pub(crate) connected: tokio::sync::watch::Sender<u64>,
    pub(crate) warn: WarnLimiter,
    pub(crate) counters: Counters,
    pub(crate) breakers: Breakers,
    /// Commands denied by the server, per key space (see `denied`).
    pub(crate) gates: Gates,
    pub(crate) slots: SlotMap,
    pub(crate) queue: Queue,
    /// Set by a failure, cleared by the next success (spares successes the state lock).
    pub(crate) failing: std::sync::atomic::AtomicBool,
    pub(crate) metrics: Handles,
}

/// The shared cache client. Cheap to clone; all clones share one cluster connection.
#[derive(Clone)]
pub struct SharedCache {
    pub(crate) inner: Arc<Inner>,
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
        let warn = WarnLimiter::new(config.clock.clone(), WARN_INTERVAL);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                ttl_secs,
                state: Mutex::new(ConnState::default()),
                connected: tokio::sync::watch::Sender::new(0),
                warn,
                counters: Counters::default(),
                breakers: Breakers::new(config.breaker),
                gates: Gates::new(),
                slots: SlotMap::default(),
                queue: Queue::new(config.write_behind),
                failing: std::sync::atomic::AtomicBool::new(false),
                metrics: Handles::default(),
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
        self.inner.counters.snapshot(&self.inner.metrics)
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

    /// Waits until every queued write is done, at most `deadline`. Returns whether the queue
    /// drained. Call it at shutdown.
    pub async fn flush(&self, deadline: Duration) -> bool {
        self.inner.queue.flush(deadline).await
    }

    /// The permission denials in force: each command the server refused (per key space), or
    /// the connect, within [`DENIED_COOLDOWN`](crate::DENIED_COOLDOWN) of its last refusal. Empty when
    /// nothing is denied.
    pub fn denials(&self) -> Vec<Denial> {
        let mut all = self.inner.gates.denials();
        let st = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, denial)) = &st.denied {
            all.insert(0, denial.clone());
        }
        all
    }

    /// Every node's breaker state (nodes seen failing only).
    pub fn breaker_states(&self) -> Vec<(String, BreakerState)> {
        self.inner.breakers.states()
    }

    /// Starts keeping GET/SET latency samples for [`SharedCache::drain_duration_samples`]
    /// (idempotent; off until called). The `metrics` facade histograms are recorded either way.
    pub fn enable_duration_samples(&self) {
        self.inner.metrics.samples.get_or_init(Samples::default);
    }

    /// Takes every sample recorded since the previous drain, and the count of those dropped
    /// because [`MAX_PENDING_SAMPLES`](crate::MAX_PENDING_SAMPLES) were already waiting; `None` until
    /// [`SharedCache::enable_duration_samples`] was called.
    pub fn drain_duration_samples(&self) -> Option<DrainedSamples> {
        self.inner.metrics.samples.get().map(Samples::drain)
    }

    /// Samples dropped (buffer full) since sampling was enabled.
    pub fn duration_samples_dropped(&self) -> u64 {
        self.inner
            .metrics
            .samples
            .get()
            .map_or(0, Samples::dropped_total)
    }
}

/// Installs `ring` as the process-wide rustls provider unless one is installed already
/// (the redis client's TLS needs a provider; this crate must not depend on the origin crate).
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

//! One call for multimodal inference workers: `loader.load(url, scope)` returns a decoded RGB
//! image as cheaply as possible.
//!
//! In order, a load is served by: the worker's byte-bounded decoded-image cache; a load of the
//! same image already in flight in this process; the fleet's shared cache of encoded bytes on
//! Redis Cluster or Dragonfly (optional, off by default, fails open); the origin over HTTP(S)
//! with a hard size cap. Session scoping partitions every cache by a hashed session id.
//!
//! # Examples
//!
//! ```
//! use mmcache_loader::{Loader, Source};
//! use mmcache_test_support::{images, origin::{Route, TestOrigin}};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let origin = TestOrigin::start();
//! origin.set("/cat.png", Route::ok(images::png(64, 48, 1)));
//!
//! // Loader::from_env() reads the DYN_MM_* variables; the builder sets the same things.
//! let loader = Loader::builder().allow_internal(true).build()?;
//! let url = origin.url("/cat.png");
//!
//! let first = loader.load_detailed(&url, None).await?;
//! assert_eq!(first.source, Source::Origin);
//! assert_eq!((first.image.width(), first.image.height()), (64, 48));
//!
//! let again = loader.load_detailed(&url, None).await?;
//! assert_eq!(again.source, Source::Memory);
//! assert_eq!(origin.hits("/cat.png"), 1);
//!
//! let err = loader.load(&origin.url("/missing.png"), None).await.unwrap_err();
//! assert_eq!(err.http_status(), 404);
//! # Ok(())
//! # }
//! ```
//!
//! # Errors
//!
//! [`Error::http_status`] maps every failure to a status a worker can return: the origin's
//! status as is, timeout 408, connection failure 400, unsupported image 415, too large 413,
//! URL policy 400/403. The shared cache never fails a load.
//!
//! # Layers
//!
//! Power users reach each layer directly: [`scope`], [`origin`], [`decode`], [`shared_cache`].

mod budget;
mod config;
mod data_url;
mod error;
mod hedge;
pub mod metrics;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use mmcache_decode::{DecodeLimits, DecodedCache, DecodedImage};
use mmcache_origin::{Origin, OriginConfig};
use mmcache_scope::{CacheIdentity, Scope};
use mmcache_shared_cache::{GetOutcome, LeaseOutcome, SharedCache, SharedCacheConfig};
use tokio::sync::watch;

use crate::budget::DecodeBudget;
use crate::hedge::Hedge;

pub use crate::config::{
    Config, DEFAULT_DECODE_MEMORY_BYTES, DEFAULT_DECODE_WAIT, LeaseSettings, SharedCacheSettings,
    env,
};
pub use crate::error::{ConfigError, DataUrlError, DecodeError, Error, OriginError, Result};
pub use crate::hedge::{HedgeSettings, HedgeStats};
pub use mmcache_decode::{self as decode, DecodedImage as Image};
pub use mmcache_origin as origin;
pub use mmcache_scope::{self as scope, scope_from_headers, scope_from_pairs};
pub use mmcache_shared_cache as shared_cache;

/// Where a load's image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The decoded-image cache.
    Memory,
    /// A load of the same identity already in flight in this process.
    Inflight,
    /// The shared cache of encoded bytes.
    Shared,
    /// The origin over HTTP(S).
    Origin,
    /// A `data:` URL.
    Data,
}

impl Source {
    /// Lowercase name, for metric labels and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Inflight => "inflight",
            Self::Shared => "shared",
            Self::Origin => "origin",
            Self::Data => "data",
        }
    }
}

/// A loaded image and how it was obtained.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Loaded {
    /// The decoded image, shared (a cache hit is the cached `Arc`, no copy).
    pub image: Arc<DecodedImage>,
    /// Where it came from.
    pub source: Source,
    /// Size of the encoded bytes, when this load had them (not for memory hits or joins).
    pub encoded_len: Option<usize>,
}

type Outcome = Result<(Arc<DecodedImage>, Source, Option<usize>)>;
type InflightSlot = watch::Receiver<Option<Outcome>>;

struct Inner {
    config: Config,
    origin: Origin,
    shared: Option<SharedCache>,
    decoded: DecodedCache,
    limits: DecodeLimits,
    budget: DecodeBudget,
    hedge: Arc<Hedge>,
    inflight: DashMap<[u8; 32], InflightSlot>,
    memory_hits: ::metrics::Counter,
    metrics: metrics::Handles,
}

/// The facade: loads image URLs through every cache layer. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Loader {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Loader`]. Start from defaults ([`Loader::builder`]) or from the environment
/// ([`LoaderBuilder::from_env`]); every setter overrides what the environment said.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct LoaderBuilder {
    config: Config,
    clock: Option<Arc<dyn mmcache_shared_cache::Clock>>,
}

impl LoaderBuilder {
    /// A builder holding the configuration read from the environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad variable and its value.
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            config: Config::from_env()?,
            clock: None,
        })
    }

    /// A builder holding `config`.
    pub fn from_config(config: Config) -> Self {
        Self {
            config,
            clock: None,
        }
    }

    /// The configuration so far.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Turns the shared cache on or off.
    pub fn shared_cache(mut self, enabled: bool) -> Self {
        self.config.shared.enabled = enabled;
        self
    }

    /// Sets the shared-cache discovery URL and turns the shared cache on.
    pub fn shared_cache_url(mut self, url: impl Into<String>) -> Self {
        self.config.shared.url = Some(url.into());
        self.config.shared.enabled = true;
        self
    }

    /// Shared-cache entry TTL.
    pub fn shared_cache_ttl(mut self, ttl: Duration) -> Self {
        self.config.shared.ttl = ttl;
        self
    }

    /// Shared-cache connect timeout.
    pub fn shared_cache_connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.shared.connect_timeout = timeout;
        self
    }

    /// Shared-cache response timeout.
    pub fn shared_cache_io_timeout(mut self, timeout: Duration) -> Self {
        self.config.shared.io_timeout = timeout;
        self
    }

    /// Largest value written to the shared cache.
    pub fn shared_cache_max_value_bytes(mut self, bytes: usize) -> Self {
        self.config.shared.max_value_bytes = bytes;
        self
    }

    /// Root CA (PEM) to trust for `rediss://`.
    pub fn shared_cache_tls_root_ca(mut self, pem: Vec<u8>) -> Self {
        self.config.shared.tls_root_ca_pem = Some(pem);
        self
    }

    /// Per-node circuit breakers of the shared cache.
    pub fn shared_cache_breaker(mut self, breaker: mmcache_shared_cache::BreakerConfig) -> Self {
        self.config.shared.breaker = breaker;
        self
    }

    /// Stampede lease on shared-cache misses.
    pub fn shared_cache_lease(mut self, lease: LeaseSettings) -> Self {
        self.config.shared.lease = lease;
        self
    }

    /// Write-behind of shared-cache SETs.
    pub fn shared_cache_write_behind(
        mut self,
        write_behind: mmcache_shared_cache::WriteBehindConfig,
    ) -> Self {
        self.config.shared.write_behind = write_behind;
        self
    }

    /// Hedged shared-cache GETs and bounded SET waits.
    pub fn shared_cache_hedge(mut self, hedge: HedgeSettings) -> Self {
        self.config.shared.hedge = hedge;
        self
    }

    /// The clock of the shared cache's warnings and breakers (tests).
    pub fn shared_cache_clock(mut self, clock: Arc<dyn mmcache_shared_cache::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Body cap in bytes.
    pub fn max_file_size_bytes(mut self, bytes: u64) -> Self {
        self.config.max_file_size_bytes = bytes;
        self
    }

    /// Partition caches by session scope.
    pub fn session_scoped(mut self, on: bool) -> Self {
        self.config.session_scoped = on;
        self
    }

    /// Allow `http://` and internal addresses.
    pub fn allow_internal(mut self, on: bool) -> Self {
        self.config.allow_internal = on;
        self
    }

    /// Hosts images may come from (`MMCACHE_ALLOWED_MEDIA_DOMAINS`): `example.com` exactly,
    /// `*.example.com` for its subdomains, IP addresses. Empty: every host.
    pub fn allowed_media_domains<S: Into<String>>(
        mut self,
        domains: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config.allowed_media_domains = domains.into_iter().map(Into::into).collect();
        self
    }

    /// Decoded-cache byte budget.
    pub fn decoded_cache_bytes(mut self, bytes: u64) -> Self {
        self.config.decoded_cache_bytes = bytes;
        self
    }

    /// Decoded-cache entry cap (`Some(0)` turns the cache off).
    pub fn decoded_cache_entries(mut self, entries: Option<usize>) -> Self {
        self.config.decoded_cache_entries = entries;
        self
    }

    /// Pixel limit of one image.
    pub fn max_pixels(mut self, pixels: u64) -> Self {
        self.config.max_pixels = pixels;
        self
    }

    /// How the JPEG decoder is chosen (`MMCACHE_JPEG_DECODER`).
    pub fn jpeg_decoder(mut self, choice: mmcache_decode::JpegDecoderChoice) -> Self {
        self.config.jpeg_decoder = choice;
        self
    }

    /// Path of libturbojpeg to load (`MMCACHE_LIBTURBOJPEG`).
    pub fn libturbojpeg(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config.libturbojpeg = Some(path.into());
        self
    }

    /// Bytes all running decodes may hold together (`MMCACHE_DECODE_MEMORY_BYTES`).
    pub fn decode_memory_bytes(mut self, bytes: u64) -> Self {
        self.config.decode_memory_bytes = bytes;
        self
    }

    /// Decodes running at once (`MMCACHE_DECODE_CONCURRENCY`).
    pub fn decode_concurrency(mut self, decodes: usize) -> Self {
        self.config.decode_concurrency = decodes;
        self
    }

    /// Longest wait for the decode budget (`MMCACHE_DECODE_WAIT_SECS`).
    pub fn decode_wait(mut self, wait: Duration) -> Self {
        self.config.decode_wait = wait;
        self
    }

    /// Origin connect timeout.
    pub fn origin_connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.origin_connect_timeout = timeout;
        self
    }

    /// Origin overall deadline per fetch.
    pub fn origin_timeout(mut self, timeout: Duration) -> Self {
        self.config.origin_timeout = timeout;
        self
    }

    /// Validates and builds. Does no network I/O: the shared cache connects on first use.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for an invalid setting, a refused cache URL or a client that cannot be
    /// built.
    pub fn build(self) -> Result<Loader, ConfigError> {
        let config = self.config;
        config.validate()?;
        let mut origin_config = OriginConfig::default();
        origin_config.allow_internal = config.allow_internal;
        origin_config.allowed_domains = mmcache_origin::DomainAllowlist::new(
            &config.allowed_media_domains,
        )
        .map_err(|reason| ConfigError::Invalid {
            name: env::ALLOWED_MEDIA_DOMAINS,
            value: reason.chars().take(64).collect(),
            expected: "host names, *.host names or IP addresses",
        })?;
        origin_config.max_body_bytes = config.max_file_size_bytes;
        origin_config.connect_timeout = config.origin_connect_timeout;
        origin_config.timeout = config.origin_timeout;
        let origin = Origin::new(origin_config).map_err(|e| ConfigError::Origin(e.to_string()))?;
        let shared = match (&config.shared.enabled, &config.shared.url) {
            (true, Some(url)) => {
                let mut c = SharedCacheConfig::new(url.clone());
                c.ttl = config.shared.ttl;
                c.connect_timeout = config.shared.connect_timeout;
                c.io_timeout = config.shared.io_timeout;
                c.max_value_bytes = config.shared.max_value_bytes;
                // A cached value may be as large as a download may be, never larger.
                c.max_read_bytes =
                    usize::try_from(config.max_file_size_bytes).unwrap_or(usize::MAX);
                c.tls_root_ca_pem = config.shared.tls_root_ca_pem.clone();
                c.breaker = config.shared.breaker;
                c.write_behind = config.shared.write_behind;
                if let Some(clock) = self.clock {
                    c.clock = clock;
                }
                Some(SharedCache::new(c)?)
            }
            _ => None,
        };
        let jpeg = mmcache_decode::select_jpeg_decoder(
            config.jpeg_decoder,
            config.libturbojpeg.as_deref(),
        )
        .map_err(|e| ConfigError::JpegDecoder(e.to_string()))?;
        match (&jpeg.library, &jpeg.fallback_reason) {
            (Some(library), _) => {
                tracing::info!(decoder = jpeg.decoder.as_str(), library = %library.display(), "JPEG decoder");
            }
            (None, Some(reason)) => tracing::warn!(
                decoder = jpeg.decoder.as_str(),
                %reason,
                "libjpeg-turbo did not load; JPEG pixels may differ from Pillow's by a few levels \
                 (install libturbojpeg0, or set MMCACHE_JPEG_DECODER=libjpeg-turbo to require it)"
            ),
            (None, None) => tracing::info!(decoder = jpeg.decoder.as_str(), "JPEG decoder"),
        }
        ::metrics::gauge!(metrics::JPEG_DECODER_INFO, "decoder" => jpeg.decoder.as_str()).set(1.0);
        let limits =
            DecodeLimits::with_max_pixels(config.max_pixels).with_jpeg_decoder(jpeg.decoder);
        let budget = DecodeBudget::new(
            config.decode_concurrency,
            config.decode_memory_bytes,
            config.decode_wait,
        );
        let decoded = DecodedCache::new(config.decoded_cache_bytes, config.decoded_cache_entries);
        let memory_hits =
            ::metrics::counter!(metrics::LOADS, "source" => "memory", "outcome" => "ok");
        Ok(Loader {
            inner: Arc::new(Inner {
                limits,
                budget,
                hedge: Arc::new(Hedge::new(config.shared.hedge)),
                config,
                origin,
                shared,
                decoded,
                inflight: DashMap::new(),
                memory_hits,
                metrics: metrics::Handles::new(),
            }),
        })
    }
}

impl Loader {
    /// A builder with the defaults (the environment is not read).
    pub fn builder() -> LoaderBuilder {
        LoaderBuilder::default()
    }

    /// A loader configured from the `DYN_MM_*` and `MMCACHE_*` environment variables.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad variable and its value.
    pub fn from_env() -> Result<Self, ConfigError> {
        LoaderBuilder::from_env()?.build()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The decoded-image cache (stats, manual eviction).
    pub fn decoded_cache(&self) -> &DecodedCache {
        &self.inner.decoded
    }

    /// How often this loader hedged its shared-cache GETs, and the current delay.
    pub fn hedge_stats(&self) -> HedgeStats {
        self.inner.hedge.stats()
    }

    /// The shared cache, when enabled.
    pub fn shared_cache(&self) -> Option<&SharedCache> {
        self.inner.shared.as_ref()
    }

    /// Waits, at most `deadline`, for queued shared-cache writes (write-behind) to finish.
    /// Returns whether everything was written. Call it before the process exits.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        match &self.inner.shared {
            Some(shared) => shared.flush(deadline).await,
            None => true,
        }
    }

    /// Loads `url` within `scope` and returns the decoded image.
    ///
    /// # Errors
    ///
    /// See [`Error`]; [`Error::http_status`] gives a status to return.
    pub async fn load(&self, url: &str, scope: Option<&Scope>) -> Result<Arc<DecodedImage>> {
        self.load_detailed(url, scope).await.map(|l| l.image)
    }

    /// Like [`Loader::load`], also saying where the image came from.
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub async fn load_detailed(&self, url: &str, scope: Option<&Scope>) -> Result<Loaded> {
        if data_url::is_data_url(url) {
            return self
                .inner
                .record(Source::Data, self.load_data_url(url).await);
        }
        let Some(identity) = CacheIdentity::resolve(self.inner.config.session_scoped, url, scope)
        else {
            // Scoped mode without a usable scope: no cache layer at all, every limit still applies.
            self.inner.metrics.bypass().increment(1);
            let started = Instant::now();
            let result = self.inner.fetch_and_decode(url).await;
            self.inner.observe(Source::Origin, started);
            return self.inner.record(
                Source::Origin,
                result.map(|(image, len)| (image, Source::Origin, Some(len))),
            );
        };
        if let Some(image) = self.inner.decoded.get(&identity) {
            self.inner.memory_hits.increment(1);
            return Ok(Loaded {
                image,
                source: Source::Memory,
                encoded_len: None,
            });
        }
        let started = Instant::now();
        let (outcome, joined) = self.join_or_start(identity, url).await;
        let source = if joined {
            Source::Inflight
        } else {
            outcome.as_ref().map_or(Source::Origin, |o| o.1)
        };
        self.inner.observe(source, started);
        let outcome = outcome.map(|(image, src, len)| {
            if joined {
                (image, Source::Inflight, None)
            } else {
                (image, src, len)
            }
        });
        self.inner.record(source, outcome)
    }

    /// Loads every URL concurrently, keeping order. When any load fails, the error returned is
    /// the first one carrying an origin HTTP status, else the first URL-policy error, else an
    /// [`Error::Batch`] listing every failure with its index.
    ///
    /// # Errors
    ///
    /// As described above.
    pub async fn load_batch<S: AsRef<str>>(
        &self,
        urls: &[S],
        scope: Option<&Scope>,
    ) -> Result<Vec<Arc<DecodedImage>>> {
        let results = self.load_batch_each(urls, scope).await;
        let failures: Vec<(usize, Error)> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| (i, e.clone())))
            .collect();
        if failures.is_empty() {
            return results.into_iter().map(|r| r.map(|l| l.image)).collect();
        }
        if let Some((_, e)) = failures.iter().find(|(_, e)| e.origin_status().is_some()) {
            return Err(e.clone());
        }
        if let Some((_, e)) = failures.iter().find(|(_, e)| e.is_policy()) {
            return Err(e.clone());
        }
        Err(Error::Batch(failures.into()))
    }

    /// Loads every URL concurrently and returns each result, in order.
    pub async fn load_batch_each<S: AsRef<str>>(
        &self,
        urls: &[S],
        scope: Option<&Scope>,
    ) -> Vec<Result<Loaded>> {
        let mut set = tokio::task::JoinSet::new();
        for (i, url) in urls.iter().enumerate() {
            let (loader, url, scope) = (self.clone(), url.as_ref().to_owned(), scope.cloned());
            set.spawn(async move { (i, loader.load_detailed(&url, scope.as_ref()).await) });
        }
        let mut out: Vec<Option<Result<Loaded>>> = (0..urls.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((i, r)) => out[i] = Some(r),
                Err(e) => tracing::error!(error = %e, "batch load task failed"),
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Internal("load task failed".into()))))
            .collect()
    }

    async fn load_data_url(&self, url: &str) -> Result<(Arc<DecodedImage>, Source, Option<usize>)> {
        let bytes = data_url::decode_payload(url, self.inner.config.max_file_size_bytes)?;
        let len = bytes.len();
        let image = self.inner.decode(Bytes::from(bytes)).await?;
        Ok((image, Source::Data, Some(len)))
    }

    /// Joins the load of `identity` in flight, or starts it in a task of its own so that a
    /// cancelled caller never cancels the load other callers wait for.
    async fn join_or_start(&self, identity: CacheIdentity, url: &str) -> (Outcome, bool) {
        let key = *blake3::hash(identity.as_str().as_bytes()).as_bytes();
        let (mut rx, joined) = match self.inner.inflight.entry(key) {
            dashmap::Entry::Occupied(slot) => (slot.get().clone(), true),
            dashmap::Entry::Vacant(slot) => {
                let (tx, rx) = watch::channel(None);
                slot.insert(rx.clone());
                let inner = self.inner.clone();
                let url = url.to_owned();
                tokio::spawn(async move {
                    // Leaves the map even if `fill` panics, so the next load starts afresh.
                    let leave = LeaveInflight { inner: &inner, key };
                    let outcome = inner.fill(&identity, &url).await;
                    if let Ok((image, _, _)) = &outcome {
                        inner.decoded.insert(&identity, image.clone());
                    }
                    // Leave the map before publishing: a later load sees the cache or retries.
                    drop(leave);
                    let _ = tx.send(Some(outcome));
                });
                (rx, false)
            }
        };
        let outcome = match rx.wait_for(Option::is_some).await {
            Ok(value) => value
                .clone()
                .unwrap_or_else(|| Err(Error::Internal("no outcome".into()))),
            // The task ended without publishing: it panicked.
            Err(_) => Err(Error::Internal("load task ended without a result".into())),
        };
        (outcome, joined)
    }
}

impl Inner {
    /// Shared cache, then origin. Runs in the load's own task.
    async fn fill(&self, identity: &CacheIdentity, url: &str) -> Outcome {
        // Policy first, DNS included: the shared cache must not serve what this worker may not
        // fetch (a worker with internal access may have cached it). Resolutions are cached
        // briefly by the origin client, which then connects to the same addresses.
        self.origin.check_resolved(url).await?;
        let Some(shared) = &self.shared else {
            let (image, bytes) = self.fetch_and_decode_bytes(url).await?;
            return Ok((image, Source::Origin, Some(bytes.len())));
        };
        let (cached, outcome) = match self.get_or_hedge(shared, identity, url).await {
            Raced::Cache(cached, outcome) => (cached, outcome),
            Raced::Hit(hit) => return Ok(hit),
            Raced::Origin(fetched) => return self.stored(shared, identity, fetched?).await,
        };
        if let Some(bytes) = cached {
            if let Some(hit) = self.decode_cached(shared, identity, bytes).await? {
                return Ok(hit);
            }
        } else if outcome == GetOutcome::Oversized {
            // Larger than this worker may download, so larger than it may hold. Another worker
            // with a larger cap may have written it legitimately: leave it, and let the origin
            // (same cap) decide.
            self.metrics.oversized().increment(1);
            tracing::debug!("shared cache value over the download cap; not read");
        } else if outcome == GetOutcome::Miss && self.config.shared.lease.enabled {
            return self.fill_with_lease(shared, identity, url).await;
        }
        self.fill_from_origin(shared, identity, url).await
    }

    /// Decodes a cached value. Bytes that are not a valid image are deleted (`Ok(None)`: the
    /// load goes to the origin). A limit of this worker's own (pixels, decode budget) is the
    /// load's error: the entry may serve workers with other limits, so it stays.
    async fn decode_cached(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        bytes: Bytes,
    ) -> Result<Option<(Arc<DecodedImage>, Source, Option<usize>)>> {
        let len = bytes.len();
        match self.decode(bytes).await {
            Ok(image) => Ok(Some((image, Source::Shared, Some(len)))),
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                self.metrics.corrupt().increment(1);
                tracing::debug!(error = %e, "shared cache value did not decode; deleting it");
                shared.delete(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Origin, decode, then SET (or queue it, with write-behind) only the bytes that decoded.
    async fn fill_from_origin(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &str,
    ) -> Outcome {
        let fetched = self.fetch_and_decode_bytes(url).await?;
        self.stored(shared, identity, fetched).await
    }

    /// Writes what the origin gave (only bytes that decoded reach here). With hedging on, the
    /// load waits for its SET at most the hedge budget; the write then goes on in the
    /// background, bounded by the I/O timeout and the write-behind queue's limits.
    async fn stored(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        (image, bytes): (Arc<DecodedImage>, Bytes),
    ) -> Outcome {
        let len = bytes.len();
        if self.hedge.enabled() {
            shared
                .store_within(identity, bytes, self.hedge.set_wait())
                .await;
        } else {
            shared.store(identity, bytes).await;
        }
        Ok((image, Source::Origin, Some(len)))
    }

    /// The shared GET, hedged: when it has not answered within the hedge delay, the origin
    /// fetch starts beside it and the first usable image wins (a late hit still wins if it
    /// decodes before the origin answers). The GET runs in its own task, so a hedged-away GET
    /// still finishes and its failure still counts toward the node's breaker.
    async fn get_or_hedge(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &str,
    ) -> Raced {
        if !self.hedge.enabled() {
            let (cached, outcome) = shared.get_with_outcome(identity).await;
            return Raced::Cache(cached, outcome);
        }
        // The GET times itself in its task: a GET that loses to the origin still counts in the
        // latency samples (and earns budget), so the delay follows slow GETs too.
        let mut get = tokio::spawn({
            let (shared, identity, hedge) = (shared.clone(), identity.clone(), self.hedge.clone());
            async move {
                let started = Instant::now();
                let (cached, outcome) = shared.get_with_outcome(&identity).await;
                if matches!(
                    outcome,
                    GetOutcome::Hit | GetOutcome::Miss | GetOutcome::Oversized
                ) {
                    hedge.observe(started.elapsed());
                }
                (cached, outcome)
            }
        });
        let joined = |r: std::result::Result<
            (Option<Bytes>, GetOutcome),
            tokio::task::JoinError,
        >| { r.unwrap_or((None, GetOutcome::Error)) };
        let Some(delay) = self.hedge.delay_if_ready() else {
            let (cached, outcome) = joined(get.await);
            return Raced::Cache(cached, outcome);
        };
        if let Ok(r) = tokio::time::timeout(delay, &mut get).await {
            let (cached, outcome) = joined(r);
            return Raced::Cache(cached, outcome);
        }
        if !self.hedge.try_take() {
            self.record_hedge("over_budget");
            let (cached, outcome) = joined(get.await);
            return Raced::Cache(cached, outcome);
        }
        let origin = self.fetch_and_decode_bytes(url);
        tokio::pin!(origin);
        // Phase 1: whichever answers first.
        let cached = tokio::select! {
            fetched = &mut origin => match fetched {
                Ok(fetched) => {
                    self.record_hedge("origin_won");
                    return Raced::Origin(Ok(fetched));
                }
                // A fast origin failure must not beat a slow cache hit: wait for the GET.
                Err(e) => {
                    let (cached, _) = joined(get.await);
                    return match cached {
                        Some(bytes) => match self.decode_cached(shared, identity, bytes).await {
                            Ok(Some(hit)) => {
                                self.record_hedge("cache_won");
                                Raced::Hit(hit)
                            }
                            _ => Raced::Origin(Err(e)),
                        },
                        None => Raced::Origin(Err(e)),
                    };
                }
            },
            r = &mut get => joined(r).0,
        };
        // Phase 2: a late hit races the origin through its decode.
        if let Some(bytes) = cached {
            let decoded = self.decode_cached(shared, identity, bytes);
            tokio::pin!(decoded);
            tokio::select! {
                fetched = &mut origin => match fetched {
                    Ok(fetched) => {
                        self.record_hedge("origin_won");
                        return Raced::Origin(Ok(fetched));
                    }
                    Err(e) => {
                        if let Ok(Some(hit)) = decoded.await {
                            self.record_hedge("cache_won");
                            return Raced::Hit(hit);
                        }
                        return Raced::Origin(Err(e));
                    }
                },
                d = &mut decoded => {
                    if let Ok(Some(hit)) = d {
                        self.record_hedge("cache_won");
                        return Raced::Hit(hit);
                    }
                }
            }
        }
        self.record_hedge("origin_won");
        Raced::Origin(origin.await)
    }

    /// On a miss, one worker of the fleet takes the lease and fills the entry; the others poll
    /// for it with backoff, bounded by the lease wait, then fetch from the origin themselves.
    /// A waiter that finds the lease released or expired (its holder failed or died) takes it
    /// over at once. Any lease failure falls back to the origin.
    async fn fill_with_lease(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &str,
    ) -> Outcome {
        let lease = self.config.shared.lease;
        let deadline = Instant::now() + lease.wait;
        let mut pause = Duration::from_millis(5);
        let mut waited = false;
        loop {
            match shared.try_lease(identity, lease.ttl).await {
                LeaseOutcome::Won(token) => {
                    self.record_lease(if waited { "took_over" } else { "won" });
                    return self
                        .fill_as_lease_holder(shared, identity, url, token)
                        .await;
                }
                LeaseOutcome::Held => {}
                _ => {
                    self.record_lease("error");
                    return self.fill_from_origin(shared, identity, url).await;
                }
            }
            // Held by another worker: wait a little, then look for its entry.
            if Instant::now() + pause >= deadline {
                self.record_lease("waited_timeout");
                return self.fill_from_origin(shared, identity, url).await;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            waited = true;
            let (cached, outcome) = shared.get_with_outcome(identity).await;
            if let Some(bytes) = cached {
                if let Some(hit) = self.decode_cached(shared, identity, bytes).await? {
                    self.record_lease("waited_hit");
                    return Ok(hit);
                }
                return self.fill_from_origin(shared, identity, url).await;
            }
            if outcome != GetOutcome::Miss {
                return self.fill_from_origin(shared, identity, url).await; // the cache failed
            }
            // Still a miss: try the lease again (taken over if its holder let it go).
        }
    }

    /// The lease holder: looks once more (the previous holder may have filled the entry and
    /// released the lease between our GET and our lease), fills from the origin, and releases
    /// the lease, so after a failure the waiters take over at once instead of sleeping out
    /// the lease.
    async fn fill_as_lease_holder(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &str,
        token: u64,
    ) -> Outcome {
        let result = async {
            match self.get_or_hedge(shared, identity, url).await {
                Raced::Hit(hit) => return Ok(hit),
                Raced::Origin(fetched) => return self.stored(shared, identity, fetched?).await,
                Raced::Cache(Some(bytes), _) => {
                    if let Some(hit) = self.decode_cached(shared, identity, bytes).await? {
                        return Ok(hit);
                    }
                }
                Raced::Cache(None, _) => {}
            }
            self.fill_from_origin(shared, identity, url).await
        }
        .await;
        // With write-behind the entry lands a little after the load returns: keep the lease
        // (it expires) so waiters poll for the entry instead of taking over and fetching again.
        if result.is_err() || !self.config.shared.write_behind.enabled {
            shared.release_lease(identity, token).await;
        }
        result
    }

    async fn fetch_and_decode(&self, url: &str) -> Result<(Arc<DecodedImage>, usize)> {
        let (image, bytes) = self.fetch_and_decode_bytes(url).await?;
        Ok((image, bytes.len()))
    }

    async fn fetch_and_decode_bytes(&self, url: &str) -> Result<(Arc<DecodedImage>, Bytes)> {
        let started = Instant::now();
        let fetched = self.origin.fetch(url).await;
        let outcome = if fetched.is_ok() { "ok" } else { "error" };
        self.metrics
            .origin_duration
            .get(outcome)
            .record(started.elapsed().as_secs_f64());
        let fetched = fetched?;
        self.metrics
            .origin_bytes()
            .increment(fetched.bytes.len() as u64);
        let image = self.decode(fetched.bytes.clone()).await?;
        Ok((image, fetched.bytes))
    }

    /// Reads the headers (refusing what cannot be an image), reserves the decode's memory in
    /// the budget, then decodes on the blocking pool: a large image is milliseconds of CPU.
    async fn decode(&self, bytes: Bytes) -> Result<Arc<DecodedImage>> {
        /// Headers of smaller files are read in place; larger ones take a scan of the bytes.
        const INLINE_PROBE_BYTES: usize = 256 << 10;
        let limits = self.limits;
        let started = Instant::now();
        let probe = if bytes.len() <= INLINE_PROBE_BYTES {
            mmcache_decode::probe(&bytes, &limits)?
        } else {
            let bytes = bytes.clone();
            blocking(move || mmcache_decode::probe(&bytes, &limits)).await??
        };
        /// Images this small decode in well under a millisecond: in place, without the hop
        /// to the blocking pool (which costs about as much as the decode itself).
        const INLINE_DECODE_PIXELS: u64 = 256 * 256;
        let permit = self.budget.acquire(probe.memory_bytes).await?;
        let small = u64::from(probe.width) * u64::from(probe.height) <= INLINE_DECODE_PIXELS
            && bytes.len() <= INLINE_PROBE_BYTES;
        let image = if small {
            let image = mmcache_decode::decode_probed(&bytes, &probe, &limits);
            drop(permit);
            image?
        } else {
            // The permit moves into the decode: if this future is dropped (a hedge won), the
            // decode still runs to its end on the blocking pool, and its memory stays counted.
            blocking(move || {
                let image = mmcache_decode::decode_probed(&bytes, &probe, &limits);
                drop(permit);
                image
            })
            .await??
        };
        self.metrics
            .decode_duration
            .get(image.format().as_str())
            .record(started.elapsed().as_secs_f64());
        Ok(Arc::new(image))
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("decode task failed: {e}")))
}

/// Removes an identity from the in-flight map when dropped.
struct LeaveInflight<'a> {
    inner: &'a Inner,
    key: [u8; 32],
}

impl Drop for LeaveInflight<'_> {
    fn drop(&mut self) {
        self.inner.inflight.remove(&self.key);
    }
}

/// How a hedged GET ended.
enum Raced {
    /// The GET answered first (or no hedge ran): its value and outcome.
    Cache(Option<Bytes>, GetOutcome),
    /// A late hit decoded before the origin answered.
    Hit((Arc<DecodedImage>, Source, Option<usize>)),
    /// The origin answered first: its decoded image and bytes, or its error.
    Origin(Result<(Arc<DecodedImage>, Bytes)>),
}

impl Inner {
    fn record_hedge(&self, outcome: &'static str) {
        self.metrics.hedges.get(outcome).increment(1);
    }

    fn record_lease(&self, outcome: &'static str) {
        self.metrics.leases.get(outcome).increment(1);
    }

    fn observe(&self, source: Source, started: Instant) {
        self.metrics
            .load_duration
            .get(source.as_str())
            .record(started.elapsed().as_secs_f64());
    }

    fn record(&self, source: Source, outcome: Outcome) -> Result<Loaded> {
        let loads = if outcome.is_ok() {
            &self.metrics.loads_ok
        } else {
            &self.metrics.loads_error
        };
        loads.get(source.as_str()).increment(1);
        outcome.map(|(image, source, encoded_len)| Loaded {
            image,
            source,
            encoded_len,
        })
    }
}

/// The README's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

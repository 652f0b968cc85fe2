//! One call for multimodal inference workers: `loader.load(url, scope)` returns a decoded RGB
//! image as cheaply as possible.
//!
//! In order, a load is served by: the worker's byte-bounded decoded-image cache; a load of the
//! same image already in flight in this process; the host's disk tier of encoded bytes, shared
//! by its worker processes (optional, off by default, fails open); the fleet's shared cache of
//! encoded bytes on Redis Cluster, Valkey or Dragonfly (optional, off by default, fails open);
//! the origin over HTTP(S) with a hard size cap. Session scoping partitions every cache (and
//! the embedding caches, [`Loader::embeddings`]) by a hashed session id.
//!
//! # Examples
//!
//! ```
//! use mmcache_loader::{Loader, Source};
//! use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A 2×2 PNG served by a tiny HTTP origin on 127.0.0.1 (below).
//! const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x02\0\0\0\x02\x08\x02\0\0\0\xfd\xd4\x9as\
//!     \0\0\0\x10IDATx\xdac8!'\x07D\x0c\x10\n\0\x1f&\x04\x11J\x8e\x8d \0\0\0\0IEND\xaeB`\x82";
//! let (url, downloads) = serve("/cat.png", PNG);
//!
//! // Loader::from_env() reads the DYN_MM_* variables; the builder sets the same things.
//! let loader = Loader::builder().allow_internal(true).build()?; // http to 127.0.0.1: tests only
//!
//! let first = loader.load_detailed(&format!("{url}/cat.png"), None).await?;
//! assert_eq!(first.source, Source::Origin);
//! assert_eq!((first.image.width(), first.image.height()), (2, 2));
//!
//! let again = loader.load_detailed(&format!("{url}/cat.png"), None).await?;
//! assert_eq!(again.source, Source::Memory);
//! assert_eq!(downloads.load(Ordering::SeqCst), 1);
//!
//! let err = loader.load(&format!("{url}/missing.png"), None).await.unwrap_err();
//! assert_eq!(err.http_status(), 404);
//! # Ok(())
//! # }
//!
//! /// Serves `body` at `path` and 404 elsewhere; returns the base URL and a download count.
//! fn serve(path: &str, body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
//!     use std::io::{Read, Write};
//!     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//!     let base = format!("http://{}", listener.local_addr().unwrap());
//!     let downloads = Arc::new(AtomicUsize::new(0));
//!     let (ok, counter) = (format!("GET {path} "), downloads.clone());
//!     std::thread::spawn(move || {
//!         for mut stream in listener.incoming().flatten() {
//!             let mut request = [0; 4096];
//!             let n = stream.read(&mut request).unwrap_or(0); // a GET fits in one read on loopback
//!             let found = request[..n].starts_with(ok.as_bytes());
//!             let (status, body) = if found { ("200 OK", body) } else { ("404 Not Found", &b""[..]) };
//!             counter.fetch_add(usize::from(found), Ordering::SeqCst);
//!             let head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
//!             let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
//!         }
//!     });
//!     (base, downloads)
//! }
//! ```
//!
//! # Errors
//!
//! [`Error::http_status`] maps every failure to a status a worker can return: the origin's
//! status as is, timeout 408, connection failure 400, unsupported image 415, too large 413,
//! URL policy 400/403. The shared cache never fails a load.
//!
//! # Embeddings
//!
//! [`Loader::embeddings`] caches encoder outputs: `get_or_compute(key, model, scope, compute)`
//! runs `compute` once per key per process (joined, cancel-safe, failures and panics never
//! cached), scoped like images. See [`embeddings`] for an example.
//!
//! # Layers
//!
//! Each layer is a crate of its own (`mmcache-scope`, `mmcache-origin`, `mmcache-decode`,
//! `mmcache-disk-cache`, `mmcache-shared-cache`). This crate re-exports the names a loader user
//! needs from them: the types of [`Loader`]'s accessors and of the settings, the image, the
//! errors and the scope helpers. A user that needs more depends on the layer's crate.

mod background;
mod budget;
mod builder;
mod config;
pub mod doctor;
pub mod embeddings;
mod error;
mod handle;
mod hedge;
mod loaded;
mod metric_labels;
pub mod metrics;
mod slow_nodes;
mod tiers;
mod write_memory;

use std::sync::Arc;
use std::time::Duration;

use mmcache_decode::DecodedImage;

use crate::embeddings::Embeddings;

pub use crate::builder::LoaderBuilder;
pub use crate::config::{
    Config, DEFAULT_DECODE_MEMORY_BYTES, DEFAULT_DECODE_WAIT, DEFAULT_DOWNLOAD_MEMORY_BYTES,
    DEFAULT_EMBEDDING_COMPUTE_TIMEOUT, DiskCacheConfig, LOAD_TIMEOUT_SLACK, LeaseConfig,
    MemoryPart, SharedCacheConfig, env,
};
pub use crate::config::{
    ConfigError, HedgeSettings, PROCESS_VARIABLES, SETTINGS, Section, Setting, Variable,
    settings_doc_tables,
};
pub use crate::error::{DataUrlError, DecodeError, Error, OriginError, Result};
pub use crate::handle::Loader;
pub use crate::hedge::HedgeStats;
pub use crate::loaded::{Loaded, Source};
// The layers' names a loader user needs, listed one by one (see the crate docs).
pub use mmcache_decode::{
    CacheStats, ColorPolicy, DecodeProfile, DecodedCache, DecodedImage as Image, Fallback,
    ImageFormat, ImageFormats, JpegDecoder, JpegDecoderChoice, Mode, Opened, Orientation,
    PixelLayout, Transparency, Undecoded,
};
pub use mmcache_disk_cache::{DiskCache, DiskCacheStats, DiskStatus};
pub use mmcache_origin::{Origin, PolicyViolation};
pub use mmcache_scope::{Scope, scope_from_headers, scope_from_pairs};
pub use mmcache_shared_cache::{BreakerConfig, SharedCache, SharedCacheStats, WriteBehindConfig};

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
        &self.tiers.config
    }

    /// The decoded-image cache (stats, manual eviction).
    pub fn decoded_cache(&self) -> &DecodedCache {
        self.tiers.memory.cache()
    }

    /// The origin client (policy checks, direct fetches).
    pub fn origin(&self) -> &Origin {
        self.tiers.origin.client()
    }

    /// How often this loader hedged its shared-cache GETs, and the current delay.
    pub fn hedge_stats(&self) -> HedgeStats {
        self.tiers.hedge.stats()
    }

    /// The host's disk tier, when enabled.
    pub fn disk_cache(&self) -> Option<&DiskCache> {
        self.tiers.disk.as_ref().map(|disk| disk.cache())
    }

    /// The host pixel tier, when enabled (its files, in the disk tier crate's
    /// [`Tier::Host`](mmcache_disk_cache::Tier::Host)).
    pub fn host_pixels(&self) -> Option<&DiskCache> {
        self.tiers.host.as_ref().map(|host| host.cache())
    }

    /// The shared cache, when enabled.
    pub fn shared_cache(&self) -> Option<&SharedCache> {
        self.tiers.shared.as_ref().map(|shared| shared.cache())
    }

    /// The embedding caches: [`Embeddings::get_or_compute`].
    pub fn embeddings(&self) -> &Embeddings {
        &self.embeddings
    }

    /// Waits, at most `deadline`, for the writes still on their way: disk-tier entries (written
    /// in the background, off the load's path) and shared-cache SETs (left to the background
    /// or queued by write-behind). Returns whether everything was written. Call it before the
    /// process exits.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        self.tiers.shutdown(deadline).await
    }

    /// Loads `url` within `scope` and returns the decoded image.
    ///
    /// # Errors
    ///
    /// See [`Error`]; [`Error::http_status`] gives a status to return.
    pub async fn load(&self, url: &str, scope: Option<&Scope>) -> Result<Arc<DecodedImage>> {
        self.load_detailed(url, scope).await.map(|l| l.image)
    }

    /// The image of `url` within `scope` if the decoded-image cache holds it, at once, without
    /// awaiting: the memory hit of [`Loader::load`] (counted as one), and `None` where `load`
    /// would look further (a miss, a `data:` URL, no usable scope in scoped mode). For callers
    /// that can skip a task or a thread hop when the image is in memory.
    pub fn load_cached(&self, url: &str, scope: Option<&Scope>) -> Option<Arc<DecodedImage>> {
        self.tiers
            .load_cached(url, scope, self.tiers.default_want())
    }

    /// [`Loader::load_cached`] in the decode profile `profile`.
    pub fn load_cached_as(
        &self,
        url: &str,
        scope: Option<&Scope>,
        profile: &DecodeProfile,
    ) -> Option<Arc<DecodedImage>> {
        self.tiers.load_cached(url, scope, self.tiers.want(profile))
    }

    /// Like [`Loader::load`], also saying where the image came from.
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub async fn load_detailed(&self, url: &str, scope: Option<&Scope>) -> Result<Loaded> {
        self.tiers.load(url, scope, self.tiers.default_want()).await
    }

    /// Loads `url` within `scope`, decoded as `profile` asks: an engine's pixels (vLLM's,
    /// SGLang's; see [`DecodeProfile`]). Every tier serves it; the encoded tiers (disk,
    /// shared) are the same for every profile, the decoded cache and the loads in flight are
    /// per profile (two profiles never share an image). With
    /// [`Fallback::Caller`](mmcache_decode::Fallback::Caller), bytes this crate cannot decode
    /// exactly as the profile asks come back undecoded ([`Mode::Undecoded`], the bytes in
    /// [`DecodedImage::source`]) for the engine's own decoder: those of another image format
    /// are cached like any image, those the decoders refused are kept by no cache.
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub async fn load_as(
        &self,
        url: &str,
        scope: Option<&Scope>,
        profile: &DecodeProfile,
    ) -> Result<Loaded> {
        self.tiers.load(url, scope, self.tiers.want(profile)).await
    }

    /// Decodes `bytes` as `profile` asks, within the decode budget and the download cap
    /// (`DYN_MM_MAX_FILE_SIZE_MB`), with no cache layer: for bytes an engine read itself (a
    /// `data:` URL it parsed, a local file it may open).
    ///
    /// # Errors
    ///
    /// See [`Error`]: the cap, the decode budget, the decode's refusals (with
    /// [`Fallback::Caller`](mmcache_decode::Fallback::Caller), those come back undecoded).
    pub async fn decode_as(
        &self,
        bytes: bytes::Bytes,
        profile: &DecodeProfile,
    ) -> Result<Arc<DecodedImage>> {
        self.tiers
            .decode_bytes(bytes, self.tiers.want(profile))
            .await
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
        if let Some((_, e)) = Error::batch_representative(&failures) {
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
}

/// The crate README's examples (the root README's are the same), compiled as doctests so they
/// stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

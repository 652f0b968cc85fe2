//! Configuration from the environment (names and defaults of the Python implementation) and
//! from the builder. A bad value is an error that names the variable and the value.
//!
//! Each setting is declared once, in [`SETTINGS`] (`settings.rs`): its variable, documented
//! default and rule, Python keyword and reader. `validate.rs` holds every bound, checked once
//! for every source; `tiers.rs` where settings go (the tiers' own configurations); `parse.rs`
//! the text parsers; `env.rs` the variable names.

use std::path::PathBuf;
use std::time::Duration;

use mmcache_decode::{ImageFormats, JpegDecoderChoice};

use crate::error::ConfigError;
use crate::hedge::HedgeSettings;

#[cfg(test)]
mod doc_tables;
pub mod env;
mod parse;
mod settings;
#[cfg(test)]
mod tests;
mod tiers;
mod validate;

pub use settings::{SETTINGS, Section, Setting};
pub(crate) use tiers::disk_read_memory;
pub(crate) use validate::Given;

/// Default of [`Config::decode_memory_bytes`]: 2 GiB, room for a few of the largest images
/// the default pixel limit lets through (a 100 MP progressive JPEG holds about 1 GB).
pub const DEFAULT_DECODE_MEMORY_BYTES: u64 = 2 << 30;
/// Default of [`Config::decode_wait`].
pub const DEFAULT_DECODE_WAIT: Duration = Duration::from_secs(30);
/// Default of [`Config::download_memory_bytes`]: 512 MiB, eight bodies of the largest size the
/// default download cap allows (64 MiB) at once, so 64 concurrent downloads of 60 MB stay
/// well under 1 GB of resident memory.
pub const DEFAULT_DOWNLOAD_MEMORY_BYTES: u64 = 512 << 20;
/// Default of [`Config::embedding_compute_timeout`]: 60 s. It only frees the waiters of a
/// compute that hangs; a vision encoder takes tens of milliseconds to a few seconds even
/// queued on a loaded GPU, so a healthy compute never meets it (a compute that fails the
/// load of a request costs more than one that is slow). Waiters in other processes are bounded
/// by the lease wait, not by this.
pub const DEFAULT_EMBEDDING_COMPUTE_TIMEOUT: Duration = Duration::from_secs(60);
/// What the default load deadline adds to the origin timeout, the decode wait and the lease
/// wait: DNS (bounded by the connect timeout), shared-cache round trips (bounded by their I/O
/// timeout), disk-tier I/O and scheduling.
pub const LOAD_TIMEOUT_SLACK: Duration = Duration::from_secs(30);
/// Shared-cache settings.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedCacheSettings {
    /// Whether loads use the shared cache. Default false.
    pub enabled: bool,
    /// Discovery URL (secret: never logged).
    pub url: Option<String>,
    /// Entry TTL. Default 3600 s.
    pub ttl: Duration,
    /// Connect timeout. Default 0.1 s.
    pub connect_timeout: Duration,
    /// Response timeout. Default 2.0 s.
    pub io_timeout: Duration,
    /// Largest value written. Default 16 MiB.
    pub max_value_bytes: usize,
    /// Root CA (PEM) for `rediss://`; `None` uses the system store.
    pub tls_root_ca_pem: Option<Vec<u8>>,
    /// Per-node circuit breakers. Default on, 5 failures, 1 s cool-down.
    pub breaker: mmcache_shared_cache::BreakerConfig,
    /// Stampede lease. Default off.
    pub lease: LeaseSettings,
    /// Write-behind of SETs. Default off.
    pub write_behind: mmcache_shared_cache::WriteBehindConfig,
    /// Hedged GETs and bounded SET waits. Default on.
    pub hedge: HedgeSettings,
}

/// Settings of the host's disk tier.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskSettings {
    /// Its directory; `None` turns the tier off (the default).
    pub dir: Option<PathBuf>,
    /// Byte budget across the host's processes. Default 10 GiB.
    pub max_bytes: u64,
    /// Entry TTL. Default 3600 s.
    pub ttl: Duration,
    /// Shared-group mode: the gid trusted besides this uid. Default `None`.
    pub group: Option<u32>,
    /// Deadline of one disk operation. Default 1 s.
    pub timeout: Duration,
}

impl Default for DiskSettings {
    fn default() -> Self {
        Self {
            dir: None,
            max_bytes: mmcache_disk_cache::DEFAULT_MAX_BYTES,
            ttl: mmcache_disk_cache::DEFAULT_TTL,
            group: None,
            timeout: mmcache_disk_cache::DEFAULT_TIMEOUT,
        }
    }
}

/// Stampede-lease settings: on a miss one worker fills the entry, the others wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSettings {
    /// Take a lease on a miss. Default false.
    pub enabled: bool,
    /// Lease lifetime (frees the entry when its holder dies). Default 5 s.
    pub ttl: Duration,
    /// Longest wait for the holder's fill before fetching from the origin. Default 3 s.
    pub wait: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            ttl: Duration::from_secs(5),
            wait: Duration::from_secs(3),
        }
    }
}

impl std::fmt::Debug for SharedCacheSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCacheSettings")
            .field("enabled", &self.enabled)
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("breaker", &self.breaker)
            .field("lease", &self.lease)
            .field("write_behind", &self.write_behind)
            .field("hedge", &self.hedge)
            .field(
                "tls_root_ca_pem",
                &self.tls_root_ca_pem.as_ref().map(|_| "<set>"),
            )
            .finish()
    }
}

impl Default for SharedCacheSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            url: None,
            ttl: mmcache_shared_cache::DEFAULT_TTL,
            connect_timeout: mmcache_shared_cache::DEFAULT_CONNECT_TIMEOUT,
            io_timeout: mmcache_shared_cache::DEFAULT_IO_TIMEOUT,
            max_value_bytes: mmcache_shared_cache::DEFAULT_MAX_VALUE_BYTES,
            tls_root_ca_pem: None,
            breaker: mmcache_shared_cache::BreakerConfig::default(),
            lease: LeaseSettings::default(),
            write_behind: mmcache_shared_cache::WriteBehindConfig::default(),
            hedge: HedgeSettings::default(),
        }
    }
}

/// Everything a [`crate::Loader`] is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The shared cache.
    pub shared: SharedCacheSettings,
    /// Body cap in bytes (`DYN_MM_MAX_FILE_SIZE_MB` MiB). Default 64 MiB.
    pub max_file_size_bytes: u64,
    /// Partition caches by session scope. Default false.
    pub session_scoped: bool,
    /// Allow `http://` and internal addresses. Default false.
    pub allow_internal: bool,
    /// The host's disk tier. Default off.
    pub disk: DiskSettings,
    /// Hosts images may come from (see [`env::ALLOWED_MEDIA_DOMAINS`]); empty: every host.
    pub allowed_media_domains: Vec<String>,
    /// Decoded-cache byte budget. Default 1 GiB.
    pub decoded_cache_bytes: u64,
    /// Decoded-cache entry cap (`Some(0)` turns the cache off). Default none.
    pub decoded_cache_entries: Option<usize>,
    /// Pixel limit of one image. Default 100 MP.
    pub max_pixels: u64,
    /// How the JPEG decoder is chosen. Default [`JpegDecoderChoice::Auto`].
    pub jpeg_decoder: JpegDecoderChoice,
    /// Image formats accepted. Default all.
    pub image_formats: ImageFormats,
    /// Path of libturbojpeg; default: the usual names.
    pub libturbojpeg: Option<PathBuf>,
    /// Bytes all running decodes may hold together. Default 2 GiB.
    pub decode_memory_bytes: u64,
    /// Decodes running at once. Default: twice the number of CPUs.
    pub decode_concurrency: usize,
    /// Longest wait for the decode budget. Default 30 s.
    pub decode_wait: Duration,
    /// Origin connect timeout. Default 5 s.
    pub origin_connect_timeout: Duration,
    /// Origin overall deadline. Default 30 s.
    pub origin_timeout: Duration,
    /// Overall deadline of a load; `None` (the default) derives it: see
    /// [`Config::load_timeout`].
    pub load_timeout: Option<Duration>,
    /// Bytes all downloads in flight may hold together. Default 512 MiB.
    pub download_memory_bytes: u64,
    /// Embedding-cache byte budget (0: nothing stored). Default 1 GiB.
    pub embedding_cache_bytes: u64,
    /// Embeddings use the fleet tiers that are on. Default true.
    pub embedding_fleet: bool,
    /// Cap on an encoded embedding value in a fleet tier. Default 64 MiB.
    pub embedding_max_value_bytes: u64,
    /// Chunk threshold and size of embedding values in the shared cache. Default 2 MiB.
    pub embedding_chunk_bytes: u64,
    /// Deadline of one embedding compute. Default (and `None`):
    /// [`DEFAULT_EMBEDDING_COMPUTE_TIMEOUT`]; see [`Config::embedding_compute_timeout`].
    pub embedding_compute_timeout: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            shared: SharedCacheSettings::default(),
            max_file_size_bytes: mmcache_origin::DEFAULT_MAX_BODY_BYTES,
            session_scoped: false,
            allow_internal: false,
            disk: DiskSettings::default(),
            allowed_media_domains: Vec::new(),
            decoded_cache_bytes: mmcache_decode::DEFAULT_DECODED_CACHE_BYTES,
            decoded_cache_entries: None,
            max_pixels: mmcache_decode::DEFAULT_MAX_PIXELS,
            jpeg_decoder: JpegDecoderChoice::Auto,
            image_formats: ImageFormats::ALL,
            libturbojpeg: None,
            decode_memory_bytes: DEFAULT_DECODE_MEMORY_BYTES,
            decode_concurrency: default_decode_concurrency(),
            decode_wait: DEFAULT_DECODE_WAIT,
            origin_connect_timeout: mmcache_origin::DEFAULT_CONNECT_TIMEOUT,
            origin_timeout: mmcache_origin::DEFAULT_FETCH_TIMEOUT,
            load_timeout: None,
            download_memory_bytes: DEFAULT_DOWNLOAD_MEMORY_BYTES,
            embedding_cache_bytes: mmcache_decode::DEFAULT_EMBEDDING_CACHE_BYTES,
            embedding_fleet: true,
            embedding_max_value_bytes: mmcache_decode::DEFAULT_EMBEDDING_MAX_VALUE_BYTES,
            embedding_chunk_bytes: mmcache_decode::DEFAULT_EMBEDDING_CHUNK_BYTES,
            embedding_compute_timeout: Some(DEFAULT_EMBEDDING_COMPUTE_TIMEOUT),
        }
    }
}

impl Config {
    /// The overall deadline of a load: the one set, else the sum of the origin timeout, the
    /// decode wait, the lease wait (when the lease is on) and [`LOAD_TIMEOUT_SLACK`], so that
    /// on a healthy path it never fires before the deadlines it covers (90 s with the other
    /// defaults).
    pub fn load_timeout(&self) -> Duration {
        self.load_timeout.unwrap_or_else(|| {
            let lease = if self.shared.lease.enabled {
                self.shared.lease.wait
            } else {
                Duration::ZERO
            };
            self.origin_timeout + self.decode_wait + lease + LOAD_TIMEOUT_SLACK
        })
    }

    /// The deadline of one embedding compute: the one set, else
    /// [`DEFAULT_EMBEDDING_COMPUTE_TIMEOUT`].
    pub fn embedding_compute_timeout(&self) -> Duration {
        self.embedding_compute_timeout
            .unwrap_or(DEFAULT_EMBEDDING_COMPUTE_TIMEOUT)
    }

    /// Reads every variable of [`env`](mod@env) from the process environment over the defaults.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad variable and its value.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Config::from_env`] with a custom lookup (tests, or a config map). An empty or
    /// blank value counts as unset.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad variable and its value.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        let mut given = Given::default();
        for setting in &SETTINGS {
            if let Some(v) = lookup(setting.name).filter(|v| !v.trim().is_empty()) {
                (setting.read)(&mut c, &v)?;
                given.0.push((setting.name, v));
            }
        }
        c.check(&given)?;
        Ok(c)
    }
}

/// Two decodes per CPU: with exactly one, every hand-off between a finished decode and the
/// next leaves a core idle for a moment (measured: 40 % less shared-hit throughput for 97 KiB
/// JPEGs at concurrency 16 on 2 cores). Memory is bounded by the budget, not by this.
fn default_decode_concurrency() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

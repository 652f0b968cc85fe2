//! Configuration from the environment (names and defaults of the Python implementation) and
//! from the builder. A bad value is an error that names the variable and the value.
//!
//! Each setting is declared once, in [`SETTINGS`] (`settings.rs` and one file per table
//! under `settings/`): its variable, documented default and rule, Python keyword, reader and
//! whose rule checks it. [`Config`] holds the tiers' own configuration types, so each field
//! exists once and each tier crate checks its own fields (its `validate`); `validate.rs`
//! checks the loader's fields and the rules spanning crates, once for every source;
//! `tiers.rs` completes the tiers' configurations with what the loader derives; `parse.rs`
//! holds the text parsers and `error.rs` the errors, at the bottom; `env.rs` re-exports the
//! variable names; `memory.rs` sums the budgets.

use std::path::PathBuf;
use std::time::Duration;

use mmcache_decode::{ImageFormats, JpegDecoderChoice, PixelLayout};
pub use mmcache_disk_cache::DiskCacheConfig;
pub use mmcache_shared_cache::{LeaseConfig, SharedCacheConfig};

mod doc_tables;
pub mod env;
mod error;
mod memory;
mod parse;
mod settings;
#[cfg(test)]
mod tests;
mod tiers;
mod validate;

pub use doc_tables::settings_doc_tables;
pub use error::ConfigError;
pub use memory::MemoryPart;
pub use settings::{PROCESS_VARIABLES, SETTINGS, Section, Setting, Variable};
pub(crate) use tiers::{disk_read_memory, in_memory};
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
/// Everything a [`crate::Loader`] is configured with.
///
/// Not `PartialEq`: the shared cache's configuration holds hooks (its clock, its read memory).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Whether loads use the shared cache. Default false.
    pub shared_enabled: bool,
    /// The shared cache's own configuration (its `url` is required when it is on; an empty one
    /// is unset). The loader sets its `max_read_bytes` and `read_memory` when it builds (from
    /// the download cap and budget).
    pub shared: SharedCacheConfig,
    /// Hedged shared-cache GETs and bounded SET waits. Default on.
    pub hedge: HedgeSettings,
    /// Body cap in bytes (`DYN_MM_MAX_FILE_SIZE_MB` MiB). Default 64 MiB.
    pub max_file_size_bytes: u64,
    /// Partition caches by session scope. Default false.
    pub session_scoped: bool,
    /// Allow `http://` and internal addresses. Default false.
    pub allow_internal: bool,
    /// `MMCACHE_ALLOW_HTTP`: `http://` to public addresses (internal ones stay refused).
    pub allow_http: bool,
    /// The host's disk tier, in the crate's own configuration: an empty `dir` (the default)
    /// keeps the tier off. The loader sets its `max_entry_bytes` when it builds (the download
    /// cap).
    pub disk: DiskCacheConfig,
    /// The host pixel tier, in the disk tier crate's configuration ([`Tier::Host`]): an empty
    /// `dir` (the default) keeps it off. The loader sets its `max_entry_bytes` when it builds
    /// (the largest image the pixel limit and the download cap allow).
    ///
    /// [`Tier::Host`]: mmcache_disk_cache::Tier::Host
    pub host: DiskCacheConfig,
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
    /// How decoded pixels are laid out. Default [`PixelLayout::Rgb`]; the Python package's
    /// loaders choose [`PixelLayout::Rgbx`].
    pub pixel_layout: PixelLayout,
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
    /// Chunk threshold and size of embedding values in the shared cache. Default 256 KiB.
    pub embedding_chunk_bytes: u64,
    /// Deadline of one embedding compute. Default (and `None`):
    /// [`DEFAULT_EMBEDDING_COMPUTE_TIMEOUT`]; see [`Config::embedding_compute_timeout`].
    pub embedding_compute_timeout: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            shared_enabled: false,
            shared: SharedCacheConfig::default(),
            hedge: HedgeSettings::default(),
            max_file_size_bytes: mmcache_origin::DEFAULT_MAX_BODY_BYTES,
            session_scoped: false,
            allow_internal: false,
            allow_http: false,
            disk: DiskCacheConfig::default(),
            host: DiskCacheConfig::host(PathBuf::new()),
            allowed_media_domains: Vec::new(),
            decoded_cache_bytes: mmcache_decode::DEFAULT_DECODED_CACHE_BYTES,
            decoded_cache_entries: None,
            max_pixels: mmcache_decode::DEFAULT_MAX_PIXELS,
            jpeg_decoder: JpegDecoderChoice::Auto,
            image_formats: ImageFormats::ALL,
            pixel_layout: PixelLayout::Rgb,
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
    /// Whether the host's disk tier is on: a directory is set.
    pub fn disk_enabled(&self) -> bool {
        !self.disk.dir.as_os_str().is_empty()
    }

    /// Whether the host pixel tier is on: a directory is set.
    pub fn host_enabled(&self) -> bool {
        !self.host.dir.as_os_str().is_empty()
    }

    /// The overall deadline of a load: the one set, else the sum of the origin timeout, the
    /// decode wait, the lease wait (when the lease is on) and [`LOAD_TIMEOUT_SLACK`], so that
    /// on a healthy path it never fires before the deadlines it covers (90 s with the other
    /// defaults).
    pub fn load_timeout(&self) -> Duration {
        self.load_timeout
            .unwrap_or_else(|| self.fill_wait() + LOAD_TIMEOUT_SLACK)
    }

    /// How long a fill of another process of the host may take, so that a process waiting
    /// for the host's fill lock (disk entries, host pixels) waits no longer: its origin
    /// deadline, decode wait and lease wait (when the lease is on), each bounded by its own
    /// setting.
    pub(crate) fn fill_wait(&self) -> Duration {
        let lease = if self.shared.lease.enabled {
            self.shared.lease.wait
        } else {
            Duration::ZERO
        };
        self.origin_timeout + self.decode_wait + lease
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
                setting.read_as(setting.name, &mut c, &v)?;
                given.0.push((setting.name, v));
            }
        }
        c.check(&given)?;
        Ok(c)
    }
}

/// Hedge settings (`MMCACHE_SHARED_IMAGE_CACHE_HEDGE*`): the hedge's configuration, kept with
/// the others (the hedge itself is a part of the running loader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HedgeSettings {
    /// Hedge shared-cache GETs (and bound the SET wait the same way). Default on.
    pub enabled: bool,
    /// Shortest delay before a hedge. Default 20 ms.
    pub min_delay: Duration,
    /// Longest delay before a hedge, and longest wait for a SET. Default 250 ms.
    pub max_delay: Duration,
}

impl Default for HedgeSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            min_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(250),
        }
    }
}

/// Two decodes per CPU: with exactly one, every hand-off between a finished decode and the
/// next leaves a core idle for a moment (measured: 40 % less shared-hit throughput for 97 KiB
/// JPEGs at concurrency 16 on 2 cores). Memory is bounded by the budget, not by this.
fn default_decode_concurrency() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

//! Configuration from the environment (names and defaults of the Python implementation) and
//! from the builder. A bad value is an error that names the variable and the value.

use std::time::Duration;

use std::path::PathBuf;

use mmcache_decode::{ImageFormats, JpegDecoderChoice};

use crate::error::ConfigError;
use crate::hedge::HedgeSettings;

/// Default of [`Config::decode_memory_bytes`]: 2 GiB, room for a few of the largest images
/// the default pixel limit lets through (a 100 MP progressive JPEG holds about 1 GB).
pub const DEFAULT_DECODE_MEMORY_BYTES: u64 = 2 << 30;
/// Default of [`Config::decode_wait`].
pub const DEFAULT_DECODE_WAIT: Duration = Duration::from_secs(30);
/// Default of [`Config::download_memory_bytes`]: 512 MiB, eight bodies of the largest size the
/// default download cap allows (64 MiB) at once, so 64 concurrent downloads of 60 MB stay
/// well under 1 GB of resident memory.
pub const DEFAULT_DOWNLOAD_MEMORY_BYTES: u64 = 512 << 20;
/// What the default load deadline adds to the origin timeout, the decode wait and the lease
/// wait: DNS (bounded by the connect timeout), shared-cache round trips (bounded by their I/O
/// timeout), disk-tier I/O and scheduling.
pub const LOAD_TIMEOUT_SLACK: Duration = Duration::from_secs(30);
/// Upper bound of [`Config::decode_wait`].
const MAX_DECODE_WAIT: Duration = Duration::from_secs(3600);
/// Upper bound of [`Config::decode_concurrency`].
const MAX_DECODE_CONCURRENCY: usize = 4096;
/// Upper bound of every timeout, cool-down and lease setting.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Upper bound of the shared-cache TTL: 365 days.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Environment variable names.
pub mod env {
    /// `0` or `1`: use the shared cache. Default `0`.
    pub const SHARED_ENABLED: &str = "DYN_MM_SHARED_IMAGE_CACHE_ENABLED";
    /// `redis://` or `rediss://` discovery endpoint; required when enabled; never logged.
    pub const SHARED_URL: &str = "DYN_MM_SHARED_IMAGE_CACHE_URL";
    /// Entry TTL in whole seconds, > 0. Default 3600.
    pub const SHARED_TTL_SECS: &str = "DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS";
    /// Connect timeout in seconds, finite, > 0. Default 0.1.
    pub const SHARED_CONNECT_TIMEOUT_SECS: &str = "DYN_MM_SHARED_IMAGE_CACHE_CONNECT_TIMEOUT_SECS";
    /// Response timeout in seconds, finite, > 0. Default 2.0.
    pub const SHARED_IO_TIMEOUT_SECS: &str = "DYN_MM_SHARED_IMAGE_CACHE_IO_TIMEOUT_SECS";
    /// Body cap in MiB, integer > 0. Default 64. Applies always.
    pub const MAX_FILE_SIZE_MB: &str = "DYN_MM_MAX_FILE_SIZE_MB";
    /// `0` or `1`: partition every cache by session scope. Default `0`.
    pub const SESSION_SCOPED: &str = "DYN_MM_IMAGE_CACHE_SESSION_SCOPED";
    /// `0` or `1`: allow `http://` and internal addresses. Default `0`.
    pub const ALLOW_INTERNAL: &str = "DYN_MM_ALLOW_INTERNAL";
    /// Entry cap of the decoded-image cache, integer >= 0 (`0` turns it off). Default: none.
    pub const IMAGE_CACHE_SIZE: &str = "DYN_MM_IMAGE_CACHE_SIZE";
    /// Byte budget of the decoded-image cache, integer >= 0. Default 1 GiB.
    pub const DECODED_CACHE_BYTES: &str = "MMCACHE_DECODED_CACHE_BYTES";
    /// Comma-separated hosts images may come from: `example.com` (exactly that host),
    /// `*.example.com` (its subdomains), IP addresses. Default: unset, every host.
    pub const ALLOWED_MEDIA_DOMAINS: &str = "MMCACHE_ALLOWED_MEDIA_DOMAINS";
    /// Directory of the host's disk tier; setting it turns the tier on. Default: unset (off).
    pub const DISK_CACHE_DIR: &str = "MMCACHE_DISK_CACHE_DIR";
    /// Byte budget of the disk tier across the host's processes, integer > 0. Default 10 GiB.
    pub const DISK_CACHE_MAX_BYTES: &str = "MMCACHE_DISK_CACHE_MAX_BYTES";
    /// Disk-tier entry TTL in whole seconds, > 0 and <= 31536000. Default 3600.
    pub const DISK_CACHE_TTL_SECS: &str = "MMCACHE_DISK_CACHE_TTL_SECS";
    /// Shared-group mode of the disk tier: a gid or a group name (from `/etc/group`). Files
    /// and folders that group owns are trusted too; ours are made 0640 (lock files 0660) in
    /// 2770 folders. For Kubernetes `fsGroup` volumes and pods of different uids. Default:
    /// unset (only this uid's files; 0600 / 0700).
    pub const DISK_CACHE_GROUP: &str = "MMCACHE_DISK_CACHE_GROUP";
    /// Deadline of one disk-tier operation in ms, integer > 0 and <= 3600000. Default 1000.
    pub const DISK_CACHE_TIMEOUT_MS: &str = "MMCACHE_DISK_CACHE_TIMEOUT_MS";
    /// `auto` (libjpeg-turbo when it loads, else pure Rust), `libjpeg-turbo` (or a start-up
    /// error) or `pure-rust`. Default `auto`.
    pub const JPEG_DECODER: &str = "MMCACHE_JPEG_DECODER";
    /// Image formats accepted, comma-separated from `jpeg`, `png`, `webp`, `gif`. Default all
    /// four (Dynamo's Python `ImageLoader` accepts `jpeg,png,webp`).
    pub const IMAGE_FORMATS: &str = "MMCACHE_IMAGE_FORMATS";
    /// Path of libturbojpeg to load. Default: `libturbojpeg.so.0`, then the other usual names.
    pub const LIBTURBOJPEG: &str = "MMCACHE_LIBTURBOJPEG";
    /// Bytes all running decodes may hold together, integer > 0. Default 2 GiB.
    pub const DECODE_MEMORY_BYTES: &str = "MMCACHE_DECODE_MEMORY_BYTES";
    /// Decodes running at once, integer > 0 and <= 4096. Default: twice the number of CPUs.
    pub const DECODE_CONCURRENCY: &str = "MMCACHE_DECODE_CONCURRENCY";
    /// Longest wait for the decode budget, in seconds, > 0 and <= 3600. Default 30.
    pub const DECODE_WAIT_SECS: &str = "MMCACHE_DECODE_WAIT_SECS";
    /// Pixel limit of one image, integer > 0. Default 100 000 000.
    pub const MAX_PIXELS: &str = "MMCACHE_MAX_PIXELS";
    /// Origin connect timeout in seconds, finite, > 0. Default 5.
    pub const ORIGIN_CONNECT_TIMEOUT_SECS: &str = "MMCACHE_ORIGIN_CONNECT_TIMEOUT_SECS";
    /// Overall origin fetch deadline in seconds, finite, > 0. Default 30.
    pub const ORIGIN_TIMEOUT_SECS: &str = "MMCACHE_ORIGIN_TIMEOUT_SECS";
    /// Path of a PEM file with the root CA to trust for `rediss://`. Default: system roots.
    pub const SHARED_TLS_CA_FILE: &str = "MMCACHE_SHARED_IMAGE_CACHE_TLS_CA_FILE";
    /// Largest value written to the shared cache, bytes, integer > 0. Default 16 MiB.
    pub const SHARED_MAX_VALUE_BYTES: &str = "MMCACHE_SHARED_IMAGE_CACHE_MAX_VALUE_BYTES";

    /// `0` or `1`: per-node circuit breakers on the shared cache. Default `1`.
    pub const SHARED_BREAKER: &str = "MMCACHE_SHARED_IMAGE_CACHE_BREAKER";
    /// Consecutive failures that open a node's breaker, integer > 0. Default 5.
    pub const SHARED_BREAKER_FAILURES: &str = "MMCACHE_SHARED_IMAGE_CACHE_BREAKER_FAILURES";
    /// Breaker cool-down before a probe, milliseconds, integer > 0. Default 1000.
    pub const SHARED_BREAKER_COOLDOWN_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_BREAKER_COOLDOWN_MS";
    /// `0` or `1`: stampede lease on a miss. Default `0`.
    pub const SHARED_LEASE: &str = "MMCACHE_SHARED_IMAGE_CACHE_LEASE";
    /// Lease lifetime, milliseconds, integer > 0. Default 5000.
    pub const SHARED_LEASE_TTL_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_LEASE_TTL_MS";
    /// Longest wait for another worker's fill, milliseconds, integer > 0. Default 3000.
    pub const SHARED_LEASE_WAIT_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_LEASE_WAIT_MS";
    /// `0` or `1`: write-behind of SETs. Default `0`.
    pub const SHARED_WRITE_BEHIND: &str = "MMCACHE_SHARED_IMAGE_CACHE_WRITE_BEHIND";
    /// Write-behind queue bound, entries, integer > 0. Default 256.
    pub const SHARED_WRITE_BEHIND_QUEUE: &str = "MMCACHE_SHARED_IMAGE_CACHE_WRITE_BEHIND_QUEUE";
    /// `0` or `1`: hedge slow GETs with the origin, and bound the SET wait. Default `1`.
    pub const SHARED_HEDGE: &str = "MMCACHE_SHARED_IMAGE_CACHE_HEDGE";
    /// Shortest hedge delay in ms, integer > 0. Default 20.
    pub const SHARED_HEDGE_MIN_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_HEDGE_MIN_MS";
    /// Longest hedge delay (and SET wait) in ms, integer >= the minimum, <= 60000. Default 250.
    pub const SHARED_HEDGE_MAX_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_HEDGE_MAX_MS";
    /// Byte budget of the in-memory embedding cache, integer >= 0 (`0` stores nothing;
    /// concurrent computes of one key still join). Default 1 GiB.
    pub const EMBEDDING_CACHE_BYTES: &str = "MMCACHE_EMBEDDING_CACHE_BYTES";
    /// `0` or `1`: embeddings use the image tiers (disk, shared cache, lease) that are on.
    /// Default `1`.
    pub const EMBEDDING_FLEET: &str = "MMCACHE_EMBEDDING_FLEET";
    /// Largest encoded embedding value stored in or read from a fleet tier, bytes, integer
    /// > 0. Default 64 MiB.
    pub const EMBEDDING_MAX_VALUE_BYTES: &str = "MMCACHE_EMBEDDING_MAX_VALUE_BYTES";
    /// Values over this many bytes go to the shared cache in chunks of this size, integer
    /// > 0, at most the value cap. Default 2 MiB.
    pub const EMBEDDING_CHUNK_BYTES: &str = "MMCACHE_EMBEDDING_CHUNK_BYTES";

    /// Overall deadline of a load in seconds, finite, > 0 and <= 3600. Default: the origin
    /// timeout + the decode wait + the lease wait (when the lease is on) + 30 s (90 s with the
    /// other defaults).
    pub const LOAD_TIMEOUT_SECS: &str = "MMCACHE_LOAD_TIMEOUT_SECS";
    /// Bytes all downloads in flight may hold together, integer > 0. Default 512 MiB.
    pub const DOWNLOAD_MEMORY_BYTES: &str = "MMCACHE_DOWNLOAD_MEMORY_BYTES";

    /// Every variable read by [`crate::Config::from_env`].
    pub const ALL: [&str; 44] = [
        SHARED_ENABLED,
        SHARED_URL,
        SHARED_TTL_SECS,
        SHARED_CONNECT_TIMEOUT_SECS,
        SHARED_IO_TIMEOUT_SECS,
        MAX_FILE_SIZE_MB,
        SESSION_SCOPED,
        ALLOW_INTERNAL,
        IMAGE_CACHE_SIZE,
        DECODED_CACHE_BYTES,
        MAX_PIXELS,
        ORIGIN_CONNECT_TIMEOUT_SECS,
        ORIGIN_TIMEOUT_SECS,
        SHARED_TLS_CA_FILE,
        SHARED_MAX_VALUE_BYTES,
        SHARED_BREAKER,
        SHARED_BREAKER_FAILURES,
        SHARED_BREAKER_COOLDOWN_MS,
        SHARED_LEASE,
        SHARED_LEASE_TTL_MS,
        SHARED_LEASE_WAIT_MS,
        SHARED_WRITE_BEHIND,
        SHARED_WRITE_BEHIND_QUEUE,
        SHARED_HEDGE,
        SHARED_HEDGE_MIN_MS,
        SHARED_HEDGE_MAX_MS,
        JPEG_DECODER,
        IMAGE_FORMATS,
        LIBTURBOJPEG,
        DECODE_MEMORY_BYTES,
        DECODE_CONCURRENCY,
        DECODE_WAIT_SECS,
        ALLOWED_MEDIA_DOMAINS,
        DISK_CACHE_DIR,
        DISK_CACHE_MAX_BYTES,
        DISK_CACHE_TTL_SECS,
        DISK_CACHE_GROUP,
        DISK_CACHE_TIMEOUT_MS,
        LOAD_TIMEOUT_SECS,
        DOWNLOAD_MEMORY_BYTES,
        EMBEDDING_CACHE_BYTES,
        EMBEDDING_FLEET,
        EMBEDDING_MAX_VALUE_BYTES,
        EMBEDDING_CHUNK_BYTES,
    ];
}

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
            .finish_non_exhaustive()
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
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut c = Self::default();
        if let Some(v) = get(env::SHARED_ENABLED) {
            c.shared.enabled = parse_flag(env::SHARED_ENABLED, &v)?;
        }
        c.shared.url = get(env::SHARED_URL).map(|v| v.trim().to_owned());
        if let Some(v) = get(env::SHARED_TTL_SECS) {
            c.shared.ttl = Duration::from_secs(parse_positive_int(env::SHARED_TTL_SECS, &v)?);
        }
        if let Some(v) = get(env::SHARED_CONNECT_TIMEOUT_SECS) {
            c.shared.connect_timeout = parse_secs(env::SHARED_CONNECT_TIMEOUT_SECS, &v)?;
        }
        if let Some(v) = get(env::SHARED_IO_TIMEOUT_SECS) {
            c.shared.io_timeout = parse_secs(env::SHARED_IO_TIMEOUT_SECS, &v)?;
        }
        if let Some(v) = get(env::SHARED_MAX_VALUE_BYTES) {
            let n = parse_positive_int(env::SHARED_MAX_VALUE_BYTES, &v)?;
            c.shared.max_value_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(v) = get(env::SHARED_BREAKER) {
            c.shared.breaker.enabled = parse_flag(env::SHARED_BREAKER, &v)?;
        }
        if let Some(v) = get(env::SHARED_BREAKER_FAILURES) {
            let n = parse_positive_int(env::SHARED_BREAKER_FAILURES, &v)?;
            c.shared.breaker.failures = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(v) = get(env::SHARED_BREAKER_COOLDOWN_MS) {
            c.shared.breaker.cooldown = parse_millis(env::SHARED_BREAKER_COOLDOWN_MS, &v)?;
        }
        if let Some(v) = get(env::SHARED_LEASE) {
            c.shared.lease.enabled = parse_flag(env::SHARED_LEASE, &v)?;
        }
        if let Some(v) = get(env::SHARED_LEASE_TTL_MS) {
            c.shared.lease.ttl = parse_millis(env::SHARED_LEASE_TTL_MS, &v)?;
        }
        if let Some(v) = get(env::SHARED_LEASE_WAIT_MS) {
            c.shared.lease.wait = parse_millis(env::SHARED_LEASE_WAIT_MS, &v)?;
        }
        if let Some(v) = get(env::SHARED_WRITE_BEHIND) {
            c.shared.write_behind.enabled = parse_flag(env::SHARED_WRITE_BEHIND, &v)?;
        }
        if let Some(v) = get(env::SHARED_WRITE_BEHIND_QUEUE) {
            let n = parse_positive_int(env::SHARED_WRITE_BEHIND_QUEUE, &v)?;
            c.shared.write_behind.max_queued = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(v) = get(env::SHARED_HEDGE) {
            c.shared.hedge.enabled = parse_flag(env::SHARED_HEDGE, &v)?;
        }
        if let Some(v) = get(env::SHARED_HEDGE_MIN_MS) {
            c.shared.hedge.min_delay = parse_millis(env::SHARED_HEDGE_MIN_MS, &v)?;
        }
        if let Some(v) = get(env::SHARED_HEDGE_MAX_MS) {
            c.shared.hedge.max_delay = parse_millis(env::SHARED_HEDGE_MAX_MS, &v)?;
        }
        if let Some(path) = get(env::SHARED_TLS_CA_FILE) {
            let pem = std::fs::read(path.trim()).map_err(|e| ConfigError::File {
                name: env::SHARED_TLS_CA_FILE,
                path: path.clone(),
                reason: e.to_string(),
            })?;
            c.shared.tls_root_ca_pem = Some(pem);
        }
        if let Some(v) = get(env::MAX_FILE_SIZE_MB) {
            let mib = parse_positive_int(env::MAX_FILE_SIZE_MB, &v)?;
            c.max_file_size_bytes = mib.checked_mul(1024 * 1024).ok_or_else(|| {
                ConfigError::invalid(env::MAX_FILE_SIZE_MB, &v, "an integer number of MiB > 0")
            })?;
        }
        if let Some(v) = get(env::SESSION_SCOPED) {
            c.session_scoped = parse_flag(env::SESSION_SCOPED, &v)?;
        }
        if let Some(v) = get(env::ALLOW_INTERNAL) {
            c.allow_internal = parse_flag(env::ALLOW_INTERNAL, &v)?;
        }
        if let Some(v) = get(env::ALLOWED_MEDIA_DOMAINS) {
            c.allowed_media_domains = v
                .split(',')
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty())
                .collect();
            if let Err(reason) = mmcache_origin::DomainAllowlist::new(&c.allowed_media_domains) {
                return Err(ConfigError::Invalid {
                    name: env::ALLOWED_MEDIA_DOMAINS,
                    value: reason.chars().take(64).collect(),
                    expected: "comma-separated host names, *.host names or IP addresses",
                });
            }
        }
        c.disk.dir = get(env::DISK_CACHE_DIR).map(|v| PathBuf::from(v.trim()));
        if let Some(v) = get(env::DISK_CACHE_MAX_BYTES) {
            c.disk.max_bytes = parse_positive_int(env::DISK_CACHE_MAX_BYTES, &v)?;
        }
        if let Some(v) = get(env::DISK_CACHE_TTL_SECS) {
            c.disk.ttl = Duration::from_secs(parse_positive_int(env::DISK_CACHE_TTL_SECS, &v)?);
        }
        if let Some(v) = get(env::DISK_CACHE_GROUP) {
            c.disk.group = Some(mmcache_disk_cache::group_id(&v).ok_or_else(|| {
                ConfigError::invalid(
                    env::DISK_CACHE_GROUP,
                    &v,
                    "a gid or the name of a group in /etc/group",
                )
            })?);
        }
        if let Some(v) = get(env::DISK_CACHE_TIMEOUT_MS) {
            c.disk.timeout = parse_millis(env::DISK_CACHE_TIMEOUT_MS, &v)?;
        }
        if let Some(v) = get(env::IMAGE_CACHE_SIZE) {
            let n = parse_int(env::IMAGE_CACHE_SIZE, &v, "an integer >= 0")?;
            c.decoded_cache_entries = Some(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if let Some(v) = get(env::DECODED_CACHE_BYTES) {
            c.decoded_cache_bytes = parse_int(env::DECODED_CACHE_BYTES, &v, "an integer >= 0")?;
        }
        if let Some(v) = get(env::EMBEDDING_CACHE_BYTES) {
            c.embedding_cache_bytes = parse_int(env::EMBEDDING_CACHE_BYTES, &v, "an integer >= 0")?;
        }
        if let Some(v) = get(env::EMBEDDING_FLEET) {
            c.embedding_fleet = parse_flag(env::EMBEDDING_FLEET, &v)?;
        }
        if let Some(v) = get(env::EMBEDDING_MAX_VALUE_BYTES) {
            c.embedding_max_value_bytes = parse_positive_int(env::EMBEDDING_MAX_VALUE_BYTES, &v)?;
        }
        if let Some(v) = get(env::EMBEDDING_CHUNK_BYTES) {
            c.embedding_chunk_bytes = parse_positive_int(env::EMBEDDING_CHUNK_BYTES, &v)?;
        }
        if let Some(v) = get(env::MAX_PIXELS) {
            c.max_pixels = parse_positive_int(env::MAX_PIXELS, &v)?;
        }
        if let Some(v) = get(env::JPEG_DECODER) {
            c.jpeg_decoder = v.parse().map_err(|()| {
                ConfigError::invalid(env::JPEG_DECODER, &v, "auto, libjpeg-turbo or pure-rust")
            })?;
        }
        if let Some(v) = get(env::IMAGE_FORMATS) {
            c.image_formats = v.parse().map_err(|_| {
                ConfigError::invalid(
                    env::IMAGE_FORMATS,
                    &v,
                    "a comma-separated list of jpeg, png, webp, gif",
                )
            })?;
        }
        c.libturbojpeg = get(env::LIBTURBOJPEG).map(|v| PathBuf::from(v.trim()));
        if let Some(v) = get(env::DECODE_MEMORY_BYTES) {
            c.decode_memory_bytes = parse_positive_int(env::DECODE_MEMORY_BYTES, &v)?;
        }
        if let Some(v) = get(env::DECODE_CONCURRENCY) {
            let n = parse_positive_int(env::DECODE_CONCURRENCY, &v)?;
            c.decode_concurrency = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(v) = get(env::DECODE_WAIT_SECS) {
            c.decode_wait = parse_secs(env::DECODE_WAIT_SECS, &v)?;
            if c.decode_wait > MAX_DECODE_WAIT {
                return Err(ConfigError::invalid(
                    env::DECODE_WAIT_SECS,
                    &v,
                    "a number of seconds > 0 and <= 3600",
                ));
            }
        }
        if let Some(v) = get(env::ORIGIN_CONNECT_TIMEOUT_SECS) {
            c.origin_connect_timeout = parse_secs(env::ORIGIN_CONNECT_TIMEOUT_SECS, &v)?;
        }
        if let Some(v) = get(env::ORIGIN_TIMEOUT_SECS) {
            c.origin_timeout = parse_secs(env::ORIGIN_TIMEOUT_SECS, &v)?;
        }
        if let Some(v) = get(env::LOAD_TIMEOUT_SECS) {
            c.load_timeout = Some(parse_secs(env::LOAD_TIMEOUT_SECS, &v)?);
        }
        if let Some(v) = get(env::DOWNLOAD_MEMORY_BYTES) {
            c.download_memory_bytes = parse_positive_int(env::DOWNLOAD_MEMORY_BYTES, &v)?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks the rules that span settings (and builder-set values).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let durations = [
            (env::SHARED_TTL_SECS, self.shared.ttl),
            (
                env::SHARED_CONNECT_TIMEOUT_SECS,
                self.shared.connect_timeout,
            ),
            (env::SHARED_IO_TIMEOUT_SECS, self.shared.io_timeout),
            (
                env::ORIGIN_CONNECT_TIMEOUT_SECS,
                self.origin_connect_timeout,
            ),
            (env::ORIGIN_TIMEOUT_SECS, self.origin_timeout),
            (env::DISK_CACHE_TIMEOUT_MS, self.disk.timeout),
        ];
        for (name, d) in durations {
            if d.is_zero() {
                return Err(ConfigError::invalid(name, "0", "a duration > 0"));
            }
        }
        // Upper bounds: a finite but huge value (1e19 s) must be a start-up error, not an
        // overflow in some later arithmetic; and Redis refuses absurd EX values.
        let bounded = [
            (
                env::SHARED_TTL_SECS,
                self.shared.ttl,
                MAX_TTL,
                "at most 31536000 (365 days)",
            ),
            (
                env::DISK_CACHE_TTL_SECS,
                self.disk.ttl,
                MAX_TTL,
                "at most 31536000 (365 days)",
            ),
            (
                env::SHARED_CONNECT_TIMEOUT_SECS,
                self.shared.connect_timeout,
                MAX_TIMEOUT,
                "at most 3600 seconds",
            ),
            (
                env::SHARED_IO_TIMEOUT_SECS,
                self.shared.io_timeout,
                MAX_TIMEOUT,
                "at most 3600 seconds",
            ),
            (
                env::ORIGIN_CONNECT_TIMEOUT_SECS,
                self.origin_connect_timeout,
                MAX_TIMEOUT,
                "at most 3600 seconds",
            ),
            (
                env::ORIGIN_TIMEOUT_SECS,
                self.origin_timeout,
                MAX_TIMEOUT,
                "at most 3600 seconds",
            ),
            (
                env::SHARED_BREAKER_COOLDOWN_MS,
                self.shared.breaker.cooldown,
                MAX_TIMEOUT,
                "at most 3600000 ms",
            ),
            (
                env::SHARED_LEASE_TTL_MS,
                self.shared.lease.ttl,
                MAX_TIMEOUT,
                "at most 3600000 ms",
            ),
            (
                env::SHARED_LEASE_WAIT_MS,
                self.shared.lease.wait,
                MAX_TIMEOUT,
                "at most 3600000 ms",
            ),
            (
                env::DISK_CACHE_TIMEOUT_MS,
                self.disk.timeout,
                MAX_TIMEOUT,
                "at most 3600000 ms",
            ),
        ];
        for (name, d, max, expected) in bounded {
            if d > max {
                return Err(ConfigError::invalid(
                    name,
                    &format!("{}", d.as_secs_f64()),
                    expected,
                ));
            }
        }
        if self.max_file_size_bytes == 0 {
            return Err(ConfigError::invalid(
                env::MAX_FILE_SIZE_MB,
                "0",
                "an integer > 0",
            ));
        }
        if self.disk.max_bytes == 0 {
            return Err(ConfigError::invalid(
                env::DISK_CACHE_MAX_BYTES,
                "0",
                "an integer > 0",
            ));
        }
        if self.disk.ttl.is_zero() {
            return Err(ConfigError::invalid(
                env::DISK_CACHE_TTL_SECS,
                "0",
                "an integer > 0",
            ));
        }
        if self.embedding_max_value_bytes == 0 {
            return Err(ConfigError::invalid(
                env::EMBEDDING_MAX_VALUE_BYTES,
                "0",
                "an integer > 0",
            ));
        }
        if self.embedding_chunk_bytes == 0
            || self.embedding_chunk_bytes > self.embedding_max_value_bytes
            || self.embedding_chunk_bytes > u64::from(u32::MAX)
            // Readers refuse a manifest of more chunks than this (a forged one could name
            // millions), so a value at the cap must fit in that many.
            || self
                .embedding_max_value_bytes
                .div_ceil(self.embedding_chunk_bytes)
                > u64::from(mmcache_decode::MAX_EMBEDDING_CHUNKS)
        {
            return Err(ConfigError::invalid(
                env::EMBEDDING_CHUNK_BYTES,
                &self.embedding_chunk_bytes.to_string(),
                "an integer > 0, at most the value cap and 4 GiB, and at least the value cap / 1024",
            ));
        }
        if self.max_pixels == 0 {
            return Err(ConfigError::invalid(env::MAX_PIXELS, "0", "an integer > 0"));
        }
        if self.image_formats.is_empty() {
            return Err(ConfigError::invalid(
                env::IMAGE_FORMATS,
                "",
                "at least one of jpeg, png, webp, gif",
            ));
        }
        if self.decode_memory_bytes == 0 {
            return Err(ConfigError::invalid(
                env::DECODE_MEMORY_BYTES,
                "0",
                "an integer > 0",
            ));
        }
        if self.decode_concurrency == 0 || self.decode_concurrency > MAX_DECODE_CONCURRENCY {
            return Err(ConfigError::invalid(
                env::DECODE_CONCURRENCY,
                &self.decode_concurrency.to_string(),
                "an integer > 0 and <= 4096",
            ));
        }
        if self.decode_wait.is_zero() || self.decode_wait > MAX_DECODE_WAIT {
            return Err(ConfigError::invalid(
                env::DECODE_WAIT_SECS,
                &format!("{:?}", self.decode_wait),
                "a number of seconds > 0 and <= 3600",
            ));
        }
        let hedge = self.shared.hedge;
        if hedge.min_delay.is_zero() || hedge.min_delay > hedge.max_delay {
            return Err(ConfigError::invalid(
                env::SHARED_HEDGE_MIN_MS,
                &hedge.min_delay.as_millis().to_string(),
                "an integer > 0, at most the hedge maximum",
            ));
        }
        if hedge.max_delay > Duration::from_secs(60) {
            return Err(ConfigError::invalid(
                env::SHARED_HEDGE_MAX_MS,
                &hedge.max_delay.as_millis().to_string(),
                "an integer of milliseconds <= 60000",
            ));
        }
        if self.shared.enabled && self.shared.url.is_none() {
            return Err(ConfigError::MissingCacheUrl);
        }
        if let Some(d) = self
            .load_timeout
            .filter(|d| d.is_zero() || *d > MAX_TIMEOUT)
        {
            return Err(ConfigError::invalid(
                env::LOAD_TIMEOUT_SECS,
                &format!("{}", d.as_secs_f64()),
                "a number of seconds > 0 and <= 3600",
            ));
        }
        if self.download_memory_bytes == 0 {
            return Err(ConfigError::invalid(
                env::DOWNLOAD_MEMORY_BYTES,
                "0",
                "an integer > 0",
            ));
        }
        Ok(())
    }
}

/// Two decodes per CPU: with exactly one, every hand-off between a finished decode and the
/// next leaves a core idle for a moment (measured: 40 % less shared-hit throughput for 97 KiB
/// JPEGs at concurrency 16 on 2 cores). Memory is bounded by the budget, not by this.
fn default_decode_concurrency() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn parse_flag(name: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(ConfigError::invalid(name, v, "0 or 1")),
    }
}

fn parse_int(name: &'static str, v: &str, expected: &'static str) -> Result<u64, ConfigError> {
    let t = v.trim();
    // Digits only: no sign, no exponent, no fraction.
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::invalid(name, v, expected));
    }
    t.parse::<u64>()
        .map_err(|_| ConfigError::invalid(name, v, expected))
}

fn parse_positive_int(name: &'static str, v: &str) -> Result<u64, ConfigError> {
    match parse_int(name, v, "an integer > 0")? {
        0 => Err(ConfigError::invalid(name, v, "an integer > 0")),
        n => Ok(n),
    }
}

fn parse_millis(name: &'static str, v: &str) -> Result<Duration, ConfigError> {
    parse_positive_int(name, v).map(Duration::from_millis)
}

fn parse_secs(name: &'static str, v: &str) -> Result<Duration, ConfigError> {
    const EXPECTED: &str = "a finite number of seconds > 0";
    let secs: f64 = v
        .trim()
        .parse()
        .map_err(|_| ConfigError::invalid(name, v, EXPECTED))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(ConfigError::invalid(name, v, EXPECTED));
    }
    let d =
        Duration::try_from_secs_f64(secs).map_err(|_| ConfigError::invalid(name, v, EXPECTED))?;
    if d.is_zero() {
        return Err(ConfigError::invalid(name, v, EXPECTED));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_match_the_design() {
        let c = with(&[]).unwrap();
        assert!(!c.shared.enabled);
        assert_eq!(c.shared.ttl, Duration::from_secs(3600));
        assert_eq!(c.shared.connect_timeout, Duration::from_millis(100));
        assert_eq!(c.shared.io_timeout, Duration::from_secs(2));
        assert_eq!(c.max_file_size_bytes, 64 << 20);
        assert!(!c.session_scoped && !c.allow_internal);
        assert_eq!(c.decoded_cache_entries, None);
        assert_eq!(c.jpeg_decoder, JpegDecoderChoice::Auto);
        assert_eq!(c.image_formats, ImageFormats::ALL);
        assert_eq!(c.decode_memory_bytes, 2 << 30);
        assert_eq!(c.decode_wait, Duration::from_secs(30));
        assert_eq!(c.embedding_cache_bytes, 1 << 30);
        assert_eq!(c, Config::default());
    }

    #[test]
    fn good_values() {
        let c = with(&[
            (env::SHARED_ENABLED, "1"),
            (env::SHARED_URL, "redis://cache:6379"),
            (env::SHARED_TTL_SECS, "60"),
            (env::SHARED_CONNECT_TIMEOUT_SECS, "0.25"),
            (env::SHARED_IO_TIMEOUT_SECS, " 1.5 "),
            (env::MAX_FILE_SIZE_MB, "8"),
            (env::SESSION_SCOPED, "1"),
            (env::ALLOW_INTERNAL, "1"),
            (env::IMAGE_CACHE_SIZE, "0"),
            (env::DECODED_CACHE_BYTES, "1048576"),
            (env::MAX_PIXELS, "1000"),
            (env::ORIGIN_TIMEOUT_SECS, "3"),
            (env::EMBEDDING_CACHE_BYTES, "4096"),
        ])
        .unwrap();
        assert_eq!(c.embedding_cache_bytes, 4096);
        assert!(c.shared.enabled && c.session_scoped && c.allow_internal);
        assert_eq!(c.shared.url.as_deref(), Some("redis://cache:6379"));
        assert_eq!(c.shared.ttl, Duration::from_secs(60));
        assert_eq!(c.shared.connect_timeout, Duration::from_millis(250));
        assert_eq!(c.shared.io_timeout, Duration::from_millis(1500));
        assert_eq!(c.max_file_size_bytes, 8 << 20);
        assert_eq!(c.decoded_cache_entries, Some(0));
        assert_eq!(c.decoded_cache_bytes, 1 << 20);
        assert_eq!(c.max_pixels, 1000);
        assert_eq!(c.origin_timeout, Duration::from_secs(3));
        let c = with(&[
            (env::SHARED_BREAKER, "0"),
            (env::SHARED_BREAKER_FAILURES, "9"),
            (env::SHARED_BREAKER_COOLDOWN_MS, "250"),
            (env::SHARED_LEASE, "1"),
            (env::SHARED_LEASE_TTL_MS, "7000"),
            (env::SHARED_LEASE_WAIT_MS, "900"),
            (env::SHARED_WRITE_BEHIND, "1"),
            (env::SHARED_WRITE_BEHIND_QUEUE, "32"),
        ])
        .unwrap();
        assert!(
            !c.shared.breaker.enabled && c.shared.lease.enabled && c.shared.write_behind.enabled
        );
        assert_eq!(c.shared.breaker.failures, 9);
        assert_eq!(c.shared.breaker.cooldown, Duration::from_millis(250));
        assert_eq!(
            (c.shared.lease.ttl, c.shared.lease.wait),
            (Duration::from_secs(7), Duration::from_millis(900))
        );
        assert_eq!(c.shared.write_behind.max_queued, 32);
        let c = with(&[
            (env::SHARED_HEDGE, "0"),
            (env::SHARED_HEDGE_MIN_MS, "5"),
            (env::SHARED_HEDGE_MAX_MS, "80"),
        ])
        .unwrap();
        assert!(!c.shared.hedge.enabled);
        assert_eq!(c.shared.hedge.min_delay, Duration::from_millis(5));
        assert_eq!(c.shared.hedge.max_delay, Duration::from_millis(80));
        for (name, value) in [
            (env::SHARED_HEDGE_MIN_MS, "300"), // above the default maximum
            (env::SHARED_HEDGE_MAX_MS, "60001"),
            (env::SHARED_HEDGE, "yes"),
        ] {
            let err = with(&[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
        // Blank counts as unset.
        assert_eq!(
            with(&[(env::SHARED_TTL_SECS, "  ")]).unwrap().shared.ttl,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn every_bad_value_names_its_variable_and_value() {
        let flags = [
            env::SHARED_ENABLED,
            env::SESSION_SCOPED,
            env::ALLOW_INTERNAL,
        ];
        let flag_bad = ["2", "true", "yes", "-1", "01", "1.0", "on"];
        let ints = [
            env::SHARED_TTL_SECS,
            env::MAX_FILE_SIZE_MB,
            env::MAX_PIXELS,
            env::SHARED_MAX_VALUE_BYTES,
        ];
        let int_bad = [
            "0",
            "-1",
            "1.5",
            "abc",
            "1e3",
            "+5",
            "nan",
            "99999999999999999999999",
        ];
        let zero_ok_ints = [
            env::IMAGE_CACHE_SIZE,
            env::DECODED_CACHE_BYTES,
            env::EMBEDDING_CACHE_BYTES,
        ];
        let zero_ok_bad = ["-1", "1.5", "x", "inf"];
        let secs = [
            env::SHARED_CONNECT_TIMEOUT_SECS,
            env::SHARED_IO_TIMEOUT_SECS,
            env::ORIGIN_CONNECT_TIMEOUT_SECS,
            env::ORIGIN_TIMEOUT_SECS,
        ];
        let secs_bad = [
            "0", "-0.1", "nan", "NaN", "inf", "-inf", "1e400", "abc", "1e-12", "0x10",
        ];
        let mut cases = Vec::new();
        for n in flags {
            for v in flag_bad {
                cases.push((n, v));
            }
        }
        for n in ints {
            for v in int_bad {
                cases.push((n, v));
            }
        }
        for n in zero_ok_ints {
            for v in zero_ok_bad {
                cases.push((n, v));
            }
        }
        for n in secs {
            for v in secs_bad {
                cases.push((n, v));
            }
        }
        for (name, value) in cases {
            let err = with(&[(name, value)]).expect_err(&format!("{name}={value} must fail"));
            let msg = err.to_string();
            assert!(msg.contains(name), "{msg}");
            assert!(msg.contains(value.trim()), "{msg}");
            assert!(matches!(err, ConfigError::Invalid { .. }));
        }
    }

    #[test]
    fn url_rules_and_secrecy() {
        assert_eq!(
            with(&[(env::SHARED_ENABLED, "1")]),
            Err(ConfigError::MissingCacheUrl)
        );
        // A URL is kept out of Debug output.
        let c = with(&[(env::SHARED_URL, "redis://:hunter2@cache:6379")]).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        let err = with(&[(env::SHARED_TLS_CA_FILE, "/nonexistent/ca.pem")]).unwrap_err();
        assert!(err.to_string().contains(env::SHARED_TLS_CA_FILE));
    }

    #[test]
    fn hostile_values_are_truncated_in_messages() {
        let long = "x".repeat(10_000);
        let err = with(&[(env::MAX_PIXELS, &long)]).unwrap_err();
        assert!(err.to_string().len() < 300);
    }

    #[test]
    fn decode_settings_are_read_and_checked() {
        let c = with(&[
            (env::JPEG_DECODER, "pure-rust"),
            (env::DECODE_MEMORY_BYTES, "1048576"),
            (env::DECODE_CONCURRENCY, "3"),
            (env::DECODE_WAIT_SECS, "1.5"),
            (env::LIBTURBOJPEG, "/opt/lib/libturbojpeg.so.0"),
            (env::IMAGE_FORMATS, " JPG, png ,WebP"),
        ])
        .unwrap();
        assert_eq!(c.jpeg_decoder, JpegDecoderChoice::PureRust);
        assert_eq!(c.image_formats, ImageFormats::DYNAMO);
        assert_eq!(c.image_formats.to_string(), "jpeg,png,webp");
        assert_eq!(c.decode_memory_bytes, 1 << 20);
        assert_eq!(c.decode_concurrency, 3);
        assert_eq!(c.decode_wait, Duration::from_millis(1500));
        assert_eq!(
            c.libturbojpeg.as_deref(),
            Some(std::path::Path::new("/opt/lib/libturbojpeg.so.0"))
        );
        for (name, value) in [
            (env::JPEG_DECODER, "turbo"),
            (env::DECODE_MEMORY_BYTES, "0"),
            (env::DECODE_CONCURRENCY, "-1"),
            (env::DECODE_CONCURRENCY, "99999999999"),
            (env::DECODE_WAIT_SECS, "3601"),
            (env::DECODE_WAIT_SECS, "1e19"),
            (env::IMAGE_FORMATS, "jpeg,bmp"),
            (env::IMAGE_FORMATS, " , "),
        ] {
            let err = with(&[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(value), "{err}");
        }
    }

    #[test]
    fn disk_settings_are_read_and_bounded() {
        let c = with(&[
            (env::DISK_CACHE_DIR, " /var/cache/mmcache "),
            (env::DISK_CACHE_MAX_BYTES, "1048576"),
            (env::DISK_CACHE_TTL_SECS, "60"),
            (env::DISK_CACHE_GROUP, " 2000 "),
            (env::DISK_CACHE_TIMEOUT_MS, "250"),
        ])
        .unwrap();
        assert_eq!(
            (c.disk.group, c.disk.timeout),
            (Some(2000), Duration::from_millis(250))
        );
        // A group name is looked up in /etc/group, where root always is.
        let root = with(&[(env::DISK_CACHE_GROUP, "root")]).unwrap();
        assert_eq!(root.disk.group, Some(0));
        let d = with(&[]).unwrap().disk;
        assert_eq!((d.group, d.timeout), (None, Duration::from_secs(1)));
        assert_eq!(
            c.disk.dir.as_deref(),
            Some(std::path::Path::new("/var/cache/mmcache"))
        );
        assert_eq!(
            (c.disk.max_bytes, c.disk.ttl),
            (1 << 20, Duration::from_secs(60))
        );
        for (name, value) in [
            (env::DISK_CACHE_TTL_SECS, "31536001"),
            (env::DISK_CACHE_TTL_SECS, "0"),
            (env::DISK_CACHE_MAX_BYTES, "0"),
            (env::DISK_CACHE_MAX_BYTES, "ten"),
            (env::DISK_CACHE_GROUP, "no-such-group-here"),
            (env::DISK_CACHE_TIMEOUT_MS, "0"),
            (env::DISK_CACHE_TIMEOUT_MS, "3600001"),
            (env::DISK_CACHE_TIMEOUT_MS, "1.5"),
        ] {
            let err = with(&[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name), "{name}={value}: {err}");
        }
    }

    #[test]
    fn allowed_media_domains_are_parsed_and_checked() {
        let c = with(&[(
            env::ALLOWED_MEDIA_DOMAINS,
            " images.example.com, *.cdn.example.net ,",
        )])
        .unwrap();
        assert_eq!(
            c.allowed_media_domains,
            ["images.example.com", "*.cdn.example.net"]
        );
        let err = with(&[(env::ALLOWED_MEDIA_DOMAINS, "ok.com,bad/host")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(env::ALLOWED_MEDIA_DOMAINS) && err.contains("bad/host"),
            "{err}"
        );
    }

    #[test]
    fn the_allowlist_refusal_reads_the_same_from_env_and_builder() {
        // The allowlist is checked once: the same refusal reads the same either way.
        let from_env = with(&[(env::ALLOWED_MEDIA_DOMAINS, "ok.com,bad/host")]).unwrap_err();
        let from_builder = crate::Loader::builder()
            .allowed_media_domains(["ok.com", "bad/host"])
            .build()
            .unwrap_err();
        assert_eq!(from_env, from_builder);
    }

    #[test]
    fn a_bound_refused_after_parsing_echoes_the_value_as_given() {
        // A bound refused after parsing echoes the value as it was given, in its own unit.
        for (name, value) in [
            (env::SHARED_LEASE_TTL_MS, "3600001"),
            (env::SHARED_BREAKER_COOLDOWN_MS, "99999999999"),
            (env::DISK_CACHE_TIMEOUT_MS, "3600001"),
            (env::DECODE_WAIT_SECS, "1e19"),
            (env::LOAD_TIMEOUT_SECS, "3601"),
        ] {
            let err = with(&[(name, value)]).unwrap_err();
            let ConfigError::Invalid { value: got, .. } = &err else {
                panic!("{name}={value}: {err}");
            };
            assert_eq!(got, value, "{err}");
        }
    }

    #[test]
    fn huge_durations_are_startup_errors_naming_the_variable() {
        for (name, value) in [
            (env::SHARED_IO_TIMEOUT_SECS, "1e19"),
            (env::SHARED_CONNECT_TIMEOUT_SECS, "3601"),
            (env::ORIGIN_TIMEOUT_SECS, "1e10"),
            (env::ORIGIN_CONNECT_TIMEOUT_SECS, "86400"),
            (env::SHARED_TTL_SECS, "31536001"),
            (env::SHARED_TTL_SECS, "18446744073709551615"),
            (env::SHARED_LEASE_TTL_MS, "3600001"),
            (env::SHARED_LEASE_WAIT_MS, "18446744073709551615"),
            (env::SHARED_BREAKER_COOLDOWN_MS, "99999999999"),
        ] {
            let err = with(&[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name), "{name}={value}: {err}");
        }
        // The largest accepted values build a loader whose arithmetic does not overflow.
        let c = with(&[
            (env::SHARED_IO_TIMEOUT_SECS, "3600"),
            (env::SHARED_CONNECT_TIMEOUT_SECS, "3600"),
            (env::SHARED_TTL_SECS, "31536000"),
        ])
        .unwrap();
        assert_eq!(c.shared.io_timeout, Duration::from_secs(3600));
        // And the builder is held to the same rules.
        let err = crate::Loader::builder()
            .shared_cache_url("redis://127.0.0.1:1")
            .shared_cache_io_timeout(Duration::MAX)
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains(env::SHARED_IO_TIMEOUT_SECS),
            "{err}"
        );
    }
}

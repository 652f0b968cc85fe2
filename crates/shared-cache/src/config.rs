//! The settings of the shared cache, their defaults and their bounds.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::BreakerConfig;
use crate::error::{Error, Result};
use crate::memory::ReadMemory;
use crate::warn::{Clock, SystemClock};

/// Default entry TTL (`DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Default connect timeout (`DYN_MM_SHARED_IMAGE_CACHE_CONNECT_TIMEOUT_SECS`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Default response timeout (`DYN_MM_SHARED_IMAGE_CACHE_IO_TIMEOUT_SECS`).
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Default cap on a stored value (`MMCACHE_SHARED_IMAGE_CACHE_MAX_VALUE_BYTES`): larger
/// values are not written, so one huge value cannot hold a node connection for everyone.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Default cap on a value read back: the origin's default download cap
/// (`DYN_MM_MAX_FILE_SIZE_MB` = 64), so the cache never makes a worker hold more than a
/// download could. Other writers of the fleet (Python workers) may store values up to that size.
pub const DEFAULT_MAX_READ_BYTES: usize = 64 * 1024 * 1024;

/// Write-behind settings: SETs go to a bounded queue drained by a background task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteBehindConfig {
    /// Queue SETs instead of awaiting them. Default off.
    pub enabled: bool,
    /// Most queued writes; a full queue drops the write (counted). Default 256.
    pub max_queued: usize,
    /// Most queued bytes; over it the write is dropped. Default 256 MiB.
    pub max_queued_bytes: usize,
    /// Writes in flight at once. Default 8.
    pub concurrency: usize,
}

impl Default for WriteBehindConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_queued: 256,
            max_queued_bytes: 256 << 20,
            concurrency: 8,
        }
    }
}

/// Settings of the shared cache.
#[derive(Clone)]
#[non_exhaustive]
pub struct SharedCacheConfig {
    /// `redis://` or `rediss://` discovery endpoint, credentials included. Never logged.
    pub url: String,
    /// Entry TTL, whole seconds (rounded up). Default [`DEFAULT_TTL`].
    pub ttl: Duration,
    /// TCP/TLS connect timeout. Default [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// Response timeout of one operation. Default [`DEFAULT_IO_TIMEOUT`].
    pub io_timeout: Duration,
    /// Values larger than this are not written. Default [`DEFAULT_MAX_VALUE_BYTES`].
    pub max_value_bytes: usize,
    /// Values larger than this are never read into memory: a GET reads the value's length
    /// with at most [`READ_STEP`](crate::read::READ_STEP) of its bytes, and a longer value than this is reported as
    /// [`GetOutcome::Oversized`](crate::metrics::GetOutcome::Oversized) without reading on. Default [`DEFAULT_MAX_READ_BYTES`].
    pub max_read_bytes: usize,
    /// PEM root certificate(s) to trust for `rediss://` instead of the system store.
    pub tls_root_ca_pem: Option<Vec<u8>>,
    /// Memory every value read reserves before its bytes are read (the loader's download
    /// budget); the returned [`Bytes`](bytes::Bytes) hold the reservation. Default none: not counted.
    pub read_memory: Option<Arc<dyn ReadMemory>>,
    /// Per-node circuit breakers. Default on: 5 consecutive failures, 1 s cool-down.
    pub breaker: BreakerConfig,
    /// Write-behind of SETs. Default off.
    pub write_behind: WriteBehindConfig,
    /// The clock used for warnings, breakers and rediscovery (tests move it by hand).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SharedCacheConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCacheConfig")
            .field("url", &"<redacted>")
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("max_read_bytes", &self.max_read_bytes)
            .field("read_memory", &self.read_memory.as_ref().map(|_| "<set>"))
            .field("breaker", &self.breaker)
            .field("write_behind", &self.write_behind)
            .field(
                "tls_root_ca_pem",
                &self.tls_root_ca_pem.as_ref().map(|_| "<set>"),
            )
            .finish_non_exhaustive()
    }
}

impl SharedCacheConfig {
    /// Defaults for the given discovery URL.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            io_timeout: DEFAULT_IO_TIMEOUT,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            tls_root_ca_pem: None,
            read_memory: None,
            breaker: BreakerConfig::default(),
            write_behind: WriteBehindConfig::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The longest any one operation may take: connect timeout plus response timeout.
    pub fn op_deadline(&self) -> Duration {
        self.connect_timeout.saturating_add(self.io_timeout)
    }
}

/// Longest TTL accepted: 365 days (Redis refuses `EX` values past its own, larger, bound;
/// refusing here keeps a bad setting from failing every SET later).
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Longest connect or response timeout accepted: an hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

pub(crate) fn check_duration(name: &'static str, d: Duration, max: Duration) -> Result<()> {
    if d.is_zero() || d > max {
        return Err(Error::Duration { name });
    }
    Ok(())
}

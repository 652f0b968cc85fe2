//! The shared cache's settings, their defaults and bounds, and their one check
//! ([`SharedCacheConfig::validate`]): one message per rule, which the loader shows under the
//! variable that set the field.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::BreakerConfig;
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

/// Settings of the shared cache. [`Default`] has no URL (an empty one, which
/// [`crate::SharedCache::new`] refuses): a place to gather settings before the URL is known.
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
    /// with at most [`crate::READ_STEP`] of its bytes, and a longer value than this is reported as
    /// [`crate::GetOutcome::Oversized`] without reading on. Default [`DEFAULT_MAX_READ_BYTES`].
    pub max_read_bytes: usize,
    /// PEM root certificate(s) to trust for `rediss://` instead of the system store.
    pub tls_root_ca_pem: Option<Vec<u8>>,
    /// Memory every value read reserves before its bytes are read (the loader's download
    /// budget); the returned [`bytes::Bytes`] hold the reservation. Default none: not counted.
    pub read_memory: Option<Arc<dyn ReadMemory>>,
    /// Per-node circuit breakers. Default on: 5 consecutive failures, 1 s cool-down.
    pub breaker: BreakerConfig,
    /// Write-behind of SETs. Default off.
    pub write_behind: WriteBehindConfig,
    /// Stampede lease on misses, taken by the caller ([`crate::SharedCache::try_lease`]) and
    /// checked here with the other settings. Default off.
    pub lease: LeaseConfig,
    /// The clock used for warnings, breakers and rediscovery: the system's, or one a test
    /// moves by hand ([`SharedCacheConfig::set_clock`], a test seam).
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SharedCacheConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCacheConfig")
            .field("url", &(!self.url.is_empty()).then_some("<redacted>"))
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("max_read_bytes", &self.max_read_bytes)
            .field("read_memory", &self.read_memory.as_ref().map(|_| "<set>"))
            .field("breaker", &self.breaker)
            .field("write_behind", &self.write_behind)
            .field("lease", &self.lease)
            .field(
                "tls_root_ca_pem",
                &self.tls_root_ca_pem.as_ref().map(|_| "<set>"),
            )
            .finish_non_exhaustive()
    }
}

impl Default for SharedCacheConfig {
    fn default() -> Self {
        Self::new(String::new())
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
            lease: LeaseConfig::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Replaces the clock of warnings, breakers and rediscovery. A test seam: only with the
    /// feature `test-seams`.
    #[cfg(any(test, feature = "test-seams"))]
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// Checks every field against its rule: the first refused one, with its rule.
    ///
    /// # Errors
    ///
    /// [`Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), Invalid> {
        let hour = "at most 3600 seconds";
        let hour_ms = "at most 3600000 ms";
        let durations = [
            (Field::Ttl, self.ttl, MAX_TTL, "at most 31536000 (365 days)"),
            (
                Field::ConnectTimeout,
                self.connect_timeout,
                MAX_TIMEOUT,
                hour,
            ),
            (Field::IoTimeout, self.io_timeout, MAX_TIMEOUT, hour),
            (
                Field::BreakerCooldown,
                self.breaker.cooldown,
                MAX_TIMEOUT,
                hour_ms,
            ),
            (Field::LeaseTtl, self.lease.ttl, MAX_TIMEOUT, hour_ms),
            (Field::LeaseWait, self.lease.wait, MAX_TIMEOUT, hour_ms),
        ];
        for (field, d, max, over) in durations {
            within(field, d, max, over)?;
        }
        let counts = [
            (Field::MaxValueBytes, self.max_value_bytes as u64),
            (Field::BreakerFailures, u64::from(self.breaker.failures)),
            (Field::WriteBehindQueue, self.write_behind.max_queued as u64),
        ];
        for (field, n) in counts {
            if n == 0 {
                return Err(Invalid::new(field, "0", "an integer > 0"));
            }
        }
        Ok(())
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

/// Stampede-lease settings: on a miss one worker fills the entry, the others wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseConfig {
    /// Take a lease on a miss. Default false.
    pub enabled: bool,
    /// Lease lifetime (frees the entry when its holder dies). Default 5 s.
    pub ttl: Duration,
    /// Longest wait for the holder's fill before fetching from the origin. Default 3 s.
    pub wait: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ttl: Duration::from_secs(5),
            wait: Duration::from_secs(3),
        }
    }
}

/// A field of [`SharedCacheConfig`] that has a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    /// [`SharedCacheConfig::ttl`].
    Ttl,
    /// [`SharedCacheConfig::connect_timeout`].
    ConnectTimeout,
    /// [`SharedCacheConfig::io_timeout`].
    IoTimeout,
    /// [`SharedCacheConfig::max_value_bytes`].
    MaxValueBytes,
    /// [`BreakerConfig::failures`].
    BreakerFailures,
    /// [`BreakerConfig::cooldown`].
    BreakerCooldown,
    /// [`LeaseConfig::ttl`].
    LeaseTtl,
    /// [`LeaseConfig::wait`].
    LeaseWait,
    /// [`WriteBehindConfig::max_queued`].
    WriteBehindQueue,
}

impl Field {
    /// Every field with a rule.
    pub const ALL: [Field; 9] = [
        Field::Ttl,
        Field::ConnectTimeout,
        Field::IoTimeout,
        Field::MaxValueBytes,
        Field::BreakerFailures,
        Field::BreakerCooldown,
        Field::LeaseTtl,
        Field::LeaseWait,
        Field::WriteBehindQueue,
    ];

    /// Its path in [`SharedCacheConfig`].
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Ttl => "ttl",
            Field::ConnectTimeout => "connect_timeout",
            Field::IoTimeout => "io_timeout",
            Field::MaxValueBytes => "max_value_bytes",
            Field::BreakerFailures => "breaker.failures",
            Field::BreakerCooldown => "breaker.cooldown",
            Field::LeaseTtl => "lease.ttl",
            Field::LeaseWait => "lease.wait",
            Field::WriteBehindQueue => "write_behind.max_queued",
        }
    }
}

/// A field outside its rule, found by [`SharedCacheConfig::validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}={value} is invalid: expected {expected}", field.as_str())]
#[non_exhaustive]
pub struct Invalid {
    /// The field.
    pub field: Field,
    /// Its value as held (a duration in seconds).
    pub value: String,
    /// The rule it broke.
    pub expected: &'static str,
}

impl Invalid {
    fn new(field: Field, value: impl Into<String>, expected: &'static str) -> Self {
        Self {
            field,
            value: value.into(),
            expected,
        }
    }
}

/// A duration must be > 0 (else it would never fire, or expire at once) and at most `max`
/// (a finite but huge value must be a start-up error, not an overflow in later arithmetic).
fn within(field: Field, d: Duration, max: Duration, over: &'static str) -> Result<(), Invalid> {
    if d.is_zero() {
        return Err(Invalid::new(field, "0", "a duration > 0"));
    }
    if d > max {
        return Err(Invalid::new(field, d.as_secs_f64().to_string(), over));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_pass_and_each_rule_names_its_field() {
        SharedCacheConfig::default().validate().unwrap();
        let mut c = SharedCacheConfig::default();
        c.lease.wait = Duration::from_secs(3601);
        let e = c.validate().unwrap_err();
        assert_eq!((e.field, e.value.as_str()), (Field::LeaseWait, "3601"));
        assert_eq!(
            e.to_string(),
            "lease.wait=3601 is invalid: expected at most 3600000 ms"
        );
        let mut c = SharedCacheConfig::default();
        c.breaker.failures = 0;
        assert_eq!(c.validate().unwrap_err().field, Field::BreakerFailures);
    }

    #[test]
    fn each_refusal_states_the_bound_it_checks() {
        // The texts are literals (`expected` is `&'static str`): held here to the constants.
        let refusal = |set: fn(&mut SharedCacheConfig, Duration), max: Duration| {
            let mut c = SharedCacheConfig::default();
            set(&mut c, max + Duration::from_millis(1));
            c.validate().unwrap_err().expected
        };
        let ttl = refusal(|c, d| c.ttl = d, MAX_TTL);
        assert!(ttl.contains(&MAX_TTL.as_secs().to_string()), "{ttl}");
        let secs = MAX_TIMEOUT.as_secs().to_string();
        let millis = MAX_TIMEOUT.as_millis().to_string();
        for (set, unit) in [
            (
                (|c, d| c.connect_timeout = d) as fn(&mut SharedCacheConfig, Duration),
                &secs,
            ),
            (|c, d| c.io_timeout = d, &secs),
            (|c, d| c.breaker.cooldown = d, &millis),
            (|c, d| c.lease.ttl = d, &millis),
            (|c, d| c.lease.wait = d, &millis),
        ] {
            let text = refusal(set, MAX_TIMEOUT);
            assert!(text.contains(&format!("at most {unit} ")), "{text}");
        }
    }
}

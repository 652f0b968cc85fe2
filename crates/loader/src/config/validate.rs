//! The one check of a configuration, whether it was read from the environment or set through
//! the builder: the tier crates' own checks of their fields (shown under the variable that set
//! the field), the loader's bounds, and every rule spanning settings; one message per rule.

use std::time::Duration;

use mmcache_origin::DomainAllowlist;

use super::error::ConfigError;
use super::settings::{CheckedBy, name_checked_by};
use super::{Config, env};

/// Upper bound of the origin's timeouts, the load deadline and the embedding compute deadline.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Upper bound of [`Config::decode_wait`].
const MAX_DECODE_WAIT: Duration = Duration::from_secs(3600);
/// Upper bound of [`Config::decode_concurrency`].
const MAX_DECODE_CONCURRENCY: usize = 4096;
/// Upper bound of the hedge delay (and of the SET wait it bounds).
const MAX_HEDGE_DELAY: Duration = Duration::from_secs(60);

/// The texts read from the environment: a refused value is echoed as it was given (`3600001`
/// ms, not a conversion of it); a value set through the builder is shown as it is held.
#[derive(Debug, Default)]
pub(crate) struct Given(pub(super) Vec<(&'static str, String)>);

impl Given {
    fn invalid(&self, name: &'static str, held: &str, expected: &'static str) -> ConfigError {
        let text = self
            .0
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(held, |(_, v)| v.as_str());
        ConfigError::invalid(name, text, expected)
    }

    /// A tier crate's refusal of its field, under the variable that sets it.
    fn tier(&self, checked_by: CheckedBy, held: &str, expected: &'static str) -> ConfigError {
        // Every tier field with a rule has its setting (a test holds it).
        let name = name_checked_by(checked_by).unwrap_or("?");
        self.invalid(name, held, expected)
    }
}

/// What checking made that building needs, so that nothing is parsed twice.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The parsed [`Config::allowed_media_domains`].
    pub(crate) allowlist: DomainAllowlist,
}

/// Whether two configured directories are one (as spelled, or once resolved when both exist).
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    let trimmed = |p: &std::path::Path| p.components().collect::<std::path::PathBuf>();
    trimmed(a) == trimmed(b)
        || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

impl Config {
    /// Checks every bound and every rule that spans settings (for builder-set values too).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(&Given::default()).map(drop)
    }

    /// [`Config::validate`], echoing the values `given` as they were given.
    pub(crate) fn check(&self, given: &Given) -> Result<Checked, ConfigError> {
        // The tiers' own fields, by their own rules.
        self.shared
            .validate()
            .map_err(|e| given.tier(CheckedBy::SharedCache(e.field), &e.value, e.expected))?;
        self.disk
            .validate()
            .map_err(|e| given.tier(CheckedBy::Disk(e.field), &e.value, e.expected))?;
        self.host
            .validate()
            .map_err(|e| given.tier(CheckedBy::Host(e.field), &e.value, e.expected))?;
        // Two tiers in one directory would sweep each other's entries against their budgets.
        if self.host_enabled() && self.disk_enabled() && same_dir(&self.host.dir, &self.disk.dir) {
            let held = self.host.dir.display().to_string();
            return Err(given.invalid(
                env::HOST_PIXELS_DIR,
                &held,
                "a directory of its own, not MMCACHE_DISK_CACHE_DIR's",
            ));
        }
        let durations = [
            (
                env::ORIGIN_CONNECT_TIMEOUT_SECS,
                self.origin_connect_timeout,
            ),
            (env::ORIGIN_TIMEOUT_SECS, self.origin_timeout),
        ];
        for (name, d) in durations {
            if d.is_zero() {
                return Err(given.invalid(name, "0", "a duration > 0"));
            }
            // A finite but huge value (1e19 s) must be a start-up error, not an overflow in
            // some later arithmetic.
            if d > MAX_TIMEOUT {
                return Err(given.invalid(name, &secs(d), "at most 3600 seconds"));
            }
        }
        let positive = [
            (env::MAX_FILE_SIZE_MB, self.max_file_size_bytes),
            (
                env::EMBEDDING_MAX_VALUE_BYTES,
                self.embedding_max_value_bytes,
            ),
            (env::MAX_PIXELS, self.max_pixels),
            (env::DECODE_MEMORY_BYTES, self.decode_memory_bytes),
            (env::DOWNLOAD_MEMORY_BYTES, self.download_memory_bytes),
        ];
        for (name, n) in positive {
            if n == 0 {
                return Err(given.invalid(name, "0", "an integer > 0"));
            }
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
            return Err(given.invalid(
                env::EMBEDDING_CHUNK_BYTES,
                &self.embedding_chunk_bytes.to_string(),
                "an integer > 0, at most the value cap and 4 GiB, and at least the value cap / 1024",
            ));
        }
        if self.image_formats.is_empty() {
            return Err(given.invalid(
                env::IMAGE_FORMATS,
                "",
                "at least one of jpeg, png, webp, gif",
            ));
        }
        if self.decode_concurrency == 0 || self.decode_concurrency > MAX_DECODE_CONCURRENCY {
            return Err(given.invalid(
                env::DECODE_CONCURRENCY,
                &self.decode_concurrency.to_string(),
                "an integer > 0 and <= 4096",
            ));
        }
        if self.decode_wait.is_zero() || self.decode_wait > MAX_DECODE_WAIT {
            return Err(given.invalid(
                env::DECODE_WAIT_SECS,
                &format!("{:?}", self.decode_wait),
                "a number of seconds > 0 and <= 3600",
            ));
        }
        let hedge = self.hedge;
        if hedge.min_delay.is_zero() || hedge.min_delay > hedge.max_delay {
            return Err(given.invalid(
                env::SHARED_HEDGE_MIN_MS,
                &hedge.min_delay.as_millis().to_string(),
                "an integer > 0, at most the hedge maximum",
            ));
        }
        if hedge.max_delay > MAX_HEDGE_DELAY {
            return Err(given.invalid(
                env::SHARED_HEDGE_MAX_MS,
                &hedge.max_delay.as_millis().to_string(),
                "an integer of milliseconds <= 60000",
            ));
        }
        if self.shared_enabled && self.shared.url.is_empty() {
            return Err(ConfigError::MissingCacheUrl);
        }
        if let Some(d) = self
            .load_timeout
            .filter(|d| d.is_zero() || *d > MAX_TIMEOUT)
        {
            return Err(given.invalid(
                env::LOAD_TIMEOUT_SECS,
                &secs(d),
                "a number of seconds > 0 and <= 3600",
            ));
        }
        if let Some(d) = self
            .embedding_compute_timeout
            .filter(|d| d.is_zero() || *d > MAX_TIMEOUT)
        {
            return Err(given.invalid(
                env::EMBEDDING_COMPUTE_TIMEOUT_SECS,
                &secs(d),
                "a number of seconds > 0 and <= 3600",
            ));
        }
        // The reason names the refused entry; the whole list may be long.
        let allowlist = DomainAllowlist::new(&self.allowed_media_domains).map_err(|reason| {
            ConfigError::invalid(
                env::ALLOWED_MEDIA_DOMAINS,
                &reason,
                "comma-separated host names, *.host names or IP addresses",
            )
        })?;
        Ok(Checked { allowlist })
    }
}

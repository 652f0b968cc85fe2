//! Settings of the disk tier and their one check ([`DiskCacheConfig::validate`]: one message
//! per rule, which the loader shows under the variable that set the field), and its counters.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Default byte budget: 10 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
/// Default byte budget of a [`Tier::Host`] cache (decoded pixels in memory): 4 GiB.
pub const DEFAULT_HOST_MAX_BYTES: u64 = 4 << 30;
/// Default entry TTL: one hour, as the shared cache's.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Default largest entry read or written: 64 MiB, as a download.
pub const DEFAULT_MAX_ENTRY_BYTES: u64 = 64 << 20;
/// Default deadline of one disk operation (a read, a write, one lock attempt).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default cap on blocking disk operations running at once (per cache).
pub const DEFAULT_MAX_BLOCKING_OPS: usize = 16;

/// Settings of the disk tier.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskCacheConfig {
    /// The directory (created when missing). One per host, shared by its worker processes.
    pub dir: PathBuf,
    /// Byte budget of the whole directory, across processes. Default [`DEFAULT_MAX_BYTES`].
    pub max_bytes: u64,
    /// Entry TTL, by modification time. Default [`DEFAULT_TTL`].
    pub ttl: Duration,
    /// Largest entry read or written. Default [`DEFAULT_MAX_ENTRY_BYTES`].
    pub max_entry_bytes: u64,
    /// Shared-group mode: the gid whose files and folders are trusted too, and that ours are
    /// made for (entries 0640, lock files 0660, folders 2770). For pods of different uids on
    /// one host and Kubernetes `fsGroup` volumes. Default `None`: only our own uid's, 0600/0700.
    pub group: Option<u32>,
    /// Deadline of one disk operation. Default [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// Blocking disk operations at once. Default [`DEFAULT_MAX_BLOCKING_OPS`].
    pub max_blocking_ops: usize,
    /// What the directory holds: encoded bytes on a disk (the default), or decoded pixels on a
    /// memory file system that readers map ([`Tier::Host`]).
    pub tier: Tier,
}

/// What a cache's directory holds, which names its metrics and sets how its entries are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Tier {
    /// The disk tier: encoded bytes, read into memory; metrics `mmcache_disk_cache_*`.
    #[default]
    Disk,
    /// The host pixel tier: entries that readers map (`DiskCache::get_mapped_named`), made
    /// read-only (0400, or 0440 with a group) before they are renamed into place, and mapped
    /// only while nobody may write them; metrics `mmcache_host_pixels_*`.
    Host,
}

/// Longest entry TTL accepted: 365 days (the shared cache's bound too).
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Longest deadline of one disk operation accepted: an hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// No directory (an empty path): a place to gather settings before the directory is known;
/// the loader keeps its tier off while `dir` is empty.
impl Default for DiskCacheConfig {
    fn default() -> Self {
        Self::new(PathBuf::new())
    }
}

impl DiskCacheConfig {
    /// Checks every field against its rule: the first refused one, with its rule.
    ///
    /// # Errors
    ///
    /// [`Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.max_bytes == 0 {
            return Err(Invalid::new(Field::MaxBytes, "0", "an integer > 0"));
        }
        if self.ttl.is_zero() {
            return Err(Invalid::new(Field::Ttl, "0", "an integer > 0"));
        }
        if self.ttl > MAX_TTL {
            let held = self.ttl.as_secs_f64().to_string();
            return Err(Invalid::new(
                Field::Ttl,
                held,
                "at most 31536000 (365 days)",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Invalid::new(Field::Timeout, "0", "a duration > 0"));
        }
        if self.timeout > MAX_TIMEOUT {
            let held = self.timeout.as_secs_f64().to_string();
            return Err(Invalid::new(Field::Timeout, held, "at most 3600000 ms"));
        }
        Ok(())
    }

    /// Defaults of a [`Tier::Host`] cache in `dir` (an empty path: not placed yet): the budget
    /// [`DEFAULT_HOST_MAX_BYTES`], the other fields as [`DiskCacheConfig::new`].
    pub fn host(dir: impl Into<PathBuf>) -> Self {
        Self {
            max_bytes: DEFAULT_HOST_MAX_BYTES,
            tier: Tier::Host,
            ..Self::new(dir)
        }
    }

    /// Defaults for `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            ttl: DEFAULT_TTL,
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            group: None,
            timeout: DEFAULT_TIMEOUT,
            max_blocking_ops: DEFAULT_MAX_BLOCKING_OPS,
            tier: Tier::Disk,
        }
    }
}

/// A field of [`DiskCacheConfig`] that has a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    /// [`DiskCacheConfig::max_bytes`].
    MaxBytes,
    /// [`DiskCacheConfig::ttl`].
    Ttl,
    /// [`DiskCacheConfig::timeout`].
    Timeout,
}

impl Field {
    /// Every field with a rule.
    pub const ALL: [Field; 3] = [Field::MaxBytes, Field::Ttl, Field::Timeout];

    /// Its name in [`DiskCacheConfig`].
    pub fn as_str(self) -> &'static str {
        match self {
            Field::MaxBytes => "max_bytes",
            Field::Ttl => "ttl",
            Field::Timeout => "timeout",
        }
    }
}

/// A field outside its rule, found by [`DiskCacheConfig::validate`].
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

/// The gid of `group`: a number, or a name in `/etc/group` (no NSS lookup: a container's
/// groups are there). `None` when unknown.
pub fn group_id(group: &str) -> Option<u32> {
    let group = group.trim();
    if let Ok(gid) = group.parse() {
        return Some(gid);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(group))
            .then(|| fields.nth(1).and_then(|g| g.parse().ok()))
            .flatten()
    })
}

/// Counters of one instance (the `metrics` facade has the process-wide view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskCacheStats {
    /// Reads that found a fresh entry.
    pub hits: u64,
    /// Reads that found none (or an expired one).
    pub misses: u64,
    /// Reads and writes that failed (I/O errors): each was a miss or a skipped write.
    pub errors: u64,
    /// Entries written.
    pub writes: u64,
    /// Entries removed by sweeps (budget or TTL) and as corrupt.
    pub evictions: u64,
    /// Sweeps this process ran.
    pub sweeps: u64,
    /// Operations skipped or cut short: a name not ours (link, FIFO, foreign owner), or a
    /// bound (deadline, no permit, breaker open). Each was a miss or a skipped write.
    pub skipped: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) sweeps: AtomicU64,
    pub(crate) skipped: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_pass_and_each_rule_names_its_field() {
        DiskCacheConfig::default().validate().unwrap();
        let c = DiskCacheConfig {
            ttl: MAX_TTL + Duration::from_secs(1),
            ..Default::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!((e.field, e.value.as_str()), (Field::Ttl, "31536001"));
        let c = DiskCacheConfig {
            timeout: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().expected, "a duration > 0");
    }

    #[test]
    fn each_refusal_states_the_bound_it_checks() {
        // The texts are literals (`expected` is `&'static str`): held here to the constants.
        let over = Duration::from_millis(1);
        let c = DiskCacheConfig {
            ttl: MAX_TTL + over,
            ..Default::default()
        };
        let ttl = c.validate().unwrap_err().expected;
        assert!(ttl.contains(&MAX_TTL.as_secs().to_string()), "{ttl}");
        let c = DiskCacheConfig {
            timeout: MAX_TIMEOUT + over,
            ..Default::default()
        };
        let timeout = c.validate().unwrap_err().expected;
        let millis = format!("at most {} ms", MAX_TIMEOUT.as_millis());
        assert_eq!(timeout, millis);
    }
}

//! The tier itself: [`DiskCache`] and the state its operations share (the settings, the
//! directory's verdict at start, the kept folder handles, the bounds, metrics and hooks), made
//! once in [`DiskCache::new`]. The operations live by job: reads in `read`, writes and removals
//! in `write`, fill locks in `lock`, sweeps in `sweep`, names of the caller's own in `named`.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;

use crate::config::{DiskCacheConfig, DiskCacheStats};
use crate::dirs::Dirs;
use crate::fsops::{self, FsResult, Owners};
use crate::guard::Guard;
use crate::metrics;
use crate::trust::{self, DiskStatus, open_root};

/// How far ahead of this host's clock a modification time may be (another process's clock,
/// a file system's rounding) before the entry counts as expired.
pub const CLOCK_SKEW: Duration = Duration::from_secs(2);

/// Adds `n` to one of an instance's counters.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A test's stand-in for a disk that does not answer: called where a read's I/O starts.
/// Set only through the test seams (feature `test-seams`).
#[cfg(feature = "test-seams")]
pub type Stall = Arc<dyn Fn() + Send + Sync>;
#[cfg(not(feature = "test-seams"))]
type Stall = Arc<dyn Fn() + Send + Sync>;

/// Memory every entry read reserves before its bytes are read (the loader's download budget,
/// see [`DiskCache::set_read_memory`]): given the entry's length (from `fstat`), it waits for
/// room and returns what turns the bytes read into [`Bytes`] holding the reservation; `None`
/// when there is no room (the read is skipped: a miss, counted as outcome `no_memory`).
pub type ReadMemory = Arc<
    dyn Fn(u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<ReadHold>> + Send>>
        + Send
        + Sync,
>;

/// The same memory taken at once or not at all (`None`: no room now): tried first, inside
/// the blocking operation that opened the entry, so a hit with room reads in that one trip.
pub type TryReadMemory = Arc<dyn Fn(u64) -> Option<ReadHold> + Send + Sync>;

/// What [`ReadMemory`] returns: wraps the bytes read so that they hold the reservation.
pub type ReadHold = Box<dyn FnOnce(Vec<u8>) -> Bytes + Send>;

/// What every clone of a [`DiskCache`] shares.
pub(crate) struct Inner {
    pub(crate) config: DiskCacheConfig,
    pub(crate) owners: Owners,
    pub(crate) status: DiskStatus,
    /// Folder handles kept open for reads.
    pub(crate) dirs: Dirs,
    pub(crate) guard: Guard,
    pub(crate) metrics: Arc<metrics::Handles>,
    /// Bytes this process wrote since its last sweep.
    pub(crate) written_since_sweep: AtomicU64,
    pub(crate) last_sweep: std::sync::Mutex<Instant>,
    /// Set while this process sweeps.
    pub(crate) sweeping: std::sync::atomic::AtomicBool,
    /// Test seam: runs before each read's I/O (see [`DiskCache::inject_read_stall`]).
    pub(crate) read_stall: std::sync::Mutex<Option<Stall>>,
    /// Where reads reserve their bytes (see [`DiskCache::set_read_memory`]).
    pub(crate) read_memory: std::sync::OnceLock<(ReadMemory, TryReadMemory)>,
    /// Test seam: runs before each write's I/O (see [`DiskCache::inject_write_stall`]).
    pub(crate) write_stall: std::sync::Mutex<Option<Stall>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("config", &self.config)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// The disk tier. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DiskCache {
    pub(crate) inner: Arc<Inner>,
}

/// The file of `identity`'s entry in a disk tier rooted at `dir`, without opening or
/// creating anything (what [`DiskCache::path_of`] returns for that directory).
pub fn entry_path(dir: &std::path::Path, identity: &CacheIdentity) -> PathBuf {
    let digest = identity.sha256_hex();
    dir.join("v1").join(&digest[..2]).join(digest)
}

impl DiskCache {
    /// A disk tier over `config.dir`. Makes the directory when missing and judges it (within
    /// the operation deadline, on a thread of its own): a directory anyone may write without
    /// the sticky bit, or one another user owns outside the group, turns the tier off with one
    /// warning ([`DiskCache::status`]); every operation then is a miss or a skipped write.
    pub fn new(config: DiskCacheConfig) -> Self {
        let owners = Owners::new(config.group);
        let (status, v1) = trust::check_at_start(&config.dir, owners, config.timeout);
        let metrics = Arc::new(metrics::Handles::new(config.tier));
        let guard = Guard::new(config.timeout, config.max_blocking_ops, metrics.clone());
        Self {
            inner: Arc::new(Inner {
                config,
                owners,
                status,
                dirs: Dirs::new(v1),
                guard,
                metrics,
                written_since_sweep: AtomicU64::new(0),
                last_sweep: std::sync::Mutex::new(Instant::now()),
                sweeping: std::sync::atomic::AtomicBool::new(false),
                read_stall: std::sync::Mutex::new(None),
                read_memory: std::sync::OnceLock::new(),
                write_stall: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Fault injection for tests (no FUSE or dm-delay here): `stall` runs on the thread of
    /// every read, where its I/O starts, standing in for a disk that does not answer. A test
    /// seam: only with the feature `test-seams`.
    #[cfg(feature = "test-seams")]
    pub fn inject_read_stall(&self, stall: Option<Stall>) {
        if let Ok(mut s) = self.inner.read_stall.lock() {
            *s = stall;
        }
    }

    /// Makes every entry read reserve its bytes first (set once; later calls are ignored).
    /// The length comes from `fstat`. `now` is tried in the blocking operation that opened
    /// the entry, which then reads it too; when it has no room, `memory` is waited for off
    /// the blocking pool (so a wait for memory holds no disk permit), then the entry is read
    /// in a second operation.
    pub fn set_read_memory(&self, memory: ReadMemory, now: TryReadMemory) {
        let _ = self.inner.read_memory.set((memory, now));
    }

    /// Fault injection for tests, as [`DiskCache::inject_read_stall`] for writes: `stall` runs
    /// on the thread of every write, before its I/O. A test seam: only with the feature
    /// `test-seams`.
    #[cfg(feature = "test-seams")]
    pub fn inject_write_stall(&self, stall: Option<Stall>) {
        if let Ok(mut s) = self.inner.write_stall.lock() {
            *s = stall;
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &DiskCacheConfig {
        &self.inner.config
    }

    /// The verdict on the directory at start (a refused one turns the tier off).
    pub fn status(&self) -> &DiskStatus {
        &self.inner.status
    }

    /// Counters of this instance.
    pub fn stats(&self) -> DiskCacheStats {
        let c = &self.inner.metrics.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskCacheStats {
            hits: load(&c.hits),
            misses: load(&c.misses),
            errors: load(&c.errors),
            writes: load(&c.writes),
            evictions: load(&c.evictions),
            sweeps: load(&c.sweeps),
            skipped: load(&c.skipped),
        }
    }

    /// The file of `identity`'s entry.
    pub fn path_of(&self, identity: &CacheIdentity) -> PathBuf {
        entry_path(&self.inner.config.dir, identity)
    }

    pub(crate) fn enabled(&self) -> bool {
        self.inner.status.is_enabled()
    }

    /// Whether a write of `len` bytes would be attempted: the tier is on and `len` within its
    /// entry cap. A caller that must copy its bytes to write them asks first.
    pub fn takes(&self, len: usize) -> bool {
        self.enabled() && len > 0 && len as u64 <= self.inner.config.max_entry_bytes
    }

    /// The folder `v1/<sub...>` of the directory, opened by handle without following links.
    pub(crate) fn open_dirs(&self, sub: &[&str], create: bool) -> FsResult<OwnedFd> {
        let owners = &self.inner.owners;
        let mut fd = open_root(&self.inner.config.dir, owners, create)?;
        for name in std::iter::once("v1").chain(sub.iter().copied()) {
            fd = fsops::open_dir_at(&fd, name, owners, create)?;
        }
        Ok(fd)
    }

    /// Counts an operation that did not complete (a bound or a skipped name).
    pub(crate) fn skipped(&self) {
        bump(&self.inner.metrics.stats.skipped, 1);
    }

    /// Whether `st` is past the TTL, or dated more than [`CLOCK_SKEW`] ahead.
    pub(crate) fn expired(&self, st: &rustix::fs::Stat) -> bool {
        match SystemTime::now().duration_since(fsops::mtime(st)) {
            Ok(age) => age > self.inner.config.ttl,
            Err(ahead) => ahead.duration() > CLOCK_SKEW,
        }
    }

    /// Whether `st` is of a valid entry: not expired, not empty, within the cap.
    pub(crate) fn valid(&self, st: &rustix::fs::Stat) -> bool {
        let len = u64::try_from(st.st_size).unwrap_or(0);
        !self.expired(st) && len > 0 && len <= self.inner.config.max_entry_bytes
    }
}

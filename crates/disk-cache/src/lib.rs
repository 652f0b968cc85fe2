//! The host-local tier of encoded image bytes: files on a local disk that every worker process
//! of one host shares, so the host downloads each image once and a restarted worker starts warm.
//!
//! - An entry is the exact origin bytes in `<dir>/v1/<aa>/<digest>`, where `<digest>` is the
//!   same SHA-256 of the cache identity as in the Redis key (so scoping partitions it the same
//!   way) and `<aa>` its first two hex digits.
//! - Writes go to a temporary file that is renamed into place: a reader sees a whole entry or
//!   none, whatever the number of processes writing the same entry at once, and a process killed
//!   mid-write leaves only a temporary file, which a sweep removes.
//! - Reads are bounded by the same cap as a download; an entry older than the TTL (by its
//!   modification time) is a miss and is removed.
//! - A byte budget holds across processes: each process sweeps the directory (under a lock file,
//!   one sweeper at a time) once it has written an eighth of the budget since its last sweep, or
//!   every [`SWEEP_INTERVAL`]; the sweep removes expired entries and then the least recently
//!   written ones until the directory is under 90 % of the budget. No write scans the directory.
//! - [`DiskCache::lock`] is a cross-process single-flight: the first process to miss takes a
//!   per-entry lock file (`flock`, released by the kernel if the process dies) and fills the
//!   entry; the others wait for it and read the entry instead of downloading it again.
//! - Fail-open like the shared cache: a full disk, a read-only or deleted directory, a corrupt
//!   or truncated file never fails a load; reads give `Option<Bytes>`, writes give nothing.
//! - The directory is shared with other processes, some possibly hostile: no link is ever
//!   followed below it, files are opened non-blocking and used only when `fstat` says they are
//!   regular files we (or the configured group) own, entries are 0600 in 0700 folders (0640 /
//!   2770 with a group), and a directory anyone may write (without the sticky bit) or another
//!   user owns is refused at start ([`DiskCache::status`]). A modification time more than
//!   [`CLOCK_SKEW`] ahead counts as expired. Reads keep the folders' handles open (a hit costs
//!   the entry's `openat`, `fstat`, reads and `close`), and look again from the path when they
//!   find nothing through them.
//! - Every operation is bounded: a deadline, a cap on blocking operations at once, and a
//!   breaker that skips a disk that keeps timing out (see [`PERMIT_WAIT`], [`BREAKER_FAILURES`]).
//!
//! This crate knows nothing of HTTP, Redis or pixels.
//!
//! # Examples
//!
//! ```
//! use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
//! use mmcache_scope::CacheIdentity;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = std::env::temp_dir().join(format!("mmcache-doc-{}", std::process::id()));
//! let cache = DiskCache::new(DiskCacheConfig::new(&dir));
//! let id = CacheIdentity::unscoped("https://example.com/cat.png");
//! assert!(cache.get(&id).await.is_none());
//! cache.put(&id, bytes::Bytes::from_static(b"\x89PNG...")).await;
//! assert_eq!(cache.get(&id).await.as_deref(), Some(&b"\x89PNG..."[..]));
//! # std::fs::remove_dir_all(&dir).ok();
//! # }
//! ```

mod config;
mod dirs;
mod fsops;
mod guard;
mod lock;
mod named;
mod sweep;
mod trust;

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;

pub use config::{DiskCacheConfig, DiskCacheStats, group_id};
use fsops::{FsError, FsResult, Owners};
pub use guard::{BREAKER_COOLDOWN, BREAKER_FAILURES, PERMIT_WAIT};
pub use lock::FillLock;
pub use named::EntryName;
pub use trust::{DiskStatus, Refusal};

/// Default byte budget: 10 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
/// Default entry TTL: one hour, as the shared cache's.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Default largest entry read or written: 64 MiB, as a download.
pub const DEFAULT_MAX_ENTRY_BYTES: u64 = 64 << 20;
/// Default deadline of one disk operation (a read, a write, one lock attempt).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default cap on blocking disk operations running at once (per cache).
pub const DEFAULT_MAX_BLOCKING_OPS: usize = 16;
/// A process sweeps at least this often while it writes.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// How far ahead of this host's clock a modification time may be (another process's clock,
/// a file system's rounding) before the entry counts as expired.
pub const CLOCK_SKEW: Duration = Duration::from_secs(2);

pub mod metrics;

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A test's stand-in for a disk that does not answer: called where a read's I/O starts.
#[doc(hidden)]
pub type Stall = Arc<dyn Fn() + Send + Sync>;

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

struct Inner {
    config: DiskCacheConfig,
    owners: Owners,
    status: DiskStatus,
    /// Folder handles kept open for reads.
    dirs: dirs::Dirs,
    guard: guard::Guard,
    metrics: Arc<metrics::Handles>,
    /// Bytes this process wrote since its last sweep.
    written_since_sweep: AtomicU64,
    last_sweep: std::sync::Mutex<Instant>,
    /// Set while this process sweeps.
    sweeping: std::sync::atomic::AtomicBool,
    /// Test seam: runs before each read's I/O (see [`DiskCache::inject_read_stall`]).
    read_stall: std::sync::Mutex<Option<Stall>>,
    /// Where reads reserve their bytes (see [`DiskCache::set_read_memory`]).
    read_memory: std::sync::OnceLock<(ReadMemory, TryReadMemory)>,
    /// Test seam: runs before each write's I/O (see [`DiskCache::inject_write_stall`]).
    write_stall: std::sync::Mutex<Option<Stall>>,
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
    inner: Arc<Inner>,
}

/// How waiting for an entry's fill lock ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Fill {
    /// This caller holds the lock: it should fill the entry.
    Locked(FillLock),
    /// A valid entry appeared while waiting (another process filled it): read it.
    Filled,
    /// Neither within the wait, or the lock cannot be taken here: go on without it.
    GaveUp,
}

/// What one read found.
enum Found {
    Hit(Bytes),
    /// A valid entry, opened, of this length: its bytes are read once reserved.
    Open(std::fs::File, usize),
    Miss,
    Expired,
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
        let metrics = Arc::new(metrics::Handles::new());
        let guard = guard::Guard::new(config.timeout, config.max_blocking_ops, metrics.clone());
        Self {
            inner: Arc::new(Inner {
                config,
                owners,
                status,
                dirs: dirs::Dirs::new(v1),
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
    /// every read, where its I/O starts, standing in for a disk that does not answer.
    #[doc(hidden)]
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
    /// on the thread of every write, before its I/O.
    #[doc(hidden)]
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

    fn enabled(&self) -> bool {
        self.inner.status.is_enabled()
    }

    /// Whether a write of `len` bytes would be attempted: the tier is on and `len` within its
    /// entry cap. A caller that must copy its bytes to write them asks first.
    pub fn takes(&self, len: usize) -> bool {
        self.enabled() && len > 0 && len as u64 <= self.inner.config.max_entry_bytes
    }

    /// The folder `v1/<sub...>` of the directory, opened by handle without following links.
    fn open_dirs(&self, sub: &[&str], create: bool) -> FsResult<OwnedFd> {
        let owners = &self.inner.owners;
        let mut fd = fsops::open_root(&self.inner.config.dir, owners, create)?;
        for name in std::iter::once("v1").chain(sub.iter().copied()) {
            fd = fsops::open_dir_at(&fd, name, owners, create)?;
        }
        Ok(fd)
    }

    /// Counts an operation that did not complete (a bound or a skipped name).
    fn skipped(&self) {
        bump(&self.inner.metrics.stats.skipped, 1);
    }

    fn read_outcome(&self, o: metrics::ReadOutcome) {
        self.inner.metrics.read(o);
    }

    /// Whether `st` is past the TTL, or dated more than [`CLOCK_SKEW`] ahead.
    fn expired(&self, st: &rustix::fs::Stat) -> bool {
        match SystemTime::now().duration_since(fsops::mtime(st)) {
            Ok(age) => age > self.inner.config.ttl,
            Err(ahead) => ahead.duration() > CLOCK_SKEW,
        }
    }

    /// The entry of `identity`, or `None` on a miss, an expired or oversized entry, a name that
    /// is not ours, a slow disk, or any I/O error (counted, never returned).
    pub async fn get(&self, identity: &CacheIdentity) -> Option<Bytes> {
        self.get_digest(identity.sha256_hex().to_owned()).await
    }

    /// [`DiskCache::get`] by the entry's hex digest name.
    pub(crate) async fn get_digest(&self, digest: String) -> Option<Bytes> {
        if !self.enabled() {
            // Not a read: no metric, a miss in the stats.
            bump(&self.inner.metrics.stats.misses, 1);
            return None;
        }
        let this = self.clone();
        let stall = self.inner.read_stall.lock().ok().and_then(|s| s.clone());
        let result = self
            .inner
            .guard
            .run(move || {
                if let Some(stall) = stall {
                    stall();
                }
                this.read(&digest)
            })
            .await;
        let found = match result {
            Ok(Ok(found)) => found,
            Ok(Err(FsError::Missing)) => Found::Miss,
            Ok(Err(FsError::Skipped(s))) => {
                s.count(&self.inner.metrics);
                self.skipped();
                Found::Miss
            }
            Ok(Err(FsError::Io(e))) => {
                tracing::debug!(error = %e, "disk cache read failed");
                self.read_outcome(metrics::ReadOutcome::Error);
                return None;
            }
            Err(_) => {
                self.skipped();
                Found::Miss
            }
        };
        let found = match found {
            Found::Open(file, len) => match self.read_open(file, len).await {
                Some(found) => found,
                None => return None, // counted there
            },
            found => found,
        };
        match found {
            Found::Open(..) => unreachable!("read above"),
            Found::Hit(bytes) => {
                self.read_outcome(metrics::ReadOutcome::Hit);
                self.inner.metrics.read_bytes.increment(bytes.len() as u64);
                Some(bytes)
            }
            Found::Miss => {
                self.read_outcome(metrics::ReadOutcome::Miss);
                None
            }
            Found::Expired => {
                self.read_outcome(metrics::ReadOutcome::Expired);
                None
            }
        }
    }

    /// Whether `st` is of a valid entry: not expired, not empty, within the cap.
    fn valid(&self, st: &rustix::fs::Stat) -> bool {
        let len = u64::try_from(st.st_size).unwrap_or(0);
        !self.expired(st) && len > 0 && len <= self.inner.config.max_entry_bytes
    }

    /// Reads an opened entry of `len` bytes (by `fstat`): at most the cap plus one byte,
    /// whatever the file grew to since the stat; `None` when over the cap or empty.
    fn read_file(&self, file: &mut std::fs::File, len: usize) -> FsResult<Option<Vec<u8>>> {
        let cap = self.inner.config.max_entry_bytes;
        let buf = fsops::read_capped(file, len as u64, cap)?;
        Ok((buf.len() as u64 <= cap && !buf.is_empty()).then_some(buf))
    }

    /// Reserves an opened entry's bytes in the read memory, then reads them (a second
    /// blocking operation, under the same deadline, permits and breaker). `None`: not read
    /// (no memory, or the read failed), counted here.
    async fn read_open(&self, mut file: std::fs::File, len: usize) -> Option<Found> {
        let (memory, _) = self.inner.read_memory.get()?;
        let Some(hold) = memory(len as u64).await else {
            self.read_outcome(metrics::ReadOutcome::NoMemory);
            return None;
        };
        let this = self.clone();
        match self
            .inner
            .guard
            .run(move || this.read_file(&mut file, len))
            .await
        {
            Ok(Ok(Some(buf))) => Some(Found::Hit(hold(buf))),
            Ok(Ok(None)) => Some(Found::Miss),
            Ok(Err(FsError::Io(e))) => {
                tracing::debug!(error = %e, "disk cache read failed");
                self.read_outcome(metrics::ReadOutcome::Error);
                None
            }
            Ok(Err(_)) => Some(Found::Miss),
            Err(_) => {
                self.skipped();
                Some(Found::Miss)
            }
        }
    }

    /// Stores `bytes` (the exact origin bytes, which decoded) for `identity`: written to a
    /// temporary file, then renamed into place. Failures are counted and ignored; a write
    /// past the deadline goes on in the background (see [`DiskCache::flush`]).
    pub async fn put(&self, identity: &CacheIdentity, bytes: Bytes) {
        self.put_locked(identity, bytes, None).await;
    }

    /// [`DiskCache::put`] by the holder of the entry's fill `lock`: the lock is held until the
    /// write really returned from the disk, even past the deadline at which this call stops
    /// waiting for it, or until the write is abandoned (skipped, no permit, breaker open). The
    /// host's other processes keep waiting for the entry, not for a lock freed before it exists.
    pub async fn put_locked(&self, identity: &CacheIdentity, bytes: Bytes, lock: Option<FillLock>) {
        self.put_digest(identity.sha256_hex().to_owned(), bytes, lock)
            .await;
    }

    /// [`DiskCache::put_locked`] by the entry's hex digest name.
    pub(crate) async fn put_digest(&self, digest: String, bytes: Bytes, lock: Option<FillLock>) {
        let len = bytes.len() as u64;
        if !self.enabled() || len == 0 || len > self.inner.config.max_entry_bytes {
            self.inner.metrics.write(metrics::WriteOutcome::Skipped);
            return;
        }
        let this = self.clone();
        let pending = self.inner.guard.pending_write();
        let stall = self.inner.write_stall.lock().ok().and_then(|s| s.clone());
        let result = self
            .inner
            .guard
            .run(move || {
                // Both drop when the write's syscalls have returned.
                let (_pending, _lock) = (pending, lock);
                if let Some(stall) = stall {
                    stall();
                }
                this.write(&digest, &bytes)
            })
            .await;
        match result {
            Ok(Ok(())) => {
                self.inner
                    .written_since_sweep
                    .fetch_add(len, Ordering::Relaxed);
                self.inner.metrics.write(metrics::WriteOutcome::Success);
                self.inner.metrics.written_bytes.increment(len);
            }
            Ok(Err(FsError::Skipped(s))) => {
                s.count(&self.inner.metrics);
                self.skipped();
                self.inner.metrics.write(metrics::WriteOutcome::Skipped);
            }
            Ok(Err(e)) => {
                self.inner.metrics.write(metrics::WriteOutcome::Error);
                tracing::debug!(error = ?e, "disk cache write failed");
            }
            Err(_) => {
                self.skipped();
                self.inner.metrics.write(metrics::WriteOutcome::Skipped);
            }
        }
        // A due sweep runs on its own, not on this load's time.
        if self.sweep_due() {
            let this = self.clone();
            self.inner
                .guard
                .spawn_unbounded(move || this.sweep_if_due());
        }
    }

    fn write(&self, digest: &str, bytes: &[u8]) -> FsResult<()> {
        let owners = &self.inner.owners;
        let tmp_dir = self.open_dirs(&["tmp"], true)?;
        let shard = self.open_dirs(&[&digest[..2]], true)?;
        // Unique across processes, even pods that all run as pid 1: random bits too.
        let tmp = format!(
            "{digest}.{}.{}.{:016x}",
            std::process::id(),
            unique(),
            random_u64()
        );
        let mut file = fsops::create_file_at(&tmp_dir, &tmp, owners)?;
        let written = file.write_all(bytes).and_then(|()| file.flush());
        drop(file);
        let result = match written {
            Ok(()) => fsops::rename_at(&tmp_dir, &tmp, &shard, digest),
            Err(e) => Err(e.into()),
        };
        if result.is_err() {
            let _ = fsops::unlink_at(&tmp_dir, &tmp);
        }
        result
    }

    /// Waits until every write started so far has returned from the disk (including writes
    /// whose caller stopped waiting at the deadline), or until `deadline`. Returns whether
    /// none is left.
    pub async fn flush(&self, deadline: Instant) -> bool {
        self.inner.guard.flush(deadline).await
    }

    /// Removes `identity`'s entry (its bytes did not decode).
    pub async fn remove(&self, identity: &CacheIdentity) {
        self.remove_digest(identity.sha256_hex().to_owned()).await;
    }

    /// [`DiskCache::remove`] by the entry's hex digest name.
    pub(crate) async fn remove_digest(&self, digest: String) {
        if !self.enabled() {
            return;
        }
        let this = self.clone();
        let removed = self
            .inner
            .guard
            .run(move || {
                let shard = this.open_dirs(&[&digest[..2]], false)?;
                let st = fsops::lstat_at(&shard, &digest)?;
                Ok(fsops::is_file(&st)
                    && this.inner.owners.trusts(&st)
                    && fsops::unlink_if_same(&shard, &digest, &st))
            })
            .await;
        if matches!(removed, Ok(Ok(true))) {
            self.inner.metrics.evicted(metrics::EvictReason::Corrupt);
        }
    }

    /// One attempt at `digest`'s lock: `Filled` only for a valid entry (a regular file of
    /// ours, not expired, not empty, within the cap).
    fn try_lock(&self, digest: &str) -> FsResult<lock::Attempt> {
        let owners = &self.inner.owners;
        match self.open_dirs(&[&digest[..2]], false) {
            Ok(shard) => match fsops::open_file_at(&shard, digest, owners) {
                Ok((_, st)) if self.valid(&st) => return Ok(lock::Attempt::Filled),
                _ => {}
            },
            Err(FsError::Missing | FsError::Skipped(_)) => {}
            Err(e) => return Err(e),
        }
        let locks = self.open_dirs(&["locks", &digest[..2]], true)?;
        lock::try_lock(&locks, digest, owners)
    }

    /// Takes `identity`'s fill lock, waiting at most `wait` for the process (or task) that holds
    /// it. While waiting it watches the entry itself, so a waiter reads the entry as soon as
    /// it is written, not when the holder's whole load ends. Never an error: a lock that
    /// cannot be made (or a slow disk) is [`Fill::GaveUp`] at once.
    pub async fn lock(&self, identity: &CacheIdentity, wait: Duration) -> Fill {
        self.lock_digest(identity.sha256_hex().to_owned(), wait)
            .await
    }

    /// [`DiskCache::lock`] by the entry's hex digest name.
    pub(crate) async fn lock_digest(&self, digest: String, wait: Duration) -> Fill {
        if !self.enabled() {
            return Fill::GaveUp;
        }
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(2);
        loop {
            let (this, d) = (self.clone(), digest.clone());
            match self.inner.guard.run(move || this.try_lock(&d)).await {
                Ok(Ok(lock::Attempt::Held)) => {} // held by someone else: wait
                Ok(Ok(lock::Attempt::Filled)) => return Fill::Filled,
                Ok(Ok(lock::Attempt::Locked(l))) => return Fill::Locked(l),
                Ok(Err(FsError::Skipped(s))) => {
                    s.count(&self.inner.metrics);
                    self.skipped();
                    return Fill::GaveUp;
                }
                Ok(Err(_)) => return Fill::GaveUp, // cannot lock here (read-only directory...)
                Err(_) => {
                    self.skipped();
                    return Fill::GaveUp;
                }
            }
            if Instant::now() + pause >= deadline {
                return Fill::GaveUp;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Sweeps now, waiting (at most a minute) for a sweep in progress to end (tests and
    /// tools): expired and partial files out, then the oldest entries until the directory holds
    /// at most 90 % of the budget. Returns the bytes left. Blocks: call it off the runtime.
    pub fn sweep_now(&self) -> u64 {
        if !self.enabled() {
            return 0;
        }
        sweep::sweep(self, true).unwrap_or(0)
    }

    fn sweep_due(&self) -> bool {
        let inner = &self.inner;
        inner.written_since_sweep.load(Ordering::Relaxed) > inner.config.max_bytes / 8
            || inner
                .last_sweep
                .lock()
                .map(|t| t.elapsed() > SWEEP_INTERVAL)
                .unwrap_or(true)
    }

    /// Sweeps while due, one sweep at a time per process. Writes made during a sweep stay
    /// counted (only what was counted when it started is subtracted), and the due check runs
    /// again after the sweeper steps down, so no write's trigger is lost. A sweep another
    /// process holds the lock for is left to it.
    fn sweep_if_due(&self) {
        let inner = &self.inner;
        loop {
            if inner.sweeping.swap(true, Ordering::AcqRel) {
                return; // this process's sweeper will look again when it is done
            }
            let mut left_to_another = false;
            while self.sweep_due() {
                let counted = inner.written_since_sweep.load(Ordering::Relaxed);
                if sweep::sweep(self, false).is_none() {
                    left_to_another = true;
                    break;
                }
                inner
                    .written_since_sweep
                    .fetch_sub(counted, Ordering::Relaxed);
                if let Ok(mut t) = inner.last_sweep.lock() {
                    *t = Instant::now();
                }
            }
            inner.sweeping.store(false, Ordering::Release);
            if left_to_another || !self.sweep_due() {
                return;
            }
        }
    }
}

/// A number that tells this process's temporary files apart.
fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// 64 random bits (std's randomly keyed hasher over the time: no extra dependency).
fn random_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(SystemTime::now())
}

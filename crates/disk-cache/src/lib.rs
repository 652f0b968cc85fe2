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

mod sweep;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;

/// Default byte budget: 10 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
/// Default entry TTL: one hour, as the shared cache's.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Default largest entry read or written: 64 MiB, as a download.
pub const DEFAULT_MAX_ENTRY_BYTES: u64 = 64 << 20;
/// A process sweeps at least this often while it writes.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Metric names.
pub mod metrics {
    /// Reads by `outcome` (`hit`, `miss`, `expired`, `error`).
    pub const READS: &str = "mmcache_disk_cache_reads_total";
    /// Bytes read from hits.
    pub const READ_BYTES: &str = "mmcache_disk_cache_read_bytes_total";
    /// Writes by `outcome` (`success`, `error`, `skipped`).
    pub const WRITES: &str = "mmcache_disk_cache_writes_total";
    /// Bytes written.
    pub const WRITTEN_BYTES: &str = "mmcache_disk_cache_written_bytes_total";
    /// Entries removed by `reason` (`budget`, `expired`, `corrupt`, `partial`).
    pub const EVICTIONS: &str = "mmcache_disk_cache_evictions_total";
}

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
}

impl DiskCacheConfig {
    /// Defaults for `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            ttl: DEFAULT_TTL,
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
        }
    }
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
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    writes: AtomicU64,
    evictions: AtomicU64,
    sweeps: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

struct Inner {
    config: DiskCacheConfig,
    root: PathBuf,
    counters: Counters,
    /// Bytes this process wrote since its last sweep.
    written_since_sweep: AtomicU64,
    last_sweep: std::sync::Mutex<Instant>,
    /// Set while this process sweeps.
    sweeping: std::sync::atomic::AtomicBool,
    /// Test seam: runs before each read's I/O (see [`DiskCache::inject_read_stall`]).
    read_stall: std::sync::Mutex<Option<Stall>>,
}

/// A test's stand-in for a disk that does not answer: called where a read's I/O starts.
#[doc(hidden)]
pub type Stall = Arc<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The disk tier. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DiskCache {
    inner: Arc<Inner>,
}

/// A held per-entry lock (cross-process single-flight); released on drop or process exit.
#[derive(Debug)]
pub struct FillLock {
    _file: File,
}

/// How waiting for an entry's fill lock ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Fill {
    /// This caller holds the lock: it should fill the entry.
    Locked(FillLock),
    /// The entry appeared while waiting (another process filled it): read it.
    Filled,
    /// Neither within the wait, or the lock cannot be taken here: go on without it.
    GaveUp,
}

impl DiskCache {
    /// A disk tier over `config.dir`. Does no I/O: directories are made on first write.
    pub fn new(config: DiskCacheConfig) -> Self {
        let root = config.dir.join("v1");
        Self {
            inner: Arc::new(Inner {
                config,
                root,
                counters: Counters::default(),
                written_since_sweep: AtomicU64::new(0),
                last_sweep: std::sync::Mutex::new(Instant::now()),
                sweeping: std::sync::atomic::AtomicBool::new(false),
                read_stall: std::sync::Mutex::new(None),
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

    /// The settings in force.
    pub fn config(&self) -> &DiskCacheConfig {
        &self.inner.config
    }

    /// Counters of this instance.
    pub fn stats(&self) -> DiskCacheStats {
        let c = &self.inner.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskCacheStats {
            hits: load(&c.hits),
            misses: load(&c.misses),
            errors: load(&c.errors),
            writes: load(&c.writes),
            evictions: load(&c.evictions),
            sweeps: load(&c.sweeps),
        }
    }

    /// The file of `identity`'s entry.
    pub fn path_of(&self, identity: &CacheIdentity) -> PathBuf {
        let digest = identity.sha256_hex();
        self.inner.root.join(&digest[..2]).join(digest)
    }

    /// The entry of `identity`, or `None` on a miss, an expired or oversized entry, or any
    /// I/O error (counted, never returned).
    pub async fn get(&self, identity: &CacheIdentity) -> Option<Bytes> {
        let this = self.clone();
        let path = self.path_of(identity);
        let stall = self.inner.read_stall.lock().ok().and_then(|s| s.clone());
        // File I/O blocks: a thread of the blocking pool, like tokio::fs, in one hop.
        tokio::task::spawn_blocking(move || {
            if let Some(stall) = stall {
                stall();
            }
            this.read(&path)
        })
        .await
        .ok()
        .flatten()
    }

    fn read(&self, path: &Path) -> Option<Bytes> {
        let c = &self.inner.counters;
        let outcome = |o: &'static str| ::metrics::counter!(metrics::READS, "outcome" => o);
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bump(&c.misses, 1);
                outcome("miss").increment(1);
                return None;
            }
            Err(_) => return self.read_failed(),
        };
        let Ok(meta) = file.metadata() else {
            return self.read_failed();
        };
        let age = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .unwrap_or_default();
        if age > self.inner.config.ttl {
            let _ = std::fs::remove_file(path);
            bump(&c.misses, 1);
            bump(&c.evictions, 1);
            outcome("expired").increment(1);
            ::metrics::counter!(metrics::EVICTIONS, "reason" => "expired").increment(1);
            return None;
        }
        if meta.len() > self.inner.config.max_entry_bytes || meta.len() == 0 {
            bump(&c.misses, 1);
            outcome("miss").increment(1);
            return None;
        }
        // Read at most the cap plus one byte, whatever the file grew to since the stat.
        let mut buf = Vec::with_capacity(meta.len() as usize);
        let cap = self.inner.config.max_entry_bytes;
        if (&mut file).take(cap + 1).read_to_end(&mut buf).is_err() || buf.len() as u64 > cap {
            return self.read_failed();
        }
        bump(&c.hits, 1);
        outcome("hit").increment(1);
        ::metrics::counter!(metrics::READ_BYTES).increment(buf.len() as u64);
        Some(Bytes::from(buf))
    }

    fn read_failed(&self) -> Option<Bytes> {
        bump(&self.inner.counters.errors, 1);
        bump(&self.inner.counters.misses, 1);
        ::metrics::counter!(metrics::READS, "outcome" => "error").increment(1);
        None
    }

    /// Stores `bytes` (the exact origin bytes, which decoded) for `identity`: written to a
    /// temporary file, then renamed into place. Failures are counted and ignored.
    pub async fn put(&self, identity: &CacheIdentity, bytes: Bytes) {
        let this = self.clone();
        let path = self.path_of(identity);
        let _ = tokio::task::spawn_blocking(move || this.write(&path, &bytes)).await;
        // A due sweep runs on its own, not on this load's time.
        if self.sweep_due() {
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.sweep_if_due());
        }
    }

    fn write(&self, path: &Path, bytes: &[u8]) {
        let c = &self.inner.counters;
        let len = bytes.len() as u64;
        if len == 0 || len > self.inner.config.max_entry_bytes {
            ::metrics::counter!(metrics::WRITES, "outcome" => "skipped").increment(1);
            return;
        }
        let tmp_dir = self.inner.root.join("tmp");
        let Some(parent) = path.parent() else { return };
        let result = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&tmp_dir)?;
            std::fs::create_dir_all(parent)?;
            // Unique across processes, even pods that all run as pid 1: random bits too.
            let tmp = tmp_dir.join(format!(
                "{}.{}.{}.{:016x}",
                path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
                std::process::id(),
                unique(),
                random_u64()
            ));
            let mut file = File::options().write(true).create_new(true).open(&tmp)?;
            let written = file.write_all(bytes).and_then(|()| file.flush());
            drop(file);
            if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                bump(&c.writes, 1);
                self.inner
                    .written_since_sweep
                    .fetch_add(len, Ordering::Relaxed);
                ::metrics::counter!(metrics::WRITES, "outcome" => "success").increment(1);
                ::metrics::counter!(metrics::WRITTEN_BYTES).increment(len);
            }
            Err(e) => {
                bump(&c.errors, 1);
                ::metrics::counter!(metrics::WRITES, "outcome" => "error").increment(1);
                tracing::debug!(error = %e, "disk cache write failed");
            }
        }
    }

    /// Removes `identity`'s entry (its bytes did not decode).
    pub async fn remove(&self, identity: &CacheIdentity) {
        let path = self.path_of(identity);
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_file(path).is_ok())
            .await
            .unwrap_or(false);
        if removed {
            bump(&self.inner.counters.evictions, 1);
            ::metrics::counter!(metrics::EVICTIONS, "reason" => "corrupt").increment(1);
        }
    }

    /// Takes `identity`'s fill lock, waiting at most `wait` for the process (or task) that holds
    /// it. While waiting it watches the entry itself, so a waiter reads the entry as soon as
    /// it is written, not when the holder's whole load ends. Never an error: a lock that
    /// cannot be made is [`Fill::GaveUp`] at once.
    pub async fn lock(&self, identity: &CacheIdentity, wait: Duration) -> Fill {
        let digest = identity.sha256_hex();
        let lock_path = self
            .inner
            .root
            .join("locks")
            .join(&digest[..2])
            .join(format!("{digest}.lock"));
        let entry = self.path_of(identity);
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(2);
        loop {
            let (p, e) = (lock_path.clone(), entry.clone());
            let attempt = tokio::task::spawn_blocking(move || -> std::io::Result<Fill> {
                if e.exists() {
                    return Ok(Fill::Filled);
                }
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let file = File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)?;
                match file.try_lock() {
                    Ok(()) => Ok(Fill::Locked(FillLock { _file: file })),
                    Err(std::fs::TryLockError::WouldBlock) => Ok(Fill::GaveUp),
                    Err(std::fs::TryLockError::Error(e)) => Err(e),
                }
            })
            .await;
            match attempt {
                Ok(Ok(Fill::GaveUp)) => {} // held by someone else: wait
                Ok(Ok(done)) => return done,
                _ => return Fill::GaveUp, // cannot lock here (read-only directory...)
            }
            if Instant::now() + pause >= deadline {
                return Fill::GaveUp;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Sweeps now, waiting for a sweep in progress to end (tests and tools): expired and
    /// partial files out, then the oldest entries until the directory holds at most 90 % of
    /// the budget. Returns the bytes left.
    pub fn sweep_now(&self) -> u64 {
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

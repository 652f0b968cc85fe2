//! The sweep: the only full scan of the directory, run by one process at a time, at most once
//! per eighth of the budget written or per [`SWEEP_INTERVAL`].
//!
//! It walks by folder handle and never follows a link: each name is judged by its `lstat`
//! relative to its folder's handle, folders are opened with `O_NOFOLLOW`, and only regular
//! files and folders we (or the group) own are touched. Anything else is skipped and counted
//! (`mmcache_disk_cache_skipped_total{reason}`), never removed: it is not ours.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rustix::fs::Stat;

use crate::cache::{CLOCK_SKEW, DiskCache, bump};
use crate::fsops::{self, FsError, Owners, Skip};
use crate::metrics::{EvictReason, Handles};
use crate::trust::open_root;

/// A process sweeps at least this often while it writes.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// A temporary file older than this belongs to a writer that died mid-write.
const PARTIAL_AFTER: Duration = Duration::from_secs(600);
/// Longest wait for `sweep.lock` when asked to wait ([`DiskCache::sweep_now`]).
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Whether `st` is a file or folder of ours (`dir`: which of the two it must be); counts the
/// reason when it is not.
fn ours(st: &Stat, owners: &Owners, dir: bool, metrics: &Handles) -> bool {
    let skip = if (st.st_mode & 0o170000) == 0o120000 {
        Some(Skip::Link)
    } else if (dir && !fsops::is_dir(st)) || (!dir && !fsops::is_file(st)) {
        Some(Skip::NotRegular)
    } else if !owners.trusts(st) {
        Some(Skip::Foreign)
    } else {
        None
    };
    skip.inspect(|s| s.count(metrics)).is_none()
}

/// The folders of `parent` that are ours, opened without following links, with their names.
fn subdirs(
    parent: &OwnedFd,
    owners: &Owners,
    keep: impl Fn(&str) -> bool,
    metrics: &Handles,
) -> Vec<(String, OwnedFd)> {
    let mut out = Vec::new();
    for name in fsops::names(parent).into_iter().filter(|n| keep(n)) {
        let Ok(st) = fsops::lstat_at(parent, &name) else {
            continue;
        };
        if !ours(&st, owners, true, metrics) {
            continue;
        }
        match fsops::open_dir_at(parent, &name, owners, false) {
            Ok(fd) => out.push((name, fd)),
            Err(FsError::Skipped(s)) => s.count(metrics),
            Err(_) => {}
        }
    }
    out
}

/// Removes expired entries, partial writes and idle lock files, then the least recently
/// written entries until the directory holds at most 90 % of the budget. Returns the bytes
/// left, or `None` when it did not run (another process is sweeping, or no directory).
pub(crate) fn sweep(cache: &DiskCache, wait_for_lock: bool) -> Option<u64> {
    let inner = &cache.inner;
    let owners = &inner.owners;
    let root = open_root(&inner.config.dir, owners, true).ok()?;
    let v1 = fsops::open_dir_at(&root, "v1", owners, true).ok()?;
    let (lock, _) = fsops::open_lock_at(&v1, "sweep.lock", owners).ok()?;
    let start = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match lock.try_lock() {
            Ok(()) => break,
            // Another process sweeps right now: it will do (or wait for it, bounded).
            Err(std::fs::TryLockError::WouldBlock)
                if wait_for_lock && start.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(_) => return None,
        }
    }
    bump(&inner.metrics.stats.sweeps, 1);
    let now = SystemTime::now();
    let older_than = |st: &Stat, limit: Duration| {
        let t = fsops::mtime(st);
        match now.duration_since(t) {
            Ok(age) => age > limit,
            Err(ahead) => ahead.duration() > CLOCK_SKEW, // dated ahead: not to be kept
        }
    };
    let evict = |dir: &OwnedFd, name: &str, judged: &Stat, reason: EvictReason| {
        if fsops::unlink_if_same(dir, name, judged) {
            inner.metrics.evicted(reason);
        }
    };
    if let Ok(tmp) = fsops::open_dir_at(&v1, "tmp", owners, false) {
        for name in fsops::names(&tmp) {
            if let Ok(st) = fsops::lstat_at(&tmp, &name)
                && ours(&st, owners, false, &inner.metrics)
                && older_than(&st, PARTIAL_AFTER)
            {
                evict(&tmp, &name, &st, EvictReason::Partial);
            }
        }
    }
    // Lock files of entries no one has filled for a while: removed while held, so no one can
    // take the file between our unlock and our unlink (lockers check the path after `flock`).
    if let Ok(locks) = fsops::open_dir_at(&v1, "locks", owners, false) {
        for (_, shard) in subdirs(&locks, owners, |n| n.len() == 2, &inner.metrics) {
            for name in fsops::names(&shard) {
                let Ok(st) = fsops::lstat_at(&shard, &name) else {
                    continue;
                };
                if !ours(&st, owners, false, &inner.metrics) || !older_than(&st, PARTIAL_AFTER) {
                    continue;
                }
                let Ok((file, opened)) = fsops::open_lock_at(&shard, &name, owners) else {
                    continue;
                };
                if fsops::same_file(&st, &opened) && file.try_lock().is_ok() {
                    let _ = fsops::unlink_at(&shard, &name);
                }
                drop(file); // unlocks, after the unlink
            }
        }
    }
    // (written or last used at, stat, shard, name) of every live entry.
    let shards = subdirs(
        &v1,
        owners,
        |n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()),
        &inner.metrics,
    );
    let mut entries: Vec<(SystemTime, Stat, usize, String)> = Vec::new();
    for (i, (_, shard)) in shards.iter().enumerate() {
        for name in fsops::names(shard) {
            let Ok(st) = fsops::lstat_at(shard, &name) else {
                continue;
            };
            if !ours(&st, owners, false, &inner.metrics) {
                continue;
            }
            if older_than(&st, inner.config.ttl) {
                evict(shard, &name, &st, EvictReason::Expired);
            } else {
                // The disk tier's entries by when they were written; the host tier's by when
                // they were last mapped (a hit refreshes the access time), so hot images stay.
                let when = match inner.config.tier {
                    crate::config::Tier::Disk => fsops::mtime(&st),
                    crate::config::Tier::Host => fsops::used(&st),
                };
                entries.push((when, st, i, name));
            }
        }
    }
    let size = |st: &Stat| u64::try_from(st.st_size).unwrap_or(0);
    // Saturating: sizes come from a shared directory (a sparse file may claim any size).
    let mut total: u64 = entries
        .iter()
        .fold(0u64, |sum, e| sum.saturating_add(size(&e.1)));
    if total > inner.config.max_bytes {
        let target = inner.config.max_bytes / 10 * 9;
        entries.sort_by_key(|e| e.0);
        for (_, st, shard, name) in &entries {
            if total <= target {
                break;
            }
            evict(&shards[*shard].1, name, st, EvictReason::Budget);
            total = total.saturating_sub(size(st));
        }
    }
    drop(lock);
    Some(total)
}

impl DiskCache {
    /// Sweeps now, waiting (at most a minute) for a sweep in progress to end (tests and
    /// tools): expired and partial files out, then the oldest entries until the directory holds
    /// at most 90 % of the budget. Returns the bytes left. Blocks: call it off the runtime.
    pub fn sweep_now(&self) -> u64 {
        if !self.enabled() {
            return 0;
        }
        sweep(self, true).unwrap_or(0)
    }

    pub(crate) fn sweep_due(&self) -> bool {
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
    pub(crate) fn sweep_if_due(&self) {
        let inner = &self.inner;
        loop {
            if inner.sweeping.swap(true, Ordering::AcqRel) {
                return; // this process's sweeper will look again when it is done
            }
            let mut left_to_another = false;
            while self.sweep_due() {
                let counted = inner.written_since_sweep.load(Ordering::Relaxed);
                if sweep(self, false).is_none() {
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

//! Per-entry fill locks: a lock file per entry under `v1/locks/<aa>/`, `flock`ed by the one
//! process of the host that fills the entry.
//!
//! - A lock file is opened like every file here (no link followed, never blocking on a FIFO,
//!   `O_CLOEXEC`), and must be a regular file we (or the group) own.
//! - After `flock`, the locker checks that the path still names the file it locked (`fstat` and
//!   `lstat` agree on device and inode): a sweep may have removed an idle lock file while this
//!   locker had it open, and a lock on an unlinked file would admit a second holder. It then
//!   retries, a bounded number of times.
//! - Taking the lock refreshes the lock file's times, so a hot entry's lock file is never
//!   judged idle by a sweep.
//! - `flock` belongs to the open file description, which a forked child shares. The holder
//!   records its pid and unlocks explicitly on drop, so a child that outlives the fill cannot
//!   keep the lock held; a child dropping its inherited copy only closes it.

use std::fs::File;
use std::time::{Duration, Instant, SystemTime};

use mmcache_scope::CacheIdentity;

use crate::cache::DiskCache;
use crate::fsops::{self, FsError, FsResult, Owners};

/// Attempts to take a lock whose path changed under us before giving up.
const RETRIES: usize = 3;

/// A held per-entry lock (cross-process single-flight); released on drop or process exit.
#[derive(Debug)]
pub struct FillLock {
    file: File,
    pid: u32,
}

impl Drop for FillLock {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            let _ = self.file.unlock();
        }
    }
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

/// One attempt's outcome.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// A valid entry is there.
    Filled,
    /// Taken.
    Locked(FillLock),
    /// Another holder has it.
    Held,
}

/// Tries once (without waiting) to take the lock `<digest>.lock` in `dir`.
pub(crate) fn try_lock(
    dir: &std::os::fd::OwnedFd,
    digest: &str,
    owners: &Owners,
) -> FsResult<Attempt> {
    let name = format!("{digest}.lock");
    for _ in 0..RETRIES {
        let (file, st) = fsops::open_lock_at(dir, &name, owners)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(Attempt::Held),
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        match fsops::lstat_at(dir, &name) {
            Ok(now) if fsops::same_file(&now, &st) => {
                // In use now: a sweep must not take it for idle.
                let _ = file.set_modified(SystemTime::now());
                return Ok(Attempt::Locked(FillLock {
                    file,
                    pid: std::process::id(),
                }));
            }
            // Removed or replaced since we opened it: ours is a stale file; try the new one.
            Ok(_) | Err(FsError::Missing) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(Attempt::Held)
}

impl DiskCache {
    /// One attempt at `digest`'s lock: `Filled` only for a valid entry (a regular file of
    /// ours, not expired, not empty, within the cap).
    fn try_lock(&self, digest: &str) -> FsResult<Attempt> {
        let owners = &self.inner.owners;
        match self.open_dirs(&[&digest[..2]], false) {
            Ok(shard) => match fsops::open_file_at(&shard, digest, owners) {
                Ok((_, st)) if self.valid(&st) => return Ok(Attempt::Filled),
                _ => {}
            },
            Err(FsError::Missing | FsError::Skipped(_)) => {}
            Err(e) => return Err(e),
        }
        let locks = self.open_dirs(&["locks", &digest[..2]], true)?;
        self::try_lock(&locks, digest, owners)
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
                Ok(Ok(Attempt::Held)) => {} // held by someone else: wait
                Ok(Ok(Attempt::Filled)) => return Fill::Filled,
                Ok(Ok(Attempt::Locked(l))) => return Fill::Locked(l),
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
}

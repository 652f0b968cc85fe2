//! The write path: an entry written to a temporary file in `v1/tmp` and renamed into place
//! (a reader sees a whole entry or none), the fill lock held until the write returned, a due
//! sweep started; removals of entries whose bytes did not decode. Failures are counted, never
//! returned.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;

use crate::cache::DiskCache;
use crate::fsops::{self, FsError, FsResult};
use crate::lock::FillLock;
use crate::metrics;
use crate::read::EntryStamp;

impl DiskCache {
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
        let _ = self
            .put_digest(identity.sha256_hex().to_owned(), vec![bytes], lock)
            .await;
    }

    /// [`DiskCache::put_locked`] by the entry's hex digest name, the entry being `parts` one
    /// after the other (written in turn, never joined in memory); how the write ended (only
    /// [`WriteOutcome::Success`](metrics::WriteOutcome::Success) landed within the deadline).
    pub(crate) async fn put_digest(
        &self,
        digest: String,
        parts: Vec<Bytes>,
        lock: Option<FillLock>,
    ) -> metrics::WriteOutcome {
        self.put_digest_stamped(digest, parts, lock).await.0
    }

    /// [`DiskCache::put_digest`], with the stamp of the file it put in place when it did.
    pub(crate) async fn put_digest_stamped(
        &self,
        digest: String,
        parts: Vec<Bytes>,
        lock: Option<FillLock>,
    ) -> (metrics::WriteOutcome, Option<EntryStamp>) {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if !self.enabled() || len == 0 || len > self.inner.config.max_entry_bytes {
            self.inner.metrics.write(metrics::WriteOutcome::Skipped);
            return (metrics::WriteOutcome::Skipped, None);
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
                this.write(&digest, &parts)
            })
            .await;
        let mut stamp = None;
        let outcome = match result {
            Ok(Ok(written)) => {
                stamp = Some(EntryStamp(written));
                self.inner
                    .written_since_sweep
                    .fetch_add(len, Ordering::Relaxed);
                self.inner.metrics.written_bytes.increment(len);
                metrics::WriteOutcome::Success
            }
            Ok(Err(FsError::Skipped(s))) => {
                s.count(&self.inner.metrics);
                self.skipped();
                metrics::WriteOutcome::Skipped
            }
            Ok(Err(e)) => {
                tracing::debug!(error = ?e, "disk cache write failed");
                if let FsError::Io(io) = &e
                    && io.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())
                {
                    // The file system is full: a sweep is due now, whatever was written.
                    self.inner
                        .written_since_sweep
                        .fetch_add(self.inner.config.max_bytes, Ordering::Relaxed);
                }
                metrics::WriteOutcome::Error
            }
            Err(_) => {
                self.skipped();
                metrics::WriteOutcome::Skipped
            }
        };
        self.inner.metrics.write(outcome);
        // A due sweep runs on its own, not on this load's time.
        if self.sweep_due() {
            let this = self.clone();
            self.inner
                .guard
                .spawn_unbounded(move || this.sweep_if_due());
        }
        (outcome, stamp)
    }

    /// Writes `digest`'s entry: a new file in `v1/tmp`, renamed into its shard folder.
    ///
    /// Not the `tempfile` crate: it creates, renames (`persist`) and removes its file by path,
    /// so each of those calls resolves the path's folders by name again. Here the folders are
    /// opened one level at a time without following links and judged (`open_dirs`), and the
    /// file is made and renamed relative to those handles (`openat`, `renameat`): a folder
    /// swapped for a link after it was judged is never followed.
    fn write(&self, digest: &str, parts: &[Bytes]) -> FsResult<rustix::fs::Stat> {
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
        let mut written = parts
            .iter()
            .try_for_each(|part| file.write_all(part))
            .and_then(|()| file.flush())
            .map_err(FsError::from);
        if written.is_ok() && self.inner.config.tier == crate::config::Tier::Host {
            written = fsops::make_read_only(&file, owners);
        }
        let stat = written.and_then(|()| Ok(rustix::fs::fstat(&file)?));
        drop(file);
        let result = match stat {
            Ok(st) => fsops::rename_at(&tmp_dir, &tmp, &shard, digest).map(|()| st),
            Err(e) => Err(e),
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
        self.remove_digest_if(digest, None).await;
    }

    /// Removes the entry `digest`, if it still is the file of `read` when given (a writer may
    /// have renamed a fresh entry over it since it was read); whether it removed it.
    pub(crate) async fn remove_digest_if(&self, digest: String, read: Option<EntryStamp>) -> bool {
        if !self.enabled() {
            return false;
        }
        let this = self.clone();
        let removed = self
            .inner
            .guard
            .run(move || {
                let shard = this.open_dirs(&[&digest[..2]], false)?;
                let st = fsops::lstat_at(&shard, &digest)?;
                let judged = read.map_or(st, |r| r.0);
                Ok(fsops::is_file(&st)
                    && this.inner.owners.trusts(&st)
                    && fsops::unlink_if_same(&shard, &digest, &judged))
            })
            .await;
        let removed = matches!(removed, Ok(Ok(true)));
        if removed {
            self.inner.metrics.evicted(metrics::EvictReason::Corrupt);
        }
        removed
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

//! The read path: an entry found through the kept folder handles (see `dirs`), judged by its
//! `fstat`, its bytes reserved in the read memory and read up to the cap, and every outcome
//! counted; never an error to the caller.

use std::os::fd::OwnedFd;

use bytes::Bytes;
use mmcache_scope::CacheIdentity;

use crate::cache::{DiskCache, ReadHold, bump};
use crate::fsops::{self, FsError, FsResult};
use crate::metrics;

/// Which file an entry read came from (device, inode, size, modification time): a writer
/// renames a new file over the name, so a later entry never has the stamp of an earlier one.
/// [`DiskCache::remove_named_if`](crate::DiskCache::remove_named_if) removes only that file.
#[derive(Clone)]
pub struct EntryStamp(pub(crate) rustix::fs::Stat);

impl EntryStamp {
    /// Whether `other` stamps the same file (device and inode): the file read is the one a
    /// write put in place.
    pub fn same_file(&self, other: &EntryStamp) -> bool {
        fsops::same_file(&self.0, &other.0)
    }
}

impl std::fmt::Debug for EntryStamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryStamp")
            .field("ino", &self.0.st_ino)
            .field("size", &self.0.st_size)
            .finish_non_exhaustive()
    }
}

/// How a read takes an entry's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// Read into memory (reserved in the read memory first).
    Read,
    /// Mapped read-only (see `mapped`).
    Map,
}

/// What one read found.
enum Found {
    /// The entry's bytes, whether they map its file, and its stamp.
    Hit(Bytes, bool, EntryStamp),
    /// A valid entry, opened, of this length: its bytes are read once reserved.
    Open(std::fs::File, usize, EntryStamp),
    Miss,
    Expired,
}

impl DiskCache {
    /// The entry of `identity`, or `None` on a miss, an expired or oversized entry, a name that
    /// is not ours, a slow disk, or any I/O error (counted, never returned).
    pub async fn get(&self, identity: &CacheIdentity) -> Option<Bytes> {
        self.get_digest(identity.sha256_hex().to_owned())
            .await
            .map(|(bytes, _)| bytes)
    }

    /// Counts a read whose outcome its caller decided: a mapped entry
    /// ([`DiskCache::get_mapped_named`]) is a hit, or not, once its bytes are checked.
    pub fn count_read(&self, outcome: metrics::ReadOutcome, bytes: u64) {
        self.read_outcome(outcome);
        if outcome == metrics::ReadOutcome::Hit {
            self.inner.metrics.read_bytes.increment(bytes);
        }
    }

    /// [`DiskCache::get`] by the entry's hex digest name, with the stamp of the file read.
    pub(crate) async fn get_digest(&self, digest: String) -> Option<(Bytes, EntryStamp)> {
        self.get_digest_as(digest, How::Read)
            .await
            .map(|(bytes, stamp, _)| (bytes, stamp))
    }

    /// [`DiskCache::get_digest`], the entry read or mapped (and whether it was). A mapped hit
    /// is not counted here: its caller checks it, then counts it ([`DiskCache::count_read`]).
    pub(crate) async fn get_digest_as(
        &self,
        digest: String,
        how: How,
    ) -> Option<(Bytes, EntryStamp, bool)> {
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
                this.read(&digest, how)
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
            Found::Open(file, len, stamp) => match self.read_open(file, len, stamp).await {
                Some(found) => found,
                None => return None, // counted there
            },
            found => found,
        };
        match found {
            Found::Open(..) => unreachable!("read above"),
            Found::Hit(bytes, mapped, stamp) => {
                if how == How::Read {
                    self.count_read(metrics::ReadOutcome::Hit, bytes.len() as u64);
                }
                Some((bytes, stamp, mapped))
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

    /// Reads `digest`'s entry through the kept folder handles; when that finds nothing, again
    /// from the configured path (the kept folder may have been removed or replaced; see `dirs`).
    fn read(&self, digest: &str, how: How) -> FsResult<Found> {
        let (aa, dirs, owners) = (&digest[..2], &self.inner.dirs, &self.inner.owners);
        let kept = dirs.shard(aa, owners);
        let first = match &kept {
            Some(shard) => match self.read_in(&shard.fd, digest, how) {
                // Nothing there, or an I/O error (a removed folder on NFS is ESTALE): the
                // folder may be gone, so look from the path.
                r @ Err(FsError::Missing | FsError::Io(_)) => Some(r),
                found => return found,
            },
            None => None,
        };
        let fresh = dirs.reopen(&self.inner.config.dir, aa, owners)?;
        if let (Some(kept), Some(first)) = (&kept, first)
            && kept.same(&fresh)
        {
            return first; // the same folder: looked there already
        }
        self.read_in(&fresh.fd, digest, how)
    }

    fn read_in(&self, shard: &OwnedFd, digest: &str, how: How) -> FsResult<Found> {
        let (mut file, st) = fsops::open_file_at(shard, digest, &self.inner.owners)?;
        if self.expired(&st) {
            if fsops::unlink_if_same(shard, digest, &st) {
                self.inner.metrics.evicted(metrics::EvictReason::Expired);
            }
            return Ok(Found::Expired);
        }
        if !self.valid(&st) {
            return Ok(Found::Miss); // empty, or over this worker's cap
        }
        let len = usize::try_from(st.st_size).unwrap_or(0);
        if how == How::Map {
            if fsops::writable(&st) {
                return Err(FsError::Skipped(fsops::Skip::Writable));
            }
            // Used now: the sweep keeps the entries last used (mapped entries' times only).
            fsops::touch_access(&file);
            if let Some(bytes) = crate::mmap::map(&file, len as u64)? {
                return Ok(Found::Hit(bytes, true, EntryStamp(st)));
            }
            return self.read_file(&mut file, len).map(|v| match v {
                None => Found::Miss,
                Some(v) => Found::Hit(v.into(), false, EntryStamp(st)),
            });
        }
        let stamp = EntryStamp(st);
        let hold: Option<ReadHold> = match self.inner.read_memory.get() {
            None => None,
            Some((_, now)) => match now(len as u64) {
                Some(hold) => Some(hold),
                // Read once its memory is reserved.
                None => return Ok(Found::Open(file, len, stamp)),
            },
        };
        self.read_file(&mut file, len).map(|v| match (v, hold) {
            (None, _) => Found::Miss,
            (Some(v), Some(hold)) => Found::Hit(hold(v), false, stamp),
            (Some(v), None) => Found::Hit(v.into(), false, stamp),
        })
    }
    fn read_outcome(&self, o: metrics::ReadOutcome) {
        self.inner.metrics.read(o);
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
    async fn read_open(
        &self,
        mut file: std::fs::File,
        len: usize,
        stamp: EntryStamp,
    ) -> Option<Found> {
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
            Ok(Ok(Some(buf))) => Some(Found::Hit(hold(buf), false, stamp)),
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
}

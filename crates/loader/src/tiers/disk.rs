//! The disk step: the host's tier read (a hit that decodes is the load's image), the fill
//! lock a filling load holds, and the entry's write in a task of its own.

use bytes::Bytes;
use mmcache_disk_cache::DiskCache;
use mmcache_scope::CacheIdentity;

use super::{Tiers, inflight_key};
use crate::error::{Error, Result};
use crate::loaded::{Loaded, Source};

impl Tiers {
    /// How long a fill of another process of the host may take: its lease wait, download and
    /// decode wait, each bounded by its own setting.
    pub(super) fn fill_wait(&self) -> std::time::Duration {
        let c = &self.config;
        let lease = if c.shared.lease.enabled {
            c.shared.lease.wait
        } else {
            std::time::Duration::ZERO
        };
        c.origin_timeout + c.decode_wait + lease
    }

    /// Reads the disk tier: a hit that decodes is the load's image; bytes that are not a valid
    /// image are removed (and the load goes on); this worker's own limits are the load's error.
    pub(super) async fn read_disk(
        &self,
        disk: &DiskCache,
        identity: &CacheIdentity,
    ) -> Result<Option<Loaded>> {
        let Some(bytes) = disk.get(identity).await else {
            return Ok(None);
        };
        let len = bytes.len();
        match self.decode(bytes).await {
            Ok(image) => Ok(Some(Loaded::decoded(image, Source::Disk, len))),
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                tracing::debug!(error = %e, "disk cache entry did not decode; removing it");
                disk.remove(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// A copy of `bytes` for the disk write, in the write memory; `None` without a disk tier.
    pub(super) fn disk_copy(&self, bytes: &Bytes) -> Option<Bytes> {
        // No copy (and no write memory taken) for a write the tier would not make.
        self.disk.as_ref().filter(|d| d.takes(bytes.len()))?;
        self.write_memory.copy(bytes)
    }

    /// Writes bytes that decoded to the disk tier, when there is one, in a task of its own:
    /// the load does not wait for the file system, and [`crate::Loader::shutdown`] waits for
    /// the write. The write takes over this load's fill lock and holds it until the file
    /// really landed (past the disk deadline too), so the host's other processes keep waiting
    /// for the entry (not for a lock released before the entry exists).
    ///
    /// `None` (no room in the write memory): no write, and the lock is released at once.
    pub(super) fn write_disk(&self, identity: &CacheIdentity, bytes: Option<Bytes>) {
        let Some(disk) = &self.disk else { return };
        let lock = self
            .fill_locks
            .remove(&inflight_key(identity))
            .map(|(_, lock)| lock);
        let Some(bytes) = bytes else { return };
        let (disk, identity) = (disk.clone(), identity.clone());
        self.background.spawn(async move {
            disk.put_locked(&identity, bytes, lock).await;
        });
    }
}

/// A disk-tier fill lock parked in [`Tiers::fill_locks`] while its load runs: the entry's
/// write takes it from there; when the load ends without one (a failure, a hit, or the load
/// deadline dropping the fill), dropping this releases it.
pub(super) struct HeldLock<'a> {
    inner: &'a Tiers,
    key: [u8; 32],
}

impl<'a> HeldLock<'a> {
    pub(super) fn hold(
        inner: &'a Tiers,
        identity: &CacheIdentity,
        lock: mmcache_disk_cache::FillLock,
    ) -> Self {
        let key = inflight_key(identity);
        inner.fill_locks.insert(key, lock);
        Self { inner, key }
    }
}

impl Drop for HeldLock<'_> {
    fn drop(&mut self) {
        self.inner.fill_locks.remove(&self.key);
    }
}

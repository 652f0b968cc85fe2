//! The disk step: the host's tier read (bytes that decode are the load's image), its fill
//! lock (one filler per host), and the entry's write in a task of its own.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mmcache_disk_cache::{DiskCache, Fill, FillLock};
use mmcache_scope::CacheIdentity;

use super::Decode;
use crate::background::Background;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::loaded::{Loaded, Source};
use crate::write_memory::WriteMemory;

/// The host's disk tier of encoded bytes.
pub(crate) struct DiskStep {
    cache: DiskCache,
    /// How long a fill of another process of the host may take: its lease wait, download and
    /// decode wait, each bounded by its own setting.
    fill_wait: Duration,
    /// Where the entries' writes run, off the load's path.
    background: Arc<Background>,
    /// What a write's copy of the bytes holds.
    write_memory: WriteMemory,
}

impl DiskStep {
    pub(crate) fn new(
        cache: DiskCache,
        config: &Config,
        background: &Arc<Background>,
        write_memory: &WriteMemory,
    ) -> Self {
        Self {
            cache,
            fill_wait: config.fill_wait(),
            background: background.clone(),
            write_memory: write_memory.clone(),
        }
    }

    pub(crate) fn cache(&self) -> &DiskCache {
        &self.cache
    }

    /// The entry of `identity`, decoded by `decode`: bytes that are not a valid image are
    /// removed (`None`: the load goes on); this worker's own limits are the load's error.
    pub(super) async fn read(
        &self,
        identity: &CacheIdentity,
        decode: impl Decode,
    ) -> Result<Option<Loaded>> {
        let Some(bytes) = self.cache.get(identity).await else {
            return Ok(None);
        };
        let len = bytes.len();
        match decode.decode(bytes).await {
            Ok(image) => Ok(Some(Loaded::decoded(image, Source::Disk, len))),
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                tracing::debug!(error = %e, "disk cache entry did not decode; removing it");
                self.cache.remove(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes the entry's fill lock, waiting at most as long as another process's fill may
    /// take. `None`: the entry appeared while waiting (read it), or the holder failed or is
    /// slow (fill it without the lock).
    pub(super) async fn lock(&self, identity: &CacheIdentity) -> Option<FillLock> {
        match self.cache.lock(identity, self.fill_wait).await {
            Fill::Locked(lock) => Some(lock),
            _ => None,
        }
    }

    /// A copy of `bytes` for the write, in the write memory (`None`: no room, or an entry the
    /// tier would not take, for which no copy is made).
    pub(super) fn copy(&self, bytes: &Bytes) -> Option<Bytes> {
        if !self.cache.takes(bytes.len()) {
            return None;
        }
        self.write_memory.copy(bytes)
    }

    /// Writes bytes that decoded in a task of its own: the load does not wait for the file
    /// system, and [`crate::Loader::shutdown`] waits for the write. The write takes the load's
    /// fill `lock` over and holds it until the file really landed (past the disk deadline
    /// too), so the host's other processes keep waiting for the entry (not for a lock released
    /// before the entry exists). `None` bytes (no room in the write memory): no write, and the
    /// lock is released at once.
    pub(super) fn write(
        &self,
        identity: &CacheIdentity,
        bytes: Option<Bytes>,
        lock: Option<FillLock>,
    ) {
        let Some(bytes) = bytes else { return };
        let (disk, identity) = (self.cache.clone(), identity.clone());
        self.background.spawn(async move {
            disk.put_locked(&identity, bytes, lock).await;
        });
    }
}

//! Entries under names of the caller's own, for values other than images (embeddings): the
//! same files, budget, sweep, locks and bounds as image entries, named by a 32-byte digest
//! the caller derives in a key space of its own (so it never equals an image's SHA-256).

use std::time::Duration;

use bytes::Bytes;

use crate::cache::DiskCache;
use crate::lock::{Fill, FillLock};
use crate::metrics::WriteOutcome;
use crate::read::EntryStamp;

/// The name of an entry: a 32-byte digest, stored as 64 lowercase hex digits like image
/// entries (`v1/<aa>/<digest>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntryName(String);

impl EntryName {
    /// The name of `digest`.
    pub fn from_digest(digest: &[u8; 32]) -> Self {
        Self(mmcache_scope::digest_hex(digest))
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl DiskCache {
    /// The file of the entry named `name`.
    pub fn path_of_named(&self, name: &EntryName) -> std::path::PathBuf {
        let dir = &self.inner.config.dir;
        dir.join("v1").join(&name.0[..2]).join(&name.0)
    }

    /// The entry named `name` ([`DiskCache::get`] for a name of the caller's own).
    pub async fn get_named(&self, name: &EntryName) -> Option<Bytes> {
        self.get_named_stamped(name).await.map(|(bytes, _)| bytes)
    }

    /// [`DiskCache::get_named`], with the stamp of the file read, for
    /// [`DiskCache::remove_named_if`].
    pub async fn get_named_stamped(&self, name: &EntryName) -> Option<(Bytes, EntryStamp)> {
        self.get_digest(name.0.clone()).await
    }

    /// Stores `bytes` under `name` ([`DiskCache::put_locked`]: the holder's fill `lock`, if
    /// any, is held until the write has really returned). How it ended: only
    /// [`WriteOutcome::Success`] landed (a write past the deadline is `Skipped`, though it
    /// may still land).
    pub async fn put_named(
        &self,
        name: &EntryName,
        bytes: Bytes,
        lock: Option<FillLock>,
    ) -> WriteOutcome {
        self.put_digest(name.0.clone(), vec![bytes], lock).await
    }

    /// [`DiskCache::put_named`] of an entry made of `parts`, written one after the other (no
    /// copy joins them); with the stamp of the file put in place when it landed, so that the
    /// writer knows its own file when it reads the entry back ([`EntryStamp::same_file`]).
    pub async fn put_named_parts(
        &self,
        name: &EntryName,
        parts: Vec<Bytes>,
        lock: Option<FillLock>,
    ) -> (WriteOutcome, Option<EntryStamp>) {
        self.put_digest_stamped(name.0.clone(), parts, lock).await
    }

    /// Removes the entry named `name` ([`DiskCache::remove`]).
    pub async fn remove_named(&self, name: &EntryName) {
        self.remove_digest(name.0.clone()).await;
    }

    /// Removes the entry named `name` only if it still is the file that `read` stamps: a value
    /// a reader found bad, and not a fresh entry another process wrote over it since. Whether
    /// it removed it.
    pub async fn remove_named_if(&self, name: &EntryName, read: &EntryStamp) -> bool {
        self.remove_digest_if(name.0.clone(), Some(read.clone()))
            .await
    }

    /// Takes the fill lock of `name` ([`DiskCache::lock`]).
    pub async fn lock_named(&self, name: &EntryName, wait: Duration) -> Fill {
        self.lock_digest(name.0.clone(), wait).await
    }
}

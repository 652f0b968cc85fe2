//! The host pixel step: decoded images on a memory file system that every worker process of
//! the host maps read-only, so each image is decoded once per host. A read maps an entry and
//! checks it; the fill lock makes the host's other processes wait for the one decoding an
//! image; the entry is written in a task of its own, which then swaps the process's own pixels
//! in its decoded cache for the mapping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use mmcache_decode::{ColorPolicy, DecodeLimits, DecodedCache, DecodedImage, EntryRead, Verify};
use mmcache_disk_cache::metrics::{ReadOutcome, WriteOutcome};
use mmcache_disk_cache::{DiskCache, EntryName, EntryStamp, Fill, FillLock, MappedEntry};
use mmcache_scope::CacheIdentity;

use super::Want;
use crate::background::Background;
use crate::config::Config;
use crate::write_memory::WriteMemory;

/// Entries smaller than this are checked in place; larger ones on the blocking pool (their
/// checksum is a pass over their pixels: about a millisecond for 16 MiB).
const INLINE_CHECK_BYTES: usize = 1 << 20;
/// How long a key whose image was not written (a failed load, bytes handed back for the
/// engine's own decoder, an image over the write allowance, a full file system) is loaded
/// without the fill lock: the host's other processes then do not wait for a fill that writes
/// nothing.
const UNWRITTEN_FOR: Duration = Duration::from_secs(60);
/// The most keys remembered as not written (forgotten all at once past it).
const MAX_UNWRITTEN: usize = 4096;

/// The host pixel tier. Clones share the tier (a write task holds one).
#[derive(Clone)]
pub(crate) struct HostStep {
    cache: DiskCache,
    /// This process's limits: an entry another process wrote must pass them too.
    limits: DecodeLimits,
    /// How long a fill of another process of the host may take (as the disk step's).
    fill_wait: Duration,
    /// Where the swap of a written entry's mapping goes.
    decoded: Arc<DecodedCache>,
    background: Arc<Background>,
    /// Bounds the pixels that writes on their way keep alive.
    write_memory: WriteMemory,
    /// Keys whose image was not written, and when.
    unwritten: Arc<DashMap<[u8; 32], Instant>>,
}

/// An entry's key (checked in its header) and its file name.
struct Named {
    key: [u8; 32],
    name: EntryName,
}

impl HostStep {
    pub(crate) fn new(
        cache: DiskCache,
        limits: DecodeLimits,
        config: &Config,
        decoded: &Arc<DecodedCache>,
        background: &Arc<Background>,
        write_memory: &WriteMemory,
    ) -> Self {
        Self {
            cache,
            limits,
            fill_wait: config.fill_wait(),
            decoded: decoded.clone(),
            background: background.clone(),
            write_memory: write_memory.clone(),
            unwritten: Arc::default(),
        }
    }

    pub(crate) fn cache(&self) -> &DiskCache {
        &self.cache
    }

    /// Whether loads in `want`'s profile use the tier: not those that want the bytes alone.
    pub(super) fn serves(&self, want: Want) -> bool {
        want.profile.color != ColorPolicy::Encoded
    }

    fn named(&self, identity: &CacheIdentity, want: Want) -> Named {
        let key = mmcache_decode::host_entry_key(identity, &want.profile, &self.limits);
        let name = EntryName::from_digest(&key);
        Named { key, name }
    }

    /// The image of `identity` in `want`'s profile, mapped: `None` on a miss, or when the
    /// entry is not a valid image of this key (removed, if it is the file read, so that the
    /// next load writes it again) or is refused by this process's limits (left for others).
    pub(super) async fn read(
        &self,
        identity: &CacheIdentity,
        want: Want,
    ) -> Option<Arc<DecodedImage>> {
        self.read_named(&self.named(identity, want), want, None)
            .await
    }

    /// [`HostStep::read`] of `named`; the checksum is skipped for the file `written` (this
    /// process wrote it, from pixels it decoded).
    async fn read_named(
        &self,
        named: &Named,
        want: Want,
        written: Option<&EntryStamp>,
    ) -> Option<Arc<DecodedImage>> {
        let MappedEntry {
            bytes,
            stamp,
            mapped,
            ..
        } = self.cache.get_mapped_named(&named.name).await?;
        let (key, layout, limits, len) = (named.key, want.profile.layout, self.limits, bytes.len());
        let read = if mapped {
            EntryRead::Mapped
        } else {
            EntryRead::Copied
        };
        let verify = match written {
            Some(w) if w.same_file(&stamp) => Verify::WrittenHere,
            _ => Verify::Checksum,
        };
        let check = move || mmcache_decode::from_entry(bytes, &key, layout, &limits, read, verify);
        let checked = if len <= INLINE_CHECK_BYTES || verify == Verify::WrittenHere {
            check()
        } else {
            tokio::task::spawn_blocking(check).await.ok()?
        };
        match checked {
            Ok(image) => {
                self.cache.count_read(ReadOutcome::Hit, len as u64);
                Some(Arc::new(image))
            }
            Err(e) if e.is_damaged() => {
                self.cache.count_read(ReadOutcome::Invalid, 0);
                tracing::debug!(error = %e, "host pixel entry refused; removing it");
                self.cache.remove_named_if(&named.name, &stamp).await;
                None
            }
            Err(_) => {
                self.cache.count_read(ReadOutcome::Refused, 0);
                None
            }
        }
    }

    /// Takes the entry's fill lock, waiting at most as long as another process's fill may
    /// take. `None`: the entry appeared while waiting (read it), the holder failed or is slow
    /// (fill it without the lock), or the key's image was not written lately (no one waits
    /// for a fill that writes nothing).
    pub(super) async fn lock(&self, identity: &CacheIdentity, want: Want) -> Option<FillLock> {
        let Named { key, name } = self.named(identity, want);
        if let Some(since) = self.unwritten.get(&key).map(|s| *s) {
            if since.elapsed() < UNWRITTEN_FOR {
                return None;
            }
            self.unwritten.remove(&key);
        }
        match self.cache.lock_named(&name, self.fill_wait).await {
            Fill::Locked(lock) => Some(lock),
            _ => None,
        }
    }

    /// Remembers that `identity`'s image in `want`'s profile was not written.
    pub(super) fn not_written(&self, identity: &CacheIdentity, want: Want) {
        self.remember_unwritten(self.named(identity, want).key);
    }

    fn remember_unwritten(&self, key: [u8; 32]) {
        if self.unwritten.len() >= MAX_UNWRITTEN {
            self.unwritten.clear();
        }
        self.unwritten.insert(key, Instant::now());
    }

    /// Writes `image` (a load's, which the decoded cache holds for `identity`) as the entry of
    /// `identity`, in a task of its own that takes the fill `lock` over and holds it until the
    /// file landed; then maps the entry and swaps `image` for the mapping in the decoded
    /// cache, so the host holds one copy of its pixels. Not for an image with no pixels to
    /// share (bytes handed back for the engine's own decoder), nor when the writes on their
    /// way already hold their allowance (counted as a skipped write): then no process waits
    /// for this key's lock for a while.
    pub(super) fn publish(
        &self,
        identity: &CacheIdentity,
        want: Want,
        image: Arc<DecodedImage>,
        lock: Option<FillLock>,
    ) {
        let named = self.named(identity, want);
        let writable = super::keepable(&image) && image.format().is_some() && image.byte_len() > 0;
        let len = image.byte_len() + image.source().map_or(0, |s| s.len());
        if !writable || !self.cache.takes(len) {
            self.remember_unwritten(named.key);
            return;
        }
        // The entry shares the image's pixels: the allowance bounds how many of them writes
        // keep alive past their load.
        let Some(held) = self.write_memory.hold(len as u64) else {
            self.remember_unwritten(named.key);
            return;
        };
        let (this, identity) = (self.clone(), identity.clone());
        self.background.spawn(async move {
            // The header's checksum is a pass over the pixels: off the runtime's threads.
            let entry = {
                let (image, key) = (image.clone(), named.key);
                tokio::task::spawn_blocking(move || mmcache_decode::to_entry(&image, &key)).await
            };
            let Ok(Some(parts)) = entry else {
                this.remember_unwritten(named.key);
                return;
            };
            let (wrote, stamp) = this.cache.put_named_parts(&named.name, parts, lock).await;
            drop(held);
            if wrote != WriteOutcome::Success {
                this.remember_unwritten(named.key);
                return;
            }
            if let Some(mapped) = this.read_named(&named, want, stamp.as_ref()).await {
                this.decoded
                    .adopt_mapped_as(&identity, want.variant, &image, mapped);
            }
        });
    }
}

//! The host pixel step: decoded images on a memory file system that every worker process of
//! the host maps read-only, so each image is decoded once per host. A read maps an entry and
//! checks it; the fill lock makes the host's other processes wait for the one decoding an
//! image; the entry is written in a task of its own, which then swaps the process's own pixels
//! in its decoded cache for the mapping.

use std::sync::Arc;
use std::time::Duration;

use mmcache_decode::{ColorPolicy, DecodeLimits, DecodedCache, DecodedImage};
use mmcache_disk_cache::{DiskCache, EntryName, Fill, FillLock};
use mmcache_scope::CacheIdentity;

use super::Want;
use crate::background::Background;
use crate::config::Config;
use crate::write_memory::WriteMemory;

/// Entries smaller than this are checked in place; larger ones on the blocking pool (their
/// checksum is a pass over their pixels: about a millisecond for 16 MiB).
const INLINE_CHECK_BYTES: usize = 1 << 20;

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
        let lease = if config.shared.lease.enabled {
            config.shared.lease.wait
        } else {
            Duration::ZERO
        };
        Self {
            cache,
            limits,
            fill_wait: config.origin_timeout + config.decode_wait + lease,
            decoded: decoded.clone(),
            background: background.clone(),
            write_memory: write_memory.clone(),
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
        let Named { key, name } = self.named(identity, want);
        let (entry, stamp) = self.cache.get_mapped_named(&name).await?;
        let (layout, limits) = (want.profile.layout, self.limits);
        let inline = entry.len() <= INLINE_CHECK_BYTES;
        let check = move || mmcache_decode::from_entry(entry, &key, layout, &limits, true);
        let checked = if inline {
            check()
        } else {
            match tokio::task::spawn_blocking(check).await {
                Ok(checked) => checked,
                Err(_) => return None,
            }
        };
        match checked {
            Ok(image) => Some(Arc::new(image)),
            Err(e) => {
                if e.is_damaged() {
                    tracing::debug!(error = %e, "host pixel entry refused; removing it");
                    self.cache.remove_named_if(&name, &stamp).await;
                }
                None
            }
        }
    }

    /// Takes the entry's fill lock, waiting at most as long as another process's fill may
    /// take. `None`: the entry appeared while waiting (read it), or the holder failed or is
    /// slow (fill it without the lock).
    pub(super) async fn lock(&self, identity: &CacheIdentity, want: Want) -> Option<FillLock> {
        let Named { name, .. } = self.named(identity, want);
        match self.cache.lock_named(&name, self.fill_wait).await {
            Fill::Locked(lock) => Some(lock),
            _ => None,
        }
    }

    /// Writes `image` (a load's, decoded into this process's memory) as the entry of
    /// `identity`, in a task of its own that takes the fill `lock` over and holds it until the
    /// file landed; then maps the entry and swaps `image` for the mapping in the decoded
    /// cache, so the host holds one copy of its pixels. Nothing for an image with no pixels
    /// of its own to share, or when the writes on their way already hold their allowance.
    pub(super) fn publish(
        &self,
        identity: &CacheIdentity,
        want: Want,
        image: Arc<DecodedImage>,
        lock: Option<FillLock>,
    ) {
        if image.is_mapped() || !super::keepable(&image) {
            return;
        }
        let named = self.named(identity, want);
        let Some(parts) = mmcache_decode::to_entry(&image, &named.key) else {
            return;
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if !self.cache.takes(len) {
            return;
        }
        // The parts share the image's pixels; the allowance bounds how many of them writes
        // keep alive past their load.
        let Some(held) = self.write_memory.reserve(len as u64) else {
            return;
        };
        let (this, identity) = (self.clone(), identity.clone());
        self.background.spawn(async move {
            let wrote = this.cache.put_named_parts(&named.name, parts, lock).await;
            drop(held);
            if wrote != mmcache_disk_cache::metrics::WriteOutcome::Success {
                return;
            }
            if let Some(mapped) = this.read(&identity, want).await {
                this.decoded
                    .adopt_mapped_as(&identity, want.variant, &image, mapped);
            }
        });
    }
}

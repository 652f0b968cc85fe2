//! The load's own task: the policy check, then the tiers below memory in order (disk, shared,
//! origin), each step in its own module.

use mmcache_disk_cache::Fill;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::GetOutcome;

use super::Tiers;
use super::disk::HeldLock;
use super::race::Raced;
use crate::loaded::{Loaded, Outcome, Source};

impl Tiers {
    /// Disk tier, shared cache, then origin. Runs in the load's own task.
    pub(super) async fn fill(&self, identity: &CacheIdentity, url: &str) -> Outcome {
        // Policy first, DNS included: the shared cache must not serve what this worker may not
        // fetch (a worker with internal access may have cached it). Resolutions are cached
        // briefly by the origin client, which then connects to the same addresses. The URL it
        // admits is the one every tier below fetches: parsed and checked once.
        let url = &self.origin.check_resolved(url).await?;
        // The host's disk tier, with a cross-process single-flight: one process of the host
        // fills a missing entry; the others watch for the entry (at most as long as a fill may
        // take) and read it. The lock is held until the entry is written: the write, which
        // runs off the load's path, takes it over (see `write_disk`).
        let _fill_lock = match &self.disk {
            Some(disk) => {
                if let Some(hit) = self.read_disk(disk, identity).await? {
                    return Ok(hit);
                }
                match disk.lock(identity, self.fill_wait()).await {
                    Fill::Locked(lock) => {
                        // Filled between our read and our lock? Look once more.
                        let held = HeldLock::hold(self, identity, lock);
                        if let Some(hit) = self.read_disk(disk, identity).await? {
                            return Ok(hit);
                        }
                        Some(held)
                    }
                    _ => {
                        if let Some(hit) = self.read_disk(disk, identity).await? {
                            return Ok(hit); // filled by the process we waited for
                        }
                        None // the holder failed or is slow: fill it ourselves
                    }
                }
            }
            None => None,
        };
        let Some(shared) = &self.shared else {
            let fetched = self.fetch_and_decode_bytes(url).await?;
            let len = fetched.bytes.len();
            if fetched.shareable {
                self.write_disk(identity, self.disk_copy(&fetched.bytes));
            }
            return Ok(Loaded::decoded(fetched.image, Source::Origin, len));
        };
        let (cached, outcome) = match self.get_or_hedge(shared, identity, url).await {
            Raced::Cache(cached, outcome) => (cached, outcome),
            Raced::Hit(hit) => return Ok(hit),
            Raced::Origin(fetched) => return self.stored(shared, identity, fetched?).await,
        };
        if let Some(bytes) = cached {
            if let Some(hit) = self.decode_cached(shared, identity, bytes).await? {
                return Ok(hit);
            }
        } else if outcome == GetOutcome::Oversized {
            // Larger than this worker may download, so larger than it may hold. Another worker
            // with a larger cap may have written it legitimately: leave it, and let the origin
            // (same cap) decide.
            self.metrics.oversized.increment(1);
            tracing::debug!("shared cache value over the download cap; not read");
        } else if outcome == GetOutcome::Miss && self.config.shared.lease.enabled {
            return self.fill_with_lease(shared, identity, url).await;
        }
        self.fill_from_origin(shared, identity, url).await
    }
}

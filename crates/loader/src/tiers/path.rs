//! The order of the tiers below memory, in one place: [`Tiers::fill`], the load's own task
//! (policy, then the host's pixels around [`Tiers::fill_bytes`], the tiers of encoded bytes).
//! Each step gives back what it found; only these functions move a load on to the next step.
//! Also the path of a load without any cache layer ([`Tiers::bypass`]).

use std::sync::Arc;

use bytes::Bytes;
use mmcache_decode::DecodedImage;
use mmcache_disk_cache::FillLock;
use mmcache_origin::Admitted;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::WriteOutcome;

use super::origin::Fetched;
use super::shared::{Got, Hit};
use super::{Decode, Tiers, Want, keepable, refused_as_error};
use crate::error::Result;
use crate::loaded::{Loaded, Outcome, Source};

/// An image from the origin, with the bytes it decoded from.
struct FromOrigin {
    image: Arc<DecodedImage>,
    fetched: Fetched,
}

impl Tiers {
    /// Policy, host pixels, disk, shared cache, origin, decode, write-back. Runs in the load's
    /// own task.
    pub(super) async fn fill(&self, identity: &CacheIdentity, url: &str, want: Want) -> Outcome {
        // Policy first, DNS included: no tier below memory may serve what this worker may not
        // fetch (a worker with internal access may have cached it).
        let url = &self.origin.admit(url).await?;
        let Some(host) = self.host.as_ref().filter(|h| h.serves(want)) else {
            return self.fill_bytes(identity, url, want).await;
        };
        // Host pixels: map; take the entry's fill lock (one process of the host decodes an
        // image, the others wait for its pixels); map again. The entry's write takes the lock
        // over.
        if let Some(image) = host.read(identity, want).await {
            return Ok(Loaded::decoded(
                image.clone(),
                Source::Host,
                image.encoded_len(),
            ));
        }
        let lock = host.lock(identity, want).await;
        if let Some(image) = host.read(identity, want).await {
            return Ok(Loaded::decoded(
                image.clone(),
                Source::Host,
                image.encoded_len(),
            ));
        }
        let outcome = self.fill_bytes(identity, url, want).await;
        match &outcome {
            Ok(loaded) => {
                // In the decoded cache first (the load's own insert then finds it there), so
                // that the write's swap for the mapping finds it too.
                let image = self
                    .memory
                    .insert(identity, want.variant, loaded.image.clone());
                host.publish(identity, want, image.clone(), lock);
                Ok(Loaded {
                    image,
                    ..loaded.clone()
                })
            }
            Err(_) => {
                host.not_written(identity, want);
                outcome
            }
        }
    }

    /// The tiers of encoded bytes, the origin, the decode and the write-back.
    async fn fill_bytes(&self, identity: &CacheIdentity, url: &Admitted, want: Want) -> Outcome {
        // Every decode of this load, whichever tier's bytes it decodes, may share an image of
        // the same content within the load's scope, in the profile the load wants. A cache
        // tier's value refused by the decoders is not an image there (it is dropped), where
        // the origin's is handed back to the caller.
        let decode = move |bytes: Bytes| self.decode.image(bytes, Some(identity), want);
        let cached = move |bytes: Bytes| async move { refused_as_error(decode(bytes).await) };
        // Disk: read; take the entry's fill lock (one process of the host fills a missing
        // entry, the others wait for it); read again (filled by the process we waited for, or
        // between our read and our lock). The entry's write takes the lock over.
        let mut lock = None;
        if let Some(disk) = &self.disk {
            if let Some(hit) = disk.read(identity, cached).await? {
                return Ok(hit);
            }
            lock = disk.lock(identity).await;
            if let Some(hit) = disk.read(identity, cached).await? {
                return Ok(hit);
            }
        }
        // Shared: the hedged GET (the origin fetched beside a late one), then on a miss the
        // lease (one worker of the fleet fills the entry, the others wait for it).
        let origin = move || self.fetch_and_decode(url, decode);
        let (got, lease) = match &self.shared {
            Some(shared) => shared.look(identity, origin, cached).await?,
            None => (Got::Miss, None),
        };
        // Origin and decode, unless the shared tier answered; then the write-back (only bytes
        // that decoded): a shared hit's to the disk tier, the origin's to both tiers.
        let (outcome, wrote) = match got {
            Got::Hit(hit) => self.write_hit(identity, hit, lock.take()),
            Got::Origin(fetched) => self.write_back(identity, fetched, true, &mut lock).await,
            Got::Miss => {
                let fetched = origin().await;
                self.write_back(identity, fetched, false, &mut lock).await
            }
        };
        // A lease this load holds is given back (or left to expire while its entry is still on
        // its way).
        if let (Some(shared), Some(lease)) = (&self.shared, lease) {
            shared.release(identity, lease, wrote).await;
        }
        outcome
    }

    /// The origin and the decode alone: a load without any cache layer (scoped mode, no
    /// usable scope). Its decode shares no image.
    pub(super) async fn bypass(&self, url: &str, want: Want) -> Outcome {
        let url = self.origin.admit(url).await?;
        let FromOrigin { image, fetched } = self
            .fetch_and_decode(&url, |bytes| self.decode.image(bytes, None, want))
            .await?;
        Ok(Loaded::decoded(image, Source::Origin, fetched.bytes.len()))
    }

    /// The origin, then the decode of its bytes.
    async fn fetch_and_decode(&self, url: &Admitted, decode: impl Decode) -> Result<FromOrigin> {
        let fetched = self.origin.fetch(url).await?;
        let image = decode.decode(fetched.bytes.clone()).await?;
        Ok(FromOrigin { image, fetched })
    }

    /// A shared hit: its bytes fill the host's tier too (the write takes `lock` over). No SET
    /// (`Skipped`).
    fn write_hit(
        &self,
        identity: &CacheIdentity,
        hit: Hit,
        lock: Option<FillLock>,
    ) -> (Outcome, WriteOutcome) {
        if let Some(disk) = &self.disk {
            disk.write(identity, disk.copy(&hit.bytes), lock);
        }
        let loaded = Loaded::decoded(hit.image, Source::Shared, hit.bytes.len());
        (Ok(loaded), WriteOutcome::Skipped)
    }

    /// Writes what the origin gave (only bytes that decoded reach here) to the shared tier
    /// and the disk tier, whose write takes the fill lock over; also how the SET ended
    /// (`Skipped`: none made). `hedged`: fetched beside a GET that was late (see
    /// [`Got::Origin`]).
    async fn write_back(
        &self,
        identity: &CacheIdentity,
        fetched: Result<FromOrigin>,
        hedged: bool,
        lock: &mut Option<FillLock>,
    ) -> (Outcome, WriteOutcome) {
        let FromOrigin {
            image,
            fetched: Fetched { bytes, shareable },
        } = match fetched {
            Ok(fetched) => fetched,
            Err(e) => return (Err(e), WriteOutcome::Skipped),
        };
        // Only bytes that decoded (or that this crate leaves to the caller's decoder, as an
        // image of a format it does not decode) go to the tiers.
        let keep = keepable(&image);
        let loaded = Loaded::decoded(image, Source::Origin, bytes.len());
        if !shareable || !keep {
            return (Ok(loaded), WriteOutcome::Skipped);
        }
        let Some(shared) = &self.shared else {
            if let Some(disk) = &self.disk {
                disk.write(identity, disk.copy(&bytes), lock.take());
            }
            return (Ok(loaded), WriteOutcome::Skipped);
        };
        // The writes hold one copy under the write memory, not this load's download
        // reservation (released when the load is done with its bytes); no room: neither
        // write is made.
        let copy = self.write_memory.copy(&bytes);
        drop(bytes);
        if let Some(disk) = &self.disk {
            disk.write(identity, copy.clone(), lock.take());
        }
        let wrote = match copy {
            Some(bytes) => shared.store(identity, bytes, hedged).await,
            None => WriteOutcome::Skipped,
        };
        (Ok(loaded), wrote)
    }
}

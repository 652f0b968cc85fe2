//! Reads of the fleet tiers. A value is checked off the async threads (copied into a buffer
//! of its own and hashed: milliseconds for a 9 MB value), and then:
//!
//! - good: a hit, its checked bytes kept for a write to the disk tier (no re-encoding);
//! - unusable by this reader but perhaps by others (over its cap, a newer format version):
//!   a miss that deletes nothing ([`Found::Kept`]);
//! - bad for every reader (truncated, corrupt, not ours, another key's, a chunk missing):
//!   deleted, but only if it still is the value read (compare-and-delete: the exact bytes in
//!   the shared cache, the same file on disk), so a good value a writer stored meanwhile stays.

use bytes::Bytes;
use mmcache_decode::{Assembly, Embedding, Manifest, WireError, decode_copied};
use mmcache_disk_cache::DiskCache;
use mmcache_scope::EmbeddingKey;
use mmcache_shared_cache::{GetOutcome, SharedCache};

use super::{Fleet, chunk_key, disk_entry_name, shared_key};
use crate::metrics::embeddings::{FleetTier, KeptReason};

/// Chunk GETs of one read in flight at once. One, with the chunk before it being put into
/// the value meanwhile: an image GET on any master then waits behind at most one chunk, and
/// the reader's CPU comes in chunk-sized slices. Measured (`cargo xtask bench --scenario
/// embed`, docs/embeddings.md): image-hit p99 while 9.3 MB values stream rose 1.7-3.9× with
/// 16 in flight, 1.1-1.2× with one; on loopback the value still reads about as fast as one
/// raw GET of its bytes (each chunk is a round trip: on a network, a few ms more).
const CHUNK_READS: u32 = 1;

/// What a read of one tier found.
pub(super) enum Found {
    /// A verified value, and its bytes as the tier stores them (the embedding lives in them).
    Hit(Embedding, Bytes),
    /// Nothing usable (absent, unanswered, or bad and deleted).
    Miss,
    /// A value this reader cannot use but others may: left in place.
    Kept,
}

/// A checked read: the embedding and its value, or why not (`None`: no answer about the
/// value, which may be whole).
type Checked = Result<(Embedding, Bytes), Option<WireError>>;

impl Fleet {
    pub(super) async fn read_disk(
        &self,
        disk: &DiskCache,
        key: &EmbeddingKey,
        model: &str,
    ) -> Found {
        let name = disk_entry_name(key);
        let Some((bytes, stamp)) = disk.get_named_stamped(&name).await else {
            self.m.miss(FleetTier::Disk);
            return Found::Miss;
        };
        // The read's buffer, with its download-budget reservation, goes once it is copied.
        match self.check(bytes, key, model).await {
            Ok((e, value)) => {
                self.m.hit(FleetTier::Disk, value.len());
                Found::Hit(e, value)
            }
            Err(None) => {
                self.m.miss(FleetTier::Disk);
                Found::Miss
            }
            Err(Some(err)) => {
                let found = self.refused(FleetTier::Disk, &err);
                if matches!(found, Found::Miss) {
                    self.before_delete().await;
                    disk.remove_named_if(&name, &stamp).await;
                }
                found
            }
        }
    }

    /// Copies and checks a value read whole, on the blocking pool.
    async fn check(&self, read: Bytes, key: &EmbeddingKey, model: &str) -> Checked {
        let (key, model, max) = (*key, model.to_owned(), self.max_value);
        tokio::task::spawn_blocking(move || decode_copied(&read, &key, &model, max))
            .await
            // A blocking pool that cannot take the job (runtime shutting down): a miss.
            .map_err(|_| None)?
            .map_err(Some)
    }

    /// Counts a refused value; [`Found::Kept`] when others may use it, else [`Found::Miss`]
    /// (the caller deletes it).
    fn refused(&self, tier: FleetTier, err: &WireError) -> Found {
        self.m.miss(tier);
        if err.may_suit_others() {
            let reason = match err {
                WireError::Oversized { .. } => KeptReason::Oversized,
                _ => KeptReason::Version,
            };
            tracing::debug!(tier = tier.as_str(), error = %err, "embedding value not usable here; left in place");
            self.m.kept(tier, reason);
            return Found::Kept;
        }
        tracing::debug!(tier = tier.as_str(), error = %err, "embedding value refused; deleting it");
        self.m.deleted(tier, err.label());
        Found::Miss
    }

    pub(super) async fn read_shared(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
    ) -> Found {
        let main = shared_key(key);
        let max = usize::try_from(self.max_value).unwrap_or(usize::MAX);
        let value = match shared.get_key(&main, max).await {
            (Some(v), _) => v,
            (None, GetOutcome::Oversized) => {
                let err = WireError::Oversized {
                    len: self.max_value + 1,
                    max: self.max_value,
                };
                return self.refused(FleetTier::Shared, &err);
            }
            _ => {
                self.m.miss(FleetTier::Shared);
                return Found::Miss;
            }
        };
        let checked = if Manifest::looks_like(&value) {
            self.read_chunks(shared, key, model, &value).await
        } else {
            self.check(value.clone(), key, model).await
        };
        match checked {
            Ok((e, whole)) => {
                self.m.hit(FleetTier::Shared, e.bytes().len());
                Found::Hit(e, whole)
            }
            Err(None) => {
                self.m.miss(FleetTier::Shared);
                Found::Miss
            }
            Err(Some(err)) => {
                let found = self.refused(FleetTier::Shared, &err);
                if matches!(found, Found::Miss) {
                    self.before_delete().await;
                    shared.compare_and_delete_key(&main, &value).await;
                }
                found
            }
        }
    }

    /// Fetches a chunked value's chunks, [`CHUNK_READS`] in flight, and puts each into the
    /// value's [`Assembly`] as it lands, on the blocking pool: the copy and the checksum of a
    /// 9 MB value take milliseconds of CPU, which in one piece (on a runtime worker or not)
    /// would stall the image loads beside it; a chunk's share is a fraction of one. A missing
    /// or stale chunk fails the value (`Err(Some(..))`: the manifest is deleted); a chunk the
    /// cache could not answer now (an error, an open breaker), no room in the download
    /// budget, or the read's deadline is a miss that deletes nothing (`Err(None)`).
    async fn read_chunks(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
        manifest: &[u8],
    ) -> Checked {
        let m = Manifest::decode(manifest, key, self.max_value, self.max_value)?;
        let read = async {
            // The assembly's buffer is reserved for as long as the value is put together (then
            // it is the cached embedding's, weighed by the embedding cache); each chunk's read
            // reservation goes as soon as the chunk is in.
            let reserved = self.read_memory.reserve(m.total_len).await.ok()?;
            let value = self.fetch_chunks(shared, key, model, m).await;
            drop(reserved);
            Some(value)
        };
        tokio::time::timeout(Fleet::chunked_deadline(shared), read)
            .await
            .ok()
            .flatten()
            .unwrap_or(Err(None))
    }

    async fn fetch_chunks(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
        m: Manifest,
    ) -> Checked {
        let mut set = tokio::task::JoinSet::new();
        let mut next = 0u32;
        let mut spawn_next = |set: &mut tokio::task::JoinSet<_>| {
            if next < m.count {
                let (shared, k, i) = (shared.clone(), chunk_key(key, m.generation, next), next);
                let want = m.chunk_range(i).len();
                set.spawn(async move { (i, shared.get_key(&k, want).await) });
                next += 1;
            }
        };
        for _ in 0..CHUNK_READS {
            spawn_next(&mut set);
        }
        let mut assembly = Assembly::new(m)?;
        let mut got = 0;
        while let Some(r) = set.join_next().await {
            let (i, chunk) = match r {
                Ok((i, (Some(chunk), _))) => (i, chunk),
                Ok((_, (None, GetOutcome::Miss | GetOutcome::Oversized))) => {
                    return Err(Some(WireError::Truncated {
                        len: got,
                        needed: m.total_len as usize,
                    }));
                }
                // Not an answer about the chunk: the value may be whole.
                _ => return Err(None),
            };
            got += chunk.len();
            // The next chunk is on its way while this one is put in.
            spawn_next(&mut set);
            // The chunk (and its read reservation) is dropped once it is in.
            let put =
                tokio::task::spawn_blocking(move || assembly.put(i, &chunk).map(|()| assembly));
            // A blocking pool that cannot take the job (runtime shutting down): a miss.
            assembly = put.await.map_err(|_| None)??;
        }
        // Decoding a verified value reads its header only: cheap enough for this worker.
        assembly
            .finish_value(key, model, self.max_value)
            .map_err(Some)
    }
}

//! The fleet tiers of embeddings: the host's disk tier and the shared cache, with the
//! stampede lease, under a key space of our own. The tiers store bytes; the value format is
//! `mmcache_decode`'s (`encode_value` / `decode_value`), checked on every read: a bad value
//! is deleted from its tier, counted, and the key is computed again.
//!
//! Keys: shared `mmcache:emb:v1:{<key hex>}` (a value, or the manifest of a chunked value),
//! chunks `mmcache:emb:v1:{<key hex>.<generation>.<i>}:chunk` (each its own hash tag, so the
//! chunks of one value spread over the cluster's slots), the lease
//! `mmcache:emb:v1:{<key hex>}:lease`; disk: an entry named by a blake3 derivation of the key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_decode::{Assembly, Embedding, Manifest, WireError, decode_value, encode_value};
use mmcache_disk_cache::{DiskCache, EntryName, Fill, FillLock};
use mmcache_scope::EmbeddingKey;
use mmcache_shared_cache::{GetOutcome, LeaseOutcome, SharedCache};

use super::EmbeddingSource;
use super::metrics::{FleetMetrics, FleetTier, LeaseOutcome as LeaseLabel, LeaseWait};
use crate::background::Background;
use crate::config::Config;

/// A chunk's key outlives its manifest's by this much, so a live manifest never names a
/// chunk that has expired.
const CHUNK_TTL_MARGIN: Duration = Duration::from_secs(60);
/// Chunk GETs of one read in flight at once. One, with the chunk before it being put into
/// the value meanwhile: an image GET on any master then waits behind at most one chunk, and
/// the reader's CPU comes in chunk-sized slices. Measured (`cargo xtask bench --scenario
/// embed`, docs/embeddings.md): image-hit p99 while 9.3 MB values stream rose 1.7-3.9× with
/// 16 in flight, 1.1-1.2× with one; on loopback the value still reads about as fast as one
/// raw GET of its bytes (each chunk is a round trip: on a network, a few ms more).
const CHUNK_READS: u32 = 1;
/// A chunked read takes at most this many of the shared cache's operation deadlines in all.
const CHUNKED_READ_DEADLINES: u32 = 2;
/// Longest pause between two polls of a lease waiter.
const MAX_POLL: Duration = Duration::from_millis(100);
/// However many holders come and go, a waiter waits at most this many lease TTLs in all.
const MAX_HOLDERS_WAITED: u32 = 3;

/// The fleet tiers of one loader (both `None` when off).
pub(crate) struct Fleet {
    disk: Option<DiskCache>,
    shared: Option<SharedCache>,
    /// The lease TTL, when the lease is on.
    lease: Option<Duration>,
    /// How long a process of the host waits for another's compute (disk fill lock).
    disk_wait: Duration,
    ttl: Duration,
    max_value: u64,
    chunk: u64,
    background: Arc<Background>,
    m: Arc<FleetMetrics>,
}

/// What a lookup before the compute found.
pub(crate) enum Before {
    /// A verified value.
    Hit(Embedding, EmbeddingSource),
    /// Nothing: compute, holding these until the value is written.
    Compute(Held),
}

/// The disk fill lock and the lease this process holds while it computes.
#[derive(Default)]
pub(crate) struct Held {
    disk_lock: Option<FillLock>,
    lease: Option<u64>,
}

fn hex(key: &EmbeddingKey) -> String {
    key.to_hex()
}

/// The shared-cache key of `key`'s value (or its chunks' manifest):
/// `mmcache:emb:v1:{<key hex>}`.
pub fn shared_key(key: &EmbeddingKey) -> String {
    main_key(key)
}

fn main_key(key: &EmbeddingKey) -> String {
    format!("mmcache:emb:v1:{{{}}}", hex(key))
}

pub(crate) fn lease_key(key: &EmbeddingKey) -> String {
    format!("mmcache:emb:v1:{{{}}}:lease", hex(key))
}

fn chunk_key(key: &EmbeddingKey, generation: u64, i: u32) -> String {
    format!(
        "mmcache:emb:v1:{{{}.{generation:016x}.{i}}}:chunk",
        hex(key)
    )
}

/// The disk-tier entry name of `key` (see `DiskCache::path_of_named` for its file).
pub fn disk_entry_name(key: &EmbeddingKey) -> EntryName {
    disk_name(key)
}

fn disk_name(key: &EmbeddingKey) -> EntryName {
    const CONTEXT: &str = "mmcache 2026-12 embedding disk entry v1";
    EntryName::from_digest(&blake3::derive_key(CONTEXT, key.as_bytes()))
}

/// 64 random bits (std's randomly keyed hasher: no extra dependency).
fn random_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(Instant::now())
}

impl Fleet {
    pub(crate) fn new(
        config: &Config,
        disk: &Option<DiskCache>,
        shared: &Option<SharedCache>,
        background: &Arc<Background>,
    ) -> Self {
        let on = config.embedding_fleet;
        let lease = config.shared.lease;
        Self {
            disk: disk.clone().filter(|_| on),
            shared: shared.clone().filter(|_| on),
            lease: lease.enabled.then_some(lease.ttl),
            disk_wait: lease.ttl,
            ttl: config.shared.ttl,
            max_value: config.embedding_max_value_bytes,
            chunk: config.embedding_chunk_bytes,
            background: background.clone(),
            m: Arc::new(FleetMetrics::new()),
        }
    }

    /// Whether any fleet tier is on.
    pub(crate) fn enabled(&self) -> bool {
        self.disk.is_some() || self.shared.is_some()
    }

    /// Disk, then shared cache, then the lease; the caller computes on [`Before::Compute`].
    pub(crate) async fn before_compute(&self, key: &EmbeddingKey, model: &str) -> Before {
        let mut held = Held::default();
        if let Some(disk) = &self.disk {
            if let Some(e) = self.read_disk(disk, key, model).await {
                return Before::Hit(e, EmbeddingSource::Disk);
            }
            // One process of the host computes; the others wait for its entry.
            match disk.lock_named(&disk_name(key), self.disk_wait).await {
                Fill::Locked(lock) => {
                    held.disk_lock = Some(lock);
                    if let Some(e) = self.read_disk(disk, key, model).await {
                        return Before::Hit(e, EmbeddingSource::Disk);
                    }
                }
                _ => {
                    if let Some(e) = self.read_disk(disk, key, model).await {
                        return Before::Hit(e, EmbeddingSource::Disk);
                    }
                }
            }
        }
        let Some(shared) = &self.shared else {
            return Before::Compute(held);
        };
        if let Some(e) = self.read_shared(shared, key, model).await {
            self.write_disk(key, model, &e, held.disk_lock.take());
            return Before::Hit(e, EmbeddingSource::Shared);
        }
        let Some(ttl) = self.lease else {
            return Before::Compute(held);
        };
        let lease = lease_key(key);
        match shared.try_lease_key(&lease, ttl).await {
            LeaseOutcome::Won(token) => {
                self.m.lease(LeaseLabel::Won);
                held.lease = Some(token);
                return Before::Compute(held);
            }
            LeaseOutcome::Held => self.m.lease(LeaseLabel::Held),
            _ => {
                self.m.lease(LeaseLabel::Unavailable);
                return Before::Compute(held);
            }
        }
        // Another process computes: poll for its value while its lease lives. A holder that
        // dies loses the lease at its TTL; the first waiter to take it then computes.
        let started = Instant::now();
        let mut holder = shared.get_key(&lease, 64).await.0;
        let mut deadline = started + ttl;
        let mut pause = Duration::from_millis(5);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
            if let Some(e) = self.read_shared(shared, key, model).await {
                self.m.lease_wait(LeaseWait::Hit);
                self.write_disk(key, model, &e, held.disk_lock.take());
                return Before::Hit(e, EmbeddingSource::Shared);
            }
            match shared.try_lease_key(&lease, ttl).await {
                LeaseOutcome::Won(token) => {
                    self.m.lease_wait(LeaseWait::TookOver);
                    held.lease = Some(token);
                    return Before::Compute(held);
                }
                LeaseOutcome::Held => {}
                _ => {
                    self.m.lease_wait(LeaseWait::Unavailable);
                    return Before::Compute(held);
                }
            }
            let now = Instant::now();
            let current = shared.get_key(&lease, 64).await.0;
            if current != holder {
                // Another waiter took over from a dead holder: its lease is new.
                holder = current;
                deadline = now + ttl;
            }
            if now >= deadline || now >= started + ttl * MAX_HOLDERS_WAITED {
                self.m.lease_wait(LeaseWait::TimedOut);
                return Before::Compute(held);
            }
        }
    }

    /// Disk, then shared cache, without a lock or a lease: a lookup that never computes. A
    /// shared hit is written to the disk tier too, as it is before a compute.
    pub(crate) async fn lookup(
        &self,
        key: &EmbeddingKey,
        model: &str,
    ) -> Option<(Embedding, EmbeddingSource)> {
        if let Some(disk) = &self.disk
            && let Some(e) = self.read_disk(disk, key, model).await
        {
            return Some((e, EmbeddingSource::Disk));
        }
        let e = self.read_shared(self.shared.as_ref()?, key, model).await?;
        self.write_disk(key, model, &e, None);
        Some((e, EmbeddingSource::Shared))
    }

    /// Writes a computed value to the tiers, off the caller's path, then gives back the disk
    /// lock and the lease. [`crate::Loader::shutdown`] waits for these writes.
    pub(crate) fn after_compute(&self, key: &EmbeddingKey, model: &str, e: &Embedding, held: Held) {
        let value = match self.encode(key, model, e) {
            Some(v) => v,
            None => {
                self.release(key, held);
                return;
            }
        };
        let Held { disk_lock, lease } = held;
        let (disk, shared) = (self.disk.clone(), self.shared.clone());
        let (key, m) = (*key, self.m.clone());
        let (ttl, chunk) = (self.ttl, self.chunk);
        let lease_ttl = self.lease;
        self.background.spawn(async move {
            let disk_write = async {
                if let Some(disk) = &disk {
                    disk.put_named(&disk_name(&key), value.clone(), disk_lock)
                        .await;
                    m.written(FleetTier::Disk, value.len());
                }
            };
            let shared_write = async {
                if let Some(shared) = &shared {
                    if write_shared(shared, &key, value.clone(), ttl, chunk).await {
                        m.written(FleetTier::Shared, value.len());
                    } else {
                        m.write_failed(FleetTier::Shared);
                    }
                    if let (Some(token), Some(_)) = (lease, lease_ttl) {
                        shared.release_lease_key(&lease_key(&key), token).await;
                    }
                }
            };
            tokio::join!(disk_write, shared_write);
        });
    }

    /// Gives back what a failed compute held (the next caller computes again).
    pub(crate) fn release(&self, key: &EmbeddingKey, held: Held) {
        let Held { disk_lock, lease } = held;
        drop(disk_lock);
        if let (Some(token), Some(shared)) = (lease, self.shared.clone()) {
            let key = *key;
            self.background.spawn(async move {
                shared.release_lease_key(&lease_key(&key), token).await;
            });
        }
    }

    fn encode(&self, key: &EmbeddingKey, model: &str, e: &Embedding) -> Option<Bytes> {
        match encode_value(key, model, e) {
            Ok(v) if v.len() as u64 <= self.max_value => Some(Bytes::from(v)),
            Ok(_) => {
                self.m.not_stored(mmcache_decode::WireErrorKind::Oversized);
                None
            }
            Err(err) => {
                self.m.not_stored(err.label());
                None
            }
        }
    }

    /// Writes a value read from the shared cache to the disk tier (in the background).
    fn write_disk(&self, key: &EmbeddingKey, model: &str, e: &Embedding, lock: Option<FillLock>) {
        // No disk tier: nothing to encode (a 9 MB value would be copied and hashed for nothing).
        let Some(disk) = self.disk.clone() else {
            drop(lock);
            return;
        };
        let Some(value) = self.encode(key, model, e) else {
            drop(lock);
            return;
        };
        let (name, m) = (disk_name(key), self.m.clone());
        self.background.spawn(async move {
            disk.put_named(&name, value.clone(), lock).await;
            m.written(FleetTier::Disk, value.len());
        });
    }

    async fn read_disk(
        &self,
        disk: &DiskCache,
        key: &EmbeddingKey,
        model: &str,
    ) -> Option<Embedding> {
        let name = disk_name(key);
        let Some(bytes) = disk.get_named(&name).await else {
            self.m.miss(FleetTier::Disk);
            return None;
        };
        // Decoded in place, then copied out: the read's buffer holds a download-budget
        // reservation, which must not stay taken as long as the entry stays cached.
        match decode_value(&bytes, key, model, self.max_value) {
            Ok(e) => {
                self.m.hit(FleetTier::Disk, bytes.len());
                Some(e.detached())
            }
            Err(err) => {
                self.bad(FleetTier::Disk, &err);
                disk.remove_named(&name).await;
                None
            }
        }
    }

    fn bad(&self, tier: FleetTier, err: &WireError) {
        tracing::debug!(tier = tier.as_str(), error = %err, "embedding value refused; deleting it");
        self.m.deleted(tier, err.label());
        self.m.miss(tier);
    }

    async fn read_shared(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
    ) -> Option<Embedding> {
        let main = main_key(key);
        let max = usize::try_from(self.max_value).unwrap_or(usize::MAX);
        let (value, outcome) = shared.get_key(&main, max).await;
        let value = match (value, outcome) {
            (Some(v), _) => v,
            (None, GetOutcome::Oversized) => {
                self.bad(
                    FleetTier::Shared,
                    &WireError::Oversized {
                        len: self.max_value + 1,
                        max: self.max_value,
                    },
                );
                shared.delete_key(&main).await;
                return None;
            }
            _ => {
                self.m.miss(FleetTier::Shared);
                return None;
            }
        };
        let decoded = if Manifest::looks_like(&value) {
            self.read_chunks(shared, key, model, &value).await
        } else {
            // Copied out of the read's buffer, which holds a download-budget reservation (an
            // assembled chunked value is in a buffer of its own already).
            decode_value(&value, key, model, self.max_value)
                .map(|e| e.detached())
                .map_err(Some)
        };
        match decoded {
            Ok(e) => {
                self.m.hit(FleetTier::Shared, e.bytes().len());
                Some(e)
            }
            Err(Some(err)) => {
                self.bad(FleetTier::Shared, &err);
                shared.delete_key(&main).await;
                None
            }
            Err(None) => {
                self.m.miss(FleetTier::Shared);
                None
            }
        }
    }

    /// Fetches a chunked value's chunks, [`CHUNK_READS`] in flight, and puts each into the
    /// value's [`Assembly`] as it lands, on the blocking pool: the copy and the checksum of a
    /// 9 MB value take milliseconds of CPU, which in one piece (on a runtime worker or not)
    /// would stall the image loads beside it; a chunk's share is a fraction of one. A missing
    /// or stale chunk fails the value (`Err(Some(..))`: delete it); a chunk the cache could
    /// not answer now (an error, an open breaker) is a miss that deletes nothing
    /// (`Err(None)`).
    async fn read_chunks(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
        manifest: &[u8],
    ) -> Result<Embedding, Option<WireError>> {
        let m = Manifest::decode(manifest, key, self.max_value, self.max_value)?;
        // One GET at a time, each under the cache's own deadline, could add up to minutes on
        // a master that answers just in time: the whole read has a deadline of its own, and
        // missing it is a miss (the value may be whole).
        let deadline = shared
            .config()
            .op_deadline()
            .saturating_mul(CHUNKED_READ_DEADLINES);
        tokio::time::timeout(deadline, self.fetch_chunks(shared, key, model, m))
            .await
            .unwrap_or(Err(None))
    }

    async fn fetch_chunks(
        &self,
        shared: &SharedCache,
        key: &EmbeddingKey,
        model: &str,
        m: Manifest,
    ) -> Result<Embedding, Option<WireError>> {
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
        // The chunks read, each holding its read-memory reservation, kept until the value is
        // whole: the assembly's buffer fills as they land, so what is reserved covers it.
        let mut reserved = Vec::with_capacity(m.count as usize);
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
            let put = tokio::task::spawn_blocking(move || {
                (assembly.put(i, &chunk).map(|()| assembly), chunk)
            });
            // A blocking pool that cannot take the job (runtime shutting down): a miss.
            let (a, chunk) = put.await.map_err(|_| None)?;
            assembly = a?;
            reserved.push(chunk);
        }
        // Decoding a verified value reads its header only: cheap enough for this worker.
        let value = assembly.finish(key, model, self.max_value).map_err(Some);
        drop(reserved);
        value
    }
}

/// One SET, or the chunks (one at a time, as they are read: see [`CHUNK_READS`]) and then the
/// manifest. Whether it all landed.
async fn write_shared(
    shared: &SharedCache,
    key: &EmbeddingKey,
    value: Bytes,
    ttl: Duration,
    chunk: u64,
) -> bool {
    use mmcache_shared_cache::WriteOutcome::Success;
    if value.len() as u64 <= chunk {
        return shared.set_key(&main_key(key), value, ttl).await == Success;
    }
    let Ok(m) = Manifest::of(&value, chunk, random_u64()) else {
        return false;
    };
    for i in 0..m.count {
        let (k, part) = (
            chunk_key(key, m.generation, i),
            value.slice(m.chunk_range(i)),
        );
        if shared.set_key(&k, part, ttl + CHUNK_TTL_MARGIN).await != Success {
            return false;
        }
    }
    // The manifest last: a reader that sees it finds every chunk.
    shared
        .set_key(&main_key(key), Bytes::copy_from_slice(&m.encode(key)), ttl)
        .await
        == Success
}

//! Writes of computed values (and of shared hits to the disk tier), off the caller's path and
//! bounded as image writes are:
//!
//! - bytes: every write holds its value under the write allowance (a quarter of
//!   `MMCACHE_DOWNLOAD_MEMORY_BYTES`), taken before the value is encoded;
//! - entries and bytes: a write to the shared cache also holds room in its write queue (256
//!   writes, 256 MiB, shared with image writes);
//! - time: a chunked write has a deadline as a whole (two operation deadlines), after which it
//!   stops and its lease is given up;
//!
//! and a write that finds no room is dropped and counted
//! (`mmcache_embedding_cache_writes_dropped_total`), never waited for. Encoding (a copy and a
//! checksum of the whole value) runs on the blocking pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mmcache_decode::{Embedding, Manifest, WireErrorKind, encode_value, encoded_len};
use mmcache_disk_cache::{DiskCache, FillLock, metrics::WriteOutcome as DiskOutcome};
use mmcache_scope::EmbeddingKey;
use mmcache_shared_cache::{SharedCache, WriteOutcome};

use super::lease::HeldLease;
use super::{Fleet, Held, chunk_key, disk_entry_name, random_u64, shared_key};
use crate::metrics::embeddings::{DropReason, FleetMetrics, FleetTier};

/// A chunk's key outlives its manifest's by this much, so a live manifest never names a
/// chunk that has expired.
const CHUNK_TTL_MARGIN: Duration = Duration::from_secs(60);

/// The fleet writes of one loader now and at their peak (since it was built): what the write
/// bounds hold them to ([`crate::embeddings::Embeddings::fleet_writes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FleetWrites {
    /// Writes accepted and not finished.
    pub pending: usize,
    /// Bytes those writes hold.
    pub pending_bytes: u64,
    /// The most writes pending at once.
    pub peak: usize,
    /// The most bytes pending at once.
    pub peak_bytes: u64,
}

/// The counts behind [`FleetWrites`], and the once-only notice of the disk cap.
#[derive(Debug, Default)]
pub(super) struct Writes {
    pending: AtomicUsize,
    bytes: AtomicU64,
    peak: AtomicUsize,
    peak_bytes: AtomicU64,
    said_too_large: AtomicBool,
}

/// One write, counted as pending until dropped.
struct Pending(Arc<Writes>, u64);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
        self.0.bytes.fetch_sub(self.1, Ordering::AcqRel);
    }
}

impl Writes {
    fn start(self: &Arc<Self>, len: u64) -> Pending {
        let n = self.pending.fetch_add(1, Ordering::AcqRel) + 1;
        let b = self.bytes.fetch_add(len, Ordering::AcqRel) + len;
        self.peak.fetch_max(n, Ordering::AcqRel);
        self.peak_bytes.fetch_max(b, Ordering::AcqRel);
        Pending(self.clone(), len)
    }

    pub(super) fn snapshot(&self) -> FleetWrites {
        FleetWrites {
            pending: self.pending.load(Ordering::Acquire),
            pending_bytes: self.bytes.load(Ordering::Acquire),
            peak: self.peak.load(Ordering::Acquire),
            peak_bytes: self.peak_bytes.load(Ordering::Acquire),
        }
    }
}

impl Fleet {
    /// The fleet writes now and at their peak.
    pub(crate) fn writes(&self) -> FleetWrites {
        self.writes.snapshot()
    }

    /// Writes a computed value to the tiers, off the caller's path, then gives back the disk
    /// lock and the lease (or gives the lease up, when the value is not stored).
    /// [`crate::Loader::shutdown`] waits for these writes.
    pub(crate) fn after_compute(&self, key: &EmbeddingKey, model: &str, e: &Embedding, held: Held) {
        let Held {
            disk_lock,
            lease,
            keep_disk,
            keep_shared,
        } = held;
        let len = match encoded_len(model, e) {
            Ok(len) if len as u64 <= self.max_value => len,
            Ok(_) => return self.not_stored(WireErrorKind::Oversized, lease),
            Err(err) => return self.not_stored(err.label(), lease),
        };
        let mut disk = self.disk.clone().filter(|_| !keep_disk);
        if let Some(d) = &disk
            && !self.disk_takes(d, len)
        {
            disk = None;
        }
        let disk_lock = disk_lock.filter(|_| disk.is_some());
        let mut shared = self.shared.clone().filter(|_| !keep_shared);
        // Room in the queue for a shared write, then the allowance, before anything is encoded.
        let room = match shared.as_ref().map(|s| s.reserve_write(len)) {
            Some(None) => {
                self.m.dropped(FleetTier::Shared, DropReason::QueueFull);
                shared = None;
                None
            }
            room => room.flatten(),
        };
        if disk.is_none() && shared.is_none() {
            return self.give_up(lease);
        }
        let Some(memory) = self.write_memory.reserve(len as u64) else {
            let tiers = [
                disk.as_ref().map(|_| FleetTier::Disk),
                shared.as_ref().map(|_| FleetTier::Shared),
            ];
            for tier in tiers.into_iter().flatten() {
                self.m.dropped(tier, DropReason::NoMemory);
            }
            return self.give_up(lease);
        };
        let pending = self.writes.start(len as u64);
        let (key, model, e) = (*key, model.to_owned(), e.clone());
        let (m, ttl, chunk) = (self.m.clone(), self.ttl, self.chunk);
        self.background.spawn(async move {
            let _held = (pending, room);
            let encode = move || encode_value(&key, &model, &e).map(|v| memory.hold(v));
            let Ok(Ok(value)) = tokio::task::spawn_blocking(encode).await else {
                // Checked above; a blocking pool that cannot take the job (shutting down).
                if let Some(lease) = lease {
                    lease.abandon().await;
                }
                return;
            };
            let disk_write = async {
                if let Some(disk) = &disk {
                    write_disk(disk, &key, value.clone(), disk_lock, &m).await;
                }
            };
            let shared_write = async {
                let stored = match &shared {
                    Some(s) => write_shared_within(s, &key, value.clone(), ttl, chunk, &m).await,
                    None => false,
                };
                match lease {
                    Some(lease) if stored => lease.release().await,
                    Some(lease) => lease.abandon().await,
                    None => {}
                }
            };
            tokio::join!(disk_write, shared_write);
        });
    }

    /// Writes a value read from the shared cache (its checked bytes, shared with the cached
    /// embedding: no copy, no re-encoding) to the disk tier, in the background.
    pub(super) fn shared_hit_to_disk(&self, key: &EmbeddingKey, value: Bytes, held: &mut Held) {
        let lock = held.disk_lock.take();
        let Some(disk) = self.disk.clone().filter(|_| !held.keep_disk) else {
            return;
        };
        if !self.disk_takes(&disk, value.len()) {
            return;
        }
        // The value lives on with the cached embedding; the allowance counts it while the
        // write may keep it past an eviction.
        let Some(memory) = self.write_memory.reserve(value.len() as u64) else {
            self.m.dropped(FleetTier::Disk, DropReason::NoMemory);
            return;
        };
        let pending = self.writes.start(value.len() as u64);
        let (key, m) = (*key, self.m.clone());
        self.background.spawn(async move {
            let _held = (pending, memory);
            write_disk(&disk, &key, value, lock, &m).await;
        });
    }

    /// Whether the disk tier takes a value of `len` bytes; when over its entry cap, that is
    /// said once and counted.
    fn disk_takes(&self, disk: &DiskCache, len: usize) -> bool {
        if disk.takes(len) {
            return true;
        }
        self.m.dropped(FleetTier::Disk, DropReason::TooLarge);
        if !self.writes.said_too_large.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                value_bytes = len,
                entry_cap_bytes = disk.config().max_entry_bytes,
                "embedding values over the disk tier's entry cap (DYN_MM_MAX_FILE_SIZE_MB) are \
                 not written to the disk tier; raise DYN_MM_MAX_FILE_SIZE_MB to keep them there \
                 (said once; counted in mmcache_embedding_cache_writes_dropped_total)"
            );
        }
        false
    }

    /// A value that cannot be stored at all: counted, and the lease given up.
    fn not_stored(&self, reason: WireErrorKind, lease: Option<HeldLease>) {
        self.m.not_stored(reason);
        self.give_up(lease);
    }

    /// Gives the lease up in the background (its waiters compute at once).
    fn give_up(&self, lease: Option<HeldLease>) {
        if let Some(lease) = lease {
            self.background.spawn(lease.abandon());
        }
    }
}

/// Writes `value` to the disk tier and counts only a write that landed.
async fn write_disk(
    disk: &DiskCache,
    key: &EmbeddingKey,
    value: Bytes,
    lock: Option<FillLock>,
    m: &FleetMetrics,
) {
    let len = value.len();
    match disk.put_named(&disk_entry_name(key), value, lock).await {
        DiskOutcome::Success => m.written(FleetTier::Disk, len),
        DiskOutcome::Error => m.write_failed(FleetTier::Disk),
        _ => m.dropped(FleetTier::Disk, DropReason::Skipped),
    }
}

/// [`write_shared`] within the chunked deadline; whether it all landed (counted).
async fn write_shared_within(
    shared: &SharedCache,
    key: &EmbeddingKey,
    value: Bytes,
    ttl: Duration,
    chunk: u64,
    m: &FleetMetrics,
) -> bool {
    let len = value.len();
    let write = write_shared(shared, key, value, ttl, chunk);
    match tokio::time::timeout(Fleet::chunked_deadline(shared), write).await {
        Ok(true) => {
            m.written(FleetTier::Shared, len);
            true
        }
        Ok(false) => {
            m.write_failed(FleetTier::Shared);
            false
        }
        // The chunks written so far expire with their TTL; no manifest names them.
        Err(_) => {
            m.dropped(FleetTier::Shared, DropReason::Deadline);
            false
        }
    }
}

/// One SET, or the chunks (one at a time, as they are read) and then the manifest. Whether it
/// all landed.
async fn write_shared(
    shared: &SharedCache,
    key: &EmbeddingKey,
    value: Bytes,
    ttl: Duration,
    chunk: u64,
) -> bool {
    if value.len() as u64 <= chunk {
        return shared.set_key(&shared_key(key), value, ttl).await == WriteOutcome::Success;
    }
    let Ok(m) = Manifest::of(&value, chunk, random_u64()) else {
        return false;
    };
    for i in 0..m.count {
        let (k, part) = (
            chunk_key(key, m.generation, i),
            value.slice(m.chunk_range(i)),
        );
        if shared.set_key(&k, part, ttl + CHUNK_TTL_MARGIN).await != WriteOutcome::Success {
            return false;
        }
    }
    // The manifest last: a reader that sees it finds every chunk.
    let manifest = Bytes::copy_from_slice(&m.encode(key));
    shared.set_key(&shared_key(key), manifest, ttl).await == WriteOutcome::Success
}

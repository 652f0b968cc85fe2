//! The tier path of a load: memory, a load in flight, then (in the load's own task) the disk
//! tier, the shared cache and the origin, each decode within the decode budget, and the
//! count of every load under the tier that served it. [`Tiers`] holds every tier and the
//! maps of loads in flight; its steps live in the modules below, one job each:
//!
//! - `load`: the whole path of one call (data URLs, the bypass, memory, the join) and the
//!   record of its outcome;
//! - `inflight`: the join of a load in flight, or its start in a task of its own;
//! - `fill`: the load's own task, the order of the tiers below memory;
//! - `disk`: the disk step (read, fill lock, background write);
//! - `shared`: the shared step (decode a cached value, store what the origin gave);
//! - `race`: the hedged shared GET, raced against the origin;
//! - `lease`: the stampede lease on a shared miss;
//! - `origin`: the origin step (fetch and decode);
//! - `decode`: the probe, the decode budget and the decode;
//! - `content`: content dedup within a load's scope.

mod content;
mod decode;
mod disk;
mod fill;
mod inflight;
mod lease;
mod load;
mod origin;
mod race;
mod shared;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use mmcache_decode::{DecodeLimits, DecodedCache};
use mmcache_origin::Origin;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::SharedCache;
use tokio::sync::watch;

use crate::background::Background;
use crate::budget::DecodeBudget;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::hedge::Hedge;
use crate::loaded::Outcome;
use crate::metrics;
use crate::write_memory::WriteMemory;

/// Where a load in flight publishes its outcome; every joined caller holds a receiver.
pub(crate) type InflightSlot = watch::Receiver<Option<Outcome>>;

/// Every tier and the maps of loads in flight, shared by a [`Loader`](crate::Loader)'s clones
/// and its load tasks.
pub(crate) struct Tiers {
    pub(crate) config: Config,
    pub(crate) origin: Origin,
    pub(crate) shared: Option<SharedCache>,
    pub(crate) disk: Option<mmcache_disk_cache::DiskCache>,
    pub(crate) decoded: DecodedCache,
    pub(crate) limits: DecodeLimits,
    pub(crate) budget: DecodeBudget,
    pub(crate) hedge: Arc<Hedge>,
    pub(crate) inflight: DashMap<[u8; 32], InflightSlot>,
    /// Disk-tier fill locks held by loads in flight, keyed as `inflight`: the entry's write
    /// takes its lock over and releases it once the entry is written.
    pub(crate) fill_locks: DashMap<[u8; 32], mmcache_disk_cache::FillLock>,
    /// Disk-tier writes on their way (they leave the load's path).
    pub(crate) background: Arc<Background>,
    /// What cache writes may hold: copies, apart from the download budget.
    pub(crate) write_memory: WriteMemory,
    pub(crate) memory_hits: ::metrics::Counter,
    pub(crate) metrics: metrics::Handles,
}

impl Tiers {
    /// Runs a load's work within the load deadline. At the deadline the work is dropped where
    /// it waits (its download is cut; a decode already on the blocking pool runs to its end and
    /// then frees its budget; the disk fill lock is released; a stampede lease is left to
    /// expire) and the load fails with [`Error::LoadTimeout`], which every waiter gets.
    pub(crate) async fn within_deadline<T>(
        &self,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let deadline = self.config.load_timeout();
        match tokio::time::timeout(deadline, work).await {
            Ok(result) => result,
            Err(_) => {
                self.metrics.load_timeouts.increment(1);
                Err(Error::LoadTimeout { after: deadline })
            }
        }
    }

    /// See [`Loader::shutdown`](crate::Loader::shutdown).
    pub(crate) async fn shutdown(&self, deadline: Duration) -> bool {
        let until = std::time::Instant::now() + deadline;
        // The loader's write tasks first; then the disk tier's own writes, which may go on
        // past the point where a task stopped waiting for them (the per-operation deadline).
        let disk = async {
            let tasks = self.background.wait_idle(deadline).await;
            let files = match &self.disk {
                Some(disk) => disk.flush(until).await,
                None => true,
            };
            tasks && files
        };
        let shared = async {
            match &self.shared {
                Some(shared) => shared.flush(deadline).await,
                None => true,
            }
        };
        let (disk, shared) = tokio::join!(disk, shared);
        disk && shared
    }
}

/// The key of `identity` in the in-flight and fill-lock maps.
pub(crate) fn inflight_key(identity: &CacheIdentity) -> [u8; 32] {
    identity.digest()
}

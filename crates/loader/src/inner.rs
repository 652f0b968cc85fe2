//! The loader's shared state: every tier, the decode budget and the maps of loads in flight,
//! which the facade ([`crate::Loader`]) and the load tasks ([`crate::fill`]) both hold.

use std::sync::Arc;

use dashmap::DashMap;
use mmcache_decode::{DecodeLimits, DecodedCache};
use mmcache_origin::Origin;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::SharedCache;
use tokio::sync::watch;

use crate::background::Background;
use crate::budget::DecodeBudget;
use crate::hedge::Hedge;
use crate::{Config, Error, Loaded, Result, embeddings, metrics};

pub(crate) type Outcome = Result<Loaded>;
pub(crate) type InflightSlot = watch::Receiver<Option<Outcome>>;

/// What a [`Loader`](crate::Loader) shares with its load tasks: every tier and the maps of
/// loads in flight.
pub(crate) struct Inner {
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
    pub(crate) write_memory: crate::write_memory::WriteMemory,
    pub(crate) memory_hits: ::metrics::Counter,
    pub(crate) metrics: metrics::Handles,
    pub(crate) embeddings: embeddings::Embeddings,
}

impl Inner {
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
}

/// The key of `identity` in the in-flight and fill-lock maps.
pub(crate) fn inflight_key(identity: &CacheIdentity) -> [u8; 32] {
    identity.digest()
}

/// Removes an identity from the in-flight map when dropped.
pub(crate) struct LeaveInflight<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) key: [u8; 32],
}

impl Drop for LeaveInflight<'_> {
    fn drop(&mut self) {
        self.inner.inflight.remove(&self.key);
    }
}

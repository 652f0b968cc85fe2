//! The tier path of a load: memory, a load in flight, then (in the load's own task) the host's
//! pixels, the disk tier, the shared cache and the origin, each decode within the decode
//! budget, and the count of every load under the tier that served it.
//!
//! [`Tiers`] holds one step per tier, each a struct of only what its tier uses, as foyer's
//! `HybridCache` holds its `memory` and `storage`. A step gives back what it found (an image,
//! a lock, a typed outcome) and never calls another; one function, `Tiers::fill` in `path`,
//! orders them. What a step needs from another (the shared step's hedge starts the origin
//! fetch, every cache tier decodes its values) it is handed by `fill` as a closure.
//!
//! - `load`: one call's path down to the join (data URLs, the bypass, memory) and the record
//!   of its outcome;
//! - `inflight`: the join of a load in flight, or its start in a task of its own;
//! - `path`: the load's own task, the order of the steps below memory: policy, host pixels,
//!   disk, shared, origin, decode, write-back;
//! - `memory`: the decoded cache's lookup and insert;
//! - `host`: the host's pixels (mapped, a fill lock per image, the entry's write and the swap
//!   of a load's own pixels for the mapping, in the background);
//! - `disk`: the host's tier (read, fill lock, the entry's write in the background);
//! - `shared`: the fleet's cache (the hedged GET in `shared/race`, the stampede lease in
//!   `shared/lease`, the SET);
//! - `origin`: the policy check and the fetch;
//! - `decode`: the probe, content dedup within a load's scope, the decode budget, the decode.

mod decode;
mod disk;
mod host;
mod inflight;
mod load;
mod memory;
mod origin;
mod path;
mod shared;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use mmcache_decode::{DecodeProfile, DecodedImage, Undecoded, Variant};
use tokio::sync::watch;

use crate::background::Background;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::hedge::Hedge;
use crate::loaded::Outcome;
use crate::metrics;
use crate::write_memory::WriteMemory;

pub(crate) use decode::DecodeStep;
pub(crate) use disk::DiskStep;
pub(crate) use host::HostStep;
pub(crate) use memory::MemoryStep;
pub(crate) use origin::OriginStep;
pub(crate) use shared::SharedStep;

/// The decode profile a load wants, and its share of the cache keys (the decoded cache's,
/// the in-flight map's): chosen once per call, carried to every decode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    pub(crate) profile: DecodeProfile,
    pub(crate) variant: Variant,
}

/// A decode's result as a cache tier takes it: bytes handed back because they were refused
/// ([`Undecoded::Refused`]) are the refusal, so the tier drops a value that is not an image
/// as it always has; what the origin gave is handed back to the caller instead.
pub(super) fn refused_as_error(decoded: Result<Arc<DecodedImage>>) -> Result<Arc<DecodedImage>> {
    match decoded {
        Ok(image) => match image.undecoded() {
            Some(Undecoded::Refused(e)) => Err(Error::Decode(e.clone())),
            _ => Ok(image),
        },
        err => err,
    }
}

/// Whether `image` may be kept by a cache (in memory, or its bytes in a byte tier): not bytes
/// handed back because they were refused.
pub(super) fn keepable(image: &DecodedImage) -> bool {
    !matches!(image.undecoded(), Some(Undecoded::Refused(_)))
}

/// Where a load in flight publishes its outcome; every joined caller holds a receiver.
pub(crate) type InflightSlot = watch::Receiver<Option<Outcome>>;

/// The decode a step is handed for the bytes it found: the decode step's, within the load's
/// scope (made once per load by `Tiers::fill`).
pub(super) trait Decode: Copy {
    fn decode(self, bytes: Bytes) -> impl Future<Output = Result<Arc<DecodedImage>>>;
}

impl<D: Fn(Bytes) -> F + Copy, F: Future<Output = Result<Arc<DecodedImage>>>> Decode for D {
    fn decode(self, bytes: Bytes) -> impl Future<Output = Result<Arc<DecodedImage>>> {
        self(bytes)
    }
}

/// The origin fetch and decode the shared step is handed, for its hedge to start beside a
/// late GET: an image with its bytes (`T`).
pub(super) trait Fetch<T>: Copy {
    fn fetch(self) -> impl Future<Output = Result<T>>;
}

impl<T, O: Fn() -> F + Copy, F: Future<Output = Result<T>>> Fetch<T> for O {
    fn fetch(self) -> impl Future<Output = Result<T>> {
        self()
    }
}

/// Every tier's step and the map of loads in flight, shared by a [`Loader`](crate::Loader)'s
/// clones and its load tasks.
pub(crate) struct Tiers {
    pub(crate) config: Config,
    pub(crate) memory: MemoryStep,
    pub(crate) inflight: DashMap<[u8; 32], InflightSlot>,
    pub(crate) host: Option<HostStep>,
    pub(crate) disk: Option<DiskStep>,
    pub(crate) shared: Option<SharedStep>,
    pub(crate) origin: OriginStep,
    pub(crate) decode: DecodeStep,
    /// What cache writes may hold: copies, apart from the download budget.
    pub(crate) write_memory: WriteMemory,
    /// The shared step's hedge, here for its stats (a loader without a shared cache has them
    /// too).
    pub(crate) hedge: Arc<Hedge>,
    /// Writes on their way off the load's path (the disk step's, the embeddings'): shutdown
    /// waits for them.
    pub(crate) background: Arc<Background>,
    /// The profile of the loader's own loads (`Config::pixel_layout`'s RGB): their keys are
    /// the identities' digests as they always were.
    pub(crate) default_profile: DecodeProfile,
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
                Some(disk) => disk.cache().flush(until).await,
                None => true,
            };
            let pixels = match &self.host {
                Some(host) => host.cache().flush(until).await,
                None => true,
            };
            tasks && files && pixels
        };
        let shared = async {
            match &self.shared {
                Some(shared) => shared.cache().flush(deadline).await,
                None => true,
            }
        };
        let (disk, shared) = tokio::join!(disk, shared);
        disk && shared
    }
}

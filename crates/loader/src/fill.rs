//! The load's own task: the policy check, the shared cache (hedged GET, stampede lease,
//! bounded SET) and the origin, then the decode within the decode budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_decode::DecodedImage;
use mmcache_disk_cache::{DiskCache, Fill};
use mmcache_origin::Admitted;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{GetOutcome, LeaseOutcome, SharedCache, WriteOutcome};

use crate::inner::{Inner, Outcome};
use crate::metrics::{self, HedgeOutcome, LeaseOutcome as LeaseLabel};
use crate::{Error, Loaded, Result, Source};

impl Inner {
    /// Shared cache, then origin. Runs in the load's own task.
    pub(crate) async fn fill(&self, identity: &CacheIdentity, url: &str) -> Outcome {
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

    /// Decodes a cached value. Bytes that are not a valid image are deleted (`Ok(None)`: the
    /// load goes to the origin). A limit of this worker's own (pixels, decode budget) is the
    /// load's error: the entry may serve workers with other limits, so it stays.
    async fn decode_cached(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        bytes: Bytes,
    ) -> Result<Option<Loaded>> {
        let len = bytes.len();
        match self.decode(bytes.clone()).await {
            Ok(image) => {
                // A shared hit fills the host's tier too.
                self.write_disk(identity, self.disk_copy(&bytes));
                Ok(Some(Loaded::decoded(image, Source::Shared, len)))
            }
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                self.metrics.corrupt.increment(1);
                tracing::debug!(error = %e, "shared cache value did not decode; deleting it");
                shared.delete(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Origin, decode, then SET (or queue it, with write-behind) only the bytes that decoded.
    async fn fill_from_origin(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
    ) -> Outcome {
        let fetched = self.fetch_and_decode_bytes(url).await?;
        self.stored(shared, identity, fetched).await
    }

    /// Writes what the origin gave (only bytes that decoded reach here). With hedging on, the
    /// load waits for its SET at most the hedge budget; the write then goes on in the
    /// background, bounded by the I/O timeout and the write-behind queue's limits.
    async fn stored(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        fetched: FromOrigin,
    ) -> Outcome {
        self.stored_with(shared, identity, fetched).await.0
    }

    /// [`Inner::stored`], also saying how the SET ended (`Pending`: still on its way).
    async fn stored_with(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        FromOrigin {
            image,
            bytes,
            shareable,
            hedged,
        }: FromOrigin,
    ) -> (Outcome, WriteOutcome) {
        let len = bytes.len();
        if !shareable {
            return (
                Ok(Loaded::decoded(image, Source::Origin, len)),
                WriteOutcome::Skipped,
            );
        }
        // The writes hold a copy under the write memory, not this load's download reservation
        // (released when the load is done with its bytes); no room: neither write is made.
        let copy = self.write_memory.copy(&bytes);
        drop(bytes);
        self.write_disk(identity, copy.clone());
        let Some(bytes) = copy else {
            return (
                Ok(Loaded::decoded(image, Source::Origin, len)),
                WriteOutcome::Skipped,
            );
        };
        let wrote = if self.hedge.enabled() {
            shared
                .store_within(
                    identity,
                    bytes,
                    if hedged {
                        Duration::ZERO
                    } else {
                        self.hedge.set_wait()
                    },
                )
                .await
        } else {
            shared.store(identity, bytes).await
        };
        (Ok(Loaded::decoded(image, Source::Origin, len)), wrote)
    }

    /// How long a fill of another process of the host may take: its lease wait, download and
    /// decode wait, each bounded by its own setting.
    fn fill_wait(&self) -> std::time::Duration {
        let c = &self.config;
        let lease = if c.shared.lease.enabled {
            c.shared.lease.wait
        } else {
            std::time::Duration::ZERO
        };
        c.origin_timeout + c.decode_wait + lease
    }

    /// Reads the disk tier: a hit that decodes is the load's image; bytes that are not a valid
    /// image are removed (and the load goes on); this worker's own limits are the load's error.
    async fn read_disk(
        &self,
        disk: &DiskCache,
        identity: &CacheIdentity,
    ) -> Result<Option<Loaded>> {
        let Some(bytes) = disk.get(identity).await else {
            return Ok(None);
        };
        let len = bytes.len();
        match self.decode(bytes).await {
            Ok(image) => Ok(Some(Loaded::decoded(image, Source::Disk, len))),
            Err(Error::Decode(e)) if e.is_not_an_image() => {
                tracing::debug!(error = %e, "disk cache entry did not decode; removing it");
                disk.remove(identity).await;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// A copy of `bytes` for the disk write, in the write memory; `None` without a disk tier.
    fn disk_copy(&self, bytes: &Bytes) -> Option<Bytes> {
        // No copy (and no write memory taken) for a write the tier would not make.
        self.disk.as_ref().filter(|d| d.takes(bytes.len()))?;
        self.write_memory.copy(bytes)
    }

    /// Writes bytes that decoded to the disk tier, when there is one, in a task of its own:
    /// the load does not wait for the file system, and [`crate::Loader::shutdown`] waits for
    /// the write. The write takes over this load's fill lock and holds it until the file
    /// really landed (past the disk deadline too), so the host's other processes keep waiting
    /// for the entry (not for a lock released before the entry exists).
    ///
    /// `None` (no room in the write memory): no write, and the lock is released at once.
    fn write_disk(&self, identity: &CacheIdentity, bytes: Option<Bytes>) {
        let Some(disk) = &self.disk else { return };
        let lock = self
            .fill_locks
            .remove(&crate::inner::inflight_key(identity))
            .map(|(_, lock)| lock);
        let Some(bytes) = bytes else { return };
        let (disk, identity) = (disk.clone(), identity.clone());
        self.background.spawn(async move {
            disk.put_locked(&identity, bytes, lock).await;
        });
    }

    /// The shared GET, hedged: when it has not answered within the hedge delay, the origin
    /// fetch starts beside it and the first usable image wins (a late hit still wins if it
    /// decodes before the origin answers). The GET runs in its own task, so a hedged-away GET
    /// still finishes and its failure still counts toward the node's breaker.
    async fn get_or_hedge(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
    ) -> Raced {
        if !self.hedge.enabled() {
            let (cached, outcome) = shared.get_with_outcome(identity).await;
            return Raced::Cache(cached, outcome);
        }
        // The GET times itself in its task: its own latency, not the wake-ups of this one.
        let mut get = tokio::spawn({
            let (shared, identity) = (shared.clone(), identity.clone());
            async move {
                let started = Instant::now();
                let (cached, outcome) = shared.get_with_outcome(&identity).await;
                (cached, outcome, started.elapsed())
            }
        });
        let joined = |r: std::result::Result<
            (Option<Bytes>, GetOutcome, Duration),
            tokio::task::JoinError,
        >| {
            r.map_or((None, GetOutcome::Error), |(cached, outcome, _)| {
                (cached, outcome)
            })
        };
        let delay = self.hedge.current_delay();
        if let Ok(r) = tokio::time::timeout(delay, &mut get).await {
            if let Ok((_, GetOutcome::Hit | GetOutcome::Miss | GetOutcome::Oversized, took)) = &r {
                self.hedge.observe(*took);
            }
            let (cached, outcome) = joined(r);
            return Raced::Cache(cached, outcome);
        }
        // Counted now as taking the delay, not later at its real latency (see `observe_late`).
        self.hedge.observe_late(delay);
        if !self.hedge.try_take() {
            self.record_hedge(HedgeOutcome::OverBudget);
            // No hedge budget left: the GET gets up to the cap, then the origin starts all the
            // same. Waiting for the whole GET (up to the I/O timeout) would let one slow node
            // cost a load far more than the origin does.
            let rest = self.hedge.max_delay().saturating_sub(delay);
            if let Ok(r) = tokio::time::timeout(rest, &mut get).await {
                let (cached, outcome) = joined(r);
                return Raced::Cache(cached, outcome);
            }
        }
        let origin = self.fetch_and_decode_bytes(url);
        tokio::pin!(origin);
        // Phase 1: whichever answers first.
        let cached = tokio::select! {
            fetched = &mut origin => match fetched {
                Ok(fetched) => {
                    self.record_hedge(HedgeOutcome::OriginWon);
                    return Raced::Origin(Ok(fetched.hedged()));
                }
                // A fast origin failure must not beat a slow cache hit: wait for the GET.
                Err(e) => {
                    let (cached, _) = joined(get.await);
                    return match cached {
                        Some(bytes) => match self.decode_cached(shared, identity, bytes).await {
                            Ok(Some(hit)) => {
                                self.record_hedge(HedgeOutcome::CacheWon);
                                Raced::Hit(hit)
                            }
                            _ => Raced::Origin(Err(e)),
                        },
                        None => Raced::Origin(Err(e)),
                    };
                }
            },
            r = &mut get => joined(r).0,
        };
        // Phase 2: a late hit races the origin through its decode.
        if let Some(bytes) = cached {
            let decoded = self.decode_cached(shared, identity, bytes);
            tokio::pin!(decoded);
            tokio::select! {
                fetched = &mut origin => match fetched {
                    Ok(fetched) => {
                        self.record_hedge(HedgeOutcome::OriginWon);
                        return Raced::Origin(Ok(fetched.hedged()));
                    }
                    Err(e) => {
                        if let Ok(Some(hit)) = decoded.await {
                            self.record_hedge(HedgeOutcome::CacheWon);
                            return Raced::Hit(hit);
                        }
                        return Raced::Origin(Err(e));
                    }
                },
                d = &mut decoded => {
                    if let Ok(Some(hit)) = d {
                        self.record_hedge(HedgeOutcome::CacheWon);
                        return Raced::Hit(hit);
                    }
                }
            }
        }
        self.record_hedge(HedgeOutcome::OriginWon);
        Raced::Origin(origin.await.map(FromOrigin::hedged))
    }

    /// On a miss, one worker of the fleet takes the lease and fills the entry; the others poll
    /// for it with backoff, bounded by the lease wait, then fetch from the origin themselves.
    /// A waiter that finds the lease released or expired (its holder failed or died) takes it
    /// over at once. Any lease failure falls back to the origin.
    async fn fill_with_lease(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
    ) -> Outcome {
        let lease = self.config.shared.lease;
        let deadline = Instant::now() + lease.wait;
        let mut pause = Duration::from_millis(5);
        let mut waited = false;
        loop {
            match shared.try_lease(identity, lease.ttl).await {
                LeaseOutcome::Won(token) => {
                    self.record_lease(if waited {
                        LeaseLabel::TookOver
                    } else {
                        LeaseLabel::Won
                    });
                    return self
                        .fill_as_lease_holder(shared, identity, url, token)
                        .await;
                }
                LeaseOutcome::Held => {}
                _ => {
                    self.record_lease(LeaseLabel::Error);
                    return self.fill_from_origin(shared, identity, url).await;
                }
            }
            // Held by another worker: wait a little, then look for its entry.
            if Instant::now() + pause >= deadline {
                self.record_lease(LeaseLabel::WaitedTimeout);
                return self.fill_from_origin(shared, identity, url).await;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            waited = true;
            let (cached, outcome) = shared.get_with_outcome(identity).await;
            if let Some(bytes) = cached {
                if let Some(hit) = self.decode_cached(shared, identity, bytes).await? {
                    self.record_lease(LeaseLabel::WaitedHit);
                    return Ok(hit);
                }
                return self.fill_from_origin(shared, identity, url).await;
            }
            if outcome != GetOutcome::Miss {
                return self.fill_from_origin(shared, identity, url).await; // the cache failed
            }
            // Still a miss: try the lease again (taken over if its holder let it go).
        }
    }

    /// The lease holder: looks once more (the previous holder may have filled the entry and
    /// released the lease between our GET and our lease), fills from the origin, and releases
    /// the lease, so after a failure the waiters take over at once instead of sleeping out
    /// the lease.
    async fn fill_as_lease_holder(
        &self,
        shared: &SharedCache,
        identity: &CacheIdentity,
        url: &Admitted,
        token: u64,
    ) -> Outcome {
        let (result, wrote) = async {
            let fetched = match self.get_or_hedge(shared, identity, url).await {
                Raced::Hit(hit) => return (Ok(hit), None),
                Raced::Origin(fetched) => fetched,
                Raced::Cache(Some(bytes), _) => {
                    match self.decode_cached(shared, identity, bytes).await {
                        Ok(Some(hit)) => return (Ok(hit), None),
                        Err(e) => return (Err(e), None),
                        Ok(None) => self.fetch_and_decode_bytes(url).await,
                    }
                }
                Raced::Cache(None, _) => self.fetch_and_decode_bytes(url).await,
            };
            match fetched {
                Ok(fetched) => {
                    let (outcome, wrote) = self.stored_with(shared, identity, fetched).await;
                    (outcome, Some(wrote))
                }
                Err(e) => (Err(e), None),
            }
        }
        .await;
        // The entry is still on its way (write-behind, or a SET left to the background): keep
        // the lease (it expires) so waiters poll for the entry instead of taking over and
        // fetching again. Otherwise release it: after a hit, a completed SET, or a failure,
        // waiters look again at once.
        let pending = match wrote {
            Some(WriteOutcome::Pending) => true,
            Some(WriteOutcome::Success) => self.config.shared.write_behind.enabled,
            _ => false,
        };
        if !pending {
            shared.release_lease(identity, token).await;
        }
        result
    }

    /// The origin and the decode alone (a load that bypasses every cache layer).
    pub(crate) async fn fetch_and_decode(&self, url: &str) -> Outcome {
        let url = self.origin.check_resolved(url).await?;
        let fetched = self.fetch_and_decode_bytes(&url).await?;
        let len = fetched.bytes.len();
        Ok(Loaded::decoded(fetched.image, Source::Origin, len))
    }

    async fn fetch_and_decode_bytes(&self, url: &Admitted) -> Result<FromOrigin> {
        let started = Instant::now();
        let fetched = self.origin.fetch_admitted(url).await;
        let outcome = if fetched.is_ok() {
            metrics::Outcome::Ok
        } else {
            metrics::Outcome::Error
        };
        self.metrics
            .origin_duration(outcome)
            .record(started.elapsed().as_secs_f64());
        let fetched = fetched?;
        self.metrics
            .origin_bytes
            .increment(fetched.bytes.len() as u64);
        let image = self.decode(fetched.bytes.clone()).await?;
        // Bytes reached through redirects by a worker with a looser policy than the default
        // (internal access, or an allowlist that other workers may not share) stay out of the
        // tiers other workers read: their hops might be ones those workers must refuse, and a
        // cache answers for the first URL only.
        let loose = self.config.allow_internal || !self.config.allowed_media_domains.is_empty();
        Ok(FromOrigin {
            image,
            bytes: fetched.bytes,
            shareable: fetched.redirects == 0 || !loose,
            hedged: false,
        })
    }

    /// Reads the headers (refusing what cannot be an image), reserves the decode's memory in
    /// the budget, then decodes on the blocking pool: a large image is milliseconds of CPU.
    pub(crate) async fn decode(&self, bytes: Bytes) -> Result<Arc<DecodedImage>> {
        /// Headers of smaller files are read in place; larger ones take a scan of the bytes.
        const INLINE_PROBE_BYTES: usize = 256 << 10;
        let limits = self.limits;
        let started = Instant::now();
        let probe = if bytes.len() <= INLINE_PROBE_BYTES {
            mmcache_decode::probe(&bytes, &limits)?
        } else {
            let bytes = bytes.clone();
            blocking(move || mmcache_decode::probe(&bytes, &limits)).await??
        };
        // The same bytes already decoded in this load's scope (under another URL): share it.
        if let Some(image) = self.shared_content(&probe.content_key) {
            return Ok(image);
        }
        /// Images this small decode in well under a millisecond: in place, without the hop
        /// to the blocking pool (which costs about as much as the decode itself).
        const INLINE_DECODE_PIXELS: u64 = 256 * 256;
        let permit = self.budget.acquire(probe.memory_bytes).await?;
        let small = u64::from(probe.width) * u64::from(probe.height) <= INLINE_DECODE_PIXELS
            && bytes.len() <= INLINE_PROBE_BYTES;
        let image = if small {
            let image = mmcache_decode::decode_probed(&bytes, &probe, &limits);
            drop(permit);
            image?
        } else {
            // The permit moves into the decode: if this future is dropped (a hedge won), the
            // decode still runs to its end on the blocking pool, and its memory stays counted.
            blocking(move || {
                let image = mmcache_decode::decode_probed(&bytes, &probe, &limits);
                drop(permit);
                image
            })
            .await??
        };
        self.metrics
            .decode_duration(image.format())
            .record(started.elapsed().as_secs_f64());
        Ok(Arc::new(image))
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("decode task failed: {e}")))
}

/// A disk-tier fill lock parked in [`Inner::fill_locks`] while its load runs: the entry's
/// write takes it from there; when the load ends without one (a failure, a hit, or the load
/// deadline dropping the fill), dropping this releases it.
pub(crate) struct HeldLock<'a> {
    inner: &'a Inner,
    key: [u8; 32],
}

impl<'a> HeldLock<'a> {
    fn hold(
        inner: &'a Inner,
        identity: &CacheIdentity,
        lock: mmcache_disk_cache::FillLock,
    ) -> Self {
        let key = crate::inner::inflight_key(identity);
        inner.fill_locks.insert(key, lock);
        Self { inner, key }
    }
}

impl Drop for HeldLock<'_> {
    fn drop(&mut self) {
        self.inner.fill_locks.remove(&self.key);
    }
}

/// An image from the origin, with its bytes.
pub(crate) struct FromOrigin {
    image: Arc<DecodedImage>,
    bytes: Bytes,
    /// Whether the bytes may go to the disk and shared tiers (see `fetch_and_decode_bytes`).
    shareable: bool,
    /// Fetched beside a GET that did not answer in time: its node is slow or hung, so the
    /// SET goes to the background at once instead of waiting on that node too.
    hedged: bool,
}

impl FromOrigin {
    fn hedged(self) -> Self {
        Self {
            hedged: true,
            ..self
        }
    }
}

/// How a hedged GET ended.
enum Raced {
    /// The GET answered first (or no hedge ran): its value and outcome.
    Cache(Option<Bytes>, GetOutcome),
    /// A late hit decoded before the origin answered.
    Hit(Loaded),
    /// The origin answered first: its decoded image and bytes, or its error.
    Origin(Result<FromOrigin>),
}

impl Inner {
    fn record_hedge(&self, outcome: HedgeOutcome) {
        self.hedge.record(outcome);
    }

    fn record_lease(&self, outcome: LeaseLabel) {
        self.metrics.lease(outcome).increment(1);
    }

    pub(crate) fn observe(&self, source: Source, started: Instant) {
        self.metrics
            .load_duration(source)
            .record(started.elapsed().as_secs_f64());
    }

    /// Counts a load's outcome under `source` (a failure's: the tier it was headed for).
    pub(crate) fn record(&self, source: Source, outcome: Outcome) -> Outcome {
        let label = if outcome.is_ok() {
            metrics::Outcome::Ok
        } else {
            metrics::Outcome::Error
        };
        self.metrics.loads(source, label).increment(1);
        outcome
    }
}

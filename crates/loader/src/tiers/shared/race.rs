//! The hedged shared GET: when it has not answered within the hedge delay, the origin fetch
//! starts beside it and the first usable image wins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{GetOutcome, SharedCache};

use super::{Hit, SharedStep};
use crate::error::Result;
use crate::hedge::Hedge;
use crate::metrics::HedgeOutcome;
use crate::slow_nodes::{Change, Probe, Route};
use crate::tiers::{Decode, Fetch};

/// How a hedged GET ended.
pub(super) enum Raced<T> {
    /// The GET answered first (or no hedge ran): its value and outcome.
    Cache(Option<Bytes>, GetOutcome),
    /// A late hit decoded before the origin answered.
    Hit(Hit),
    /// The origin answered first: what `origin` gave, or its error.
    Origin(Result<T>),
}

impl SharedStep {
    /// The shared GET, hedged: when it has not answered within the hedge delay, `origin`
    /// starts the fetch beside it and the first usable image wins (a late hit still wins if
    /// `decode` decodes it before the origin answers). The GET runs in its own task, so a
    /// hedged-away GET still finishes and its failure still counts toward the node's breaker.
    /// A key whose node is routed around (late on most of its recent GETs, see `slow_nodes`)
    /// skips the GET: the origin at once, and now and then the GET as a probe in the
    /// background.
    pub(super) async fn get_or_hedge<T>(
        &self,
        identity: &CacheIdentity,
        origin: impl Fetch<T>,
        decode: impl Decode,
    ) -> Raced<T> {
        let shared = &self.cache;
        if !self.hedge.enabled() {
            let (cached, outcome) = shared.get_with_outcome(identity).await;
            return Raced::Cache(cached, outcome);
        }
        let node = shared.node_of(identity);
        if let Some(node) = &node
            && let Route::Around { probe } = self.hedge.slow.route(node, Instant::now())
        {
            if probe {
                spawn_probe(&self.hedge, shared, identity, node.clone());
            }
            self.record_hedge(HedgeOutcome::RoutedAround);
            return match origin.fetch().await {
                Ok(fetched) => Raced::Origin(Ok(fetched)),
                // The origin failed: the slow node may still hold the image, and a cache must
                // not fail a load it could serve. Ask it, as a hedged load does (the GET is
                // bounded by the operation deadline).
                Err(e) => match shared.get_with_outcome(identity).await {
                    (Some(bytes), _) => match self.hit(identity, bytes, decode).await {
                        Ok(Some(hit)) => Raced::Hit(hit),
                        _ => Raced::Origin(Err(e)),
                    },
                    _ => Raced::Origin(Err(e)),
                },
            };
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
                note_lateness(&self.hedge, shared, node.as_ref(), false, false);
            }
            let (cached, outcome) = joined(r);
            return Raced::Cache(cached, outcome);
        }
        // Counted now as taking the delay, not later at its real latency (see `observe_late`).
        self.hedge.observe_late(delay);
        note_lateness(&self.hedge, shared, node.as_ref(), true, false);
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
        let origin = origin.fetch();
        tokio::pin!(origin);
        // Phase 1: whichever answers first.
        let cached = tokio::select! {
            fetched = &mut origin => match fetched {
                Ok(fetched) => {
                    self.record_hedge(HedgeOutcome::OriginWon);
                    return Raced::Origin(Ok(fetched));
                }
                // A fast origin failure must not beat a slow cache hit: wait for the GET.
                Err(e) => {
                    let (cached, _) = joined(get.await);
                    return match cached {
                        Some(bytes) => match self.hit(identity, bytes, decode).await {
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
            let decoded = self.hit(identity, bytes, decode);
            tokio::pin!(decoded);
            tokio::select! {
                fetched = &mut origin => match fetched {
                    Ok(fetched) => {
                        self.record_hedge(HedgeOutcome::OriginWon);
                        return Raced::Origin(Ok(fetched));
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
        Raced::Origin(origin.await)
    }

    fn record_hedge(&self, outcome: HedgeOutcome) {
        self.hedge.record(outcome);
    }
}

/// The GET of a routed load's key, in the background, timed against the hedge delay like any
/// GET: it feeds the adaptive delay and tells whether the node answers in time again. Late at
/// the delay, it is recorded so then, and still runs to its end (the I/O timeout at most), so
/// a hung node's failures reach its breaker; the node's next probe starts only after it.
fn spawn_probe(hedge: &Arc<Hedge>, shared: &SharedCache, identity: &CacheIdentity, node: Arc<str>) {
    let delay = hedge.current_delay();
    let (hedge, shared, identity) = (hedge.clone(), shared.clone(), identity.clone());
    let probe = Probe::new(hedge.slow.clone(), node.clone());
    tokio::spawn(async move {
        let _probe = probe; // however the task ends, the node's next probe may start
        let started = Instant::now();
        let get = shared.get_with_outcome(&identity);
        tokio::pin!(get);
        match tokio::time::timeout(delay, &mut get).await {
            Ok((_, GetOutcome::Hit | GetOutcome::Miss | GetOutcome::Oversized)) => {
                hedge.observe(started.elapsed());
                note_lateness(&hedge, &shared, Some(&node), false, true);
            }
            // Failed or skipped at once (its breaker is open): nothing about its latency.
            Ok(_) => {}
            Err(_) => {
                hedge.observe_late(delay);
                note_lateness(&hedge, &shared, Some(&node), true, true);
                let _ = get.await;
            }
        }
    });
}

/// Records a GET's lateness for its node (when the slot map knows it), and logs when the node
/// starts or stops being routed around (a warning at most once per
/// [`SLOW_WARN_INTERVAL`](crate::slow_nodes::SLOW_WARN_INTERVAL), else at debug).
fn note_lateness(
    hedge: &Hedge,
    shared: &SharedCache,
    node: Option<&Arc<str>>,
    late: bool,
    probe: bool,
) {
    let Some(node) = node else { return };
    let Some(change) = hedge.slow.record(node, late, probe, || shared.masters()) else {
        return;
    };
    let loud = hedge.slow.may_warn(Instant::now());
    match change {
        Change::Slow if loud => tracing::warn!(
            node = &**node,
            "shared image cache node late on most GETs; its keys go to the origin while it is probed"
        ),
        Change::Slow => tracing::debug!(node = &**node, "shared image cache node routed around"),
        Change::Recovered if loud => tracing::warn!(
            node = &**node,
            "shared image cache node answers in time again; its keys use it again"
        ),
        Change::Recovered => tracing::debug!(node = &**node, "shared image cache node used again"),
    }
}

//! Routing around a slow node: when most recent GETs to one cache node were still running at
//! the hedge delay, that node's keys go straight to the origin (the disk tier came first)
//! instead of paying the delay on every load, and a GET of a routed load's key runs now and
//! then in the background as a probe. A few probes in a row in time, and the node is used
//! again.
//!
//! Why: with one master of three slow, hedging bounds each load to the delay, but a third of
//! the keys still wait it before their origin fetch starts, and p99 is that delay. A node late
//! on [`ENTER_LATE`] of its last [`WINDOW`] GETs is consistently slower than the delay; a
//! healthy node on a busy machine is late now and then, not on most GETs. The probes run off
//! the load's path, so a node still slow costs no load anything; they are timed against the
//! same delay and feed the adaptive delay, so a cluster slow as a whole raises the delay
//! through them and comes back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// GETs per node whose lateness is remembered.
const WINDOW: u32 = 8;
/// Late GETs of the last [`WINDOW`] that route a node around.
const ENTER_LATE: u32 = 6;
/// Probes in time, one after the other, that bring a routed node back. One or two can answer
/// in time by luck while the node is sick (a node that stalls and resumes answers whatever
/// reaches it between stalls); three in a row rarely do.
const EXIT_PROBES: u8 = 3;
/// At most one probe per node this often (one per routed load when loads are rarer).
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Nodes tracked; past this, the nodes not routed around are forgotten (names of nodes that
/// left the cluster would otherwise accumulate).
const MAX_NODES: usize = 256;
/// Changes logged as warnings at most this often (a node that comes and goes would otherwise
/// warn several times a second); the others at debug.
pub(crate) const SLOW_WARN_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Node {
    /// The last [`WINDOW`] GETs, newest in bit 0: 1 when late.
    late: u8,
    seen: u8,
    /// Routed around since (and its last probe, and the probes in time since the last late one).
    routed: Option<Routed>,
}

#[derive(Debug, Clone, Copy)]
struct Routed {
    last_probe: Instant,
    in_time: u8,
}

/// How a load reaches a node's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Send the GET, hedged as usual.
    Get,
    /// Skip the GET and fetch from the origin; `probe`: also send the GET in the background.
    Around { probe: bool },
}

/// A node started or stopped being routed around.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Slow,
    Recovered,
}

/// Per-node lateness of one loader's GETs.
#[derive(Debug, Default)]
pub(crate) struct SlowNodes {
    nodes: Mutex<HashMap<Arc<str>, Node>>,
    /// Nodes routed around now: while 0, [`SlowNodes::route`] takes no lock.
    routed: AtomicUsize,
    warned_at: Mutex<Option<Instant>>,
}

impl SlowNodes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How a load should reach `node` at `now`.
    pub(crate) fn route(&self, node: &str, now: Instant) -> Route {
        if self.routed.load(Ordering::Acquire) == 0 {
            return Route::Get;
        }
        let mut nodes = self.lock();
        let Some(routed) = nodes.get_mut(node).and_then(|n| n.routed.as_mut()) else {
            return Route::Get;
        };
        let probe = now.duration_since(routed.last_probe) >= PROBE_INTERVAL;
        if probe {
            routed.last_probe = now;
        }
        Route::Around { probe }
    }

    /// Records a GET to `node`: `late` when it was still running at the hedge delay, `probe`
    /// when it was a background probe of a routed node. A GET that started before its node
    /// was routed around says nothing about recovery: only probes bring a node back.
    pub(crate) fn record(&self, node: &Arc<str>, late: bool, probe: bool) -> Option<Change> {
        let mut nodes = self.lock();
        if !nodes.contains_key(node) && nodes.len() >= MAX_NODES {
            nodes.retain(|_, n| n.routed.is_some());
        }
        let n = nodes.entry(node.clone()).or_default();
        if let Some(routed) = n.routed.as_mut() {
            if !probe {
                return None;
            }
            if late {
                routed.in_time = 0;
                return None;
            }
            routed.in_time += 1;
            if routed.in_time < EXIT_PROBES {
                return None;
            }
            // Back with a clean window: it must be late on most GETs again to be routed.
            *n = Node::default();
            self.routed.fetch_sub(1, Ordering::AcqRel);
            return Some(Change::Recovered);
        }
        n.late = (n.late << 1) | u8::from(late);
        n.seen = (n.seen + 1).min(WINDOW as u8);
        if u32::from(n.seen) < WINDOW || n.late.count_ones() < ENTER_LATE {
            return None;
        }
        n.routed = Some(Routed {
            last_probe: Instant::now(),
            in_time: 0,
        });
        self.routed.fetch_add(1, Ordering::AcqRel);
        Some(Change::Slow)
    }

    /// Whether a change may be logged as a warning at `now` (then not again for
    /// [`SLOW_WARN_INTERVAL`]).
    pub(crate) fn may_warn(&self, now: Instant) -> bool {
        let mut at = self.warned_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.is_some_and(|t| now.duration_since(t) < SLOW_WARN_INTERVAL) {
            return false;
        }
        *at = Some(now);
        true
    }

    /// Nodes routed around now.
    pub(crate) fn routed_nodes(&self) -> usize {
        self.routed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn a_node_late_on_most_gets_is_routed_around_and_probes_bring_it_back() {
        let s = SlowNodes::default();
        let (slow, fast) = (node("a:1"), node("b:1"));
        let t0 = Instant::now();
        // In time, then late on the last 5 of 8 (below 6): still used.
        for i in 0..8 {
            assert_eq!(s.record(&slow, i >= 3, false), None);
            assert_eq!(s.record(&fast, false, false), None);
        }
        assert_eq!(s.route("a:1", t0), Route::Get);
        // Late on the next GET: 6 of the last 8 late.
        assert_eq!(s.record(&slow, true, false), Some(Change::Slow));
        assert_eq!(s.routed_nodes(), 1);
        assert_eq!(s.route("b:1", t0), Route::Get);
        // The first routed load after the interval probes; the next within it does not.
        let later = Instant::now() + PROBE_INTERVAL;
        assert_eq!(s.route("a:1", later), Route::Around { probe: true });
        assert_eq!(s.route("a:1", later), Route::Around { probe: false });
        // GETs that started before the routing do not bring it back, nor two probes in time
        // and a late one.
        for _ in 0..EXIT_PROBES {
            assert_eq!(s.record(&slow, false, false), None);
        }
        for late in [false, false, true, false, false] {
            assert_eq!(s.record(&slow, late, true), None);
        }
        assert_eq!(s.record(&slow, false, true), Some(Change::Recovered));
        assert_eq!(s.routed_nodes(), 0);
        assert_eq!(s.route("a:1", later), Route::Get);
        // Back with a clean window: it takes most of 8 GETs late again.
        for _ in 0..WINDOW - 1 {
            assert_eq!(s.record(&slow, true, false), None);
        }
        assert_eq!(s.record(&slow, true, false), Some(Change::Slow));
    }

    #[test]
    fn the_nodes_tracked_are_bounded() {
        let s = SlowNodes::default();
        let sick = node("sick:1");
        for _ in 0..WINDOW {
            s.record(&sick, true, false);
        }
        for i in 0..MAX_NODES * 3 {
            s.record(&node(&format!("n{i}:1")), false, false);
        }
        assert!(s.lock().len() <= MAX_NODES);
        // The routed node is kept.
        assert!(matches!(
            s.route("sick:1", Instant::now()),
            Route::Around { .. }
        ));
    }
}

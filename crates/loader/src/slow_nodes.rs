//! Routing around a slow node: when most recent GETs to one cache node were still running at
//! the hedge delay, that node's keys go straight to the origin (the disk tier came first)
//! instead of paying the delay on every load, and a GET of a routed load's key runs now and
//! then in the background as a probe. A few probes in a row in time, and the node is used
//! again.
//!
//! Why: with one master of three slow, hedging bounds each load to the delay, but a third of
//! the keys still wait it before their origin fetch starts, and p99 is that delay. A node late
//! on [`ENTER_LATE`] of its last [`WINDOW`] GETs is consistently slower than the delay; a
//! healthy node on a busy machine is late now and then, not on most GETs.
//!
//! Bounds: at most half of the cluster's masters is routed around (so never the only node;
//! nothing before the slot map is read): a cluster slow as a whole is the adaptive delay's
//! job, and routing it all would send every load to the origin.
//! One probe per node is in flight at a time, at most one per [`PROBE_INTERVAL`]; probes run
//! off the load's path, are timed against the same delay and feed the adaptive delay. A node
//! that no load has asked for during [`IDLE`] (it left the cluster, or moved to another
//! address) is forgotten, routed or not; the table is swept at most every [`SWEEP_INTERVAL`].
//! While no node has a late GET in its window, nothing here takes a lock.

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
/// A node no load asked for this long is forgotten (routed or not). Long enough that a
/// routed node of a worker with a load every few seconds stays routed.
const IDLE: Duration = Duration::from_secs(30);
/// Nodes idle past [`IDLE`] are looked for at most this often.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// Nodes tracked (each with a late GET in its window); past this, the least recently seen
/// node not routed around is forgotten.
const MAX_NODES: usize = 256;
/// Changes logged as warnings at most this often (a node that comes and goes would otherwise
/// warn several times a second); the others at debug.
pub(crate) const SLOW_WARN_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Node {
    /// The last [`WINDOW`] GETs, newest in bit 0: 1 when late.
    late: u8,
    seen: u8,
    last_seen: Instant,
    routed: Option<Routed>,
}

#[derive(Debug, Clone, Copy)]
struct Routed {
    last_probe: Instant,
    /// A probe GET has not ended yet.
    probing: bool,
    /// Probes in time since the last late one.
    in_time: u8,
}

/// How a load reaches a node's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Send the GET, hedged as usual.
    Get,
    /// Skip the GET and fetch from the origin; `probe`: also send the GET in the background
    /// (then call [`SlowNodes::probe_ended`] when it ends).
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
    nodes: Mutex<Table>,
    /// Entries in `nodes`: while 0, an in-time GET records nothing and takes no lock.
    tracked: AtomicUsize,
    /// Nodes routed around now: while 0, [`SlowNodes::route`] takes no lock.
    routed: AtomicUsize,
    warned_at: Mutex<Option<Instant>>,
}

#[derive(Debug, Default)]
struct Table {
    nodes: HashMap<Arc<str>, Node>,
    swept_at: Option<Instant>,
}

/// A probe in flight: when it drops (the probe ended, or its task was cancelled or
/// panicked), the node's next probe may start.
pub(crate) struct Probe {
    slow: Arc<SlowNodes>,
    node: Arc<str>,
}

impl Probe {
    /// The probe of `node` that [`SlowNodes::route`] asked for.
    pub(crate) fn new(slow: Arc<SlowNodes>, node: Arc<str>) -> Self {
        Self { slow, node }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.slow.probe_ended(&self.node);
    }
}

impl SlowNodes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How a load should reach `node` at `now`.
    pub(crate) fn route(&self, node: &str, now: Instant) -> Route {
        if self.routed.load(Ordering::Acquire) == 0 {
            return Route::Get;
        }
        let mut table = self.lock();
        self.forget_idle(&mut table, now);
        let Some(n) = table.nodes.get_mut(node) else {
            return Route::Get;
        };
        n.last_seen = now;
        let Some(routed) = n.routed.as_mut() else {
            return Route::Get;
        };
        let probe = !routed.probing && now.duration_since(routed.last_probe) >= PROBE_INTERVAL;
        if probe {
            routed.last_probe = now;
            routed.probing = true;
        }
        Route::Around { probe }
    }

    /// A probe GET of `node` ended (answered, failed or timed out): the next may start.
    fn probe_ended(&self, node: &str) {
        let mut table = self.lock();
        if let Some(routed) = table.nodes.get_mut(node).and_then(|n| n.routed.as_mut()) {
            routed.probing = false;
        }
    }

    /// Records a GET to `node`: `late` when it was still running at the hedge delay, `probe`
    /// when it was a background probe of a routed node; `masters`: the masters of the slot
    /// map (0 while it is unknown), asked only when a node may be routed around. A GET that
    /// started before its node was routed around says nothing about recovery: only probes
    /// bring a node back.
    pub(crate) fn record(
        &self,
        node: &Arc<str>,
        late: bool,
        probe: bool,
        masters: impl FnOnce() -> usize,
    ) -> Option<Change> {
        if !late && self.tracked.load(Ordering::Acquire) == 0 {
            return None; // the healthy steady state: no window to move
        }
        let now = Instant::now();
        let mut table = self.lock();
        self.forget_idle(&mut table, now);
        let Some(n) = table.nodes.get_mut(node) else {
            if !late {
                return None;
            }
            if table.nodes.len() >= MAX_NODES {
                self.evict_one(&mut table.nodes);
            }
            table.nodes.insert(
                node.clone(),
                Node {
                    late: 1,
                    seen: 1,
                    last_seen: now,
                    routed: None,
                },
            );
            self.tracked.store(table.nodes.len(), Ordering::Release);
            return None;
        };
        n.last_seen = now;
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
            table.nodes.remove(node);
            self.tracked.store(table.nodes.len(), Ordering::Release);
            self.routed.fetch_sub(1, Ordering::AcqRel);
            return Some(Change::Recovered);
        }
        n.late = (n.late << 1) | u8::from(late);
        n.seen = (n.seen + 1).min(WINDOW as u8);
        if n.late == 0 {
            // No late GET left in its window: forgotten, so healthy GETs take no lock.
            table.nodes.remove(node);
            self.tracked.store(table.nodes.len(), Ordering::Release);
            return None;
        }
        if u32::from(n.seen) < WINDOW || n.late.count_ones() < ENTER_LATE {
            return None;
        }
        // At most half of the masters routed around, this one included.
        if (self.routed.load(Ordering::Acquire) + 1) * 2 > masters() {
            return None;
        }
        n.routed = Some(Routed {
            last_probe: now,
            probing: false,
            in_time: 0,
        });
        self.routed.fetch_add(1, Ordering::AcqRel);
        Some(Change::Slow)
    }

    /// Forgets the nodes no load asked for within [`IDLE`], at most every
    /// [`SWEEP_INTERVAL`].
    fn forget_idle(&self, table: &mut Table, now: Instant) {
        if table
            .swept_at
            .is_some_and(|t| now.saturating_duration_since(t) < SWEEP_INTERVAL)
        {
            return;
        }
        table.swept_at = Some(now);
        let before = table.nodes.len();
        table
            .nodes
            .retain(|_, n| now.saturating_duration_since(n.last_seen) < IDLE);
        if table.nodes.len() < before {
            let routed = table.nodes.values().filter(|n| n.routed.is_some()).count();
            self.routed.store(routed, Ordering::Release);
            self.tracked.store(table.nodes.len(), Ordering::Release);
        }
    }

    /// Forgets the least recently seen node not routed around (or any, when all are).
    fn evict_one(&self, nodes: &mut HashMap<Arc<str>, Node>) {
        let oldest = nodes
            .iter()
            .min_by_key(|(_, n)| (n.routed.is_some(), n.last_seen))
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest
            && nodes.remove(&k).is_some_and(|n| n.routed.is_some())
        {
            self.routed.fetch_sub(1, Ordering::AcqRel);
        }
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

    /// Nodes routed around now (forgetting those no load asked for lately).
    pub(crate) fn routed_nodes(&self) -> usize {
        if self.tracked.load(Ordering::Acquire) > 0 {
            self.forget_idle(&mut self.lock(), Instant::now());
        }
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
        // Healthy GETs leave nothing to track.
        assert_eq!(s.record(&fast, false, false, || 3), None);
        assert!(s.lock().nodes.is_empty());
        // Late, in time, then late on 5 of 8 (below 6): still used.
        for i in 0..8 {
            assert_eq!(s.record(&slow, i == 0 || i >= 4, false, || 3), None);
        }
        // The oldest late one leaves the window as a new one comes: still 5.
        assert_eq!(s.record(&slow, true, false, || 3), None);
        assert_eq!(s.route("a:1", t0), Route::Get);
        // Late on the next GET: 6 of the last 8 late.
        assert_eq!(s.record(&slow, true, false, || 3), Some(Change::Slow));
        assert_eq!(s.routed_nodes(), 1);
        assert_eq!(s.route("b:1", t0), Route::Get);
        // The first routed load after the interval probes; none while it runs.
        let later = Instant::now() + PROBE_INTERVAL;
        assert_eq!(s.route("a:1", later), Route::Around { probe: true });
        assert_eq!(
            s.route("a:1", later + PROBE_INTERVAL),
            Route::Around { probe: false }
        );
        s.probe_ended("a:1");
        assert_eq!(
            s.route("a:1", later + PROBE_INTERVAL),
            Route::Around { probe: true }
        );
        // GETs that started before the routing do not bring it back, nor two probes in time
        // and a late one.
        for _ in 0..EXIT_PROBES {
            assert_eq!(s.record(&slow, false, false, || 3), None);
        }
        for late in [false, false, true, false, false] {
            assert_eq!(s.record(&slow, late, true, || 3), None);
        }
        assert_eq!(s.record(&slow, false, true, || 3), Some(Change::Recovered));
        assert_eq!(s.routed_nodes(), 0);
        assert_eq!(s.route("a:1", later), Route::Get);
        // Back with a clean window: it takes most of 8 GETs late again.
        for _ in 0..WINDOW - 1 {
            assert_eq!(s.record(&slow, true, false, || 3), None);
        }
        assert_eq!(s.record(&slow, true, false, || 3), Some(Change::Slow));
    }

    #[test]
    fn at_most_half_of_the_masters_is_routed_around() {
        let s = SlowNodes::default();
        let (a, b, only, unknown) = (node("a:1"), node("b:1"), node("c:1"), node("*"));
        for _ in 0..WINDOW {
            s.record(&a, true, false, || 3);
            s.record(&b, true, false, || 3);
        }
        assert_eq!(s.routed_nodes(), 1, "one of three masters, not two");
        // The only node, or any node while the slot map is unknown (0 masters): never.
        let s = SlowNodes::default();
        for _ in 0..WINDOW * 2 {
            assert_eq!(s.record(&only, true, false, || 1), None);
            assert_eq!(s.record(&unknown, true, false, || 0), None);
        }
        assert_eq!(s.routed_nodes(), 0);
    }

    #[test]
    fn a_routed_node_no_load_asks_for_is_forgotten() {
        let s = SlowNodes::default();
        let gone = node("gone:1");
        for _ in 0..WINDOW {
            s.record(&gone, true, false, || 3);
        }
        let t0 = Instant::now();
        assert!(matches!(s.route("gone:1", t0), Route::Around { .. }));
        // Its keys moved to another address: loads ask for that one only.
        assert_eq!(s.route("new:1", t0 + IDLE), Route::Get);
        assert_eq!(s.routed.load(Ordering::Acquire), 0);
        assert_eq!(s.route("gone:1", t0 + IDLE), Route::Get);
    }

    #[test]
    fn the_nodes_tracked_are_bounded() {
        let s = SlowNodes::default();
        let sick = node("sick:1");
        for _ in 0..WINDOW {
            s.record(&sick, true, false, || MAX_NODES * 4);
        }
        for i in 0..MAX_NODES * 3 {
            s.record(&node(&format!("n{i}:1")), true, false, || MAX_NODES * 4);
        }
        assert!(s.lock().nodes.len() <= MAX_NODES);
        // The routed node is kept.
        assert!(matches!(
            s.route("sick:1", Instant::now()),
            Route::Around { .. }
        ));
    }

    #[test]
    fn a_node_with_a_late_get_no_load_asks_for_again_is_forgotten() {
        let s = SlowNodes::default();
        let left = node("left:1");
        s.record(&left, true, false, || 3);
        assert_eq!(s.tracked.load(Ordering::Acquire), 1);
        // It left the cluster after one late GET: no GET moves its window to empty again.
        let idle_since = Instant::now()
            .checked_sub(IDLE)
            .expect("an uptime past IDLE");
        let mut table = s.lock();
        table.nodes.get_mut("left:1").unwrap().last_seen = idle_since;
        table.swept_at = Some(idle_since); // the last sweep too was long ago
        drop(table);
        assert_eq!(s.routed_nodes(), 0);
        assert_eq!(
            s.tracked.load(Ordering::Acquire),
            0,
            "in-time GETs take no lock again"
        );
    }
}

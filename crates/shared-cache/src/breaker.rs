//! Circuit breakers, one per cache node (found from the cluster's slot map), plus one for
//! operations whose node is unknown.
//!
//! Closed: operations run; a run of `failures` consecutive failures on a node opens its breaker.
//! Open: operations on that node are skipped (the load goes to the origin at once) for the
//! cool-down. Half-open: one probe goes through; success closes, failure opens again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Breaker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Off: every operation runs.
    pub enabled: bool,
    /// Consecutive failures that open a breaker. Default 5.
    pub failures: u32,
    /// How long an open breaker skips operations before one probe. Default 1 s.
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            failures: 5,
            cooldown: Duration::from_secs(1),
        }
    }
}

mmcache_metrics::label_values! {
    /// The state of one breaker, for gauges and tests; the values of the `from` and `to`
    /// labels.
    #[non_exhaustive]
    pub enum BreakerState: "to" {
        /// Operations run.
        Closed = "closed",
        /// Operations are skipped until the cool-down ends.
        Open = "open",
        /// One probe is running.
        HalfOpen = "half_open",
    }
}

impl BreakerState {
    /// Gauge encoding: 0 closed, 1 open, 2 half-open.
    pub fn as_gauge(self) -> f64 {
        match self {
            Self::Closed => 0.0,
            Self::Open => 1.0,
            Self::HalfOpen => 2.0,
        }
    }
}

#[derive(Debug)]
struct One {
    state: BreakerState,
    consecutive: u32,
    opened_at: Option<Instant>,
}

impl Default for One {
    fn default() -> Self {
        Self {
            state: BreakerState::Closed,
            consecutive: 0,
            opened_at: None,
        }
    }
}

/// What the breaker says about an operation about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Run it.
    Run,
    /// Run it as the half-open probe.
    Probe,
    /// Skip it.
    Skip,
}

/// A state change, reported so the caller can count transitions.
pub(crate) type Transition = Option<(BreakerState, BreakerState)>;

/// Only nodes that failed since their last success have an entry, so in steady state the map
/// is empty and every call returns after one atomic load, without the lock.
#[derive(Debug)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    nodes: Mutex<HashMap<String, One>>,
    tracked: AtomicUsize,
}

impl Breakers {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            nodes: Mutex::new(HashMap::new()),
            tracked: AtomicUsize::new(0),
        }
    }

    /// True when no node has failed since its last success: nothing to check.
    pub(crate) fn is_idle(&self) -> bool {
        !self.config.enabled || self.tracked.load(Ordering::Acquire) == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, One>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn admit(&self, node: &str, now: Instant) -> (Admit, Transition) {
        if !self.config.enabled {
            return (Admit::Run, None);
        }
        let mut nodes = self.lock();
        let Some(b) = nodes.get_mut(node) else {
            return (Admit::Run, None);
        };
        match b.state {
            BreakerState::Closed => (Admit::Run, None),
            BreakerState::HalfOpen => (Admit::Skip, None),
            BreakerState::Open => {
                if b.opened_at
                    .is_some_and(|t| now.duration_since(t) >= self.config.cooldown)
                {
                    b.state = BreakerState::HalfOpen;
                    (
                        Admit::Probe,
                        Some((BreakerState::Open, BreakerState::HalfOpen)),
                    )
                } else {
                    (Admit::Skip, None)
                }
            }
        }
    }

    pub(crate) fn on_success(&self, node: &str) -> Transition {
        if self.is_idle() {
            return None;
        }
        let mut nodes = self.lock();
        let b = nodes.remove(node)?; // closed with no failures: no entry needed
        self.tracked.store(nodes.len(), Ordering::Release);
        (b.state != BreakerState::Closed).then_some((b.state, BreakerState::Closed))
    }

    pub(crate) fn on_failure(&self, node: &str, now: Instant) -> Transition {
        if !self.config.enabled {
            return None;
        }
        let mut nodes = self.lock();
        if !nodes.contains_key(node) {
            nodes.insert(node.to_owned(), One::default());
            self.tracked.store(nodes.len(), Ordering::Release);
        }
        let b = nodes.get_mut(node)?;
        b.consecutive = b.consecutive.saturating_add(1);
        let before = b.state;
        let open = match before {
            BreakerState::HalfOpen => true,
            BreakerState::Closed => b.consecutive >= self.config.failures,
            BreakerState::Open => false,
        };
        if open {
            b.state = BreakerState::Open;
            b.opened_at = Some(now);
            return Some((before, BreakerState::Open));
        }
        None
    }

    /// A probe that was admitted but never finished (cancelled): let the next one through.
    pub(crate) fn abandon_probe(&self, node: &str) {
        let mut nodes = self.lock();
        if let Some(b) = nodes.get_mut(node)
            && b.state == BreakerState::HalfOpen
        {
            b.state = BreakerState::Open;
        }
    }

    pub(crate) fn state(&self, node: &str) -> BreakerState {
        self.lock()
            .get(node)
            .map_or(BreakerState::Closed, |b| b.state)
    }

    pub(crate) fn states(&self) -> Vec<(String, BreakerState)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.state))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_a_run_probes_after_cooldown_and_closes_on_success() {
        let b = Breakers::new(BreakerConfig {
            enabled: true,
            failures: 3,
            cooldown: Duration::from_secs(1),
        });
        let t0 = Instant::now();
        assert_eq!(b.admit("n", t0).0, Admit::Run);
        b.on_failure("n", t0);
        b.on_failure("n", t0);
        b.on_success("n"); // a success breaks the run
        b.on_failure("n", t0);
        b.on_failure("n", t0);
        assert_eq!(b.state("n"), BreakerState::Closed);
        assert_eq!(
            b.on_failure("n", t0),
            Some((BreakerState::Closed, BreakerState::Open))
        );
        assert_eq!(b.admit("n", t0 + Duration::from_millis(999)).0, Admit::Skip);
        assert_eq!(
            b.admit("other", t0).0,
            Admit::Run,
            "other nodes are unaffected"
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.admit("n", t1).0, Admit::Probe);
        assert_eq!(b.admit("n", t1).0, Admit::Skip, "a single probe");
        // Failed probe: open again for another cool-down.
        assert_eq!(
            b.on_failure("n", t1),
            Some((BreakerState::HalfOpen, BreakerState::Open))
        );
        assert_eq!(b.admit("n", t1 + Duration::from_millis(500)).0, Admit::Skip);
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(b.admit("n", t2).0, Admit::Probe);
        assert_eq!(
            b.on_success("n"),
            Some((BreakerState::HalfOpen, BreakerState::Closed))
        );
        assert_eq!(b.admit("n", t2).0, Admit::Run);
    }

    #[test]
    fn disabled_never_skips() {
        let b = Breakers::new(BreakerConfig {
            enabled: false,
            ..Default::default()
        });
        let t = Instant::now();
        for _ in 0..100 {
            b.on_failure("n", t);
        }
        assert_eq!(b.admit("n", t).0, Admit::Run);
    }
}

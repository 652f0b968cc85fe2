//! Hedged shared-cache reads: when a GET has not answered within the hedge delay, the origin
//! fetch starts beside it and the first usable image wins.
//!
//! The delay follows the GET latency actually observed: a multiple of the median of the last
//! [`SAMPLES`] GETs that answered, clamped to `[min, max]`. The median, not a high percentile:
//! when one master of three is slow or hung, a third of all GETs are slow and any percentile
//! above the 67th would follow that node up to the cap, making every load to it wait; the
//! median stays with the healthy majority. A GET still running at the delay counts as taking
//! the delay, at that moment: a stopped or slow node answers its queued GETs all at once, and
//! recording their real latencies then would fill the samples with one burst and lift the
//! median (so every hedge) to the cap. Hedges are budgeted: each GET earns half a hedge (a
//! burst of [`BURST`] at most), so when most GETs are slow the hedges stop doubling the origin
//! traffic at the adaptive delay; a load over budget waits for its GET up to the cap, then
//! fetches from the origin all the same, so a slow node never costs a load more than the cap.
//!
//! While at most half of the recent GETs were late, the delay stays within
//! [`MINORITY_CEILING`] times the floor: a slow minority (one sick master) is what hedging is
//! for, and on a saturated machine the healthy GETs themselves slow down (scheduling, not
//! Redis), so 8 x their median would rise to 100-200 ms and make every load to the sick
//! master wait that (measured in the `outage-hung` bench's slow-node row). A late majority,
//! a cluster slow as a whole, lifts the delay towards the cap, doubling it at most per
//! recompute; once its GETs answer in time again, the ceiling is [`IN_TIME_MULTIPLE`] times
//! the median of the in-time GETs (when over the 4 floors), so the delay stays above the
//! cluster's latency instead of falling back to 4 floors and making most GETs late again
//! (which made it oscillate). The median of the in-time GETs stays with the healthy majority
//! when one master is sick; a p90 would follow the sick master's GETs that answer just
//! within the delay, and hold the delay up with them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ::metrics::Counter;
use mmcache_metrics::counted::Counted;

use crate::config::HedgeSettings;
use crate::metrics::{HEDGES, HedgeOutcome, PerLabel};
use crate::slow_nodes::SlowNodes;

/// GET latencies kept for the median.
const SAMPLES: usize = 128;
/// The delay is this many times the median GET latency (before the clamp).
const MEDIAN_MULTIPLE: u64 = 8;
/// Hedge tokens earned per GET, in thousandths: one hedge for every two GETs.
const EARN_PER_GET: u64 = 500;
/// Most hedges that may run back to back (thousandths of a token, like the balance).
const BURST: u64 = 64_000;
const COST: u64 = 1000;
/// GETs timed before the first hedge.
const WARM_UP: u64 = 16;
/// While at most half of the samples are late, the delay stays within this many floors...
const MINORITY_CEILING: u32 = 4;
/// ... or within this many times the median of the GETs that answered in time, when more.
const IN_TIME_MULTIPLE: u32 = 2;
/// Marks a sample of a GET that was still running at the delay (see `observe_late`).
const LATE: u32 = 1 << 31;

/// The adaptive delay and the hedge budget of one loader.
#[derive(Debug)]
pub(crate) struct Hedge {
    settings: HedgeSettings,
    /// Recent GET latencies in microseconds (0: no sample yet), [`LATE`] set on a GET that
    /// was still running at the delay.
    samples: [AtomicU32; SAMPLES],
    next: AtomicU64,
    /// The current delay, in microseconds.
    delay_us: AtomicU64,
    /// Hedge tokens, in thousandths.
    tokens: AtomicU64,
    answered: AtomicU64,
    /// Hedges taken from the budget (no metric: `origin_won`/`cache_won` also count the races
    /// of loads over budget, whose origin fetch starts at the cap).
    hedged: AtomicU64,
    /// [`HEDGES`] by outcome; [`HedgeStats::over_budget`] is its `over_budget` count, so the
    /// event is recorded once (see `mmcache_metrics::counted`).
    outcomes: PerLabel<Counted<Counter>>,
    /// The nodes whose GETs are mostly late, routed around (see `slow_nodes`).
    pub(crate) slow: Arc<SlowNodes>,
}

/// Counts of a loader's hedging, for tests, benchmarks and dashboards (the `metrics` facade
/// has the process-wide view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HedgeStats {
    /// GETs that answered and were timed.
    pub answered_gets: u64,
    /// Origin fetches started beside a slow GET.
    pub hedged: u64,
    /// Slow GETs not hedged because the budget was spent.
    pub over_budget: u64,
    /// The current hedge delay.
    pub delay: Duration,
    /// Loads that skipped their GET because its node was routed around (late on most of its
    /// recent GETs) and went to the origin at once.
    pub routed_around: u64,
    /// Nodes routed around now.
    pub slow_nodes: usize,
}

impl Hedge {
    pub(crate) fn new(settings: HedgeSettings) -> Self {
        Self {
            settings,
            samples: std::array::from_fn(|_| AtomicU32::new(0)),
            next: AtomicU64::new(0),
            delay_us: AtomicU64::new(micros(settings.min_delay)),
            tokens: AtomicU64::new(BURST),
            answered: AtomicU64::new(0),
            hedged: AtomicU64::new(0),
            outcomes: PerLabel::new(HedgeOutcome::ALL, |o: HedgeOutcome| {
                Counted::new(::metrics::counter!(HEDGES.name, "outcome" => o.as_str()))
            }),
            slow: Arc::default(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// How long to let a GET run alone.
    pub(crate) fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }

    /// The delay to use now: the adaptive one once this loader has timed [`WARM_UP`] GETs;
    /// before that the cap. Its first GETs also wait for the connection, so their latency says
    /// little about a normal GET; but a GET slower than the cap is sick whatever the
    /// connection did (the connect timeout is shorter), and a worker that starts while a node
    /// hangs must not wait the full I/O timeout on every early load.
    pub(crate) fn current_delay(&self) -> Duration {
        if self.answered.load(Ordering::Relaxed) >= WARM_UP {
            self.delay()
        } else {
            self.settings.max_delay
        }
    }

    /// The longest delay: a load over the hedge budget waits this long for its GET.
    pub(crate) fn max_delay(&self) -> Duration {
        self.settings.max_delay
    }

    /// The longest a load waits for its SET: the same budget as a GET.
    pub(crate) fn set_wait(&self) -> Duration {
        self.current_delay()
    }

    /// Records a GET that answered (hit, miss or oversized) within the delay, after `latency`;
    /// earns hedge budget, and every [`SAMPLES`] / 4 GETs recomputes the delay.
    pub(crate) fn observe(&self, latency: Duration) {
        self.sample(latency, 0);
    }

    fn sample(&self, latency: Duration, flag: u32) {
        // Below the flag bit: 35 minutes, far above any cap.
        let us = u32::try_from(micros(latency))
            .unwrap_or(LATE - 1)
            .clamp(1, LATE - 1)
            | flag;
        self.answered.fetch_add(1, Ordering::Relaxed);
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.samples[(n as usize) % SAMPLES].store(us, Ordering::Relaxed);
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some((t + EARN_PER_GET).min(BURST))
            });
        // Also when the warm-up ends, so the first adaptive delay rests on all of its GETs,
        // not on the first one alone (which waited for the connection too).
        if n.is_multiple_of(SAMPLES as u64 / 4) || n + 1 == WARM_UP {
            self.recompute();
        }
    }

    /// Records a GET still running at the hedge `delay` as taking the delay, now (in the
    /// order GETs started) and once: its real latency, when a stopped or slow node finally
    /// answers, arrives in a burst with the others that node held, and would lift the median
    /// for everyone. A majority of such GETs still raises the delay (8 x the delay itself),
    /// so the delay follows a cluster that is slow as a whole.
    pub(crate) fn observe_late(&self, delay: Duration) {
        self.sample(delay, LATE);
    }

    fn recompute(&self) {
        let raw: Vec<u32> = self
            .samples
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&us| us > 0)
            .collect();
        if raw.is_empty() {
            return;
        }
        let mut in_time: Vec<u32> = raw.iter().copied().filter(|&us| us & LATE == 0).collect();
        let late = raw.len() - in_time.len();
        let mut v: Vec<u32> = raw.iter().map(|&us| us & !LATE).collect();
        let mid = v.len() / 2;
        let median = u64::from(*v.select_nth_unstable(mid).1);
        let (floor, cap) = (self.settings.min_delay, self.settings.max_delay);
        // A late majority climbs at most 2x per recompute (the median is then the delay
        // itself, and 8x would jump): a borderline moment, when healthy GETs hover around the
        // floor, costs one step, while a cluster slow as a whole still reaches the cap within
        // a few recomputes. Otherwise the ceiling is 4 floors, or twice the median of the GETs
        // that answered in time when that is more: a cluster uniformly slower than 4 floors
        // keeps the delay it climbed to (its GETs stay in time), where a fixed ceiling would
        // drop it back each time its late GETs became a minority, and make them late again.
        // The median, not a high percentile: a sick master's GETs that answer just within the
        // delay would hold a p90 up (and with it the delay they answered within).
        let ceiling = if late * 2 > v.len() {
            self.delay() * 2
        } else {
            let in_time_median = match in_time.len() {
                0 => 0,
                n => *in_time.select_nth_unstable(n / 2).1,
            };
            let in_time_median = Duration::from_micros(u64::from(in_time_median));
            (floor * MINORITY_CEILING).max(in_time_median * IN_TIME_MULTIPLE)
        }
        .min(cap);
        let delay = median
            .saturating_mul(MEDIAN_MULTIPLE)
            .clamp(micros(floor), micros(ceiling.max(floor)));
        self.delay_us.store(delay, Ordering::Relaxed);
    }

    /// Takes one hedge from the budget; false when it is spent (the caller then records
    /// [`HedgeOutcome::OverBudget`]).
    pub(crate) fn try_take(&self) -> bool {
        let taken = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_sub(COST)
            })
            .is_ok();
        if taken {
            self.hedged.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Counts how a hedged GET ended (a load over budget: [`HedgeOutcome::OverBudget`]).
    pub(crate) fn record(&self, outcome: HedgeOutcome) {
        self.outcomes.get(outcome as usize).increment();
    }

    pub(crate) fn stats(&self) -> HedgeStats {
        HedgeStats {
            answered_gets: self.answered.load(Ordering::Relaxed),
            hedged: self.hedged.load(Ordering::Relaxed),
            over_budget: self.outcomes.get(HedgeOutcome::OverBudget as usize).count(),
            delay: self.delay(),
            routed_around: self
                .outcomes
                .get(HedgeOutcome::RoutedAround as usize)
                .count(),
            slow_nodes: self.slow.routed_nodes(),
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_follows_the_median_within_its_clamp() {
        let h = Hedge::new(HedgeSettings::default());
        assert_eq!(h.delay(), Duration::from_millis(20));
        // A healthy majority at 1 ms and a third of GETs at 300 ms: 8 x median = 8 ms, so
        // the floor holds.
        for i in 0..SAMPLES * 2 {
            let ms = if i % 3 == 0 { 300 } else { 1 };
            h.observe(Duration::from_millis(ms));
        }
        assert_eq!(h.delay(), Duration::from_millis(20));
        // Every GET at 8 ms, in time: 64 ms.
        for _ in 0..SAMPLES * 2 {
            h.observe(Duration::from_millis(8));
        }
        assert_eq!(h.delay(), Duration::from_millis(64));
        // Every GET at 15 ms, in time (a saturated machine): 4 x the floor, not 120 ms.
        for _ in 0..SAMPLES * 2 {
            h.observe(Duration::from_millis(15));
        }
        assert_eq!(h.delay(), Duration::from_millis(80));
        // Every GET late: the cap.
        for _ in 0..SAMPLES * 2 {
            h.observe_late(h.current_delay());
        }
        assert_eq!(h.delay(), Duration::from_millis(250));
    }

    #[test]
    fn the_cap_until_the_warm_up_then_the_adaptive_delay() {
        let h = Hedge::new(HedgeSettings::default());
        // The first GET also waited for the connection: it must not set the delay alone.
        h.observe(Duration::from_millis(200));
        for _ in 0..WARM_UP - 2 {
            h.observe(Duration::from_millis(5));
        }
        assert_eq!(h.current_delay(), Duration::from_millis(250));
        h.observe(Duration::from_millis(5));
        // 8 x the median of the 16 (5 ms), not 8 x 200 ms clamped to the cap.
        assert_eq!(h.current_delay(), Duration::from_millis(40));
    }

    #[test]
    fn late_gets_count_at_the_delay_and_a_slow_majority_still_raises_it() {
        let h = Hedge::new(HedgeSettings::default());
        // A third of GETs late (counted at the 20 ms delay), the rest at 1 ms: the floor.
        for i in 0..SAMPLES * 2 {
            if i % 3 == 0 {
                h.observe_late(h.current_delay());
            } else {
                h.observe(Duration::from_millis(1));
            }
        }
        assert_eq!(h.delay(), Duration::from_millis(20));
        // Every GET late: the delay climbs to the cap within a few recomputes.
        for _ in 0..SAMPLES * 2 {
            h.observe_late(h.current_delay());
        }
        assert_eq!(h.delay(), Duration::from_millis(250));
    }

    #[test]
    fn a_late_minority_on_a_slow_machine_stays_within_four_floors() {
        let h = Hedge::new(HedgeSettings::default());
        // Healthy GETs at 25 ms (a saturated machine), a third late: 8 x 25 ms = 200 ms
        // without the ceiling.
        for i in 0..SAMPLES * 2 {
            if i % 3 == 0 {
                h.observe_late(h.current_delay());
            } else {
                h.observe(Duration::from_millis(25));
            }
        }
        assert_eq!(h.delay(), Duration::from_millis(80));
    }

    /// Drives `h` with `gets` GETs whose latencies `latency(i)` gives, each timed as the
    /// loader times it: in time when it answers within the current delay, else late at the
    /// delay. Returns the delays seen after each GET and how many GETs were late.
    fn drive(
        h: &Hedge,
        gets: usize,
        latency: impl Fn(usize) -> Duration,
    ) -> (Vec<Duration>, usize) {
        let mut late = 0;
        let delays = (0..gets)
            .map(|i| {
                let delay = h.current_delay();
                let took = latency(i);
                if took < delay {
                    h.observe(took);
                } else {
                    late += 1;
                    h.observe_late(delay);
                }
                h.current_delay()
            })
            .collect();
        (delays, late)
    }

    #[test]
    fn a_cluster_uniformly_slower_than_four_floors_settles_above_its_latency() {
        // Every GET takes 100 ms (over 4 x the 20 ms floor, under the 250 ms cap): once the
        // delay has climbed past 100 ms it must stay there, not fall back to the 80 ms
        // ceiling each time the late GETs become a minority and make them all late again.
        let h = Hedge::new(HedgeSettings::default());
        let _ = drive(&h, SAMPLES * 8, |_| Duration::from_millis(100));
        let (delays, late) = drive(&h, SAMPLES * 16, |_| Duration::from_millis(100));
        let lowest = delays.iter().min().unwrap();
        assert!(
            late == 0 && *lowest > Duration::from_millis(100),
            "{late} of {} GETs late in steady state; the delay fell to {lowest:?}",
            delays.len()
        );
        // The same with jitter (60-159 ms): a few of the slowest GETs late at most.
        let h = Hedge::new(HedgeSettings::default());
        let jittered = |i: usize| Duration::from_millis(60 + (i as u64 * 37) % 100);
        let _ = drive(&h, SAMPLES * 8, jittered);
        let (delays, late) = drive(&h, SAMPLES * 16, jittered);
        assert!(
            late * 20 < delays.len(),
            "{late} of {} GETs late",
            delays.len()
        );
    }

    #[test]
    fn a_slow_master_on_a_slow_machine_keeps_the_delay_within_four_floors() {
        // Two masters answer in 25 ms (a saturated machine); the third stops 300 ms of every
        // 320, so its GETs take anywhere from 1 to 320 ms and some answer in time.
        let h = Hedge::new(HedgeSettings::default());
        let latency = |i: usize| {
            if i.is_multiple_of(3) {
                Duration::from_millis(1 + (i as u64 * 37) % 320)
            } else {
                Duration::from_millis(25)
            }
        };
        let _ = drive(&h, SAMPLES * 8, latency);
        let (delays, _) = drive(&h, SAMPLES * 16, latency);
        let highest = delays.iter().max().unwrap();
        assert!(*highest <= Duration::from_millis(80), "{highest:?}");
    }

    #[test]
    fn hedges_are_budgeted_to_half_the_gets() {
        let h = Hedge::new(HedgeSettings::default());
        let burst = (BURST / COST) as usize;
        assert_eq!((0..burst * 2).filter(|_| h.try_take()).count(), burst);
        // Then one hedge per two GETs.
        for _ in 0..10 {
            h.observe(Duration::from_millis(1));
        }
        assert_eq!((0..10).filter(|_| h.try_take()).count(), 5);
    }
}

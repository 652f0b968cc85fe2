//! Metric handles that also keep their holder's own count, so that an event is recorded once:
//! a component's stats (`SharedCache::stats`, `Loader::hedge_stats`, a cache's `stats`) read
//! the count of the very handle its metric is recorded through, and the two cannot disagree.
//!
//! Why the count is kept beside the handle rather than read from the metric: the `metrics`
//! facade's handles are write-only; the recorder's value is process-wide (every instance of a
//! kind adds to one series, and a process may hold several: tests, a fleet of loaders); and
//! without an installed recorder the handle does nothing, while the stats must still count.
//! One call per event updates both; no lock is taken.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use metrics::{Counter, Gauge, Histogram};

/// A counter or histogram handle, and how many events its holder recorded through it.
#[derive(Debug)]
pub struct Counted<M> {
    count: AtomicU64,
    metric: M,
}

impl<M> Counted<M> {
    /// Wraps a resolved handle; the count starts at zero.
    pub fn new(metric: M) -> Self {
        Self {
            count: AtomicU64::new(0),
            metric,
        }
    }

    /// Events recorded through this handle.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn counted(&self) -> &M {
        self.count.fetch_add(1, Ordering::Relaxed);
        &self.metric
    }
}

impl Counted<Counter> {
    /// Counts one event.
    pub fn increment(&self) {
        self.counted().increment(1);
    }
}

impl Counted<Histogram> {
    /// Observes one event's value (a duration in seconds, say).
    pub fn record(&self, value: f64) {
        self.counted().record(value);
    }
}

/// A gauge that every instance of a kind adds to by deltas, and this instance's share of it:
/// the share is its own level (entries or bytes it holds), and is taken out of the gauge when
/// the instance drops.
#[derive(Debug)]
pub struct Level {
    value: AtomicI64,
    gauge: Gauge,
}

impl Level {
    /// Wraps a resolved gauge handle; the share starts at zero.
    pub fn new(gauge: Gauge) -> Self {
        Self {
            value: AtomicI64::new(0),
            gauge,
        }
    }

    /// Moves this instance's share by `delta`.
    pub fn add(&self, delta: i64) {
        if delta != 0 {
            self.value.fetch_add(delta, Ordering::Relaxed);
            self.gauge.increment(delta as f64);
        }
    }

    /// This instance's share.
    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }
}

impl Drop for Level {
    fn drop(&mut self) {
        self.gauge.decrement(*self.value.get_mut() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_without_a_recorder() {
        // No recorder is installed in this test: the handles do nothing, the counts still go.
        let counter = Counted::new(Counter::noop());
        counter.increment();
        counter.increment();
        assert_eq!(counter.count(), 2);
        let histogram = Counted::new(Histogram::noop());
        histogram.record(0.5);
        assert_eq!(histogram.count(), 1);
        let level = Level::new(Gauge::noop());
        level.add(5);
        level.add(-2);
        assert_eq!(level.get(), 3);
    }
}

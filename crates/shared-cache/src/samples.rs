//! A bounded buffer of GET/SET latency samples, for exporters that observe raw durations
//! into histograms of their own on each scrape: Dynamo's `register_image_loader_metrics`
//! drains `SharedImageCacheStats.snapshot_and_drain()` this way.
//!
//! Off by default: until [`crate::SharedCache::enable_duration_samples`] is called, recording
//! costs one atomic load. When on, a sample is a short mutex push, as in Dynamo. At most
//! [`MAX_PENDING_SAMPLES`] samples wait between two drains (Dynamo's `_MAX_PENDING_DURATIONS`);
//! later ones are dropped and counted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Samples kept between two drains: Dynamo's `_MAX_PENDING_DURATIONS`.
pub const MAX_PENDING_SAMPLES: usize = 10_000;

/// The operation of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SampleOp {
    /// An image-entry GET (`STRLEN` and `GETRANGE`), leased waits' GETs and hedged GETs included.
    Get,
    /// An image-entry SET, write-behind and backgrounded SETs included (sampled when they end).
    Set,
}

impl SampleOp {
    /// Dynamo's operation name: `get` or `set`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Set => "set",
        }
    }
}

/// The samples of one `(operation, outcome, size_bucket)` series.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleSeries {
    /// `get` or `set`.
    pub op: SampleOp,
    /// The metric's `outcome` label (`hit`, `miss`, `error`; `success`, `error`).
    pub outcome: &'static str,
    /// The metric's `size_bucket` label ([`crate::metrics::size_bucket`]).
    pub size_bucket: &'static str,
    /// Durations in seconds, in the order they were recorded.
    pub seconds: Vec<f64>,
}

/// What one drain took.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct DrainedSamples {
    /// Non-empty series, in a fixed order (GET before SET).
    pub series: Vec<SampleSeries>,
    /// Samples dropped since the previous drain because the buffer was full.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Pending {
    /// One vector per series, indexed as the metric handles are.
    series: Vec<(SampleOp, &'static str, &'static str, Vec<f64>)>,
    count: usize,
    dropped: u64,
}

/// The buffer.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    pending: Mutex<Pending>,
    dropped_total: AtomicU64,
}

impl Samples {
    pub(crate) fn record(
        &self,
        op: SampleOp,
        outcome: &'static str,
        size_bucket: &'static str,
        elapsed: Duration,
    ) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.count >= MAX_PENDING_SAMPLES {
            p.dropped += 1;
            drop(p);
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            return;
        }
        p.count += 1;
        let secs = elapsed.as_secs_f64();
        // A handful of series exist (2 ops x 3 outcomes x 8 buckets at most): a scan is cheap.
        match p
            .series
            .iter_mut()
            .find(|(o, out, b, _)| *o == op && *out == outcome && *b == size_bucket)
        {
            Some((_, _, _, v)) => v.push(secs),
            None => p.series.push((op, outcome, size_bucket, vec![secs])),
        }
    }

    pub(crate) fn drain(&self) -> DrainedSamples {
        let taken = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *p)
        };
        let mut series: Vec<SampleSeries> = taken
            .series
            .into_iter()
            .map(|(op, outcome, size_bucket, seconds)| SampleSeries {
                op,
                outcome,
                size_bucket,
                seconds,
            })
            .collect();
        series.sort_by_key(|s| (s.op == SampleOp::Set, s.outcome, s.size_bucket));
        DrainedSamples {
            series,
            dropped: taken.dropped,
        }
    }

    pub(crate) fn dropped_total(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_pending_samples_and_counts_the_dropped() {
        let s = Samples::default();
        for _ in 0..MAX_PENDING_SAMPLES + 3 {
            s.record(SampleOp::Get, "hit", "le_64kib", Duration::from_millis(1));
        }
        s.record(
            SampleOp::Set,
            "success",
            "le_64kib",
            Duration::from_millis(1),
        );
        let d = s.drain();
        assert_eq!(d.series.len(), 1);
        assert_eq!(d.series[0].seconds.len(), MAX_PENDING_SAMPLES);
        assert_eq!(d.dropped, 4);
        assert_eq!(s.dropped_total(), 4);
        // Drained: room again, nothing pending.
        assert_eq!(s.drain(), DrainedSamples::default());
        s.record(SampleOp::Set, "error", "le_1mib", Duration::from_millis(2));
        let d = s.drain();
        assert_eq!((d.series.len(), d.dropped), (1, 0));
        assert_eq!(d.series[0].seconds, vec![0.002]);
        assert_eq!(s.dropped_total(), 4);
    }
}

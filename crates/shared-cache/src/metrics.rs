//! Metric names, labels and buckets, compatible with the Python implementation.
//!
//! The library records through the `metrics` facade and never installs an exporter. Labels
//! never hold a URL, a key or a scope.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Histogram};

use crate::samples::SampleOp;

/// GET latency histogram; labels `outcome` (`hit`, `miss`, `error`) and `size_bucket`.
pub const GET_DURATION: &str = "dynamo_component_image_shared_cache_get_duration_seconds";
/// SET latency histogram; labels `outcome` (`success`, `error`) and `size_bucket`.
pub const SET_DURATION: &str = "dynamo_component_image_shared_cache_set_duration_seconds";
/// DEL counter; label `outcome` (`success`, `error`).
pub const DELETES: &str = "mmcache_shared_cache_deletes_total";
/// Failure counter; labels `op` (`get`, `set`, `del`, ...) and `kind` (`timeout`, `connect`,
/// `cluster`, `other`).
pub const ERRORS: &str = "mmcache_shared_cache_errors_total";
/// Operations not attempted; labels `op` and `reason` (`breaker_open`, `too_large`).
pub const SKIPPED: &str = "mmcache_shared_cache_skipped_total";

/// Breaker transitions; labels `from` and `to` (`closed`, `open`, `half_open`).
pub const BREAKER_TRANSITIONS: &str = "mmcache_shared_cache_breaker_transitions_total";
/// Breakers currently open or half-open (gauge).
pub const BREAKERS_OPEN: &str = "mmcache_shared_cache_breakers_open";

/// Latency buckets in seconds, 1 ms to 4 s. Apply them where the exporter is built.
pub const LATENCY_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0,
];

/// Names of the histograms that take [`LATENCY_BUCKETS`].
pub const HISTOGRAMS: [&str; 2] = [GET_DURATION, SET_DURATION];

/// The `size_bucket` label of a value of `len` bytes (inclusive upper bounds).
pub fn size_bucket(len: Option<usize>) -> &'static str {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    match len {
        None => "unknown",
        Some(n) if n <= 64 * KIB => "le_64kib",
        Some(n) if n <= 256 * KIB => "le_256kib",
        Some(n) if n <= MIB => "le_1mib",
        Some(n) if n <= 4 * MIB => "le_4mib",
        Some(n) if n <= 16 * MIB => "le_16mib",
        Some(n) if n <= 32 * MIB => "le_32mib",
        Some(_) => "gt_32mib",
    }
}

/// How a GET ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GetOutcome {
    /// The entry was there.
    Hit,
    /// No entry.
    Miss,
    /// The operation failed (and the load went on without the cache).
    Error,
    /// Not attempted (circuit breaker open).
    Skipped,
    /// The entry is longer than [`crate::SharedCacheConfig::max_read_bytes`]: not read, no
    /// value returned. Recorded as a `hit` with size bucket `unknown`.
    Oversized,
    /// Not read: the read memory ([`crate::SharedCacheConfig::read_memory`]) had no room
    /// within its wait. Counted in `mmcache_shared_cache_skipped_total{reason="no_memory"}`.
    NoMemory,
}

impl GetOutcome {
    /// The metric label value. An oversized entry is a `hit` (the entry was there): the
    /// design's labels are `hit`, `miss` and `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit | Self::Oversized => "hit",
            Self::Miss => "miss",
            Self::Error => "error",
            Self::Skipped | Self::NoMemory => "skipped",
        }
    }
}

/// How a SET or DEL ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// Written (or deleted).
    Success,
    /// The operation failed.
    Error,
    /// Not attempted (breaker open, value over the size cap, write queue full).
    Skipped,
    /// Still running in the background: a bounded store whose wait ended first
    /// ([`crate::SharedCache::store_within`]). Its real outcome is recorded when it ends.
    Pending,
}

impl WriteOutcome {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Skipped => "skipped",
            Self::Pending => "pending",
        }
    }
}

/// `size_bucket` values, in index order ("unknown" last).
const BUCKETS: [&str; 8] = [
    "le_64kib",
    "le_256kib",
    "le_1mib",
    "le_4mib",
    "le_16mib",
    "le_32mib",
    "gt_32mib",
    "unknown",
];
/// `op` values.
const OPS: [&str; 4] = ["get", "set", "del", "lease"];
/// Skip `reason` values.
const REASONS: [&str; 4] = ["breaker_open", "too_large", "queue_full", "no_memory"];
/// Failure `kind` values, in [`crate::FailureKind`] order.
const KINDS: [crate::FailureKind; 5] = [
    crate::FailureKind::Timeout,
    crate::FailureKind::Connect,
    crate::FailureKind::Cluster,
    crate::FailureKind::Reply,
    crate::FailureKind::Other,
];

fn index_of(all: &[&str], value: &str) -> usize {
    all.iter()
        .position(|v| *v == value)
        .unwrap_or(all.len() - 1)
}

/// The metric handles of one cache, each registered with the recorder on first use and then
/// reused: no registry lookup and no label allocation per operation. A label combination that
/// never occurs is never registered, so the exposition matches the Python implementation's.
#[derive(Default)]
pub(crate) struct Handles {
    /// GET by outcome (hit, miss, error) and size bucket.
    get: [OnceLock<Histogram>; 3 * BUCKETS.len()],
    /// SET by outcome (success, error) and size bucket.
    set: [OnceLock<Histogram>; 2 * BUCKETS.len()],
    /// DEL by outcome (success, error, skipped).
    deletes: [OnceLock<Counter>; 3],
    /// Failures by op and kind.
    errors: [OnceLock<Counter>; OPS.len() * KINDS.len()],
    /// Skips by op and reason.
    skips: [OnceLock<Counter>; OPS.len() * REASONS.len()],
    /// Raw GET/SET samples for a scraping exporter; set once enabled (see `samples.rs`).
    pub(crate) samples: OnceLock<crate::samples::Samples>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}

impl Handles {
    pub(crate) fn record_get(&self, outcome: GetOutcome, len: Option<usize>, elapsed: Duration) {
        let row = match outcome {
            GetOutcome::Skipped | GetOutcome::NoMemory => return,
            GetOutcome::Hit | GetOutcome::Oversized => 0,
            GetOutcome::Miss => 1,
            GetOutcome::Error => 2,
        };
        let bucket = if outcome == GetOutcome::Hit {
            size_bucket(len)
        } else {
            "unknown"
        };
        let slot = row * BUCKETS.len() + index_of(&BUCKETS, bucket);
        self.get[slot]
            .get_or_init(|| {
                metrics::histogram!(GET_DURATION, "outcome" => outcome.as_str(), "size_bucket" => bucket)
            })
            .record(elapsed.as_secs_f64());
        if let Some(samples) = self.samples.get() {
            samples.record(SampleOp::Get, outcome.as_str(), bucket, elapsed);
        }
    }

    pub(crate) fn record_set(&self, outcome: WriteOutcome, len: usize, elapsed: Duration) {
        let row = match outcome {
            WriteOutcome::Skipped | WriteOutcome::Pending => return,
            WriteOutcome::Success => 0,
            WriteOutcome::Error => 1,
        };
        let bucket = size_bucket(Some(len));
        let slot = row * BUCKETS.len() + index_of(&BUCKETS, bucket);
        self.set[slot]
            .get_or_init(|| {
                metrics::histogram!(SET_DURATION, "outcome" => outcome.as_str(), "size_bucket" => bucket)
            })
            .record(elapsed.as_secs_f64());
        if let Some(samples) = self.samples.get() {
            samples.record(SampleOp::Set, outcome.as_str(), bucket, elapsed);
        }
    }

    pub(crate) fn record_delete(&self, outcome: WriteOutcome) {
        let slot = match outcome {
            WriteOutcome::Success => 0,
            WriteOutcome::Error => 1,
            WriteOutcome::Skipped | WriteOutcome::Pending => 2,
        };
        self.deletes[slot]
            .get_or_init(|| metrics::counter!(DELETES, "outcome" => outcome.as_str()))
            .increment(1);
    }

    pub(crate) fn record_error(&self, op: &'static str, kind: crate::FailureKind) {
        let k = KINDS
            .iter()
            .position(|x| *x == kind)
            .unwrap_or(KINDS.len() - 1);
        let slot = index_of(&OPS, op) * KINDS.len() + k;
        self.errors[slot]
            .get_or_init(|| metrics::counter!(ERRORS, "op" => op, "kind" => kind.as_str()))
            .increment(1);
    }

    pub(crate) fn record_skip(&self, op: &'static str, reason: &'static str) {
        let slot = index_of(&OPS, op) * REASONS.len() + index_of(&REASONS, reason);
        self.skips[slot]
            .get_or_init(|| metrics::counter!(SKIPPED, "op" => op, "reason" => reason))
            .increment(1);
    }
}

pub(crate) fn record_breaker(from: crate::BreakerState, to: crate::BreakerState) {
    metrics::counter!(BREAKER_TRANSITIONS, "from" => from.as_str(), "to" => to.as_str())
        .increment(1);
    let gauge = metrics::gauge!(BREAKERS_OPEN);
    match (from, to) {
        (crate::BreakerState::Closed, _) => gauge.increment(1.0),
        (_, crate::BreakerState::Closed) => gauge.decrement(1.0),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets_have_inclusive_bounds() {
        const KIB: usize = 1024;
        let cases = [
            (None, "unknown"),
            (Some(0), "le_64kib"),
            (Some(64 * KIB), "le_64kib"),
            (Some(64 * KIB + 1), "le_256kib"),
            (Some(256 * KIB), "le_256kib"),
            (Some(1024 * KIB), "le_1mib"),
            (Some(1024 * KIB + 1), "le_4mib"),
            (Some(4 * 1024 * KIB), "le_4mib"),
            (Some(16 * 1024 * KIB), "le_16mib"),
            (Some(32 * 1024 * KIB), "le_32mib"),
            (Some(32 * 1024 * KIB + 1), "gt_32mib"),
        ];
        for (len, want) in cases {
            assert_eq!(size_bucket(len), want, "{len:?}");
        }
    }

    #[test]
    fn buckets_span_1ms_to_4s() {
        assert_eq!(LATENCY_BUCKETS.first(), Some(&0.001));
        assert_eq!(LATENCY_BUCKETS.last(), Some(&4.0));
        assert!(LATENCY_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}

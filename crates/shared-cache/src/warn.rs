//! Rate-limited failure warnings: the first failure warns at once, then at most one warning
//! per interval, carrying the number of failures since the previous warning.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Interval between two failure warnings.
pub const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// A source of "now", injectable so tests can move time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to. A test seam: only with the feature `test-seams`.
#[cfg(any(test, feature = "test-seams"))]
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    offset: Mutex<Duration>,
}

#[cfg(any(test, feature = "test-seams"))]
impl Default for ManualClock {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        }
    }
}

#[cfg(any(test, feature = "test-seams"))]
impl ManualClock {
    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

#[cfg(any(test, feature = "test-seams"))]
impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Decides when a failure deserves a warning.
#[derive(Debug)]
pub(crate) struct WarnLimiter {
    clock: Arc<dyn Clock>,
    interval: Duration,
    state: Mutex<WarnState>,
}

#[derive(Debug, Default)]
struct WarnState {
    last_warning: Option<Instant>,
    failures_since: u64,
}

impl WarnLimiter {
    pub(crate) fn new(clock: Arc<dyn Clock>, interval: Duration) -> Self {
        Self {
            clock,
            interval,
            state: Mutex::new(WarnState::default()),
        }
    }

    /// Counts one failure; returns `Some(failures since the last warning, this one included)`
    /// when a warning is due now.
    pub(crate) fn on_failure(&self) -> Option<u64> {
        let now = self.clock.now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.failures_since += 1;
        let due = st
            .last_warning
            .is_none_or(|t| now.duration_since(t) >= self.interval);
        if !due {
            return None;
        }
        st.last_warning = Some(now);
        Some(std::mem::take(&mut st.failures_since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_at_once_then_one_per_interval_with_count() {
        let clock = Arc::new(ManualClock::default());
        let limiter = WarnLimiter::new(clock.clone(), Duration::from_secs(60));
        assert_eq!(limiter.on_failure(), Some(1));
        for _ in 0..9 {
            assert_eq!(limiter.on_failure(), None);
        }
        clock.advance(Duration::from_secs(59));
        assert_eq!(limiter.on_failure(), None);
        clock.advance(Duration::from_secs(1));
        assert_eq!(limiter.on_failure(), Some(11)); // 9 + 1 suppressed, plus this one
        assert_eq!(limiter.on_failure(), None);
        clock.advance(Duration::from_secs(3600));
        assert_eq!(limiter.on_failure(), Some(2));
    }
}

//! Bounds on every disk operation, so a stalled disk (NFS, EBS) cannot park loads or take the
//! blocking pool that decodes use:
//!
//! - a deadline: an operation not done within it is a miss (or a skipped write) for its caller;
//!   its thread goes on until the syscall returns;
//! - a semaphore: at most `max_blocking_ops` blocking disk operations at once per cache; the
//!   closure holds its permit until the syscall really returns, and an operation that cannot
//!   get one within [`PERMIT_WAIT`] is skipped;
//! - a breaker: [`BREAKER_FAILURES`] timeouts or `EIO`s in a row skip the disk for
//!   [`BREAKER_COOLDOWN`]; after it, operations run again and one more failure opens it again
//!   at once, one success closes it. No permit in time counts only when every permit is held
//!   by an operation already past its deadline (`stalled`): the disk has not answered any of
//!   them. Otherwise it is `busy`, this process's own load on a disk that answers, and does
//!   not count: a burst of loads must not turn off a healthy disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use crate::fsops::{FsError, FsResult};
use crate::metrics;

/// Longest wait for a permit: all of them held that long means the disk is stalled or
/// saturated, and the load is better served by the next tier.
pub const PERMIT_WAIT: Duration = Duration::from_millis(100);
/// Failures in a row that open the breaker.
pub const BREAKER_FAILURES: u32 = 5;
/// How long an open breaker skips the disk.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(5);

/// Why an operation did not run to its end in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounded {
    /// The breaker is open.
    Breaker,
    /// No permit within [`PERMIT_WAIT`], some held by operations within their deadline.
    Busy,
    /// No permit within [`PERMIT_WAIT`], every one held by an operation past its deadline.
    Stalled,
    /// Past the deadline (the operation goes on in the background).
    Timeout,
    /// The blocking closure panicked.
    Panicked,
}

impl Bounded {
    fn label(self) -> &'static str {
        match self {
            Bounded::Breaker => "breaker_open",
            Bounded::Busy => "busy",
            Bounded::Stalled => "stalled",
            Bounded::Timeout => "timeout",
            Bounded::Panicked => "panicked",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Guard {
    permits: Arc<Semaphore>,
    timeout: Duration,
    /// Failures in a row.
    failures: AtomicU32,
    /// Milliseconds since `epoch` until which the breaker is open (0: closed).
    open_until: AtomicU64,
    epoch: Instant,
    pending: Arc<Pending>,
    /// The permits, and how many of them are held by operations past their deadline.
    max_ops: usize,
    overdue: Arc<AtomicUsize>,
}

/// An operation's progress, shared by its caller and its blocking closure.
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const OVERDUE: u8 = 2;

/// Dropped when an operation's blocking part returns: an overdue one stops counting as such.
struct Finished {
    state: Arc<AtomicU8>,
    overdue: Arc<AtomicUsize>,
}

impl Drop for Finished {
    fn drop(&mut self) {
        if self.state.swap(DONE, Ordering::AcqRel) == OVERDUE {
            self.overdue.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Writes whose blocking part has not returned yet.
#[derive(Debug, Default)]
struct Pending {
    count: AtomicUsize,
    idle: Notify,
}

/// Held by a write's blocking closure; the write stops counting as pending when it drops.
#[derive(Debug)]
pub(crate) struct PendingWrite(Arc<Pending>);

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Guard {
    pub(crate) fn new(timeout: Duration, max_blocking_ops: usize) -> Self {
        let max_ops = max_blocking_ops.max(1);
        Self {
            permits: Arc::new(Semaphore::new(max_ops)),
            max_ops,
            overdue: Arc::default(),
            timeout,
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            epoch: Instant::now(),
            pending: Arc::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn breaker_open(&self) -> bool {
        self.now_ms() < self.open_until.load(Ordering::Acquire)
    }

    fn failed(&self) {
        let n = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        if n >= BREAKER_FAILURES && !self.breaker_open() {
            let until = self
                .now_ms()
                .saturating_add(u64::try_from(BREAKER_COOLDOWN.as_millis()).unwrap_or(u64::MAX));
            self.open_until.store(until, Ordering::Release);
            ::metrics::counter!(metrics::BREAKER_OPENS).increment(1);
            tracing::warn!(
                failures = n,
                cooldown_secs = BREAKER_COOLDOWN.as_secs(),
                "disk cache slow or failing; skipping it for the cool-down"
            );
        }
    }

    fn succeeded(&self) {
        self.failures.store(0, Ordering::Release);
    }

    /// Counts a write as pending until the returned token drops (inside its blocking closure).
    pub(crate) fn pending_write(&self) -> PendingWrite {
        self.pending.count.fetch_add(1, Ordering::AcqRel);
        PendingWrite(self.pending.clone())
    }

    /// Waits until no write is pending, or `deadline`. Returns whether none is.
    pub(crate) async fn flush(&self, deadline: Instant) -> bool {
        loop {
            let idle = self.pending.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.pending.count.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline.into(), idle)
                .await
                .is_err()
            {
                return self.pending.count.load(Ordering::Acquire) == 0;
            }
        }
    }

    /// Runs a long job (a sweep) on the blocking pool with a permit and no deadline, if a
    /// permit is free now; otherwise it is left for a later trigger.
    pub(crate) fn spawn_unbounded(&self, job: impl FnOnce() + Send + 'static) {
        if self.breaker_open() {
            return;
        }
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                job();
            });
        }
    }

    /// Runs `op` on the blocking pool within the bounds above. `Err` says why it did not
    /// complete in time; `Ok` is the operation's own result. An `EIO`, a deadline, a panic or
    /// no permit behind operations all past their deadline counts toward the breaker (busy
    /// does not); anything else that completes closes it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce() -> FsResult<T> + Send + 'static,
    ) -> Result<FsResult<T>, Bounded> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let bounded = |b: Bounded| {
            ::metrics::counter!(metrics::SKIPPED, "reason" => b.label()).increment(1);
            // Only what the disk did counts: a deadline passed or the operation died.
            if matches!(b, Bounded::Timeout | Bounded::Panicked | Bounded::Stalled) {
                self.failed();
            }
            Err(b)
        };
        if self.breaker_open() {
            return bounded(Bounded::Breaker);
        }
        let wait = PERMIT_WAIT.min(self.timeout);
        let permit = match tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            // Every permit held by an operation the disk has not answered within its deadline.
            _ if self.overdue.load(Ordering::Acquire) >= self.max_ops => {
                return bounded(Bounded::Stalled);
            }
            _ => return bounded(Bounded::Busy),
        };
        let state = Arc::new(AtomicU8::new(RUNNING));
        let finished = Finished {
            state: state.clone(),
            overdue: self.overdue.clone(),
        };
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit; // until the syscalls really returned
            let _finished = finished; // dropped first: no longer overdue, then the permit
            op()
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(result)) => {
                match &result {
                    Err(FsError::Io(e))
                        if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) =>
                    {
                        self.failed()
                    }
                    _ => self.succeeded(),
                }
                Ok(result)
            }
            Ok(Err(_)) => bounded(Bounded::Panicked),
            Err(_) => {
                // Counted before it is marked, so the closure never takes away an uncounted one.
                self.overdue.fetch_add(1, Ordering::AcqRel);
                if state
                    .compare_exchange(RUNNING, OVERDUE, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    self.overdue.fetch_sub(1, Ordering::AcqRel); // it returned meanwhile
                }
                bounded(Bounded::Timeout)
            }
        }
    }
}

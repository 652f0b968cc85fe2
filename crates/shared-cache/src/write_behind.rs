//! The write-behind queue: a miss returns as soon as its image is decoded, and its SET runs
//! in the background. Bounded in entries and bytes; a full queue drops the write and never
//! blocks a load.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use crate::config::WriteBehindConfig;

#[derive(Debug)]
pub(crate) struct Queue {
    config: WriteBehindConfig,
    pending: Arc<Pending>,
    permits: Arc<Semaphore>,
}

/// Writes accepted and not yet finished (queued or running), shared with their reservations.
#[derive(Debug, Default)]
struct Pending {
    count: AtomicUsize,
    bytes: AtomicUsize,
    idle: Notify,
}

impl Pending {
    fn done(&self, len: usize) {
        self.bytes.fetch_sub(len, Ordering::AcqRel);
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }
}

impl Queue {
    pub(crate) fn new(config: WriteBehindConfig) -> Self {
        Self {
            config,
            pending: Arc::default(),
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
        }
    }

    /// Accepts a write of `len` bytes when there is room and runs it in the background, at
    /// most `concurrency` at once; returns false (and does nothing) when full.
    pub(crate) fn push(
        &self,
        len: usize,
        write: impl Future<Output = ()> + Send + 'static,
    ) -> bool {
        let Some(room) = self.reserve(len) else {
            return false;
        };
        let permits = self.permits.clone();
        tokio::spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = permits.acquire_owned().await.ok();
            write.await;
            drop(room);
        });
        true
    }

    /// Reserves room for a write of `len` bytes against the queue's bounds; `None` when full.
    /// The room is given back when the returned reservation drops.
    pub(crate) fn reserve(&self, len: usize) -> Option<WriteRoom> {
        self.reserve_share(len, 1)
    }

    /// [`Queue::reserve`] within the first `1 / divisor` of both bounds, writes and bytes
    /// (the whole queue counted, whoever holds it); a share of a bound that is not zero is
    /// never below 1, so a one-write queue still takes a write of the share.
    pub(crate) fn reserve_share(&self, len: usize, divisor: usize) -> Option<WriteRoom> {
        let share = |bound: usize| (bound / divisor.max(1)).max(bound.min(1));
        let (max_n, max_b) = (
            share(self.config.max_queued),
            share(self.config.max_queued_bytes),
        );
        // Reserve first, so concurrent writers cannot overshoot the bounds.
        let n = self.pending.count.fetch_add(1, Ordering::AcqRel);
        let b = self.pending.bytes.fetch_add(len, Ordering::AcqRel);
        if n >= max_n || b + len > max_b {
            self.pending.done(len);
            return None;
        }
        Some(WriteRoom {
            pending: self.pending.clone(),
            len,
        })
    }

    pub(crate) async fn flush(&self, deadline: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.pending.idle.notified();
                if self.pending.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(deadline, wait).await.is_ok()
    }
}

/// Room held in the write queue by one write; given back on drop (see
/// [`SharedCache::reserve_write`](crate::SharedCache::reserve_write)).
#[derive(Debug)]
pub struct WriteRoom {
    pending: Arc<Pending>,
    len: usize,
}

impl Drop for WriteRoom {
    fn drop(&mut self) {
        self.pending.done(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(max_queued: usize, max_queued_bytes: usize) -> Queue {
        Queue::new(WriteBehindConfig {
            max_queued,
            max_queued_bytes,
            ..WriteBehindConfig::default()
        })
    }

    #[test]
    fn a_share_holds_half_the_bounds_and_never_rounds_to_nothing() {
        let q = queue(4, 100);
        let a = q.reserve_share(30, 2).expect("the first write of the half");
        assert!(
            q.reserve_share(30, 2).is_none(),
            "60 bytes is past half of 100"
        );
        let b = q
            .reserve_share(10, 2)
            .expect("40 bytes, 2 writes: within half");
        assert!(q.reserve_share(1, 2).is_none(), "2 writes is half of 4");
        assert!(q.reserve(10).is_some(), "the other half is the images'");
        drop((a, b));
        // One write, one byte: the half of each is 1, not 0.
        let tiny = queue(1, 1);
        assert!(tiny.reserve_share(1, 2).is_some());
        assert!(
            queue(0, 100).reserve_share(1, 2).is_none(),
            "a zero bound stays zero"
        );
    }
}

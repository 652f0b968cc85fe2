//! The write-behind queue: a miss returns as soon as its image is decoded, and its SET runs
//! in the background. Bounded in entries and bytes; a full queue drops the write and never
//! blocks a load.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use tokio::sync::{Notify, Semaphore, oneshot};

use crate::{SharedCache, WriteBehindConfig, WriteOutcome};

#[derive(Debug)]
pub(crate) struct Queue {
    config: WriteBehindConfig,
    /// Writes accepted and not yet finished (queued or running).
    pending: AtomicUsize,
    pending_bytes: AtomicUsize,
    permits: Arc<Semaphore>,
    idle: Notify,
}

impl Queue {
    pub(crate) fn new(config: WriteBehindConfig) -> Self {
        Self {
            config,
            pending: AtomicUsize::new(0),
            pending_bytes: AtomicUsize::new(0),
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            idle: Notify::new(),
        }
    }

    /// Accepts the write when there is room; returns false (and does nothing) when full.
    pub(crate) fn push(&self, cache: &SharedCache, identity: CacheIdentity, bytes: Bytes) -> bool {
        self.spawn(cache, identity, bytes, true).is_some()
    }

    /// Reserves room for a write of `len` bytes against the queue's bounds; `None` when full.
    /// The room is given back when the returned reservation drops.
    pub(crate) fn reserve(&self, cache: &SharedCache, len: usize) -> Option<Reservation> {
        // Reserve first, so concurrent writers cannot overshoot the bounds.
        let n = self.pending.fetch_add(1, Ordering::AcqRel);
        let b = self.pending_bytes.fetch_add(len, Ordering::AcqRel);
        if n >= self.config.max_queued || b + len > self.config.max_queued_bytes {
            self.done(len);
            return None;
        }
        Some(Reservation {
            cache: cache.clone(),
            len,
        })
    }

    fn spawn(
        &self,
        cache: &SharedCache,
        identity: CacheIdentity,
        bytes: Bytes,
        queued: bool,
    ) -> Option<oneshot::Receiver<WriteOutcome>> {
        let room = self.reserve(cache, bytes.len())?;
        let cache = cache.clone();
        let permits = queued.then(|| self.permits.clone());
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = match permits {
                Some(p) => p.acquire_owned().await.ok(),
                None => None,
            };
            let outcome = cache.set(&identity, bytes).await;
            drop(room);
            let _ = tx.send(outcome); // the caller may have stopped waiting
        });
        Some(rx)
    }

    pub(crate) fn done(&self, len: usize) {
        self.pending_bytes.fetch_sub(len, Ordering::AcqRel);
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    pub(crate) async fn flush(&self, deadline: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.pending.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(deadline, wait).await.is_ok()
    }
}

/// Room held in the write queue by one write; given back on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    cache: SharedCache,
    len: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.cache.inner.queue.done(self.len);
    }
}

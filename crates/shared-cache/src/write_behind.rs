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

    /// Accepts a write whose caller waits for it a little (a bounded store): it runs at once,
    /// not behind the write-behind concurrency, and counts against the same bounds. Returns
    /// its outcome's receiver, or `None` when the queue is full.
    pub(crate) fn push_awaited(
        &self,
        cache: &SharedCache,
        identity: CacheIdentity,
        bytes: Bytes,
    ) -> Option<oneshot::Receiver<WriteOutcome>> {
        self.spawn(cache, identity, bytes, false)
    }

    fn spawn(
        &self,
        cache: &SharedCache,
        identity: CacheIdentity,
        bytes: Bytes,
        queued: bool,
    ) -> Option<oneshot::Receiver<WriteOutcome>> {
        let len = bytes.len();
        // Reserve room first, so concurrent pushes cannot overshoot the bounds.
        let n = self.pending.fetch_add(1, Ordering::AcqRel);
        let b = self.pending_bytes.fetch_add(len, Ordering::AcqRel);
        if n >= self.config.max_queued || b + len > self.config.max_queued_bytes {
            self.done(len);
            return None;
        }
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
            cache.inner.queue.done(len);
            let _ = tx.send(outcome); // the caller may have stopped waiting
        });
        Some(rx)
    }

    fn done(&self, len: usize) {
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

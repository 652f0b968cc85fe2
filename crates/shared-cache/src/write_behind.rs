//! The write-behind queue: a miss returns as soon as its image is decoded, and its SET runs
//! in the background. Bounded in entries and bytes; a full queue drops the write and never
//! blocks a load.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use tokio::sync::{Notify, Semaphore};

use crate::{SharedCache, WriteBehindConfig};

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
        let len = bytes.len();
        // Reserve room first, so concurrent pushes cannot overshoot the bounds.
        let n = self.pending.fetch_add(1, Ordering::AcqRel);
        let b = self.pending_bytes.fetch_add(len, Ordering::AcqRel);
        if n >= self.config.max_queued || b + len > self.config.max_queued_bytes {
            self.done(len);
            return false;
        }
        let cache = cache.clone();
        let permits = self.permits.clone();
        tokio::spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = permits.acquire_owned().await;
            cache.set(&identity, bytes).await;
            cache.inner.queue.done(len);
        });
        true
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

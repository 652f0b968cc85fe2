//! Writes that leave the load's path: disk-tier entries are written by tasks of their own,
//! counted here, so a load returns as soon as its image is decoded and
//! [`crate::Loader::shutdown`] can wait for every write still on its way.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Background writes in flight, and a wake-up for whoever waits for none.
#[derive(Debug, Default)]
pub(crate) struct Background {
    pending: AtomicUsize,
    idle: Notify,
}

/// Counts one write until dropped (when the task ends, or is dropped with the runtime).
struct Pending(Arc<Background>);

impl Drop for Pending {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Runs `write` in a task of its own, counted until it ends.
    pub(crate) fn spawn(self: &Arc<Self>, write: impl Future<Output = ()> + Send + 'static) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let pending = Pending(self.clone());
        tokio::spawn(async move {
            let _pending = pending;
            write.await;
        });
    }

    /// Writes still on their way.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Waits, at most `deadline`, until no write is on its way. Returns whether none is.
    pub(crate) async fn wait_idle(&self, deadline: Duration) -> bool {
        let idle = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                // Registered before the count is read: a write ending in between still wakes us.
                notified.as_mut().enable();
                if self.pending() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(deadline, idle).await.is_ok()
    }
}

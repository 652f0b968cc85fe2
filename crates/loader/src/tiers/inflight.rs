//! The join of a load in flight, or its start in a task of its own.

use std::sync::Arc;

use mmcache_scope::CacheIdentity;
use tokio::sync::watch;

use super::{Tiers, Want};
use crate::error::Error;
use crate::loaded::Outcome;

impl Tiers {
    /// Joins the load of `identity` in flight, or starts it in a task of its own so that a
    /// cancelled caller never cancels the load other callers wait for.
    pub(super) async fn join_or_start(
        self: &Arc<Self>,
        identity: CacheIdentity,
        url: &str,
        want: Want,
    ) -> (Outcome, bool) {
        let key = want.variant.apply(identity.digest());
        let (mut rx, joined) = match self.inflight.entry(key) {
            dashmap::Entry::Occupied(slot) => (slot.get().clone(), true),
            dashmap::Entry::Vacant(slot) => {
                let (tx, rx) = watch::channel(None);
                slot.insert(rx.clone());
                let inner = self.clone();
                let url = url.to_owned();
                tokio::spawn(async move {
                    // Leaves the map even if `fill` panics, so the next load starts afresh.
                    let leave = LeaveInflight { inner: &inner, key };
                    let fill = inner.fill(&identity, &url, want);
                    let mut outcome = inner.within_deadline(fill).await;
                    if let Ok(loaded) = &mut outcome {
                        let image = loaded.image.clone();
                        loaded.image = inner.memory.insert(&identity, want.variant, image);
                    }
                    // Leave the map before publishing: a later load sees the cache or retries.
                    drop(leave);
                    let _ = tx.send(Some(outcome));
                });
                (rx, false)
            }
        };
        let outcome = match rx.wait_for(Option::is_some).await {
            Ok(value) => value
                .clone()
                .unwrap_or_else(|| Err(Error::Internal("no outcome".into()))),
            // The task ended without publishing: it panicked.
            Err(_) => Err(Error::Internal("load task ended without a result".into())),
        };
        (outcome, joined)
    }
}

/// Removes an identity from the in-flight map when dropped.
struct LeaveInflight<'a> {
    inner: &'a Tiers,
    key: [u8; 32],
}

impl Drop for LeaveInflight<'_> {
    fn drop(&mut self) {
        self.inner.inflight.remove(&self.key);
    }
}

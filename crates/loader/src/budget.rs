//! The process-wide decode budget: how many decodes run at once, and how many bytes they may
//! hold together, reserved from each image's header estimate before anything is allocated.
//! A load over the budget waits its turn (first come, first served), up to a deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Error;
use crate::metrics::BudgetOutcome;

/// Memory is counted in KiB so a `u32` permit count reaches 4 TiB.
const UNIT: u64 = 1024;

/// Concurrency slots and a memory budget for decodes.
#[derive(Debug)]
pub(crate) struct DecodeBudget {
    slots: Arc<Semaphore>,
    memory: Arc<Semaphore>,
    memory_units: u32,
    wait: Duration,
    outcomes: crate::metrics::PerLabel<::metrics::Counter>,
}

/// What a running decode holds; released on drop.
#[derive(Debug)]
pub(crate) struct DecodePermit {
    _memory: OwnedSemaphorePermit,
    _slot: OwnedSemaphorePermit,
}

impl DecodeBudget {
    pub(crate) fn new(concurrency: usize, memory_bytes: u64, wait: Duration) -> Self {
        let memory_units = u32::try_from(memory_bytes.div_ceil(UNIT)).unwrap_or(u32::MAX);
        Self {
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            memory: Arc::new(Semaphore::new(memory_units as usize)),
            memory_units,
            wait,
            outcomes: crate::metrics::PerLabel::new(
                BudgetOutcome::ALL,
                |o: BudgetOutcome| ::metrics::counter!(crate::metrics::DECODE_BUDGET.name, "outcome" => o.as_str()),
            ),
        }
    }

    /// Reserves `bytes` and a slot, waiting at most the configured wait.
    ///
    /// # Errors
    ///
    /// [`Error::OverDecodeBudget`] at once when `bytes` exceed the whole budget (413);
    /// [`Error::DecodeBusy`] when the wait ends first (503).
    pub(crate) async fn acquire(&self, bytes: u64) -> Result<DecodePermit, Error> {
        let units = bytes.div_ceil(UNIT);
        if units > u64::from(self.memory_units) {
            self.record(BudgetOutcome::OverBudget);
            return Err(Error::OverDecodeBudget {
                needed: bytes,
                budget: u64::from(self.memory_units) * UNIT,
            });
        }
        let take = async {
            // Memory first, then a slot, always in this order: no two loads wait on each other.
            let memory = self.memory.clone().acquire_many_owned(units as u32).await;
            let slot = self.slots.clone().acquire_owned().await;
            (memory, slot)
        };
        match tokio::time::timeout(self.wait, take).await {
            Ok((Ok(memory), Ok(slot))) => {
                self.record(BudgetOutcome::Acquired);
                Ok(DecodePermit {
                    _memory: memory,
                    _slot: slot,
                })
            }
            // The semaphores are never closed.
            Ok(_) => Err(Error::Internal("decode budget closed".into())),
            Err(_) => {
                self.record(BudgetOutcome::Timeout);
                Err(Error::DecodeBusy { waited: self.wait })
            }
        }
    }
}

impl DecodeBudget {
    fn record(&self, outcome: BudgetOutcome) {
        self.outcomes.get(outcome as usize).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn waits_its_turn_then_gives_up_with_503() {
        let budget = DecodeBudget::new(4, 10 << 20, Duration::from_secs(5));
        let first = budget.acquire(8 << 20).await.expect("fits");
        // 8 + 4 MiB > 10 MiB: waits, and the wait ends (paused clock: no real sleep).
        let err = budget.acquire(4 << 20).await.unwrap_err();
        assert!(matches!(err, Error::DecodeBusy { .. }), "{err}");
        assert_eq!(err.http_status(), 503);
        drop(first);
        budget
            .acquire(10 << 20)
            .await
            .expect("the whole budget, once free");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_release_wakes_a_waiter() {
        let budget = Arc::new(DecodeBudget::new(1, 1 << 30, Duration::from_secs(5)));
        let held = budget.acquire(1).await.expect("slot");
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.acquire(1).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "one slot: the second decode waits");
        drop(held);
        waiter
            .await
            .expect("task")
            .expect("acquired after the release");
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_is_refused_at_once_with_413() {
        let budget = DecodeBudget::new(2, 1 << 20, Duration::from_secs(3600));
        let err = budget.acquire((1 << 20) + 1).await.unwrap_err();
        assert!(matches!(err, Error::OverDecodeBudget { .. }), "{err}");
        assert_eq!(err.http_status(), 413);
        assert!(err.is_too_large());
    }
}

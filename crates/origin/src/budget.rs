//! The download budget: how many bytes all bodies being read (and held afterwards) may take
//! together, process-wide. A body reserves its `Content-Length` before its first byte is
//! read; a body without one reserves a first step, then, past it, all it may grow to at once.
//! Each reservation travels with the bytes it covers and is released when the last copy of
//! them is dropped.
//!
//! The budget is two pools of half each, so that no download waits while holding what another
//! waits for: bodies with a length and first steps reserve from one pool in one go (holding
//! nothing while they wait); a body that grows past its first step holds that step while it
//! waits, but only on the other pool, whose holders never wait for anything, so they end and
//! make room. One pool would let every growing body hold a step and wait for the others.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Error;

/// Memory is counted in KiB so a `u32` permit count reaches 4 TiB.
const UNIT: u64 = 1024;

/// A process-wide byte budget for downloads, shared by every clone. The loader configures
/// one and hands it to [`crate::OriginConfig::download_budget`].
#[derive(Debug, Clone)]
pub struct DownloadBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Bodies with a known length, and first steps.
    first: Pool,
    /// Growth of bodies without a length past their first step.
    growth: Pool,
    wait: Duration,
}

#[derive(Debug)]
struct Pool {
    memory: Arc<Semaphore>,
    units: u32,
}

impl Pool {
    fn new(units: u64) -> Self {
        let units = u32::try_from(units.max(1)).unwrap_or(u32::MAX);
        Self {
            memory: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }

    fn capacity(&self) -> u64 {
        u64::from(self.units) * UNIT
    }
}

/// Bytes reserved in a [`DownloadBudget`]; released on drop.
#[derive(Debug, Default)]
pub struct Reservation {
    first: Option<OwnedSemaphorePermit>,
    growth: Option<OwnedSemaphorePermit>,
    bytes: u64,
}

impl Reservation {
    /// The bytes this reservation covers (rounded up to whole KiB).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Turns `buf` into [`Bytes`] that own this reservation: it is released when the last copy
    /// of them is dropped. The reservation is first trimmed to the buffer's capacity (a read
    /// that reserved a first step, or all it might grow to, keeps only what it holds). Every
    /// budgeted read (an origin body, a shared-cache value, a disk entry) ends here.
    pub fn hold(mut self, buf: Vec<u8>) -> Bytes {
        self.trim_to(buf.capacity() as u64);
        Bytes::from_owner(Held {
            buf,
            _reservation: self,
        })
    }

    /// Gives back what a buffer of `used` bytes does not need: growth first, then the first
    /// part.
    pub(crate) fn trim_to(&mut self, used: u64) {
        let spare = (self.bytes / UNIT).saturating_sub(used.div_ceil(UNIT));
        let from_growth = give_back(&mut self.growth, spare);
        let from_first = give_back(&mut self.first, spare - from_growth);
        self.bytes -= (from_growth + from_first) * UNIT;
    }
}

/// Releases up to `units` of `permit` and says how many it released.
fn give_back(permit: &mut Option<OwnedSemaphorePermit>, units: u64) -> u64 {
    let Some(held) = permit else { return 0 };
    let n = units.min(held.num_permits() as u64);
    if n == held.num_permits() as u64 {
        *permit = None; // dropped: every unit back to the pool
    } else if n > 0 {
        drop(held.split(n as usize));
    }
    n
}

impl DownloadBudget {
    /// A budget of `bytes` (at least 2 KiB); a reservation waits at most `wait` for room.
    pub fn new(bytes: u64, wait: Duration) -> Self {
        let units = bytes.div_ceil(UNIT).max(2);
        Self {
            inner: Arc::new(Inner {
                first: Pool::new(units - units / 2),
                growth: Pool::new(units / 2),
                wait,
            }),
        }
    }

    /// The whole budget in bytes.
    pub fn capacity(&self) -> u64 {
        self.inner.first.capacity() + self.inner.growth.capacity()
    }

    /// The most one body with a known length (or a first step) may reserve: half the budget.
    pub fn max_reservation(&self) -> u64 {
        self.inner.first.capacity()
    }

    /// The most a body without a length may reserve past its first step: the other half.
    pub fn max_growth(&self) -> u64 {
        self.inner.growth.capacity()
    }

    /// Bytes free now, in both pools (for tests and metrics).
    pub fn available(&self) -> u64 {
        let free = |p: &Pool| p.memory.available_permits() as u64 * UNIT;
        free(&self.inner.first) + free(&self.inner.growth)
    }

    /// How long a reservation waits for room.
    pub fn wait(&self) -> Duration {
        self.inner.wait
    }

    /// Reserves `bytes` for a body with a known length (or a first step), first come first
    /// served, waiting at most the budget's wait. Holds nothing while it waits.
    ///
    /// # Errors
    ///
    /// [`Error::OverDownloadBudget`] at once when `bytes` exceed
    /// [`DownloadBudget::max_reservation`] (413); [`Error::DownloadBusy`] when the wait ends
    /// first (503).
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, Error> {
        let permit = self.take(&self.inner.first, bytes).await?;
        Ok(Reservation {
            bytes: permit.as_ref().map_or(0, |p| p.num_permits() as u64 * UNIT),
            first: permit,
            growth: None,
        })
    }

    /// Reserves `bytes` like [`DownloadBudget::reserve`] if they fit now, without waiting:
    /// `None` when they do not (or exceed [`DownloadBudget::max_reservation`]).
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let pool = &self.inner.first;
        let units = bytes.div_ceil(UNIT);
        if units == 0 {
            return Some(Reservation::default());
        }
        let units = u32::try_from(units).ok().filter(|&u| u <= pool.units)?;
        let permit = pool.memory.clone().try_acquire_many_owned(units).ok()?;
        Some(Reservation {
            bytes: u64::from(units) * UNIT,
            first: Some(permit),
            growth: None,
        })
    }

    /// Grows `reservation` (a first step, once) by `more` bytes from the growth pool.
    ///
    /// # Errors
    ///
    /// [`Error::OverDownloadBudget`] at once when `more` exceeds
    /// [`DownloadBudget::max_growth`] or the reservation grew already (413);
    /// [`Error::DownloadBusy`] when the wait ends first (503).
    pub async fn grow(&self, reservation: &mut Reservation, more: u64) -> Result<(), Error> {
        if reservation.growth.is_some() {
            return Err(self.over(reservation.bytes + more));
        }
        let permit = self.take(&self.inner.growth, more).await?;
        reservation.bytes += permit.as_ref().map_or(0, |p| p.num_permits() as u64 * UNIT);
        reservation.growth = permit;
        Ok(())
    }

    fn over(&self, needed: u64) -> Error {
        Error::OverDownloadBudget {
            needed,
            budget: self.capacity(),
        }
    }

    async fn take(&self, pool: &Pool, bytes: u64) -> Result<Option<OwnedSemaphorePermit>, Error> {
        let units = bytes.div_ceil(UNIT);
        if units == 0 {
            return Ok(None);
        }
        if units > u64::from(pool.units) {
            return Err(self.over(bytes));
        }
        let take = pool.memory.clone().acquire_many_owned(units as u32);
        let busy = Error::DownloadBusy {
            waited: self.inner.wait,
        };
        match tokio::time::timeout(self.inner.wait, take).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            // The semaphores are never closed.
            Ok(Err(_)) | Err(_) => Err(busy),
        }
    }
}

/// Bytes with the reservation that covers them (see [`Reservation::hold`]).
struct Held {
    buf: Vec<u8>,
    _reservation: Reservation,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn waits_its_turn_then_gives_up_with_503() {
        let budget = DownloadBudget::new(20 << 20, Duration::from_secs(5));
        assert_eq!(budget.max_reservation(), 10 << 20);
        let first = budget.reserve(8 << 20).await.expect("fits");
        let err = budget.reserve(4 << 20).await.unwrap_err();
        assert!(matches!(err, Error::DownloadBusy { .. }), "{err}");
        assert_eq!(err.http_status(), 503);
        drop(first);
        let all = budget
            .reserve(10 << 20)
            .await
            .expect("the whole half, once free");
        assert_eq!(budget.available(), 10 << 20);
        drop(all);
        assert_eq!(budget.available(), 20 << 20);
    }

    #[tokio::test]
    async fn more_than_a_pool_is_refused_at_once_with_413() {
        let budget = DownloadBudget::new(2 << 20, Duration::from_secs(3600));
        let err = budget.reserve((1 << 20) + 1).await.unwrap_err();
        assert!(matches!(err, Error::OverDownloadBudget { .. }), "{err}");
        assert_eq!(err.http_status(), 413);
        let mut r = budget.reserve(1 << 19).await.unwrap();
        let err = budget.grow(&mut r, (1 << 20) + 1).await.unwrap_err();
        assert_eq!(err.http_status(), 413);
        budget.grow(&mut r, 1 << 20).await.unwrap();
        assert_eq!((r.bytes(), budget.available()), (3 << 19, 1 << 19));
        assert!(budget.grow(&mut r, 1).await.is_err(), "grows once");
        drop(r);
        assert_eq!(budget.available(), 2 << 20);
    }

    #[tokio::test]
    async fn a_grown_reservation_keeps_only_what_its_body_holds() {
        let budget = DownloadBudget::new(16 << 20, Duration::from_secs(5));
        let mut r = budget.reserve(1 << 20).await.unwrap();
        budget.grow(&mut r, 7 << 20).await.unwrap();
        assert_eq!(budget.available(), 8 << 20);
        r.trim_to((1 << 20) + 1500); // 1 MiB first step + 2 KiB of growth kept
        assert_eq!(r.bytes(), (1 << 20) + 2048);
        assert_eq!(budget.available(), (16 << 20) - (1 << 20) - 2048);
        r.trim_to(1000); // within the first step: no growth left, and 1 KiB of the step
        assert_eq!(r.bytes(), 1024);
        drop(r);
        assert_eq!(budget.available(), 16 << 20);
    }

    #[tokio::test]
    async fn try_reserve_never_waits() {
        let budget = DownloadBudget::new(4 << 20, Duration::from_secs(3600));
        let held = budget.try_reserve(2 << 20).expect("the whole half is free");
        assert!(
            budget.try_reserve(1).is_none(),
            "the half is taken: no wait"
        );
        assert!(budget.try_reserve(3 << 20).is_none(), "more than a half");
        drop(held);
        assert_eq!(budget.try_reserve(1).map(|r| r.bytes()), Some(1024));
    }

    #[tokio::test]
    async fn held_bytes_keep_their_trimmed_reservation_until_the_last_copy_drops() {
        let budget = DownloadBudget::new(16 << 20, Duration::from_secs(5));
        let r = budget.reserve(4 << 20).await.unwrap();
        let bytes = r.hold(vec![7u8; 3000]); // a first step of 4 MiB holding 3000 bytes
        assert_eq!(budget.available(), (16 << 20) - 3072);
        let copy = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(
            budget.available(),
            (16 << 20) - 3072,
            "a copy still holds it"
        );
        drop(copy);
        assert_eq!(budget.available(), 16 << 20);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn growing_bodies_holding_first_steps_do_not_starve_each_other() {
        // Every first step taken, by bodies that all want to grow: the growth pool serves
        // them one after the other instead of all waiting on each other.
        let budget = DownloadBudget::new(8 << 20, Duration::from_secs(5));
        let mut steps = Vec::new();
        for _ in 0..4 {
            steps.push(budget.reserve(1 << 20).await.unwrap());
        }
        for mut step in steps {
            budget
                .grow(&mut step, 3 << 20)
                .await
                .expect("the growth pool is free");
            drop(step); // the body ends
        }
    }
}

//! The memory cache writes may hold. A write to the disk tier or the shared cache holds a copy
//! of the load's bytes under this allowance (a quarter of the download budget, apart from
//! it), never the load's own download reservation: a hung disk or master keeps at most the
//! allowance taken, and never makes a later load wait or fail for download memory. A write
//! that does not fit at once is skipped (`mmcache_cache_writes_skipped_total`): the entry is
//! filled by a later load.

use bytes::Bytes;
use mmcache_origin::DownloadBudget;

use crate::metrics;

/// The write allowance (see the module docs). Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct WriteMemory {
    /// A budget that never waits; it reserves from its first half, so it is made twice the
    /// allowance.
    allowance: DownloadBudget,
    /// [`metrics::WRITES_SKIPPED`], resolved when built.
    skipped: ::metrics::Counter,
}

impl WriteMemory {
    /// An allowance of `bytes` ([`crate::Config::write_allowance_bytes`]).
    pub(crate) fn new(bytes: u64) -> Self {
        Self {
            allowance: DownloadBudget::new(bytes * 2, std::time::Duration::ZERO),
            skipped: ::metrics::counter!(metrics::WRITES_SKIPPED.name),
        }
    }

    /// The most the writes may hold together (and so the largest value a cache write takes).
    pub(crate) fn capacity(&self) -> u64 {
        self.allowance.max_reservation()
    }

    /// `len` bytes of the allowance if they fit now, uncounted: for a writer that holds bytes
    /// it made itself (an encoded embedding) or shares (a value read), and counts its own.
    pub(crate) fn reserve(&self, len: u64) -> Option<mmcache_origin::Reservation> {
        self.allowance.try_reserve(len)
    }

    /// `len` bytes of the allowance for a write that holds bytes it shares (no copy), or `None`
    /// (counted) when they do not fit now: the write is skipped.
    pub(crate) fn hold(&self, len: u64) -> Option<mmcache_origin::Reservation> {
        let held = self.allowance.try_reserve(len);
        if held.is_none() {
            self.skipped.increment(1);
        }
        held
    }

    /// A copy of `bytes` holding its share of the allowance, or `None` (counted) when it
    /// does not fit now: the cache writes of this load are skipped.
    pub(crate) fn copy(&self, bytes: &Bytes) -> Option<Bytes> {
        let Some(reservation) = self.allowance.try_reserve(bytes.len() as u64) else {
            self.skipped.increment(1);
            return None;
        };
        Some(reservation.hold(bytes.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_hold_at_most_a_quarter_of_the_download_budget() {
        let download = DownloadBudget::new(16 << 20, std::time::Duration::ZERO);
        let config = crate::Config {
            download_memory_bytes: download.capacity(),
            ..Default::default()
        };
        let writes = WriteMemory::new(config.write_allowance_bytes());
        assert_eq!(writes.capacity(), 4 << 20);
        let body = Bytes::from(vec![1u8; 3 << 20]);
        let first = writes.copy(&body).expect("fits");
        assert_eq!(first, body);
        assert!(writes.copy(&body).is_none(), "no room: skipped, no wait");
        drop(first);
        assert!(
            writes.copy(&body).is_some(),
            "room again once the write dropped it"
        );
        assert_eq!(
            download.available(),
            16 << 20,
            "the download budget is untouched"
        );
    }
}

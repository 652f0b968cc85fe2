//! The read memory: where every value read reserves its bytes before they are read (the
//! loader's download budget), and the reservation the returned [`Bytes`] hold.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

/// A boxed future, as [`ReadMemory::reserve`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Memory for the values a [`SharedCache`](crate::SharedCache) reads (the loader's download budget): every read
/// reserves its bytes here before reading them.
pub trait ReadMemory: Send + Sync {
    /// Reserves `bytes` for a read of a value of that known length, waiting as long as the
    /// owner allows; `None` when there is no room (the read is then not made:
    /// [`crate::GetOutcome::NoMemory`]).
    fn reserve(&self, bytes: u64) -> BoxFuture<'_, Option<ReadHold>>;

    /// Like [`ReadMemory::reserve`] without waiting, for a read's first step, made before the
    /// value's length is known; `None` when there is no room now (the read then asks for the
    /// length alone first). It should come from memory of its own: GETs to a node that hangs
    /// keep their first steps until their deadline, and must hold nothing that other reads
    /// (or origin downloads) wait for.
    fn try_reserve_first(&self, bytes: u64) -> Option<ReadHold>;
}

/// Memory reserved for one value: [`ReadHold::hold`] turns the bytes read into [`Bytes`] that
/// keep the reservation (trimmed to them) until their last copy is dropped.
pub struct ReadHold(Box<dyn FnOnce(Vec<u8>) -> Bytes + Send>);

impl std::fmt::Debug for ReadHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadHold")
    }
}

impl ReadHold {
    /// A reservation, given as what wraps the bytes read.
    pub fn new(hold: impl FnOnce(Vec<u8>) -> Bytes + Send + 'static) -> Self {
        Self(Box::new(hold))
    }

    /// The bytes read, holding the reservation.
    pub fn hold(self, bytes: Vec<u8>) -> Bytes {
        (self.0)(bytes)
    }
}

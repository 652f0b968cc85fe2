//! Reading a value within a memory budget: its bytes are reserved before they are read, and
//! the reservation is held by the returned [`Bytes`].
//!
//! A read is `STRLEN key` and `GETRANGE key 0 step-1` in one pipeline (one key, one node,
//! one round trip) under a reservation of [`READ_STEP`], taken without waiting from the first
//! steps' own memory ([`ReadMemory::try_reserve_first`](crate::ReadMemory::try_reserve_first); when it has no room, `STRLEN` alone
//! first): a value that fits is whole, and the reservation is trimmed to it. A longer value
//! (at most the read cap; a longer one is not read on) is read again whole under a
//! reservation of its exact length, taken while holding nothing, so reads never wait on each
//! other. A value that changed between the two reads is a miss.

use bytes::Bytes;

use crate::client::SharedCache;
use crate::commands;
use crate::conn::Failure;
use crate::memory::ReadHold;
use crate::metrics::Op;

/// What a read reserves first, and the longest value read in one round trip: larger than
/// nearly every image, small enough that many reads at once fit a budget.
pub const READ_STEP: usize = 2 << 20;

/// How a read ended (its failures are the `Err` of [`SharedCache::read_value`]).
pub(crate) enum Read {
    Value(Bytes),
    /// Absent or empty (an empty value is never valid), or changed while it was read.
    Miss,
    /// Longer than the cap: not read past the first step.
    Oversized,
    /// The read memory had no room.
    NoMemory,
}

impl SharedCache {
    /// Reads `key` (at most `max` bytes) within the configured read memory.
    pub(crate) async fn read_value(&self, op: Op, key: &str, max: usize) -> Result<Read, Failure> {
        let step = READ_STEP.min(max.max(1));
        let len = match self.first_step(step) {
            Some(hold) => {
                let (len, v) = self.strlen_getrange(op, key, step).await?;
                if len == 0 {
                    return Ok(Read::Miss);
                }
                if len > max {
                    return Ok(Read::Oversized);
                }
                if len <= step {
                    // Whole, unless the value changed between the two commands.
                    return Ok(if v.len() == len {
                        Read::Value(hold.finish(v))
                    } else {
                        Read::Miss
                    });
                }
                len // longer: the step is given back (nothing held while waiting below)
            }
            None => {
                // Every first step is taken (by GETs in flight, perhaps to a hung node): the
                // length alone first, so this read waits for nothing those hold.
                let len = self.strlen(op, key).await?;
                if len == 0 {
                    return Ok(Read::Miss);
                }
                if len > max {
                    return Ok(Read::Oversized);
                }
                len
            }
        };
        let Some(hold) = self.reserve_read(len).await else {
            return Ok(Read::NoMemory);
        };
        let (now, v) = self.strlen_getrange(op, key, len).await?;
        Ok(if now == v.len() && now > 0 {
            Read::Value(hold.finish(v))
        } else {
            Read::Miss // replaced by a longer value (or deleted) meanwhile
        })
    }

    /// A first step's reservation, taken without waiting; `None` when there is no room.
    fn first_step(&self, bytes: usize) -> Option<Held> {
        match &self.inner.config.read_memory {
            None => Some(Held(None)),
            Some(memory) => memory
                .try_reserve_first(bytes as u64)
                .map(|h| Held(Some(h))),
        }
    }

    async fn strlen(&self, op: Op, key: &str) -> Result<usize, Failure> {
        self.run(op, commands::STRLEN, key, |mut conn, key| async move {
            redis::cmd("STRLEN")
                .arg(key)
                .query_async::<usize>(&mut conn)
                .await
        })
        .await
    }

    async fn reserve_read(&self, bytes: usize) -> Option<Held> {
        match &self.inner.config.read_memory {
            None => Some(Held(None)),
            Some(memory) => memory.reserve(bytes as u64).await.map(|h| Held(Some(h))),
        }
    }

    /// `STRLEN key` and `GETRANGE key 0 n-1`, pipelined: the value's length and at most `n`
    /// of its bytes.
    async fn strlen_getrange(
        &self,
        op: Op,
        key: &str,
        n: usize,
    ) -> Result<(usize, Vec<u8>), Failure> {
        // Redis takes a signed 64-bit end.
        let end = i64::try_from(n).unwrap_or(i64::MAX) - 1;
        self.run(op, commands::READ, key, |mut conn, key| async move {
            redis::pipe()
                .cmd("STRLEN")
                .arg(key)
                .cmd("GETRANGE")
                .arg(key)
                .arg(0)
                .arg(end)
                .query_async::<(usize, Vec<u8>)>(&mut conn)
                .await
        })
        .await
    }
}

/// A reservation, or none when the cache has no read memory configured.
struct Held(Option<ReadHold>);

impl Held {
    fn finish(self, v: Vec<u8>) -> Bytes {
        match self.0 {
            Some(hold) => hold.hold(v),
            None => Bytes::from(v),
        }
    }
}

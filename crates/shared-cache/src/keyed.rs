//! Operations on keys of the caller's own (embeddings), beside the image entries: the same
//! connections, deadlines and per-node breakers, but none of the image metrics or counters
//! (the caller counts its own). The caller owns the key space and checks the values.

use std::time::Duration;

use bytes::Bytes;

use crate::client::SharedCache;
use crate::commands;
use crate::conn::Failure;
use crate::metrics::Op;
use crate::metrics::{GetOutcome, WriteOutcome};
use crate::read::Read;
use crate::write_behind::WriteRoom;

impl SharedCache {
    /// The value of `key`, read like an image entry (within the read memory; a hostile value
    /// costs at most `max` bytes): [`GetOutcome::Oversized`] when longer than `max`, a miss
    /// when absent or empty, `None` on any failure (an open breaker: [`GetOutcome::Skipped`];
    /// no room in the read memory: [`GetOutcome::NoMemory`]).
    pub async fn get_key(&self, key: &str, max: usize) -> (Option<Bytes>, GetOutcome) {
        match self.read_value(Op::Get, key, max).await {
            Ok(Read::Miss) => (None, GetOutcome::Miss),
            Ok(Read::Oversized) => (None, GetOutcome::Oversized),
            Ok(Read::Value(v)) => (Some(v), GetOutcome::Hit),
            Ok(Read::NoMemory) => (None, GetOutcome::NoMemory),
            Err(Failure::Skipped) => (None, GetOutcome::Skipped),
            Err(Failure::Failed(_)) => (None, GetOutcome::Error),
        }
    }

    /// Room for a write of `len` bytes of the caller's own in the write queue's bounds (its
    /// entries and bytes, which image writes count too), held until the returned reservation
    /// drops; `None` when the queue is full: the caller drops its write (and counts it).
    /// Such writes get the queue's first half only (in entries and bytes): image writes
    /// always have the other half, however many large values are on their way.
    pub fn reserve_write(&self, len: usize) -> Option<WriteRoom> {
        self.inner.queue.reserve_share(len, 2)
    }

    /// `SET key bytes PX ttl`. No size cap of the image entries applies: the caller bounds
    /// its own values.
    pub async fn set_key(&self, key: &str, bytes: Bytes, ttl: Duration) -> WriteOutcome {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let result = self
            .run(Op::Set, commands::SET, key, |mut conn, key| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(&bytes[..])
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await;
        write_outcome(result.map(|()| 0))
    }

    /// Deletes `key` only if it still holds exactly `expected` (a script: `GET`, compare,
    /// `DEL`, run by Redis, Valkey and Dragonfly alike): a reader deletes the value it found bad,
    /// never one a writer stored after it read. [`WriteOutcome::Success`] whether or not it
    /// was still there.
    pub async fn compare_and_delete_key(&self, key: &str, expected: &[u8]) -> WriteOutcome {
        write_outcome(
            self.compare_and_delete(Op::Del, key, expected)
                .await
                .map(i64::from),
        )
    }

    /// `DEL key` (one key: keys of one caller may sit in different slots).
    pub async fn delete_key(&self, key: &str) -> WriteOutcome {
        let result = self
            .run(Op::Del, commands::DEL, key, |mut conn, key| async move {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
            })
            .await;
        write_outcome(result)
    }
}

fn write_outcome(result: Result<i64, Failure>) -> WriteOutcome {
    match result {
        Ok(_) => WriteOutcome::Success,
        Err(Failure::Skipped) => WriteOutcome::Skipped,
        Err(Failure::Failed(_)) => WriteOutcome::Error,
    }
}

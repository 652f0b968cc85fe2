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

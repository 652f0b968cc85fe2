//! The sweep: the only full scan of the directory, run by one process at a time, at most once
//! per eighth of the budget written or per [`crate::SWEEP_INTERVAL`].

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::{DiskCache, bump, metrics};

/// A temporary file older than this belongs to a writer that died mid-write.
const PARTIAL_AFTER: Duration = Duration::from_secs(600);

/// Removes expired entries and partial writes, then the least recently written entries until
/// the directory holds at most 90 % of the budget. Returns the bytes left (0 when another
/// process is sweeping).
pub(crate) fn sweep(cache: &DiskCache) -> u64 {
    let inner = &cache.inner;
    let root = &inner.root;
    if std::fs::create_dir_all(root).is_err() {
        return 0;
    }
    let Ok(lock) = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join("sweep.lock"))
    else {
        return 0;
    };
    if lock.try_lock().is_err() {
        return 0; // another process sweeps right now
    }
    bump(&inner.counters.sweeps, 1);
    let now = SystemTime::now();
    let age = |m: &std::fs::Metadata| {
        m.modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    };
    let evict = |path: &PathBuf, reason: &'static str| {
        if std::fs::remove_file(path).is_ok() {
            bump(&inner.counters.evictions, 1);
            ::metrics::counter!(metrics::EVICTIONS, "reason" => reason).increment(1);
        }
    };
    if let Ok(tmp) = std::fs::read_dir(root.join("tmp")) {
        for e in tmp.flatten() {
            if e.metadata().is_ok_and(|m| age(&m) > PARTIAL_AFTER) {
                evict(&e.path(), "partial");
            }
        }
    }
    // (written at, bytes, path) of every live entry.
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    let shards = std::fs::read_dir(root).into_iter().flatten().flatten();
    for shard in shards.filter(|s| s.file_name().len() == 2) {
        for e in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(meta) = e.metadata() else { continue };
            if age(&meta) > inner.config.ttl {
                evict(&e.path(), "expired");
            } else {
                let written = meta.modified().unwrap_or(now);
                entries.push((written, meta.len(), e.path()));
            }
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    if total > inner.config.max_bytes {
        let target = inner.config.max_bytes / 10 * 9;
        entries.sort_by_key(|e| e.0);
        for (_, len, path) in &entries {
            if total <= target {
                break;
            }
            evict(path, "budget");
            total -= len;
        }
    }
    total
}

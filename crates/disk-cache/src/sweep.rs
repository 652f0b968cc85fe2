//! The sweep: the only full scan of the directory, run by one process at a time, at most once
//! per eighth of the budget written or per [`crate::SWEEP_INTERVAL`].

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::{DiskCache, bump, metrics};

/// A temporary file older than this belongs to a writer that died mid-write.
const PARTIAL_AFTER: Duration = Duration::from_secs(600);

/// Removes expired entries, partial writes and idle lock files, then the least recently
/// written entries until the directory holds at most 90 % of the budget. Returns the bytes
/// left, or `None` when it did not run (another process is sweeping, or no directory).
pub(crate) fn sweep(cache: &DiskCache, wait_for_lock: bool) -> Option<u64> {
    let inner = &cache.inner;
    let root = &inner.root;
    std::fs::create_dir_all(root).ok()?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join("sweep.lock"))
        .ok()?;
    if wait_for_lock {
        lock.lock().ok()?;
    } else {
        lock.try_lock().ok()?; // another process sweeps right now: it will do
    }
    bump(&inner.counters.sweeps, 1);
    let now = SystemTime::now();
    let age = |m: &std::fs::Metadata| {
        m.modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    };
    // Removes `path` if it is still the file that was judged: another process may have
    // renamed a fresh entry over it since (then it stays).
    let evict = |path: &PathBuf, judged: &std::fs::Metadata, reason: &'static str| {
        let same = std::fs::metadata(path).is_ok_and(|now| {
            now.ino() == judged.ino() && now.len() == judged.len() && now.mtime() == judged.mtime()
        });
        if same && std::fs::remove_file(path).is_ok() {
            bump(&inner.counters.evictions, 1);
            ::metrics::counter!(metrics::EVICTIONS, "reason" => reason).increment(1);
        }
    };
    if let Ok(tmp) = std::fs::read_dir(root.join("tmp")) {
        for e in tmp.flatten() {
            if let Ok(m) = e.metadata()
                && age(&m) > PARTIAL_AFTER
            {
                evict(&e.path(), &m, "partial");
            }
        }
    }
    // Lock files of entries no one has filled for a while: removed if no one holds them.
    for shard in std::fs::read_dir(root.join("locks"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for e in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let idle = e.metadata().is_ok_and(|m| age(&m) > PARTIAL_AFTER);
            let free = idle
                && File::options()
                    .write(true)
                    .open(e.path())
                    .is_ok_and(|f| f.try_lock().is_ok());
            if free {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    // (written at, metadata, path) of every live entry.
    let mut entries: Vec<(SystemTime, std::fs::Metadata, PathBuf)> = Vec::new();
    let shards = std::fs::read_dir(root).into_iter().flatten().flatten();
    for shard in shards.filter(|s| s.file_name().len() == 2) {
        for e in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(meta) = e.metadata() else { continue };
            if age(&meta) > inner.config.ttl {
                evict(&e.path(), &meta, "expired");
            } else {
                let written = meta.modified().unwrap_or(now);
                entries.push((written, meta, e.path()));
            }
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1.len()).sum();
    if total > inner.config.max_bytes {
        let target = inner.config.max_bytes / 10 * 9;
        entries.sort_by_key(|e| e.0);
        for (_, meta, path) in &entries {
            if total <= target {
                break;
            }
            evict(path, meta, "budget");
            total -= meta.len();
        }
    }
    Some(total)
}

//! The disk tier on a real directory.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use mmcache_disk_cache::{DiskCache, DiskCacheConfig, Fill};

use crate::common::{Dir, id};

fn dir_bytes(root: &std::path::Path) -> u64 {
    let mut total = 0;
    for shard in std::fs::read_dir(root.join("v1"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if shard.file_name().len() != 2 {
            continue;
        }
        for e in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            total += e.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}

#[tokio::test]
async fn round_trip_with_the_identity_digest_as_file_name() {
    let dir = Dir::new("disk-roundtrip");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let ident = id(1);
    assert!(cache.get(&ident).await.is_none());
    cache
        .put(&ident, Bytes::from_static(b"exact origin bytes"))
        .await;
    assert_eq!(
        cache.get(&ident).await.as_deref(),
        Some(&b"exact origin bytes"[..])
    );
    // The same digest as the Redis key, so scoping partitions both tiers alike.
    let digest = ident.sha256_hex();
    let path = dir.0.join("v1").join(&digest[..2]).join(digest);
    assert_eq!(std::fs::read(&path).unwrap(), b"exact origin bytes");
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.writes), (1, 1, 1));
}

#[tokio::test]
async fn expired_oversized_and_empty_entries_are_misses() {
    let dir = Dir::new("disk-expiry");
    let mut config = DiskCacheConfig::new(&dir.0);
    config.ttl = Duration::from_secs(60);
    config.max_entry_bytes = 10;
    let cache = DiskCache::new(config);
    cache.put(&id(1), Bytes::from_static(b"fresh")).await;
    cache
        .put(&id(2), Bytes::from_static(b"this is over ten bytes"))
        .await;
    assert!(
        cache.get(&id(2)).await.is_none(),
        "never written: over the cap"
    );
    // An entry written an hour ago is past the TTL: a miss, and removed.
    let old = cache.path_of(&id(1));
    let file = std::fs::File::options().write(true).open(&old).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    assert!(cache.get(&id(1)).await.is_none());
    assert!(!old.exists());
    // A file that another writer left empty or grew past the cap is a miss, never an error.
    std::fs::write(cache.path_of(&id(1)), b"").unwrap();
    assert!(cache.get(&id(1)).await.is_none());
    std::fs::write(cache.path_of(&id(1)), [7u8; 11]).unwrap();
    assert!(cache.get(&id(1)).await.is_none());
}

#[tokio::test]
async fn leftovers_of_a_killed_writer_are_ignored_and_swept() {
    let dir = Dir::new("disk-partial");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"whole")).await;
    // What a writer killed mid-write leaves: a temporary file, never the entry's own path.
    let tmp = dir.0.join("v1/tmp/killed.1234.0");
    std::fs::write(&tmp, b"half an ima").unwrap();
    assert!(cache.get(&id(2)).await.is_none());
    // Young temporary files may be writes in progress; old ones are partial and removed.
    cache.sweep_now();
    assert!(tmp.exists());
    let f = std::fs::File::options().write(true).open(&tmp).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    cache.sweep_now();
    assert!(!tmp.exists());
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"whole"[..]));
}

#[tokio::test]
async fn the_budget_holds_without_a_scan_per_write() {
    let dir = Dir::new("disk-budget");
    let mut config = DiskCacheConfig::new(&dir.0);
    config.max_bytes = 64 * 1024;
    let cache = DiskCache::new(config);
    let value = Bytes::from(vec![1u8; 1024]);
    for n in 0..400 {
        cache.put(&id(n), value.clone()).await;
    }
    // Sweeps ran when an eighth of the budget was written, not per write.
    let s = cache.stats();
    assert!(s.sweeps >= 2 && s.sweeps <= 400 / 8, "{s:?}");
    assert!(s.evictions > 0, "{s:?}");
    // Sweeps run beside the writes: once the last one is done, the directory is within the
    // budget plus what was written since (an eighth of it). Bounded wait for that sweep.
    let bound = 64 * 1024 + 8 * 1024;
    let mut size = dir_bytes(&dir.0);
    for _ in 0..100 {
        if size <= bound {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        size = dir_bytes(&dir.0);
    }
    assert!(size <= bound, "{size} > {bound}");
    // A sweep leaves the directory within the budget (at 90 % of it after evicting).
    let left = cache.sweep_now();
    assert!(left <= 64 * 1024, "{left}");
    assert_eq!(left, dir_bytes(&dir.0));
    // The newest entries are the ones kept.
    assert!(cache.get(&id(399)).await.is_some());
    assert!(cache.get(&id(0)).await.is_none());
}

#[tokio::test]
async fn a_broken_directory_fails_open() {
    let dir = Dir::new("disk-broken");
    // The configured "directory" is a regular file: nothing can be created under it.
    std::fs::write(&dir.0, b"not a directory").unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"x")).await;
    assert!(cache.get(&id(1)).await.is_none());
    assert!(matches!(
        cache.lock(&id(1), Duration::from_millis(10)).await,
        Fill::GaveUp
    ));
    assert!(cache.stats().errors >= 1);
    std::fs::remove_file(&dir.0).unwrap();
    // Deleted under a running process: the next write makes it again.
    let ok = DiskCache::new(DiskCacheConfig::new(&dir.0));
    ok.put(&id(1), Bytes::from_static(b"x")).await;
    std::fs::remove_dir_all(&dir.0).unwrap();
    assert!(ok.get(&id(1)).await.is_none());
    ok.put(&id(1), Bytes::from_static(b"y")).await;
    assert_eq!(ok.get(&id(1)).await.as_deref(), Some(&b"y"[..]));
}

#[tokio::test]
async fn the_fill_lock_admits_one_holder_at_a_time() {
    let dir = Dir::new("disk-lock");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let locked = |f: &Fill| matches!(f, Fill::Locked(_));
    let first = cache.lock(&id(1), Duration::from_millis(100)).await;
    assert!(locked(&first));
    // Held: a second taker waits, then gives up.
    let second = cache.lock(&id(1), Duration::from_millis(50)).await;
    assert!(matches!(second, Fill::GaveUp));
    // Another entry is independent.
    assert!(locked(&cache.lock(&id(2), Duration::from_millis(50)).await));
    // Released (as when its process exits): the waiter gets it.
    let waiter = tokio::spawn({
        let cache = cache.clone();
        async move {
            matches!(
                cache.lock(&id(1), Duration::from_secs(10)).await,
                Fill::Locked(_)
            )
        }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    drop(first);
    assert!(waiter.await.unwrap());
    // A waiter sees the entry as soon as the holder writes it, before the lock is released.
    let holder = cache.lock(&id(3), Duration::from_millis(100)).await;
    assert!(locked(&holder));
    let watcher = tokio::spawn({
        let cache = cache.clone();
        async move {
            matches!(
                cache.lock(&id(3), Duration::from_secs(10)).await,
                Fill::Filled
            )
        }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    cache.put(&id(3), Bytes::from_static(b"filled")).await;
    assert!(watcher.await.unwrap(), "the watcher saw the entry");
    drop(holder);
}

#[tokio::test]
async fn a_named_entry_is_removed_only_if_it_is_still_the_file_read() {
    use mmcache_disk_cache::{EntryName, metrics::WriteOutcome};
    let dir = Dir::new("disk-named-if");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let name = EntryName::from_digest(&[7; 32]);
    let put = cache
        .put_named(&name, Bytes::from_static(b"bad"), None)
        .await;
    assert_eq!(put, WriteOutcome::Success);
    let (bytes, bad) = cache.get_named_stamped(&name).await.expect("entry");
    assert_eq!(&bytes[..], b"bad");
    // Another process writes a good value over it (rename: a new file) before the delete.
    let put = cache
        .put_named(&name, Bytes::from_static(b"good"), None)
        .await;
    assert_eq!(put, WriteOutcome::Success);
    assert!(
        !cache.remove_named_if(&name, &bad).await,
        "the new file kept"
    );
    assert_eq!(cache.get_named(&name).await.as_deref(), Some(&b"good"[..]));
    // The file it read is removed.
    let (_, now) = cache.get_named_stamped(&name).await.expect("entry");
    assert!(cache.remove_named_if(&name, &now).await);
    assert!(cache.get_named(&name).await.is_none());
    // A write the tier does not make says so.
    let empty = cache.put_named(&name, Bytes::new(), None).await;
    assert_eq!(empty, WriteOutcome::Skipped);
}

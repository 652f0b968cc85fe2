//! Every disk operation is bounded in time. A disk that does not answer is simulated with the
//! crate's test seam `DiskCache::inject_read_stall` (no FUSE or dm-delay here), which parks the
//! read's blocking thread where its I/O would start.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_disk_cache::{BREAKER_FAILURES, DiskCache, DiskCacheConfig, Stall};

use crate::common::{Dir, id};

/// A stall that parks each read until released (at most 20 s), counting the reads it parked.
struct Stalled {
    released: Arc<AtomicBool>,
    parked: Arc<AtomicUsize>,
    /// Reads whose stall ended (released or timed out).
    unparked: Arc<AtomicUsize>,
}

impl Stalled {
    fn on(cache: &DiskCache) -> Self {
        let released = Arc::new(AtomicBool::new(false));
        let parked = Arc::new(AtomicUsize::new(0));
        let unparked = Arc::new(AtomicUsize::new(0));
        let stall: Stall = Arc::new({
            let (released, parked, unparked) = (released.clone(), parked.clone(), unparked.clone());
            move || {
                parked.fetch_add(1, Ordering::SeqCst);
                let start = Instant::now();
                while !released.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(20)
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                unparked.fetch_add(1, Ordering::SeqCst);
            }
        });
        cache.inject_read_stall(Some(stall));
        Self {
            released,
            parked,
            unparked,
        }
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        self.released.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_read_is_a_miss_at_the_default_deadline() {
    let dir = Dir::new("bounds-default");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"there")).await;
    let stall = Stalled::on(&cache);
    let t = Instant::now();
    let got = cache.get(&id(1)).await;
    let took = t.elapsed();
    assert!(got.is_none(), "a stalled read returned bytes");
    // The default deadline is 1 s; the stall would last 20 s.
    assert!(
        took < Duration::from_secs(10),
        "a stalled read took {took:?}"
    );
    assert_eq!(stall.parked.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().skipped, 1);
    drop(stall);
    cache.inject_read_stall(None);
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"there"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_keeps_stalling_is_skipped_by_the_breaker() {
    let dir = Dir::new("bounds-breaker");
    // Seeded with the default deadline, so a slow first write on a loaded machine cannot count
    // as a failure of the cache under test; its deadline is short only to keep the test quick.
    DiskCache::new(DiskCacheConfig::new(&dir.0))
        .put(&id(1), Bytes::from_static(b"there"))
        .await;
    let mut config = DiskCacheConfig::new(&dir.0);
    config.timeout = Duration::from_millis(250);
    let cache = DiskCache::new(config);
    let stall = Stalled::on(&cache);
    for _ in 0..BREAKER_FAILURES {
        assert!(cache.get(&id(1)).await.is_none());
    }
    let parked = stall.parked.load(Ordering::SeqCst);
    assert_eq!(parked, BREAKER_FAILURES as usize);
    // Open: the next operations do not touch the disk at all.
    let t = Instant::now();
    for _ in 0..10 {
        assert!(cache.get(&id(1)).await.is_none());
        let _ = cache.lock(&id(1), Duration::from_millis(10)).await;
        cache.put(&id(2), Bytes::from_static(b"skipped")).await;
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(stall.parked.load(Ordering::SeqCst), parked);
    assert!(
        !cache.path_of(&id(2)).exists(),
        "a write ran with the breaker open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_reads_never_hold_more_than_their_permits() {
    let dir = Dir::new("bounds-permits");
    let mut config = DiskCacheConfig::new(&dir.0);
    config.max_blocking_ops = 4;
    config.timeout = Duration::from_secs(5);
    let cache = DiskCache::new(config);
    let stall = Stalled::on(&cache);
    let reads: Vec<_> = (0..32)
        .map(|n| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get(&id(n)).await })
        })
        .collect();
    for r in reads {
        let got = tokio::time::timeout(Duration::from_secs(15), r).await;
        assert!(matches!(got, Ok(Ok(None))), "{got:?}");
    }
    // Only 4 reads ever reached the disk; the others found no permit and were misses.
    assert_eq!(stall.parked.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_waits_for_writes_in_flight() {
    let dir = Dir::new("bounds-flush");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    assert!(cache.flush(Instant::now()).await, "nothing pending");
    let value = Bytes::from(vec![7u8; 4 << 20]);
    let writes: Vec<_> = (0..8)
        .map(|n| {
            let (cache, value) = (cache.clone(), value.clone());
            tokio::spawn(async move { cache.put(&id(n), value).await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert!(cache.flush(Instant::now() + Duration::from_secs(30)).await);
    // Every write that had started is on disk once flush says so.
    for n in 0..8 {
        if cache.path_of(&id(n)).exists() {
            assert_eq!(
                std::fs::metadata(cache.path_of(&id(n))).unwrap().len(),
                4 << 20
            );
        }
    }
    for w in writes {
        w.await.unwrap();
    }
    assert!(cache.flush(Instant::now()).await);
    for n in 0..8 {
        assert!(cache.path_of(&id(n)).exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_permits_do_not_open_the_breaker() {
    let dir = Dir::new("bounds-busy");
    // Default settings: 16 permits, 1 s deadline, 100 ms permit wait.
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"there")).await;
    let permits = cache.config().max_blocking_ops;
    let stall = Stalled::on(&cache);
    let stalled: Vec<_> = (0..permits)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get(&id(1)).await })
        })
        .collect();
    let t = Instant::now();
    while stall.parked.load(Ordering::SeqCst) < permits {
        assert!(t.elapsed() < Duration::from_secs(10), "reads never parked");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Every permit is taken: these find none within the permit wait (busy, not a disk fault).
    let busy: Vec<_> = (0..2 * BREAKER_FAILURES)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.get(&id(1)).await })
        })
        .collect();
    for b in busy {
        assert!(b.await.unwrap().is_none());
    }
    // The parked reads complete before their deadline: the disk itself answered.
    drop(stall);
    for s in stalled {
        assert_eq!(
            s.await.unwrap().as_deref(),
            Some(&b"there"[..]),
            "a parked read"
        );
    }
    cache.inject_read_stall(None);
    assert_eq!(
        cache.get(&id(1)).await.as_deref(),
        Some(&b"there"[..]),
        "busy permits opened the breaker: the disk is skipped though it never failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_permit_behind_operations_past_their_deadline_counts_as_a_stalled_disk() {
    let dir = Dir::new("bounds-overdue");
    DiskCache::new(DiskCacheConfig::new(&dir.0))
        .put(&id(1), Bytes::from_static(b"there"))
        .await;
    // Fewer permits than the failures that open the breaker: the stalled reads alone, each
    // past its deadline, cannot open it.
    let mut config = DiskCacheConfig::new(&dir.0);
    config.max_blocking_ops = 2;
    config.timeout = Duration::from_millis(250);
    let cache = DiskCache::new(config);
    let stall = Stalled::on(&cache);
    for _ in 0..2 {
        let cache = cache.clone();
        tokio::spawn(async move { cache.get(&id(1)).await });
    }
    let t = Instant::now();
    while stall.parked.load(Ordering::SeqCst) < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "reads never parked");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Past the deadline of both: every permit is held by an operation the disk never answered.
    tokio::time::sleep(Duration::from_millis(400)).await;
    for _ in 0..2 * BREAKER_FAILURES {
        assert!(cache.get(&id(1)).await.is_none());
    }
    // The disk answers again; once the parked reads returned their permits, a closed breaker
    // would let the next read hit. An open one skips the disk for its cool-down (5 s).
    stall.released.store(true, Ordering::SeqCst);
    let t = Instant::now();
    while stall.unparked.load(Ordering::SeqCst) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "reads never unparked"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    cache.inject_read_stall(None);
    assert!(
        cache.get(&id(1)).await.is_none(),
        "a disk whose every permit was held past its deadline never opened the breaker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_concurrent_load_on_a_healthy_disk_never_opens_the_breaker() {
    let dir = Dir::new("bounds-load");
    // One permit and 16 MiB entries: 96 reads at once queue for longer than the permit wait
    // (100 ms) on any disk, so some are busy; none is past its deadline (1 s) on a disk that
    // answers. Rounds go on (at most 10) until one was busy: a fast machine's page cache must
    // not leave the test loading nothing.
    let mut config = DiskCacheConfig::new(&dir.0);
    config.max_blocking_ops = 1;
    let cache = DiskCache::new(config);
    let value = Bytes::from(vec![5u8; 16 << 20]);
    for n in 0..4 {
        cache.put(&id(n), value.clone()).await;
        assert!(cache.path_of(&id(n)).exists(), "seeding entry {n}");
    }
    for round in 0..10 {
        if round >= 3 && cache.stats().skipped > 0 {
            break;
        }
        let reads: Vec<_> = (0..96)
            .map(|n| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.get(&id(n % 4)).await.map(|b| b.len()) })
            })
            .collect();
        for r in reads {
            let got = tokio::time::timeout(Duration::from_secs(30), r).await;
            assert!(
                matches!(got, Ok(Ok(None | Some(0x100_0000)))),
                "round {round}: {got:?}"
            );
        }
    }
    assert!(
        cache.stats().skipped > 0,
        "no read was ever busy: the test loads nothing"
    );
    assert_eq!(
        cache.get(&id(0)).await.map(|b| b.len()),
        Some(16 << 20),
        "busy reads on a healthy disk opened the breaker"
    );
}

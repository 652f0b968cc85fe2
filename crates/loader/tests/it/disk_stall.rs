//! A disk that stops answering (an NFS or EBS stall) must not take the blocking pool that
//! decodes use: with more stalled disk reads than the pool has threads, a memory hit and a
//! shared hit (a real Redis Cluster) still return at once, and the stalled loads fail over.
//! The stall is the disk tier's test seam `DiskCache::inject_read_stall` (no FUSE or dm-delay
//! here): it parks each read's thread where its I/O would start.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mmcache_loader::{HedgeSettings, Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

use crate::common::Dir;

/// The test runtime's blocking pool: small, as a worker that sized it down would have.
const BLOCKING_THREADS: usize = 24;
/// Stalled loads: more than the blocking pool has threads.
const STALLED: usize = 40;
/// Longest a stalled read stays parked (the test releases it sooner).
const STALL_BOUND: Duration = Duration::from_secs(30);

#[test]
fn stalled_disk_reads_leave_memory_and_shared_hits_fast() {
    if !require_redis("stalled_disk_reads_leave_memory_and_shared_hits_fast") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
        .unwrap();
    let cluster = RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster");
    let origin = TestOrigin::start();
    let dir = Dir(std::env::temp_dir().join(format!("mmcache-stall-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    origin.set("/hot.png", Route::ok(images::png(32, 32, 1)));
    origin.set("/shared.png", Route::ok(images::png(40, 30, 2)));
    for n in 0..STALLED {
        origin.set(
            &format!("/s{n}.png"),
            Route::ok(images::png(8, 8, n as u32)),
        );
    }
    rt.block_on(async {
        // No hedge: the shared hit must be the shared cache's, not an origin race.
        let mut no_hedge = HedgeSettings::default();
        no_hedge.enabled = false;
        // The disk tier with its default settings (deadline, permits, breaker).
        let loader = Loader::builder()
            .allow_internal(true)
            .shared_cache_url(cluster.url())
            .shared_cache_hedge(no_hedge)
            .disk_cache_dir(&dir.0)
            .build()
            .unwrap();
        let hot = origin.url("/hot.png");
        assert_eq!(
            loader.load_detailed(&hot, None).await.unwrap().source,
            Source::Origin
        );
        // Another worker (no disk tier) puts /shared.png in the shared cache.
        let seeder = Loader::builder()
            .allow_internal(true)
            .shared_cache_url(cluster.url())
            .shared_cache_hedge(no_hedge)
            .build()
            .unwrap();
        let shared_url = origin.url("/shared.png");
        assert_eq!(
            seeder
                .load_detailed(&shared_url, None)
                .await
                .unwrap()
                .source,
            Source::Origin
        );

        // The disk stops answering.
        let released = Arc::new(AtomicBool::new(false));
        let parked = Arc::new(AtomicUsize::new(0));
        let disk = loader.disk_cache().expect("disk tier on").clone();
        disk.inject_read_stall(Some(Arc::new({
            let (released, parked) = (released.clone(), parked.clone());
            move || {
                parked.fetch_add(1, Ordering::SeqCst);
                let start = Instant::now();
                while !released.load(Ordering::SeqCst) && start.elapsed() < STALL_BOUND {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })));
        let stalled: Vec<_> = (0..STALLED)
            .map(|n| {
                let (loader, url) = (loader.clone(), origin.url(&format!("/s{n}.png")));
                tokio::spawn(async move { loader.load_detailed(&url, None).await })
            })
            .collect();
        // Bounded wait until the stall holds threads (all of them, before the fix).
        let start = Instant::now();
        while parked.load(Ordering::SeqCst) < 8 && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            parked.load(Ordering::SeqCst) >= 8,
            "the stall never started"
        );

        let t = Instant::now();
        let memory =
            tokio::time::timeout(Duration::from_secs(3), loader.load_detailed(&hot, None)).await;
        let memory_took = t.elapsed();
        let t = Instant::now();
        let shared = tokio::time::timeout(
            Duration::from_secs(3),
            loader.load_detailed(&shared_url, None),
        )
        .await;
        let shared_took = t.elapsed();
        let held = parked.load(Ordering::SeqCst);
        released.store(true, Ordering::SeqCst);
        eprintln!("memory hit {memory_took:?}, shared hit {shared_took:?}, reads parked {held}");
        let memory = memory
            .expect("a memory hit waited on a stalled disk")
            .unwrap();
        assert_eq!(memory.source, Source::Memory);
        let shared = shared.expect("a shared hit waited on a stalled disk (blocking pool taken)");
        assert_eq!(shared.unwrap().source, Source::Shared);
        // Every stalled load still succeeds (fail-open), within a bound.
        for task in stalled {
            let loaded = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("a stalled load hung")
                .unwrap();
            assert!(loaded.is_ok(), "{:?}", loaded.err());
        }
        // They went on to the next tier because the disk's bounds cut them short.
        let s = disk.stats();
        assert!(s.skipped >= (STALLED - 16) as u64, "{s:?}");
        // The stall ends: after the breaker's cool-down the disk serves again (bounded wait).
        disk.inject_read_stall(None);
        let hot_id = CacheIdentity::unscoped(&hot);
        let start = Instant::now();
        let mut back = disk.get(&hot_id).await.is_some();
        while !back && start.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            back = disk.get(&hot_id).await.is_some();
        }
        assert!(
            back,
            "the disk tier never came back after the stall: {:?}",
            disk.stats()
        );
    });
    rt.shutdown_timeout(Duration::from_secs(10));
}

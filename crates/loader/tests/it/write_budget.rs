//! A cache write never makes a later load wait or fail for memory: with every disk write
//! stalled (a hung disk; the disk tier's test seam `DiskCache::inject_write_stall`), a run of
//! distinct large loads under a small download budget all succeed, because the writes hold
//! their bytes under a separate, bounded allowance and not the loads' download reservations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mmcache_loader::{Loader, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

use crate::common::Dir;

/// Longest a stalled write stays parked (the test releases them sooner).
const STALL_BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_disk_writes_do_not_hold_the_download_budget() {
    const LOADS: usize = 8;
    let origin = TestOrigin::start();
    let dir =
        Dir(std::env::temp_dir().join(format!("mmcache-write-budget-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let urls: Vec<String> = (0..LOADS)
        .map(|i| {
            let path = format!("/noise-{i}.png");
            // About 3 MB each: pseudo-random pixels barely compress.
            origin.set(
                &path,
                Route::ok(images::noise_png(1000, 1000, i as u64 + 1)),
            );
            origin.url(&path)
        })
        .collect();
    // 16 MiB: two such bodies at once (half the budget serves bodies with a length).
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0))
        .disk_cache_dir(&dir.0)
        .download_memory_bytes(16 << 20)
        .decode_wait(Duration::from_secs(2))
        .build()
        .unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let disk = loader.disk_cache().expect("the disk tier is on");
    disk.inject_write_stall(Some(Arc::new({
        let released = released.clone();
        move || {
            let started = Instant::now();
            while !released.load(Ordering::Relaxed) && started.elapsed() < STALL_BOUND {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    })));

    // One after the other: each load's disk write stalls behind it.
    let mut failures = Vec::new();
    for url in &urls {
        match loader.load_detailed(url, None).await {
            Ok(loaded) => assert_eq!(loaded.source, Source::Origin),
            Err(e) => failures.push(format!("{url}: {} {e}", e.http_status())),
        }
    }
    released.store(true, Ordering::Relaxed);
    loader.shutdown(Duration::from_secs(10)).await;
    assert!(
        failures.is_empty(),
        "loads failed while disk writes were stalled: {failures:#?}"
    );
}

//! The host's fill lock of an entry is held until the entry's write has really landed (or was
//! abandoned), not only until `put` stopped waiting for it at the disk deadline: otherwise
//! another process takes the lock while the entry is still on its way and downloads it again.
//! Real directory, real origin, default disk settings; the slow write is the disk tier's test
//! seam `DiskCache::inject_write_stall` (no FUSE or dm-delay here).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mmcache_disk_cache::{DiskCache, DiskCacheConfig, Fill};
use mmcache_loader::{Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

use crate::common::Dir;

/// Longest the stalled write stays parked (the test releases it sooner).
const STALL_BOUND: Duration = Duration::from_secs(30);

/// A gate the stalled write waits on until opened (or [`STALL_BOUND`]).
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let started = Instant::now();
        let mut open = self.open.lock().unwrap();
        while !*open && started.elapsed() < STALL_BOUND {
            open = self
                .cv
                .wait_timeout(open, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fill_lock_is_held_until_the_write_lands_not_until_put_gives_up() {
    let dir = Dir(std::env::temp_dir().join(format!("mmcache-fill-lock-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(16, 16, 1)));
    let url = origin.url("/a.png");
    let loader = Loader::builder()
        .allow_internal(true)
        .disk_cache_dir(&dir.0)
        .build()
        .unwrap();
    let disk = loader.disk_cache().unwrap().clone();
    let gate = Arc::new(Gate::default());
    disk.inject_write_stall(Some(Arc::new({
        let gate = gate.clone();
        move || gate.wait()
    })));
    let id = CacheIdentity::resolve(false, &url, None).unwrap();

    assert_eq!(
        loader.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    // Wait (bounded) until `put` has stopped waiting for its write: the deadline (default 1 s)
    // passed, which the tier counts as a skipped operation.
    let started = Instant::now();
    while disk.stats().skipped == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the stalled write never reached its deadline"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Another process of the host (a second instance: `flock` is per open file) looks for the
    // lock while the write is still parked: it must find it held.
    let other = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let seen = other.lock(&id, Duration::from_millis(300)).await;
    assert!(
        matches!(seen, Fill::GaveUp),
        "the fill lock was free while the entry's write was still on its way: {seen:?}"
    );

    // Once the write lands, the entry is there for the others.
    gate.open();
    assert!(loader.shutdown(Duration::from_secs(20)).await);
    let seen = other.lock(&id, Duration::from_secs(5)).await;
    assert!(matches!(seen, Fill::Filled), "after the write: {seen:?}");
}

//! Disk-tier writes leave the load's path: a load returns while its entry is still being
//! written, and `Loader::shutdown` waits for the write to land. Real directory, real origin.

use std::time::{Duration, Instant};

use mmcache_loader::{Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

use crate::common::Dir;

/// A fresh directory under the temp dir (emptied first), removed on drop.
fn fresh_dir(name: &str) -> Dir {
    let p = std::env::temp_dir().join(format!("mmcache-loader-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    Dir(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_returns_before_its_disk_write_lands_and_shutdown_waits_for_it() {
    let dir = fresh_dir("disk-writes");
    let origin = TestOrigin::start();
    // A 1x1 PNG carrying 48 MB in a text chunk that decoding skips unread: the decode is
    // quick, the entry's write is not (tens of milliseconds even on tmpfs).
    let body = images::zero_png(1, 1, 8, 2, &[(b"tEXt", vec![b'x'; 48 << 20])]);
    origin.set("/big.png", Route::ok(body.clone()));
    let url = origin.url("/big.png");
    let loader = Loader::builder()
        .allow_internal(true)
        .disk_cache_dir(&dir.0)
        .build()
        .unwrap();
    let entry = loader
        .disk_cache()
        .unwrap()
        .path_of(&CacheIdentity::resolve(false, &url, None).unwrap());

    let loaded = loader.load_detailed(&url, None).await.unwrap();
    let landed_before_return = entry.exists();
    assert_eq!(loaded.source, Source::Origin);
    assert!(
        !landed_before_return,
        "the load waited for its 48 MB disk write (the entry existed when it returned)"
    );

    let started = Instant::now();
    assert!(
        loader.shutdown(Duration::from_secs(60)).await,
        "shutdown reports the pending disk write as finished"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(
        std::fs::read(&entry).expect("the entry exists once shutdown returned true"),
        body
    );
    // Nothing pending: returns true at once.
    assert!(loader.shutdown(Duration::from_millis(1)).await);
}

// Not in tests/it: it reads the process-wide digest count (`CacheIdentity::digests_computed`).
//! A load hashes its cache identity once per digest: one blake3 (the in-process maps) and one
//! SHA-256 (the disk tier's names, the shared cache's keys), however many tiers it passes.
//! Real disk directory, real Redis Cluster, real HTTP origin. Alone in its binary: the count
//! is process-wide.

use std::path::PathBuf;
use std::time::Duration;

use mmcache_loader::{HedgeSettings, LeaseConfig, Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

/// A fresh directory under the temp dir, removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_through_every_tier_hashes_its_identity_once_per_digest() {
    if !require_redis("a_miss_through_every_tier_hashes_its_identity_once_per_digest") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster");
    let dir = Dir(std::env::temp_dir().join(format!("mmcache-hashes-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(16, 16, 1)));
    let url = origin.url("/a.png");
    // Every tier that keys by the identity: disk (read, lock, read again, write), shared GET,
    // lease (take, look again, release), SET. No hedge: the count must not depend on timing.
    let mut no_hedge = HedgeSettings::default();
    no_hedge.enabled = false;
    let mut lease = LeaseConfig::default();
    lease.enabled = true;
    let loader = Loader::builder()
        .allow_internal(true)
        .disk_cache_dir(&dir.0)
        .shared_cache_url(cluster.url())
        .shared_cache_connect_timeout(Duration::from_secs(2))
        .shared_cache_io_timeout(Duration::from_secs(2))
        .shared_cache_hedge(no_hedge)
        .shared_cache_lease(lease)
        .build()
        .unwrap();

    let before = CacheIdentity::digests_computed();
    let loaded = loader.load_detailed(&url, None).await.unwrap();
    assert!(
        loader.shutdown(Duration::from_secs(30)).await,
        "writes landed"
    );
    let miss = CacheIdentity::digests_computed() - before;
    assert_eq!(loaded.source, Source::Origin);
    let s = loader.shared_cache().unwrap().stats();
    assert_eq!(
        (s.get_misses, s.set_ok),
        (2, 1),
        "GET, GET as lease holder, SET"
    );
    assert_eq!(loader.disk_cache().unwrap().stats().writes, 1);
    assert_eq!(
        miss, 2,
        "identity digests computed by one miss (blake3 + SHA-256)"
    );

    let before = CacheIdentity::digests_computed();
    let hit = loader.load_detailed(&url, None).await.unwrap();
    assert_eq!(hit.source, Source::Memory);
    assert_eq!(
        CacheIdentity::digests_computed() - before,
        1,
        "identity digests computed by one memory hit (blake3)"
    );
}

// Not in tests/it: its counting global allocator counts the whole process.
//! Values read from the shared cache count in the download budget like origin bodies: many
//! shared hits of large values at once never hold more than the budget together, and every
//! load still gets its image (a bounded wait serves them all). A counting allocator measures
//! the peak of live bytes; one decode at a time keeps the hits waiting with their bytes.

mod common;

use std::time::Duration;

use mmcache_loader::{HedgeSettings, Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::entry_key;
use mmcache_test_support::alloc::{Counting, peak_since, start_peak};
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

// One test in this binary: the allocator counts the whole process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_shared_hits_stay_within_the_download_budget() {
    if !require_redis("concurrent_shared_hits_stay_within_the_download_budget") {
        return;
    }
    const LOADS: usize = 24;
    let budget = 16 * MIB; // room for about four values at once
    // One master: one connection, so the client's own read buffer is one value's worth.
    let cluster = RedisCluster::start(ClusterOptions {
        masters: 1,
        ..ClusterOptions::default()
    })
    .expect("start a Redis Cluster");
    let origin = TestOrigin::start(); // serves nothing: every image must come from the cache
    let urls: Vec<String> = (0..LOADS)
        .map(|i| {
            let url = origin.url(&format!("/noise-{i}.png"));
            // About 4 MB each: pseudo-random pixels barely compress.
            let png = images::noise_png(1150, 1150, i as u64 + 1);
            assert!(png.len() > 3_900_000, "{}", png.len());
            let key = entry_key(&CacheIdentity::unscoped(&url));
            cluster.set_raw(&key, &png, Some(600)).unwrap();
            url
        })
        .collect();
    let mut no_hedge = HedgeSettings::default();
    no_hedge.enabled = false; // the origin has nothing; only the GETs are measured
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0))
        .shared_cache_url(cluster.url())
        .shared_cache_io_timeout(Duration::from_secs(10))
        .shared_cache_hedge(no_hedge)
        .decode_concurrency(1)
        .download_memory_bytes(budget as u64)
        .build()
        .unwrap();
    assert!(loader.shared_cache().unwrap().connect().await);

    let base = start_peak();
    let sources = common::load_all_at_once(&loader, urls).await;
    let peak = peak_since(base);
    assert!(sources.iter().all(|s| *s == Source::Shared), "{sources:?}");
    eprintln!(
        "peak of live allocations: {:.1} MiB",
        peak as f64 / MIB as f64
    );
    // Twenty-four values held at once (each waiting for the one decode slot) take 96 MB. The
    // budget admits about four; the slack covers the one decode's pixels and buffers (about
    // 8 MB), the Redis client's read buffer (up to twice a value) and the runtime.
    assert!(
        peak < budget + 24 * MIB,
        "peak {} MiB of live allocations with a {} MiB download budget",
        peak / MIB,
        budget / MIB
    );
}

//! The stampede lease and the write-behind queue, across the workers of one fleet.

use super::*;

#[tokio::test]
async fn a_waiter_takes_over_a_released_lease_at_once() {
    if !require_redis("a_waiter_takes_over_a_released_lease_at_once") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    origin.set("/t.png", Route::ok(images::png(8, 8, 2)));
    let url = origin.url("/t.png");
    // Another worker holds the lease, and gives it up (its origin fetch failed) 200 ms later.
    let lease = mmcache_shared_cache::lease_key(&CacheIdentity::unscoped(&url));
    cluster
        .set_raw(&lease, b"failing-worker", Some(60))
        .unwrap();
    let mut settings = mmcache_loader::LeaseConfig::default();
    settings.enabled = true;
    settings.wait = Duration::from_secs(20);
    let loader = worker(&cluster.url())
        .shared_cache_lease(settings)
        .build()
        .unwrap();
    let load = tokio::spawn({
        let (loader, url) = (loader.clone(), url.clone());
        async move {
            let started = std::time::Instant::now();
            let loaded = loader.load_detailed(&url, None).await;
            (loaded, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.cli_cluster(&["DEL", &lease]).unwrap();
    let (loaded, took) = load.await.unwrap();
    assert_eq!(loaded.unwrap().source, Source::Origin);
    // It took the lease over instead of sleeping out the 20 s wait.
    assert!(took < settings.wait / 4, "took {took:?}");
    assert_eq!(origin.hits("/t.png"), 1);
    // And released it after filling the entry.
    assert_eq!(cluster.get_raw(&lease).unwrap(), None);
    assert!(cluster.get_raw(&key_for(&url)).unwrap().is_some());
}

async fn stampede(cluster: &RedisCluster, lease: bool, path: &str) -> (usize, Vec<Source>) {
    let origin = TestOrigin::start();
    origin.set(
        path,
        Route::Delay(
            Duration::from_millis(300),
            Box::new(Route::ok(images::png(16, 16, 3))),
        ),
    );
    let url = origin.url(path);
    let mut settings = mmcache_loader::LeaseConfig::default();
    settings.enabled = lease;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let loader = worker(&cluster.url())
            .shared_cache_lease(settings)
            .build()
            .unwrap();
        assert!(loader.shared_cache().unwrap().connect().await);
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            loader.load_detailed(&url, None).await.unwrap().source
        }));
    }
    let mut sources = Vec::new();
    for t in tasks {
        sources.push(t.await.unwrap());
    }
    (origin.hits(path), sources)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stampede_lease_makes_one_origin_fetch_for_a_fleet() {
    if !require_redis("stampede_lease_makes_one_origin_fetch_for_a_fleet") {
        return;
    }
    let cluster = cluster();
    let (fetches, sources) = stampede(&cluster, true, "/hot.png").await;
    assert_eq!(fetches, 1, "{sources:?}");
    assert_eq!(sources.iter().filter(|s| **s == Source::Shared).count(), 7);
    // Without the lease every worker that missed went to the origin.
    let (fetches, _) = stampede(&cluster, false, "/hot2.png").await;
    assert!(
        fetches > 1,
        "expected a stampede without the lease, got {fetches} fetch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_by_a_dead_worker_only_costs_the_wait() {
    if !require_redis("a_lease_held_by_a_dead_worker_only_costs_the_wait") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    origin.set("/x.png", Route::ok(images::png(8, 8, 1)));
    let url = origin.url("/x.png");
    // Someone took the lease and died: it never fills the entry.
    let lease = mmcache_shared_cache::lease_key(&CacheIdentity::unscoped(&url));
    cluster.set_raw(&lease, b"dead-worker", Some(60)).unwrap();
    let mut settings = mmcache_loader::LeaseConfig::default();
    settings.enabled = true;
    settings.wait = Duration::from_millis(300);
    let loader = worker(&cluster.url())
        .shared_cache_lease(settings)
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        loader.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it waited for the holder first"
    );
    assert_eq!(origin.hits("/x.png"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_behind_returns_first_and_drains_on_shutdown() {
    if !require_redis("write_behind_returns_first_and_drains_on_shutdown") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let mut wb = mmcache_shared_cache::WriteBehindConfig::default();
    wb.enabled = true;
    let loader = worker(&cluster.url())
        .shared_cache_write_behind(wb)
        .build()
        .unwrap();
    let mut urls = Vec::new();
    for i in 0..20u32 {
        let path = format!("/wb{i}.png");
        origin.set(&path, Route::ok(images::png(8, 8, i)));
        urls.push(origin.url(&path));
    }
    for url in &urls {
        assert_eq!(
            loader.load_detailed(url, None).await.unwrap().source,
            Source::Origin
        );
    }
    assert!(
        loader.shutdown(Duration::from_secs(5)).await,
        "the queue drains"
    );
    for url in &urls {
        assert!(
            cluster.get_raw(&key_for(url)).unwrap().is_some(),
            "{url} written behind"
        );
    }
    assert_eq!(loader.shared_cache().unwrap().stats().set_ok, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_write_behind_queue_drops_instead_of_blocking() {
    if !require_redis("a_full_write_behind_queue_drops_instead_of_blocking") {
        return;
    }
    let cluster = cluster();
    let mut c = mmcache_shared_cache::SharedCacheConfig::new(cluster.url());
    c.io_timeout = Duration::from_millis(500);
    c.write_behind.enabled = true;
    c.write_behind.max_queued = 2;
    let cache = mmcache_shared_cache::SharedCache::new(c).unwrap();
    assert!(cache.connect().await);
    let id = CacheIdentity::unscoped("https://example.com/stuck.png");
    let master = cluster.master_of(&entry_key(&id)).unwrap();
    cluster.hang(master).unwrap();
    let started = std::time::Instant::now();
    let outcomes: Vec<_> = store_five_times(&cache, &id).await;
    // A store that waited for the stopped master would take at least its 500 ms timeout.
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "queueing never waits for a SET"
    );
    cluster.resume(master).unwrap();
    use mmcache_shared_cache::WriteOutcome;
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == WriteOutcome::Success)
            .count(),
        2
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == WriteOutcome::Skipped)
            .count(),
        3
    );
    assert_eq!(cache.stats().write_behind_dropped, 3);
    assert!(cache.flush(Duration::from_secs(5)).await);
}

async fn store_five_times(
    cache: &mmcache_shared_cache::SharedCache,
    id: &CacheIdentity,
) -> Vec<mmcache_shared_cache::WriteOutcome> {
    let mut out = Vec::new();
    for i in 0..5u8 {
        out.push(cache.store(id, bytes::Bytes::from(vec![i; 10])).await);
    }
    out
}

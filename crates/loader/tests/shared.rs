//! The loader with the shared cache on a real Redis Cluster and a real HTTP origin.

use std::time::Duration;

use mmcache_loader::ImageFormats;
use mmcache_loader::{HedgeSettings, Loader, LoaderBuilder, Scope, Source};
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::entry_key;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

/// A worker with short timeouts and no hedging: these tests count origin hits and sources
/// exactly, which a hedge on a busy machine would blur. Hedging has its own tests, with the
/// default settings.
fn worker(url: &str) -> LoaderBuilder {
    let mut no_hedge = HedgeSettings::default();
    no_hedge.enabled = false;
    Loader::builder()
        .allow_internal(true)
        .shared_cache_url(url)
        .shared_cache_connect_timeout(Duration::from_millis(300))
        .shared_cache_io_timeout(Duration::from_millis(500))
        .shared_cache_hedge(no_hedge)
}

fn key_for(url: &str) -> String {
    entry_key(&CacheIdentity::unscoped(url))
}

fn cluster() -> RedisCluster {
    RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_downloads_each_image_once() {
    if !require_redis("a_fleet_downloads_each_image_once") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let png = images::png(50, 40, 1);
    origin.set("/a.png", Route::ok(png.clone()));
    let url = origin.url("/a.png");

    let first = worker(&cluster.url())
        .shared_cache_ttl(Duration::from_secs(120))
        .build()
        .unwrap();
    assert_eq!(
        first.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    // The exact origin bytes, with the configured TTL, at the compatible key.
    let key = key_for(&url);
    assert_eq!(cluster.get_raw(&key).unwrap().as_deref(), Some(&png[..]));
    let ttl = cluster.ttl(&key).unwrap();
    assert!((100..=120).contains(&ttl), "ttl {ttl}");

    // Another worker (its own caches) gets a shared hit: no origin request, no SET.
    let second = worker(&cluster.url()).build().unwrap();
    let loaded = second.load_detailed(&url, None).await.unwrap();
    assert_eq!((loaded.source, loaded.image.width()), (Source::Shared, 50));
    assert_eq!(origin.hits("/a.png"), 1);
    let s = second.shared_cache().unwrap().stats();
    assert_eq!((s.get_hits, s.set_ok), (1, 0));
    // And then its own decoded cache.
    assert_eq!(
        second.load_detailed(&url, None).await.unwrap().source,
        Source::Memory
    );
}

#[tokio::test]
async fn only_bytes_that_decode_are_written() {
    if !require_redis("only_bytes_that_decode_are_written") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    origin.set("/svg", Route::ok(images::svg()));
    origin.set("/404", Route::status(404));
    // Hostile images that a lenient decoder would accept: refused, so never shared.
    origin.set(
        "/empty-scan.jpg",
        Route::ok(images::jpeg_empty_scan(10_000, 10_000)),
    );
    origin.set(
        "/starved.png",
        Route::ok(images::png_header_claiming(9_000, 9_000)),
    );
    let loader = worker(&cluster.url()).build().unwrap();
    for path in ["/svg", "/404", "/empty-scan.jpg", "/starved.png"] {
        assert!(loader.load(&origin.url(path), None).await.is_err());
        assert_eq!(
            cluster.get_raw(&key_for(&origin.url(path))).unwrap(),
            None,
            "{path}"
        );
    }
    assert_eq!(loader.shared_cache().unwrap().stats().set_ok, 0);
}

#[tokio::test]
async fn an_entry_over_this_workers_limits_is_left_for_others() {
    if !require_redis("an_entry_over_this_workers_limits_is_left_for_others") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let png = images::png(64, 48, 3);
    origin.set("/a.png", Route::ok(png.clone()));
    let url = origin.url("/a.png");
    cluster.set_raw(&key_for(&url), &png, Some(3600)).unwrap();
    // Over this worker's pixel limit, then over its decode budget: the load fails with 413,
    // and the valid entry stays for workers whose limits allow it.
    for small in [
        worker(&cluster.url()).max_pixels(1000),
        worker(&cluster.url()).decode_memory_bytes(1024),
    ] {
        let err = small.build().unwrap().load(&url, None).await.unwrap_err();
        assert_eq!(err.http_status(), 413, "{err}");
        assert_eq!(
            cluster.get_raw(&key_for(&url)).unwrap().as_deref(),
            Some(&png[..])
        );
    }
    assert_eq!(origin.hits("/a.png"), 0);
    let loaded = worker(&cluster.url()).build().unwrap();
    assert_eq!(
        loaded.load_detailed(&url, None).await.unwrap().source,
        Source::Shared
    );
}

/// A worker that accepts fewer formats (Dynamo's JPEG, PNG and WebP) refuses a GIF with 415,
/// from the origin (nothing written) and from the shared cache (the entry kept for others).
#[tokio::test]
async fn a_format_this_worker_does_not_accept_is_415_and_left_for_others() {
    if !require_redis("a_format_this_worker_does_not_accept_is_415_and_left_for_others") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let gif = images::gif(31, 17, 4);
    let dynamo_like = || {
        worker(&cluster.url())
            .image_formats(ImageFormats::DYNAMO)
            .build()
            .unwrap()
    };

    origin.set("/fresh.gif", Route::ok(gif.clone()));
    let fresh = origin.url("/fresh.gif");
    let err = dynamo_like().load(&fresh, None).await.unwrap_err();
    assert_eq!(err.http_status(), 415, "{err}");
    assert!(
        err.to_string().contains("gif images are not accepted"),
        "{err}"
    );
    assert_eq!(
        cluster.get_raw(&key_for(&fresh)).unwrap(),
        None,
        "not written"
    );

    origin.set("/cached.gif", Route::ok(gif.clone()));
    let cached = origin.url("/cached.gif");
    cluster
        .set_raw(&key_for(&cached), &gif, Some(3600))
        .unwrap();
    let loader = dynamo_like();
    let err = loader.load(&cached, None).await.unwrap_err();
    assert_eq!(err.http_status(), 415, "{err}");
    assert_eq!(loader.shared_cache().unwrap().stats().del_ok, 0);
    assert_eq!(
        cluster.get_raw(&key_for(&cached)).unwrap().as_deref(),
        Some(&gif[..]),
        "kept"
    );
    assert_eq!(origin.hits("/cached.gif"), 0);
    let every_format = worker(&cluster.url()).build().unwrap();
    assert_eq!(
        every_format
            .load_detailed(&cached, None)
            .await
            .unwrap()
            .source,
        Source::Shared
    );
}

#[tokio::test]
async fn corrupt_and_truncated_entries_are_deleted_and_refilled() {
    if !require_redis("corrupt_and_truncated_entries_are_deleted_and_refilled") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let jpeg = images::jpeg(64, 48, 2);
    let cases: [(&str, Vec<u8>); 3] = [
        ("/garbage.jpg", b"garbage, not an image".to_vec()),
        ("/truncated.jpg", jpeg[..jpeg.len() / 2].to_vec()),
        ("/svg.jpg", images::svg()),
    ];
    for (path, bad) in &cases {
        origin.set(path, Route::ok(jpeg.clone()));
        let url = origin.url(path);
        cluster.set_raw(&key_for(&url), bad, Some(3600)).unwrap();
        let loader = worker(&cluster.url()).build().unwrap();
        let loaded = loader.load_detailed(&url, None).await.unwrap();
        assert_eq!(loaded.source, Source::Origin, "{path}");
        assert_eq!(origin.hits(path), 1, "{path}");
        assert_eq!(
            cluster.get_raw(&key_for(&url)).unwrap().as_deref(),
            Some(&jpeg[..]),
            "{path} refilled"
        );
        let s = loader.shared_cache().unwrap().stats();
        assert_eq!((s.get_hits, s.del_ok, s.set_ok), (1, 1, 1), "{path}");
    }
}

#[tokio::test]
async fn an_entry_larger_than_a_download_may_be_is_never_read() {
    if !require_redis("an_entry_larger_than_a_download_may_be_is_never_read") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let cap = 64 * 1024;
    let jpeg = images::jpeg(64, 48, 3);
    // Over this worker's download cap (64 KiB), but otherwise a perfectly good JPEG: read whole,
    // it would decode and be a hit.
    let mut huge = jpeg.clone();
    huge.resize(cap + 1, 0);
    let loader = worker(&cluster.url())
        .max_file_size_bytes(cap as u64)
        .build()
        .unwrap();

    // The origin serves the same oversized file: the load fails as it would without a cache,
    // and the entry (another worker's, with a larger cap) is left alone.
    origin.set("/big.jpg", Route::ok(huge.clone()));
    let big = origin.url("/big.jpg");
    cluster.set_raw(&key_for(&big), &huge, Some(3600)).unwrap();
    let err = loader.load_detailed(&big, None).await.unwrap_err();
    assert_eq!(err.http_status(), 413, "{err}");
    assert_eq!(origin.hits("/big.jpg"), 1);
    assert_eq!(cluster.get_raw(&key_for(&big)).unwrap(), Some(huge.clone()));

    // The origin now serves a file within the cap: it is loaded and written over the entry.
    origin.set("/changed.jpg", Route::ok(jpeg.clone()));
    let changed = origin.url("/changed.jpg");
    cluster
        .set_raw(&key_for(&changed), &huge, Some(3600))
        .unwrap();
    let loaded = loader.load_detailed(&changed, None).await.unwrap();
    assert_eq!(loaded.source, Source::Origin);
    assert_eq!(
        cluster.get_raw(&key_for(&changed)).unwrap().as_deref(),
        Some(&jpeg[..])
    );
    let s = loader.shared_cache().unwrap().stats();
    assert_eq!((s.get_hits, s.del_ok, s.set_ok), (2, 0, 1));
}

#[tokio::test]
async fn an_entry_written_by_another_client_is_a_hit() {
    if !require_redis("an_entry_written_by_another_client_is_a_hit") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start(); // serves nothing: a request would be a 404
    let url = origin.url("/written-by-python.png");
    cluster
        .set_raw(&key_for(&url), &images::png(7, 3, 1), Some(3600))
        .unwrap();
    let loader = worker(&cluster.url()).build().unwrap();
    let loaded = loader.load_detailed(&url, None).await.unwrap();
    assert_eq!(
        (loaded.source, loaded.image.width(), loaded.image.height()),
        (Source::Shared, 7, 3)
    );
    assert_eq!(origin.total_hits(), 0);
}

#[tokio::test]
async fn scoped_partitioning_and_missing_scope() {
    if !require_redis("scoped_partitioning_and_missing_scope") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    origin.set("/s.png", Route::ok(images::png(8, 8, 1)));
    let url = origin.url("/s.png");
    let (a, b) = (
        Scope::new("session-a").unwrap(),
        Scope::new("session-b").unwrap(),
    );
    let fresh = || worker(&cluster.url()).session_scoped(true).build().unwrap();
    // a, b, a on three workers: two origin fetches, two SETs, one shared hit.
    let (w1, w2, w3) = (fresh(), fresh(), fresh());
    assert_eq!(
        w1.load_detailed(&url, Some(&a)).await.unwrap().source,
        Source::Origin
    );
    assert_eq!(
        w2.load_detailed(&url, Some(&b)).await.unwrap().source,
        Source::Origin
    );
    assert_eq!(
        w3.load_detailed(&url, Some(&a)).await.unwrap().source,
        Source::Shared
    );
    assert_eq!(origin.hits("/s.png"), 2);
    let sets: u64 = [&w1, &w2, &w3]
        .iter()
        .map(|w| w.shared_cache().unwrap().stats().set_ok)
        .sum();
    assert_eq!(sets, 2);
    assert!(
        cluster
            .get_raw(&entry_key(&CacheIdentity::scoped(&a, &url)))
            .unwrap()
            .is_some()
    );
    assert!(
        cluster.get_raw(&key_for(&url)).unwrap().is_none(),
        "nothing under the unscoped key"
    );

    // No usable scope: no GET, SET or DEL at all.
    let w4 = fresh();
    assert_eq!(
        w4.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    let s = w4.shared_cache().unwrap().stats();
    assert_eq!(
        (
            s.get_hits + s.get_misses + s.get_errors,
            s.set_ok + s.set_errors,
            s.del_ok + s.del_errors
        ),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn a_dead_cache_never_fails_a_load() {
    let port = mmcache_test_support::closed_port();
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(8, 8, 1)));
    let loader = worker(&format!("redis://127.0.0.1:{port}"))
        .build()
        .unwrap();
    for i in 0..5 {
        let url = origin.url(&format!("/a.png?{i}"));
        origin.set(&format!("/a.png?{i}"), Route::ok(images::png(8, 8, i)));
        assert_eq!(
            loader.load_detailed(&url, None).await.unwrap().source,
            Source::Origin
        );
    }
    // Every operation failed or, once the breaker opened, was skipped.
    let s = loader.shared_cache().unwrap().stats();
    assert_eq!(s.get_errors + s.set_errors + s.skipped, 10);
    assert_eq!(s.breaker_opens, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_costs_at_most_the_timeouts() {
    if !require_redis("a_hung_master_costs_at_most_the_timeouts") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    origin.set("/h.png", Route::ok(images::png(8, 8, 1)));
    let url = origin.url("/h.png");
    let loader = worker(&cluster.url()).build().unwrap();
    assert!(loader.shared_cache().unwrap().connect().await);
    let master = cluster.master_of(&key_for(&url)).unwrap();
    cluster.hang(master).unwrap();
    let started = std::time::Instant::now();
    let loaded = loader.load_detailed(&url, None).await;
    let took = started.elapsed();
    cluster.resume(master).unwrap();
    assert_eq!(loaded.unwrap().source, Source::Origin);
    // GET and SET each bounded by connect + I/O timeouts (0.8 s); plus a margin.
    assert!(took < Duration::from_millis(2 * 800 + 700), "took {took:?}");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_default_timeouts_a_hung_master_is_hedged_not_waited_for() {
    if !require_redis("with_default_timeouts_a_hung_master_is_hedged_not_waited_for") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    // The defaults users run: 0.1 s connect, 2.0 s I/O, hedging on.
    let defaults = || {
        Loader::builder()
            .allow_internal(true)
            .shared_cache_url(cluster.url())
    };
    let urls: Vec<String> = (0..12)
        .map(|i| {
            let path = format!("/hedge-{i}.png");
            origin.set(&path, Route::ok(images::png(16, 16, i)));
            origin.url(&path)
        })
        .collect();
    let filler = defaults().build().unwrap();
    for url in &urls {
        filler.load(url, None).await.unwrap();
    }
    let hung = cluster.master_of(&key_for(&urls[0])).unwrap();
    let on_hung: Vec<&String> = urls
        .iter()
        .filter(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .collect();
    // Nothing kept in memory, so every load asks the shared cache; two rounds of loads teach
    // the loader what a healthy GET costs (it hedges only once it knows).
    let loader = defaults().decoded_cache_entries(Some(0)).build().unwrap();
    for _ in 0..2 {
        for url in &urls {
            loader.load(url, None).await.unwrap();
        }
    }
    assert!(loader.hedge_stats().answered_gets >= 16);
    cluster.hang(hung).unwrap();
    let io_timeout = loader.config().shared.io_timeout;
    let mut tasks = Vec::new();
    for url in &urls {
        let (loader, url) = (loader.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let loaded = loader.load_detailed(&url, None).await;
            (url, loaded, started.elapsed())
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    // A URL whose SET hangs too: the load returns, the write goes on in the background.
    let fresh = (0..256)
        .map(|i| origin.url(&format!("/hedge-fresh-{i}.png")))
        .find(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .expect("a key on every master among 256");
    let path = fresh.rsplit_once('/').unwrap().1;
    origin.set(&format!("/{path}"), Route::ok(images::png(16, 16, 99)));
    let fresh_loaded = loader.load_detailed(&fresh, None).await;
    cluster.resume(hung).unwrap();
    for (url, loaded, took) in results {
        let loaded = loaded.unwrap();
        let expected = if on_hung.contains(&&url) {
            Source::Origin
        } else {
            Source::Shared
        };
        assert_eq!(loaded.source, expected, "{url}");
        // Nobody waited for the GET timeout: the hedge answered from the origin.
        assert!(took < io_timeout, "{url} took {took:?}");
    }
    assert!(!on_hung.is_empty());
    assert_eq!(fresh_loaded.unwrap().source, Source::Origin);
    let stats = loader.shared_cache().unwrap().stats();
    assert!(stats.set_backgrounded >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_a_master_hangs_hedges_its_first_loads() {
    if !require_redis("a_worker_started_while_a_master_hangs_hedges_its_first_loads") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    // Master 1 hangs (node 0 is the discovery URL: the new worker still learns the slot map).
    let hung = 1;
    let urls: Vec<String> = (0..256)
        .map(|i| origin.url(&format!("/cold-{i}.png")))
        .filter(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .take(8)
        .collect();
    assert_eq!(urls.len(), 8, "8 keys on master {hung} among 256");
    for (i, url) in urls.iter().enumerate() {
        let path = url.rsplit_once('/').unwrap().1;
        origin.set(&format!("/{path}"), Route::ok(images::png(8, 8, i as u32)));
    }
    let filler = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    for url in &urls {
        filler.load(url, None).await.unwrap();
    }
    // Every entry written (a SET may have gone on in the background).
    assert!(filler.shutdown(Duration::from_secs(5)).await);
    // A worker with the default settings has just started: four loads connected it to every
    // master (far fewer GETs than it needs to learn their latency) when master 1 hangs.
    let loader = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    for url in &urls[..4] {
        loader.load_detailed(url, None).await.unwrap();
    }
    // (A warm-up GET slower than the cap on a loaded machine may itself have hedged.)
    let hedged_before = loader.hedge_stats().hedged;
    cluster.hang(hung).unwrap();
    let io_timeout = loader.config().shared.io_timeout;
    let mut tasks = Vec::new();
    for url in &urls[4..] {
        let (loader, url) = (loader.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            (loader.load_detailed(&url, None).await, started.elapsed())
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    cluster.resume(hung).unwrap();
    for (loaded, took) in results {
        assert_eq!(loaded.unwrap().source, Source::Origin);
        // It hedged at the cap instead of waiting for the GET's I/O timeout.
        assert!(took < io_timeout, "took {took:?}");
    }
    assert_eq!(loader.hedge_stats().hedged - hedged_before, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_origin_failure_does_not_beat_a_slow_hit() {
    if !require_redis("a_fast_origin_failure_does_not_beat_a_slow_hit") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let warm: Vec<String> = (0..8)
        .map(|i| {
            let path = format!("/warm-{i}.png");
            origin.set(&path, Route::ok(images::png(8, 8, i)));
            origin.url(&path)
        })
        .collect();
    origin.set("/gone.png", Route::ok(images::png(8, 8, 42)));
    let gone = origin.url("/gone.png");
    let loader = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .decoded_cache_entries(Some(0))
        .build()
        .unwrap();
    loader.load(&gone, None).await.unwrap(); // cached in the shared cache
    for _ in 0..2 {
        for url in &warm {
            loader.load(url, None).await.unwrap();
        }
    }
    // The origin now fails at once; the entry's master answers only after 300 ms.
    origin.set("/gone.png", Route::status(503));
    let master = cluster.master_of(&key_for(&gone)).unwrap();
    cluster.hang(master).unwrap();
    let load = tokio::spawn({
        let (loader, gone) = (loader.clone(), gone.clone());
        async move { loader.load_detailed(&gone, None).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.resume(master).unwrap();
    let loaded = load
        .await
        .unwrap()
        .expect("the slow hit wins over the failed origin");
    assert_eq!(loaded.source, Source::Shared);
    assert!(loader.hedge_stats().hedged >= 1, "the load did hedge");
    assert_eq!(origin.hits("/gone.png"), 2);
}

#[tokio::test]
async fn the_policy_and_dns_apply_before_the_shared_cache_answers() {
    if !require_redis("the_policy_and_dns_apply_before_the_shared_cache_answers") {
        return;
    }
    let cluster = cluster();
    // A worker with internal access cached an internal image under a hostname URL.
    let internal = "https://localhost:1/secret.png";
    let png = images::png(8, 8, 5);
    cluster
        .set_raw(&key_for(internal), &png, Some(3600))
        .unwrap();
    // A worker without internal access resolves the name first: refused, not served.
    let strict = Loader::builder()
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    let err = strict.load(internal, None).await.unwrap_err();
    assert!(err.is_policy(), "{err}");
    assert_eq!(err.http_status(), 403);
    assert_eq!(strict.shared_cache().unwrap().stats().get_hits, 0);
    // Nor by an allowlist that does not name the host, even with internal access.
    let listed = Loader::builder()
        .allow_internal(true)
        .allowed_media_domains(["images.example.com"])
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    let err = listed.load(internal, None).await.unwrap_err();
    assert_eq!(err.http_status(), 403, "{err}");
    // A worker allowed both gets the shared hit.
    let open = Loader::builder()
        .allow_internal(true)
        .allowed_media_domains(["localhost"])
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    let loaded = open.load_detailed(internal, None).await.unwrap();
    assert_eq!(loaded.source, Source::Shared);
}

#[tokio::test]
async fn redirected_bytes_of_a_loose_policy_stay_out_of_shared_tiers() {
    if !require_redis("redirected_bytes_of_a_loose_policy_stay_out_of_shared_tiers") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    // A public-looking URL that redirects to an internal one: a worker with internal access
    // follows it, and must not publish the internal bytes under the first URL.
    origin.set("/internal.png", Route::ok(images::png(8, 8, 9)));
    origin.set("/public.png", Route::redirect("/internal.png"));
    origin.set("/direct.png", Route::ok(images::png(8, 8, 10)));
    let loader = worker(&cluster.url()).build().unwrap();
    let redirected = origin.url("/public.png");
    assert_eq!(
        loader
            .load_detailed(&redirected, None)
            .await
            .unwrap()
            .source,
        Source::Origin
    );
    assert_eq!(cluster.get_raw(&key_for(&redirected)).unwrap(), None);
    // Without a redirect the same worker shares as usual.
    let direct = origin.url("/direct.png");
    loader.load(&direct, None).await.unwrap();
    assert!(cluster.get_raw(&key_for(&direct)).unwrap().is_some());
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

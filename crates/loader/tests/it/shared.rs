//! The loader with the shared cache on a real Redis Cluster and a real HTTP origin.

mod acl;
mod denied;
mod hung;
mod lease;

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

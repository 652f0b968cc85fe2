//! Every tier keys a URL as ai-dynamo 1.6.1 does (scheme and host lowercased, fragment and an
//! empty `?` dropped), with a real HTTP origin, a real directory and a real Redis Cluster; the
//! download still uses the URL as given.

use std::time::Duration;

use mmcache_loader::{Loader, Source};
use mmcache_scope::{Scope, sha256_hex};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

use crate::common::Dir;

/// Dynamo's shared-cache key for the key string Dynamo computed, written out by hand (not by
/// our keying code): `dynamo:mm:image:{sha256hex(key)}:bytes`.
fn dynamo_entry(key: &str) -> String {
    format!("dynamo:mm:image:{{{}}}:bytes", sha256_hex(key.as_bytes()))
}

/// Spellings of `http://localhost:{port}{path}` that Dynamo keys as that URL.
fn spellings(port: u16, path: &str) -> [String; 4] {
    [
        format!("HTTP://localhost:{port}{path}"),
        format!("http://LocalHost:{port}{path}"),
        format!("http://localhost:{port}{path}#frag"),
        format!("hTTp://LOCALHOST:{port}{path}?#"),
    ]
}

#[tokio::test]
async fn spellings_dynamo_keys_alike_are_one_download() {
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(20, 10, 1)));
    origin.set("/A.png", Route::ok(images::png(10, 20, 2)));
    let port = origin.addr().port();
    // Default settings, but for the loopback origin.
    let loader = Loader::builder().allow_internal(true).build().unwrap();
    let plain = format!("http://localhost:{port}/a.png");
    assert_eq!(
        loader.load_detailed(&plain, None).await.unwrap().source,
        Source::Origin
    );
    for url in spellings(port, "/a.png") {
        let loaded = loader.load_detailed(&url, None).await.unwrap();
        assert_eq!(loaded.source, Source::Memory, "{url}");
        assert_eq!(loaded.image.width(), 20, "{url}");
    }
    assert_eq!(origin.hits("/a.png"), 1);
    // The path's case is kept: another image.
    let upper = format!("http://localhost:{port}/A.png");
    let loaded = loader.load_detailed(&upper, None).await.unwrap();
    assert_eq!((loaded.source, loaded.image.width()), (Source::Origin, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_spellings_join_one_load() {
    let origin = TestOrigin::start();
    let slow = Route::Delay(
        Duration::from_secs(1),
        Box::new(Route::ok(images::png(8, 8, 3))),
    );
    // The download uses the URL as given: `…?#` asks the origin for `/slow.png?`.
    origin.set("/slow.png", slow.clone());
    origin.set("/slow.png?", slow);
    let port = origin.addr().port();
    let loader = Loader::builder().allow_internal(true).build().unwrap();
    let loads = spellings(port, "/slow.png").map(|url| {
        let loader = loader.clone();
        tokio::spawn(async move { loader.load_detailed(&url, None).await.map(|l| l.source) })
    });
    let mut sources = Vec::new();
    for load in loads {
        sources.push(load.await.unwrap().unwrap());
    }
    assert_eq!(origin.total_hits(), 1, "{sources:?}");
    // One load went to the origin; the others joined it (or, on a stalled machine, found its
    // result in memory).
    let count = |source| sources.iter().filter(|s| **s == source).count();
    assert_eq!(count(Source::Origin), 1, "{sources:?}");
    assert!(count(Source::Inflight) >= 1, "{sources:?}");
}

/// A scratch directory, removed on drop.
#[tokio::test]
async fn the_disk_tier_keys_as_dynamo_does() {
    let dir = Dir(std::env::temp_dir().join(format!("mmcache-dynamo-keys-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let origin = TestOrigin::start();
    origin.set("/d.png", Route::ok(images::png(12, 6, 4)));
    let port = origin.addr().port();
    let worker = || {
        Loader::builder()
            .allow_internal(true)
            .disk_cache_dir(&dir.0)
            .build()
            .unwrap()
    };
    let writer = format!("HTTP://LocalHost:{port}/d.png#frag");
    assert_eq!(
        worker().load_detailed(&writer, None).await.unwrap().source,
        Source::Origin
    );
    // Another process of the host (its own memory) finds the entry under the plain spelling.
    let reader = format!("http://localhost:{port}/d.png");
    assert_eq!(
        worker().load_detailed(&reader, None).await.unwrap().source,
        Source::Disk
    );
    assert_eq!(origin.hits("/d.png"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_shares_entries_whatever_the_spelling() {
    if !require_redis("a_mixed_fleet_shares_entries_whatever_the_spelling") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster");
    let origin = TestOrigin::start();
    let port = origin.addr().port();
    let worker = |scoped: bool| {
        Loader::builder()
            .allow_internal(true)
            .shared_cache_url(cluster.url())
            .session_scoped(scoped)
            .build()
            .unwrap()
    };
    let scope = Scope::new("session-a").unwrap();
    let digest = scope.digest();

    // Entries a Dynamo worker wrote (at Dynamo's key of the plain URL) are hits for ours,
    // whichever spelling ours is given; the origin is never asked.
    for i in 0..4 {
        let path = format!("/dyn-{i}.png");
        let url = &spellings(port, &path)[i];
        let png = images::png(9, 7, 10 + i as u32);
        origin.set(&path, Route::ok(png.clone()));
        let key = format!("http://localhost:{port}{path}");
        cluster
            .set_raw(&dynamo_entry(&key), &png, Some(60))
            .unwrap();
        let scoped_key = format!("{digest}:{key}");
        cluster
            .set_raw(&dynamo_entry(&scoped_key), &png, Some(60))
            .unwrap();
        let loaded = worker(false).load_detailed(url, None).await.unwrap();
        assert_eq!(loaded.source, Source::Shared, "{url}");
        let loaded = worker(true).load_detailed(url, Some(&scope)).await.unwrap();
        assert_eq!(loaded.source, Source::Shared, "{url} scoped");
        assert_eq!(origin.hits(&path), 0, "{url}");
    }

    // What ours writes for such a spelling is where a Dynamo worker looks.
    for i in 0..4 {
        let path = format!("/ours-{i}.png");
        let url = &spellings(port, &path)[i];
        let png = images::png(7, 9, 20 + i as u32);
        origin.set(&path, Route::ok(png.clone()));
        origin.set(&format!("{path}?"), Route::ok(png.clone()));
        let loader = worker(false);
        assert_eq!(
            loader.load_detailed(url, None).await.unwrap().source,
            Source::Origin,
            "{url}"
        );
        assert!(loader.shutdown(Duration::from_secs(10)).await);
        let key = format!("http://localhost:{port}{path}");
        assert_eq!(
            cluster.get_raw(&dynamo_entry(&key)).unwrap().as_deref(),
            Some(&png[..]),
            "{url}"
        );
    }
}

#[tokio::test]
async fn a_backslash_path_keeps_its_case() {
    // `urlsplit` reads `h\A.png` as the host, so Dynamo's rule alone would lowercase it; our
    // downloader (as a browser) reads `\` as `/`: two images, which must not share a key.
    let origin = TestOrigin::start();
    origin.set("/A.png", Route::ok(images::png(4, 2, 30)));
    origin.set("/a.png", Route::ok(images::png(2, 4, 31)));
    let port = origin.addr().port();
    let loader = Loader::builder().allow_internal(true).build().unwrap();
    let upper = format!("http://localhost:{port}\\A.png");
    let lower = format!("http://localhost:{port}\\a.png");
    assert_eq!(loader.load(&upper, None).await.unwrap().width(), 4);
    assert_eq!(
        loader.load(&lower, None).await.unwrap().width(),
        2,
        "{lower}"
    );
    assert_eq!((origin.hits("/A.png"), origin.hits("/a.png")), (1, 1));
}

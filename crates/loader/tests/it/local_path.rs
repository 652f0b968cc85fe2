//! The loader without a shared cache, against a real HTTP origin on 127.0.0.1.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use mmcache_loader::{Error, Loader, LoaderBuilder, Scope, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

fn builder() -> LoaderBuilder {
    Loader::builder()
        .allow_internal(true)
        .origin_timeout(Duration::from_secs(10))
}

fn slow(body: Vec<u8>, ms: u64) -> Route {
    Route::Delay(Duration::from_millis(ms), Box::new(Route::ok(body)))
}

fn scope(s: &str) -> Scope {
    Scope::new(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_loads_of_one_url_fetch_once() {
    let origin = TestOrigin::start();
    origin.set("/a.png", slow(images::png(32, 32, 1), 300));
    let loader = builder().build().unwrap();
    let url = origin.url("/a.png");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (loader, url) = (loader.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            loader.load_detailed(&url, None).await.unwrap()
        }));
    }
    let mut sources = Vec::new();
    let mut first: Option<Arc<mmcache_loader::Image>> = None;
    for t in tasks {
        let loaded = t.await.unwrap();
        if let Some(f) = &first {
            assert!(
                Arc::ptr_eq(f, &loaded.image),
                "all callers share one decoded image"
            );
        }
        first = Some(loaded.image.clone());
        sources.push(loaded.source);
    }
    assert_eq!(origin.hits("/a.png"), 1);
    assert_eq!(sources.iter().filter(|s| **s == Source::Origin).count(), 1);
    assert_eq!(
        sources.iter().filter(|s| **s == Source::Inflight).count(),
        15
    );
}

#[tokio::test]
async fn different_urls_fetch_independently() {
    let origin = TestOrigin::start();
    origin.set("/a.png", slow(images::png(8, 8, 1), 100));
    origin.set("/b.png", slow(images::png(8, 8, 2), 100));
    let loader = builder().build().unwrap();
    let (url_a, url_b) = (origin.url("/a.png"), origin.url("/b.png"));
    let (a, b) = tokio::join!(
        loader.load_detailed(&url_a, None),
        loader.load_detailed(&url_b, None)
    );
    assert_eq!(
        (a.unwrap().source, b.unwrap().source),
        (Source::Origin, Source::Origin)
    );
    assert_eq!((origin.hits("/a.png"), origin.hits("/b.png")), (1, 1));
}

#[tokio::test]
async fn a_cancelled_waiter_does_not_cancel_the_shared_load() {
    let origin = TestOrigin::start();
    origin.set("/slow.png", slow(images::png(8, 8, 1), 400));
    let loader = builder().build().unwrap();
    let url = origin.url("/slow.png");
    // The first caller gives up long before the origin answers.
    let gave_up = tokio::time::timeout(Duration::from_millis(50), loader.load(&url, None)).await;
    assert!(gave_up.is_err());
    // A second caller joins the same load, which is still running.
    let joined = loader.load_detailed(&url, None).await.unwrap();
    assert_eq!(joined.source, Source::Inflight);
    assert_eq!(
        loader.load_detailed(&url, None).await.unwrap().source,
        Source::Memory
    );
    assert_eq!(origin.hits("/slow.png"), 1);
}

#[tokio::test]
async fn a_failed_load_is_not_cached_and_the_next_call_retries() {
    let origin = TestOrigin::start();
    origin.set("/flaky.png", Route::status(503));
    let loader = builder().build().unwrap();
    let url = origin.url("/flaky.png");
    let err = loader.load(&url, None).await.unwrap_err();
    assert_eq!(err.http_status(), 503);
    origin.set("/flaky.png", Route::ok(images::png(8, 8, 1)));
    let ok = loader.load_detailed(&url, None).await.unwrap();
    assert_eq!(ok.source, Source::Origin);
    assert_eq!(origin.hits("/flaky.png"), 2);
}

#[tokio::test]
async fn decoded_cache_holds_its_budget_and_keeps_what_is_used() {
    let origin = TestOrigin::start();
    for p in ["/a", "/b", "/c"] {
        origin.set(p, Route::ok(images::png(10, 10, 1)));
    }
    // Room for two 10x10 images (300 bytes + overhead each), not three.
    let per = 300 + mmcache_decode::ENTRY_OVERHEAD_BYTES;
    let loader = builder().decoded_cache_bytes(2 * per).build().unwrap();
    let load = |p: &'static str| {
        let (loader, url) = (loader.clone(), origin.url(p));
        async move { loader.load_detailed(&url, None).await.unwrap().source }
    };
    load("/a").await;
    load("/b").await;
    for _ in 0..3 {
        assert_eq!(load("/a").await, Source::Memory); // a is used again and again
    }
    load("/c").await; // one must go: not the one in use
    assert_eq!(load("/a").await, Source::Memory);
    let stats = loader.decoded_cache().stats();
    assert!(stats.entries <= 2 && stats.bytes <= 2 * per, "{stats:?}");
    assert_eq!(origin.hits("/a"), 1);
}

#[tokio::test]
async fn entry_cap_of_zero_turns_the_decoded_cache_off() {
    let origin = TestOrigin::start();
    origin.set("/a", Route::ok(images::png(4, 4, 1)));
    let loader = builder().decoded_cache_entries(Some(0)).build().unwrap();
    for _ in 0..2 {
        assert_eq!(
            loader
                .load_detailed(&origin.url("/a"), None)
                .await
                .unwrap()
                .source,
            Source::Origin
        );
    }
    assert_eq!(origin.hits("/a"), 2);
}

#[tokio::test]
async fn identity_keeps_case_and_query() {
    let origin = TestOrigin::start();
    let paths = [
        "/Img.png?x=1",
        "/img.png?x=1",
        "/Img.png?x=2",
        "/Img.png?X=1",
    ];
    for p in paths {
        origin.set(p, Route::ok(images::png(4, 4, 1)));
    }
    let loader = builder().build().unwrap();
    for p in paths {
        assert_eq!(
            loader
                .load_detailed(&origin.url(p), None)
                .await
                .unwrap()
                .source,
            Source::Origin,
            "{p}"
        );
    }
    for p in paths {
        assert_eq!(origin.hits(p), 1, "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_mode_partitions_cache_and_inflight_join() {
    let origin = TestOrigin::start();
    origin.set("/s.png", slow(images::png(8, 8, 1), 200));
    let loader = builder().session_scoped(true).build().unwrap();
    let url = origin.url("/s.png");
    let (a, b) = (scope("session-a"), scope("session-b"));
    // Concurrently: a and a join; b loads on its own.
    let (r1, r2, r3) = tokio::join!(
        loader.load_detailed(&url, Some(&a)),
        loader.load_detailed(&url, Some(&a)),
        loader.load_detailed(&url, Some(&b)),
    );
    let mut sources = [r1.unwrap().source, r2.unwrap().source];
    sources.sort_by_key(|s| s.as_str());
    assert_eq!(sources, [Source::Inflight, Source::Origin]);
    assert_eq!(r3.unwrap().source, Source::Origin);
    assert_eq!(origin.hits("/s.png"), 2);
    // Afterwards each scope hits its own entry.
    assert_eq!(
        loader.load_detailed(&url, Some(&a)).await.unwrap().source,
        Source::Memory
    );
    assert_eq!(
        loader.load_detailed(&url, Some(&b)).await.unwrap().source,
        Source::Memory
    );
    assert_eq!(
        loader
            .load_detailed(&url, Some(&scope("session-c")))
            .await
            .unwrap()
            .source,
        Source::Origin
    );
}

#[tokio::test]
async fn scope_is_ignored_when_scoping_is_off() {
    let origin = TestOrigin::start();
    origin.set("/s.png", Route::ok(images::png(8, 8, 1)));
    let loader = builder().build().unwrap();
    let url = origin.url("/s.png");
    assert_eq!(
        loader
            .load_detailed(&url, Some(&scope("a")))
            .await
            .unwrap()
            .source,
        Source::Origin
    );
    assert_eq!(
        loader
            .load_detailed(&url, Some(&scope("b")))
            .await
            .unwrap()
            .source,
        Source::Memory
    );
    assert_eq!(
        loader.load_detailed(&url, None).await.unwrap().source,
        Source::Memory
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_scope_bypasses_every_cache_but_keeps_limits() {
    let origin = TestOrigin::start();
    origin.set("/s.png", slow(images::png(8, 8, 1), 100));
    origin.set("/big", Route::ok(vec![0; 2000]));
    let loader = builder()
        .session_scoped(true)
        .max_file_size_bytes(1000)
        .build()
        .unwrap();
    let url = origin.url("/s.png");
    let (x, y) = tokio::join!(
        loader.load_detailed(&url, None),
        loader.load_detailed(&url, None)
    );
    assert_eq!(
        (x.unwrap().source, y.unwrap().source),
        (Source::Origin, Source::Origin)
    );
    assert_eq!(
        loader.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    assert_eq!(origin.hits("/s.png"), 3, "no join, no cache");
    assert_eq!(loader.decoded_cache().stats().entries, 0);
    assert_eq!(
        loader
            .load(&origin.url("/big"), None)
            .await
            .unwrap_err()
            .http_status(),
        413
    );
}

#[tokio::test]
async fn data_urls_decode_and_are_never_cached() {
    let png = images::png(5, 4, 3);
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let loader = builder().build().unwrap();
    for _ in 0..2 {
        let l = loader.load_detailed(&url, None).await.unwrap();
        assert_eq!(
            (l.source, l.image.width(), l.image.height()),
            (Source::Data, 5, 4)
        );
    }
    assert_eq!(loader.decoded_cache().stats().entries, 0);

    let bad = [
        ("data:image/png;base64,@@@@", 400),
        ("data:text/plain;base64,aGk=", 415),
        ("data:image/png,rawbytes", 400),
        ("data:image/png;base64", 400),
        ("data:image/png;base64,aGk=", 415), // valid base64, not an image
    ];
    for (url, status) in bad {
        let err = loader.load(url, None).await.unwrap_err();
        assert_eq!(err.http_status(), status, "{url}: {err}");
    }
    let tiny = builder().max_file_size_bytes(100).build().unwrap();
    let err = tiny.load(&url, None).await.unwrap_err();
    assert!(err.is_too_large(), "{err}");
}

#[tokio::test]
async fn origin_errors_keep_their_status() {
    let origin = TestOrigin::start();
    origin.set("/hang", Route::Hang);
    let loader = builder()
        .origin_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = loader.load(&origin.url("/hang"), None).await.unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(err.http_status(), 408);
    assert_eq!(
        loader
            .load(&origin.url("/nope"), None)
            .await
            .unwrap_err()
            .http_status(),
        404
    );
    let port = mmcache_test_support::closed_port();
    let err = loader
        .load(&format!("http://127.0.0.1:{port}/x.png"), None)
        .await
        .unwrap_err();
    assert_eq!(err.http_status(), 400, "{err}");
}

#[tokio::test]
async fn bad_images_are_415_and_bombs_413() {
    let origin = TestOrigin::start();
    let jpeg = images::jpeg(64, 64, 1);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("/svg", images::svg(), 415),
        ("/garbage", b"definitely not an image".to_vec(), 415),
        ("/truncated", jpeg[..jpeg.len() / 2].to_vec(), 415),
        ("/bomb", images::png_header_claiming(20_000, 20_000), 413),
    ];
    for (path, body, _) in &cases {
        origin.set(path, Route::ok(body.clone()));
    }
    origin.set("/empty", Route::ok(Vec::new()));
    let loader = builder().build().unwrap();
    for (path, _, status) in &cases {
        let err = loader.load(&origin.url(path), None).await.unwrap_err();
        assert_eq!(err.http_status(), *status, "{path}: {err}");
    }
    assert!(loader.load(&origin.url("/empty"), None).await.is_err());
    assert_eq!(loader.decoded_cache().stats().entries, 0);
}

#[tokio::test]
async fn scheme_gate() {
    let loader = Loader::builder().build().unwrap();
    let err = loader.load("file:///etc/passwd", None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "URL policy: local file access is not allowed"
    );
    assert_eq!(err.http_status(), 400);
    for url in [
        "/etc/passwd",
        "ftp://example.com/a.png",
        "http://example.com/a.png",
        "gopher://x",
    ] {
        let err = loader.load(url, None).await.unwrap_err();
        assert!(err.is_policy(), "{url}: {err}");
    }
    let err = loader
        .load("https://169.254.169.254/latest/meta-data", None)
        .await
        .unwrap_err();
    assert_eq!(err.http_status(), 403);
}

#[tokio::test]
async fn batch_keeps_order_and_picks_errors_by_priority() {
    let origin = TestOrigin::start();
    for i in 0..5u32 {
        origin.set(&format!("/{i}"), Route::ok(images::png(i + 1, 1, i)));
    }
    origin.set("/svg", Route::ok(images::svg()));
    origin.set("/404", Route::status(404));
    let loader = builder().build().unwrap();
    let urls: Vec<String> = (0..5).map(|i| origin.url(&format!("/{i}"))).collect();
    let images = loader.load_batch(&urls, None).await.unwrap();
    let widths: Vec<u32> = images.iter().map(|i| i.width()).collect();
    assert_eq!(widths, [1, 2, 3, 4, 5]);

    // Origin status first, even when a policy error comes earlier.
    let mixed = [
        origin.url("/svg"),
        "file:///x".into(),
        origin.url("/404"),
        urls[0].clone(),
    ];
    assert_eq!(
        loader
            .load_batch(&mixed, None)
            .await
            .unwrap_err()
            .http_status(),
        404
    );
    // Then the policy error.
    let mixed = [origin.url("/svg"), "file:///x".into()];
    assert!(
        loader
            .load_batch(&mixed, None)
            .await
            .unwrap_err()
            .is_policy()
    );
    // Else all failures, listed with their indexes.
    let mixed = [
        urls[0].clone(),
        origin.url("/svg"),
        "data:image/png;base64,!!".into(),
    ];
    match loader.load_batch(&mixed, None).await.unwrap_err() {
        Error::Batch(failures) => {
            let idx: Vec<usize> = failures.iter().map(|(i, _)| *i).collect();
            assert_eq!(idx, [1, 2]);
        }
        other => panic!("expected a batch error, got {other}"),
    }
    let each = loader.load_batch_each(&mixed, None).await;
    assert!(each[0].is_ok() && each[1].is_err() && each[2].is_err());
}

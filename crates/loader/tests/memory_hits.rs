// Not in tests/it: it installs the process-global metrics recorder.
//! A memory hit without awaiting (`Loader::load_cached`, `Embeddings::cached`), counted as the
//! awaited one is, and the pixel layout a loader keeps. One test per binary: the metrics
//! recorder is process-global.

use std::sync::Arc;

use mmcache_loader::embeddings::EmbeddingKeyInput;
use mmcache_loader::{Loader, PixelLayout, Scope, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

fn value(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hits_without_awaiting() {
    a_cached_image_is_returned_without_awaiting_and_counted_once().await;
    scoping_applies_to_the_cached_lookup().await;
}

async fn a_cached_image_is_returned_without_awaiting_and_counted_once() {
    let handle = mmcache_loader::metrics::install_prometheus().unwrap();
    let memory_hits = |h: &mmcache_loader::metrics::prometheus::PrometheusHandle| {
        value(
            &h.render(),
            "mmcache_loads_total{source=\"memory\",outcome=\"ok\"}",
        )
    };
    let origin = TestOrigin::start();
    origin.set("/a.jpg", Route::ok(images::photo_jpeg(64, 48, 1)));
    let url = origin.url("/a.jpg");
    let rgb = Loader::builder().allow_internal(true).build().unwrap();
    let rgbx = Loader::builder()
        .allow_internal(true)
        .pixel_layout(PixelLayout::Rgbx)
        .build()
        .unwrap();

    assert!(rgb.load_cached(&url, None).is_none(), "nothing loaded yet");
    assert!(
        rgb.load_cached("data:image/png;base64,AAAA", None)
            .is_none()
    );
    let before = memory_hits(&handle);
    let loaded = rgb.load_detailed(&url, None).await.unwrap();
    assert_eq!(loaded.source, Source::Origin);
    let hit = rgb.load_cached(&url, None).expect("in memory now");
    assert!(Arc::ptr_eq(&hit, &loaded.image), "the cached Arc, no copy");
    let awaited = rgb.load_detailed(&url, None).await.unwrap();
    assert_eq!(awaited.source, Source::Memory);
    assert_eq!(memory_hits(&handle) - before, 2.0, "each hit counted once");
    assert_eq!(origin.hits("/a.jpg"), 1);

    // The 4-byte layout: the same pixel values, a fourth byte of 255, and the decoded cache
    // weighs the bytes it holds.
    let wide = rgbx.load(&url, None).await.unwrap();
    assert_eq!(wide.layout(), PixelLayout::Rgbx);
    assert_eq!(hit.layout(), PixelLayout::Rgb);
    assert_eq!(wide.pixels().len(), 64 * 48 * 4);
    assert_eq!(wide.rgb().as_ref(), hit.pixels());
    let held = |l: &Loader| l.decoded_cache().stats().bytes - mmcache_decode::ENTRY_OVERHEAD_BYTES;
    assert_eq!(held(&rgb), 64 * 48 * 3);
    assert_eq!(held(&rgbx), 64 * 48 * 4);
    assert!(Arc::ptr_eq(&rgbx.load_cached(&url, None).unwrap(), &wide));
}

async fn scoping_applies_to_the_cached_lookup() {
    let origin = TestOrigin::start();
    origin.set("/s.png", Route::ok(images::png(8, 8, 2)));
    let url = origin.url("/s.png");
    let loader = Loader::builder()
        .allow_internal(true)
        .session_scoped(true)
        .build()
        .unwrap();
    let (a, b) = (Scope::new("a").unwrap(), Scope::new("b").unwrap());
    loader.load(&url, Some(&a)).await.unwrap();
    assert!(loader.load_cached(&url, Some(&a)).is_some());
    assert!(
        loader.load_cached(&url, Some(&b)).is_none(),
        "another scope"
    );
    assert!(
        loader.load_cached(&url, None).is_none(),
        "no scope: no cache"
    );

    let embeddings = loader.embeddings();
    let key = EmbeddingKeyInput::caller("uuid-1");
    assert!(embeddings.cached(&key, "m", Some(&a)).is_none());
    let stored = mmcache_loader::embeddings::Embedding::from_f32(vec![2], vec![1.0, 2.0]).unwrap();
    assert!(embeddings.insert(&key, "m", Some(&a), stored.clone()));
    assert_eq!(embeddings.cached(&key, "m", Some(&a)), Some(stored));
    assert!(embeddings.cached(&key, "m", Some(&b)).is_none());
    assert!(embeddings.cached(&key, "m", None).is_none());
}

// Not in tests/it: it installs the process-global metrics recorder.
//! Content keys and content dedup through a real loader and a real HTTP origin: the same bytes
//! under two URLs are one decode and one resident image within a scope, never across scopes.
//! One test function: decodes are counted from the process-global metrics recorder.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput, EmbeddingSource};
use mmcache_loader::metrics::prometheus::PrometheusHandle;
use mmcache_loader::{Loader, Source};
use mmcache_scope::{ContentKey, Scope};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

/// PNG decodes so far (the decode-duration histogram's count).
fn png_decodes(handle: &PrometheusHandle) -> u64 {
    let series = "mmcache_decode_duration_seconds_count{format=\"png\"}";
    handle
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

fn loader(scoped: bool) -> Loader {
    Loader::builder()
        .allow_internal(true)
        .session_scoped(scoped)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_bytes_under_two_urls_share_one_decode_within_a_scope_only() {
    let handle = mmcache_loader::metrics::install_prometheus().unwrap();
    let origin = TestOrigin::start();
    let body = images::png(64, 48, 5);
    // Cache-busting query strings and a second path: three URLs, one body.
    let urls: Vec<String> = ["/a.png?v=1", "/a.png?v=2", "/copy/b.png"]
        .iter()
        .map(|p| {
            origin.set(p, Route::ok(body.clone()));
            origin.url(p)
        })
        .collect();

    // Unscoped: one decode for the three URLs, one Arc, one content key.
    let unscoped = loader(false);
    let before = png_decodes(&handle);
    let mut loaded = Vec::new();
    for url in &urls {
        let l = unscoped.load_detailed(url, None).await.unwrap();
        assert_eq!(l.source, Source::Origin, "each URL is its own identity");
        loaded.push(l.image);
    }
    assert_eq!(png_decodes(&handle) - before, 1, "one decode for one body");
    for image in &loaded[1..] {
        assert!(Arc::ptr_eq(image, &loaded[0]), "one resident copy");
        assert_eq!(image.content_key(), loaded[0].content_key());
    }
    assert_eq!(loaded[0].content_key(), ContentKey::of(&body));
    let stats = unscoped.decoded_cache().stats();
    assert_eq!(stats.entries, 1, "the shared image is counted once");
    assert_eq!(
        stats.bytes,
        64 * 48 * 3 + mmcache_decode::ENTRY_OVERHEAD_BYTES
    );
    // A memory hit returns the same image and key (no rehash: the key is kept with it).
    let hit = unscoped.load_detailed(&urls[1], None).await.unwrap();
    assert_eq!(hit.source, Source::Memory);
    assert!(Arc::ptr_eq(&hit.image, &loaded[0]));

    // Scoped: two scopes never share; one scope shares across its URLs.
    let scoped = loader(true);
    let (s1, s2) = (Scope::new("one").unwrap(), Scope::new("two").unwrap());
    let before = png_decodes(&handle);
    let a1 = scoped.load(&urls[0], Some(&s1)).await.unwrap();
    let a2 = scoped.load(&urls[0], Some(&s2)).await.unwrap();
    assert_eq!(png_decodes(&handle) - before, 2, "one decode per scope");
    assert!(!Arc::ptr_eq(&a1, &a2), "no image crosses scopes");
    assert_eq!(a1.content_key(), a2.content_key());
    let b1 = scoped.load(&urls[2], Some(&s1)).await.unwrap();
    let b2 = scoped.load(&urls[1], Some(&s2)).await.unwrap();
    assert_eq!(
        png_decodes(&handle) - before,
        2,
        "then shared within each scope"
    );
    assert!(Arc::ptr_eq(&a1, &b1) && Arc::ptr_eq(&a2, &b2));
    assert_eq!(scoped.decoded_cache().stats().entries, 2);
    // (Unscoped and scoped slots of one cache never meet: decode's unit tests check that on one
    // cache; these are two loaders, so comparing their images would prove nothing.)

    // An embedding keyed by content: either URL's image hits the same entry.
    let runs = Arc::new(AtomicUsize::new(0));
    for image in [&loaded[0], &loaded[2]] {
        let runs = runs.clone();
        let e = unscoped
            .embeddings()
            .get_or_compute(
                &EmbeddingKeyInput::content(&**image),
                "m",
                None,
                move || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Embedding::from_f32(vec![1, 4], vec![0.0; 4])
                },
            )
            .await
            .unwrap();
        assert!(matches!(
            e.source,
            EmbeddingSource::Computed | EmbeddingSource::Memory
        ));
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "one compute for one content"
    );
}

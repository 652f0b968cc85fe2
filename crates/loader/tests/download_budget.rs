// Not in tests/it: its counting global allocator counts the whole process.
//! The download budget holds under concurrency: many loads of distinct large bodies at once
//! (with `Content-Length` and chunked) never hold more download memory together than the
//! budget, and every load still gets its own answer (no load fails for want of budget when a
//! bounded wait serves it). A counting allocator measures the peak of live bytes.

use std::sync::Arc;

use mmcache_loader::{Config, LoaderBuilder, env};
use mmcache_test_support::alloc::{Counting, peak_since, start_peak};
use mmcache_test_support::origin::{Route, TestOrigin};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

// One test in this binary: the allocator counts the whole process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_downloads_stay_within_the_download_budget() {
    const LOADS: usize = 16;
    const BODY: usize = 4_000_000; // not an image: refused by the probe, nothing decoded
    let budget = 16 * MIB; // room for about four such bodies at once
    let origin = TestOrigin::start();
    let body = Arc::new(vec![0x5au8; BODY]);
    let urls: Vec<String> = (0..LOADS)
        .map(|i| {
            let path = format!("/blob-{i}");
            let route = if i % 2 == 0 {
                Route::Body {
                    status: 200,
                    content_type: "application/octet-stream".into(),
                    body: body.clone(),
                }
            } else {
                Route::Chunked(body.clone())
            };
            origin.set(&path, route);
            origin.url(&path)
        })
        .collect();
    let budget_var = budget.to_string();
    let config = Config::from_lookup(|name| match name {
        n if n == env::ALLOW_INTERNAL => Some("1".into()),
        "MMCACHE_DOWNLOAD_MEMORY_BYTES" => Some(budget_var.clone()),
        _ => None,
    })
    .unwrap();
    let loader = LoaderBuilder::from_config(config).build().unwrap();

    let base = start_peak();
    let tasks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let loader = loader.clone();
            tokio::spawn(async move { loader.load(&url, None).await.map(|i| i.byte_len()) })
        })
        .collect();
    for t in tasks {
        let err = t.await.unwrap().expect_err("not an image");
        // Its own answer: the bytes arrived whole and were refused as not an image, never a
        // budget or timeout error.
        assert_eq!(err.http_status(), 415, "{err}");
    }
    let peak = peak_since(base);
    eprintln!(
        "peak of live allocations: {:.1} MiB",
        peak as f64 / MIB as f64
    );
    // Sixteen at once would hold 64 MB (and up to twice that while buffers double). The
    // budget admits about four; the slack covers the HTTP client's read buffers, the
    // runtime and a body being handed from one load to the next.
    assert!(
        peak < budget + 8 * MIB,
        "peak {} MiB of live allocations with a {} MiB download budget",
        peak / MIB,
        budget / MIB
    );

    // A body announced larger than a download may reserve (half the budget) is refused at
    // once with 413; so is a chunked body that grows past what the budget allows.
    let big = Arc::new(vec![0x5au8; 10 * MIB]);
    origin.set(
        "/too-big",
        Route::Body {
            status: 200,
            content_type: "application/octet-stream".into(),
            body: big.clone(),
        },
    );
    origin.set("/too-big-chunked", Route::Chunked(big));
    for path in ["/too-big", "/too-big-chunked"] {
        let err = loader.load(&origin.url(path), None).await.unwrap_err();
        assert_eq!(err.http_status(), 413, "{path}: {err}");
        assert!(err.is_too_large(), "{path}: {err}");
    }
}

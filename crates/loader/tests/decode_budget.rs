// Not in tests/it: its counting global allocator counts the whole process.
//! The decode budget holds under concurrency: many loads of distinct large images at once
//! never hold more decode memory together than the budget. A counting allocator measures the
//! peak of live bytes in the process, so the bound is asserted, not assumed.

use std::time::Duration;

use mmcache_loader::{Error, Loader};
use mmcache_test_support::alloc::{Counting, peak_since, start_peak};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

// One test in this binary: the allocator counts the whole process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_decodes_stay_within_the_budget() {
    const LOADS: usize = 12;
    // 2000x1500 RGB: 9 MB of output each, about 60 KB on the wire.
    let origin = TestOrigin::start();
    let urls: Vec<String> = (0..LOADS)
        .map(|i| {
            let path = format!("/big-{i}.png");
            origin.set(
                &path,
                Route::ok(images::zero_png(2000, 1500 + i as u32, 8, 2, &[])),
            );
            origin.url(&path)
        })
        .collect();
    let budget = 20 * MIB; // room for two such decodes at once, never three
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0)) // nothing kept: only decodes hold memory
        .decode_memory_bytes(budget as u64)
        .decode_concurrency(LOADS)
        .decode_wait(Duration::from_secs(60))
        .build()
        .unwrap();

    let base = start_peak();
    let tasks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let loader = loader.clone();
            // Each result is dropped at once: the test holds no image.
            tokio::spawn(async move { loader.load(&url, None).await.map(|i| i.byte_len()) })
        })
        .collect();
    for t in tasks {
        let len = t.await.unwrap().expect("every load succeeds, in turn");
        assert!(len >= 2000 * 1500 * 3);
    }
    let peak = peak_since(base);
    // Twelve at once would be over 108 MB. The budget admits two decodes (18 MB); a finished
    // image outlives its permit for a moment (on its way to the caller, who drops it), so up
    // to two such outputs may be alive beside them, plus fixed overhead (HTTP bodies of
    // ~60 KB, buffers, the runtime).
    let output = 2000 * 1511 * 3;
    eprintln!(
        "peak {:.1} MiB of live allocations with a {} MiB budget; bound {:.1} MiB",
        peak as f64 / MIB as f64,
        budget / MIB,
        (budget + 2 * output + 8 * MIB) as f64 / MIB as f64
    );
    assert!(
        peak < budget + 2 * output + 8 * MIB,
        "peak {} MiB of live allocations with a {} MiB budget",
        peak / MIB,
        budget / MIB
    );

    // An image that can never fit is refused at once, 413, nothing allocated for it.
    let huge = origin.url("/huge.png");
    origin.set(
        "/huge.png",
        Route::ok(images::zero_png(4000, 3000, 8, 2, &[])),
    );
    let err = loader.load(&huge, None).await.unwrap_err();
    assert!(matches!(err, Error::OverDecodeBudget { .. }), "{err}");
    assert_eq!(err.http_status(), 413);
}

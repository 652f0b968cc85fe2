// Not in tests/it: its counting global allocator counts the whole process.
//! Entries read from the disk tier count in the download budget like origin bodies: many disk
//! hits of large entries at once never hold more than the budget together, and every load
//! still gets its image (a bounded wait serves them all). A counting allocator measures the
//! peak of live bytes; one decode at a time keeps the hits waiting with their bytes.

mod common;

use mmcache_loader::{Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::alloc::{Counting, peak_since, start_peak};
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// One test in this binary: the allocator counts the whole process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_disk_hits_stay_within_the_download_budget() {
    const LOADS: usize = 24;
    let budget = 16 * MIB; // room for about four entries at once
    let origin = TestOrigin::start(); // serves nothing: every image must come from the disk
    let dir = Scratch(
        std::env::temp_dir().join(format!("mmcache-disk-read-budget-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&dir.0);
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0))
        .disk_cache_dir(&dir.0)
        .decode_concurrency(1)
        .download_memory_bytes(budget as u64)
        .build()
        .unwrap();
    let disk = loader.disk_cache().expect("the disk tier is on");
    let mut urls = Vec::new();
    for i in 0..LOADS {
        let url = origin.url(&format!("/noise-{i}.png"));
        // About 4 MB each: pseudo-random pixels barely compress.
        let png = images::noise_png(1150, 1150, i as u64 + 1);
        disk.put(&CacheIdentity::unscoped(&url), png.into()).await;
        urls.push(url);
    }

    let base = start_peak();
    let sources = common::load_all_at_once(&loader, urls).await;
    let peak = peak_since(base);
    assert!(sources.iter().all(|s| *s == Source::Disk), "{sources:?}");
    eprintln!(
        "peak of live allocations: {:.1} MiB",
        peak as f64 / MIB as f64
    );
    // Twenty-four entries held at once (each waiting for the one decode slot) take 96 MB. The
    // budget admits about four; the slack covers the one decode's pixels and buffers (about
    // 8 MB) and the runtime.
    assert!(
        peak < budget + 16 * MIB,
        "peak {} MiB of live allocations with a {} MiB download budget",
        peak / MIB,
        budget / MIB
    );
}

//! The host pixel tier within one process: loaders with decoded caches of their own sharing a
//! real directory on a memory file system, as a host's worker processes do (the same
//! across real processes: crates/cli/tests/it/host_pixels.rs). A second loader maps what the first
//! decoded; the first swaps its own pixels for the mapping; a mapping outlives its entry; the
//! profiles, scopes and limits of a loader hold for what it maps; mapped images are charged
//! their share of the tier in the decoded cache.

use std::path::Path;
use std::time::Duration;

use mmcache_loader::{DecodeProfile, Loader, LoaderBuilder, Source};
use mmcache_scope::Scope;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

use crate::common::Dir;

/// A scratch directory on a memory file system (`/dev/shm`), removed on drop.
fn scratch(name: &str) -> Dir {
    Dir(mmcache_test_support::memory_dir(&format!("host-{name}")))
}

fn builder(dir: &Path) -> LoaderBuilder {
    Loader::builder().allow_internal(true).host_pixels_dir(dir)
}

/// Every entry file of the tier.
fn entries(dir: &Path) -> usize {
    let Ok(shards) = std::fs::read_dir(dir.join("v1")) else {
        return 0;
    };
    shards
        .flatten()
        .filter(|s| s.file_name().len() == 2)
        .map(|s| std::fs::read_dir(s.path()).map_or(0, |d| d.count()))
        .sum()
}

/// Waits for the background writes of `loader` (the entry and the swap to its mapping).
async fn settle(loader: &Loader) {
    assert!(
        loader.shutdown(Duration::from_secs(10)).await,
        "writes landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_loader_maps_what_the_first_decoded_and_the_first_drops_its_copy() {
    let dir = scratch("second");
    let origin = TestOrigin::start();
    // Over 64 KiB of pixels: entries that small are read, not mapped.
    origin.set("/a.png", Route::ok(images::png(200, 150, 1)));
    let url = origin.url("/a.png");
    let first = builder(&dir.0).build().unwrap();
    let loaded = first.load_detailed(&url, None).await.unwrap();
    // Decoded here (the image handed out may already be the mapping when its entry landed
    // before the load's own insert).
    assert_eq!(loaded.source, Source::Origin);
    let own = loaded.image.pixels().to_vec();
    drop(loaded);
    settle(&first).await;
    assert_eq!(entries(&dir.0), 1);
    // The writer's decoded cache now holds the mapping instead of its own pixels.
    let again = first.load_detailed(&url, None).await.unwrap();
    assert_eq!(again.source, Source::Memory);
    assert!(again.image.is_mapped(), "swapped for the mapping");
    assert_eq!(again.image.pixels(), &own[..]);
    // Another loader (another process's decoded cache) maps it: no download, no decode.
    let second = builder(&dir.0).build().unwrap();
    let hit = second.load_detailed(&url, None).await.unwrap();
    assert_eq!(hit.source, Source::Host);
    assert!(hit.image.is_mapped());
    assert_eq!(hit.image.pixels(), &own[..]);
    assert_eq!(hit.encoded_len, Some(again.image.encoded_len()));
    assert_eq!(origin.hits("/a.png"), 1);
    // The pixels of both are one mapping of the same file, not copies (same bytes, two
    // mappings of one inode: checked through the file the mapping belongs to).
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mapped = maps
        .lines()
        .filter(|l| l.contains(dir.0.to_str().unwrap()))
        .count();
    assert!(mapped >= 2, "both loaders map the entry: {maps}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapping_outlives_its_entry_evicted_replaced_or_its_directory_removed() {
    let dir = scratch("outlives");
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(200, 150, 2)));
    let url = origin.url("/a.png");
    let writer = builder(&dir.0).build().unwrap();
    let want = writer.load(&url, None).await.unwrap().pixels().to_vec();
    settle(&writer).await;
    // A reader whose budget is a byte: its sweep evicts every entry.
    let reader = builder(&dir.0).host_pixels_max_bytes(1).build().unwrap();
    let held = reader.load_detailed(&url, None).await.unwrap();
    assert_eq!(held.source, Source::Host);
    assert!(held.image.is_mapped());
    let tier = reader.host_pixels().unwrap().clone();
    let left = tokio::task::spawn_blocking(move || tier.sweep_now())
        .await
        .unwrap();
    assert_eq!((left, entries(&dir.0)), (0, 0), "evicted");
    assert_eq!(
        held.image.pixels(),
        &want[..],
        "the mapping outlives its eviction"
    );
    // Written again by the next load, then replaced under the mapping, then the directory
    // removed altogether.
    let again = builder(&dir.0).build().unwrap();
    assert_eq!(
        again.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    settle(&again).await;
    let other = builder(&dir.0).build().unwrap();
    assert_eq!(
        other.load_detailed(&url, None).await.unwrap().source,
        Source::Host
    );
    std::fs::remove_dir_all(&dir.0).unwrap();
    assert_eq!(held.image.pixels(), &want[..], "the mapping is intact");
    // The next load in a third process-like loader misses, decodes and writes the entry again.
    let third = builder(&dir.0).build().unwrap();
    assert_eq!(
        third.load_detailed(&url, None).await.unwrap().source,
        Source::Origin
    );
    settle(&third).await;
    assert_eq!(entries(&dir.0), 1);
    assert_eq!(held.image.pixels(), &want[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_and_scopes_never_alias_and_a_loaders_limits_hold_for_what_it_maps() {
    let dir = scratch("profiles");
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(40, 30, 3)));
    let url = origin.url("/a.png");
    // Entries this small (under 64 KiB) are read into memory, not mapped: the same checks.
    let profiles = [
        DecodeProfile::rgb(mmcache_loader::PixelLayout::Rgb),
        DecodeProfile::rgb(mmcache_loader::PixelLayout::Rgbx),
        DecodeProfile::vllm_rgb([255, 255, 255]),
        DecodeProfile::sglang(),
    ];
    let writer = builder(&dir.0).build().unwrap();
    let mut want = Vec::new();
    for p in &profiles {
        want.push(writer.load_as(&url, None, p).await.unwrap().image);
    }
    settle(&writer).await;
    assert_eq!(entries(&dir.0), profiles.len(), "an entry per profile");
    let reader = builder(&dir.0).build().unwrap();
    for (p, want) in profiles.iter().zip(&want) {
        let got = reader.load_as(&url, None, p).await.unwrap();
        assert_eq!(got.source, Source::Host, "{p:?}");
        assert!(!got.image.is_mapped(), "read, not mapped: {p:?}");
        assert_eq!(*got.image, **want, "{p:?}");
        assert_eq!(got.image.source(), want.source(), "kept bytes of {p:?}");
    }
    // Scoped: an entry per scope; no usable scope: no tier at all.
    let scoped = || builder(&dir.0).session_scoped(true).build().unwrap();
    let (a, b) = (Scope::new("session-a"), Scope::new("session-b"));
    let w = scoped();
    w.load(&url, a.as_ref()).await.unwrap();
    w.load(&url, None).await.unwrap();
    settle(&w).await;
    assert_eq!(
        entries(&dir.0),
        profiles.len() + 1,
        "the scope's entry; none unscoped"
    );
    let r = scoped();
    assert_eq!(
        r.load_detailed(&url, a.as_ref()).await.unwrap().source,
        Source::Host
    );
    assert_eq!(
        r.load_detailed(&url, b.as_ref()).await.unwrap().source,
        Source::Origin
    );
    // A loader with a smaller pixel limit refuses the entry another wrote, as it refuses the
    // image: the entry stays for the others.
    let small = builder(&dir.0).max_pixels(40 * 30 - 1).build().unwrap();
    let refused = small.load(&url, None).await.unwrap_err();
    assert_eq!(refused.http_status(), 413);
    assert_eq!(
        reader.load_detailed(&url, None).await.unwrap().source,
        Source::Memory
    );
    let fresh = builder(&dir.0).build().unwrap();
    assert_eq!(
        fresh.load_detailed(&url, None).await.unwrap().source,
        Source::Host
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_images_are_charged_their_share_of_the_tier_not_their_bytes() {
    let dir = scratch("charge");
    let origin = TestOrigin::start();
    let urls: Vec<String> = (0..4)
        .map(|i| {
            origin.set(&format!("/{i}.png"), Route::ok(images::png(200, 150, i)));
            origin.url(&format!("/{i}.png"))
        })
        .collect();
    let writer = builder(&dir.0).build().unwrap();
    for url in &urls {
        writer.load(url, None).await.unwrap();
    }
    settle(&writer).await;
    // 4 MiB of decoded cache beside a 64 MiB tier: a mapped image counts a sixteenth.
    let reader = builder(&dir.0)
        .decoded_cache_bytes(4 << 20)
        .host_pixels_max_bytes(64 << 20)
        .build()
        .unwrap();
    let mut mapped = 0;
    for url in &urls {
        let l = reader.load_detailed(url, None).await.unwrap();
        assert_eq!(l.source, Source::Host);
        mapped += l.image.mapped_len() as u64;
    }
    assert_eq!(
        mapped,
        4 * (4096 + 200 * 150 * 3),
        "the whole entries are mapped"
    );
    let held = reader.decoded_cache().stats().bytes;
    let overhead = 4 * mmcache_decode::ENTRY_OVERHEAD_BYTES;
    assert!(
        held <= mapped / 16 + overhead + 64,
        "charged {held} for {mapped} mapped bytes"
    );
    assert!(
        held >= mapped / 16,
        "charged {held} for {mapped} mapped bytes"
    );
}

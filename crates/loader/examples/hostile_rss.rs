//! Peak memory of hostile images, measured: a local origin serves 16 distinct 100-megapixel
//! PNGs (all-zero rows, about 1.9 MB each on the wire, 300 MB each decoded); a loader with the
//! default decode budget loads all 16 at once, then each hostile file of the decode tests once.
//! Prints the process's peak resident memory (VmHWM) after each phase.
//!
//! The `downloads` phase serves 64 distinct URLs of one 60 MB body that is not an image, with
//! `Content-Length` and then chunked, and loads each set of 64 at once with the defaults: what
//! the download budget bounds (the bodies are refused by the probe, so no decode runs).
//!
//! The `shared` phase stores 64 distinct 60 MB values that are not images in a local Redis
//! Cluster and loads their 64 URLs at once with the defaults: each is a shared hit (refused by
//! the probe, deleted, then downloaded from the origin, which serves the same body), so it
//! measures what the download budget bounds of the shared tier's reads. It runs in a child
//! process of its own, so its peak is its own.
//!
//! ```sh
//! cargo run --release -p mmcache-loader --example hostile_rss             # every phase
//! cargo run --release -p mmcache-loader --example hostile_rss -- downloads
//! cargo run --release -p mmcache-loader --example hostile_rss -- shared
//! ```

use std::sync::Arc;
use std::time::Instant;

use mmcache_loader::Loader;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

/// Peak resident set of this process, in MiB (Linux).
fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// Resets the peak (Linux: writing 5 to clear_refs).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// 64 concurrent loads of distinct URLs serving one 60 MB non-image body, with a length and
/// chunked, with the default settings.
async fn downloads() -> anyhow::Result<()> {
    const LOADS: usize = 64;
    let origin = TestOrigin::start();
    let body = Arc::new(vec![0x5au8; 60_000_000]);
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0))
        .build()?;
    println!("baseline peak RSS: {} MiB", peak_rss_mib());
    for chunked in [false, true] {
        let urls: Vec<String> = (0..LOADS)
            .map(|i| {
                let path = format!("/blob-{chunked}-{i}");
                let route = if chunked {
                    Route::Chunked(body.clone())
                } else {
                    Route::Body {
                        status: 200,
                        content_type: "application/octet-stream".into(),
                        body: body.clone(),
                    }
                };
                origin.set(&path, route);
                origin.url(&path)
            })
            .collect();
        reset_peak();
        let started = Instant::now();
        let statuses = load_all_at_once(&loader, &urls).await?;
        println!(
            "{LOADS} concurrent 60 MB non-image bodies ({}): statuses {statuses:?} in {:.1} s, peak RSS {} MiB",
            if chunked { "chunked" } else { "Content-Length" },
            started.elapsed().as_secs_f64(),
            peak_rss_mib()
        );
    }
    Ok(())
}

/// 64 concurrent loads of distinct URLs whose 60 MB non-image values are in the shared cache.
async fn shared() -> anyhow::Result<()> {
    use mmcache_scope::CacheIdentity;
    use mmcache_shared_cache::entry_key;
    use mmcache_test_support::redis::{ClusterOptions, RedisCluster};
    const LOADS: usize = 64;
    let cluster = RedisCluster::start(ClusterOptions::default())?;
    let origin = TestOrigin::start();
    let body = Arc::new(vec![0x5au8; 60_000_000]);
    let urls: Vec<String> = (0..LOADS)
        .map(|i| {
            let path = format!("/shared-{i}");
            origin.set(
                &path,
                Route::Body {
                    status: 200,
                    content_type: "application/octet-stream".into(),
                    body: body.clone(),
                },
            );
            let url = origin.url(&path);
            let key = entry_key(&CacheIdentity::unscoped(&url));
            cluster.set_raw(&key, &body, Some(600)).map(|()| url)
        })
        .collect::<anyhow::Result<_>>()?;
    drop(body);
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0))
        .shared_cache_url(cluster.url())
        .build()?;
    println!("baseline peak RSS: {} MiB", peak_rss_mib());
    reset_peak();
    let started = Instant::now();
    let statuses = load_all_at_once(&loader, &urls).await?;
    let hits = loader.shared_cache().map_or(0, |c| c.stats().get_hits);
    println!(
        "{LOADS} concurrent shared hits of 60 MB non-image values: statuses {statuses:?} in {:.1} s, \
         {hits} values read, peak RSS {} MiB",
        started.elapsed().as_secs_f64(),
        peak_rss_mib()
    );
    Ok(())
}

/// Runs this example again with `phase` in a child process, so the phase's peak RSS is its own.
fn in_child(phase: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new(std::env::current_exe()?)
        .arg(phase)
        .status()?;
    anyhow::ensure!(status.success(), "phase {phase}: {status}");
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let phase = std::env::args().nth(1);
    match phase.as_deref() {
        Some("downloads") => return downloads().await,
        Some("shared") => return shared().await,
        _ => {}
    }
    let origin = TestOrigin::start();
    let bombs: Vec<String> = (0..16)
        .map(|i| {
            let path = format!("/100mp-{i}.png");
            origin.set(
                &path,
                Route::ok(images::zero_png(10_000, 10_000 - i, 8, 2, &[])),
            );
            origin.url(&path)
        })
        .collect();
    let hostile = [
        (
            "empty-scan JPEG 10000x10000",
            images::jpeg_empty_scan(10_000, 10_000),
        ),
        (
            "IDAT-starved PNG 10000x10000",
            images::png_header_claiming(10_000, 10_000),
        ),
        (
            "1x1 PNG with 256 MiB iCCP and zTXt bombs",
            images::zero_png(
                1,
                1,
                8,
                2,
                &[
                    (b"iCCP", images::iccp_bomb(256 << 20)),
                    (b"zTXt", images::ztxt_bomb(256 << 20)),
                ],
            ),
        ),
        (
            "16-bit RGBA PNG 10000x10000",
            images::zero_png(10_000, 10_000, 16, 6, &[]),
        ),
    ];
    for (i, (_, body)) in hostile.iter().enumerate() {
        origin.set(&format!("/hostile-{i}"), Route::ok(body.clone()));
    }
    // Default settings, decoded cache off: only decodes hold image memory.
    let loader = Loader::builder()
        .allow_internal(true)
        .decoded_cache_entries(Some(0))
        .build()?;
    println!(
        "decode budget: {} MiB",
        loader.config().decode_memory_bytes >> 20
    );
    println!("baseline peak RSS: {} MiB", peak_rss_mib());

    reset_peak();
    let started = Instant::now();
    let tasks: Vec<_> = bombs
        .iter()
        .map(|url| {
            let (loader, url) = (loader.clone(), url.clone());
            tokio::spawn(async move { loader.load(&url, None).await.map(|i| i.byte_len()) })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        if t.await?.is_ok() {
            ok += 1;
        }
    }
    println!(
        "16 concurrent 100 MP PNGs: {ok} loaded in {:.1} s, peak RSS {} MiB",
        started.elapsed().as_secs_f64(),
        peak_rss_mib()
    );

    for (i, (name, body)) in hostile.iter().enumerate() {
        reset_peak();
        let before = peak_rss_mib();
        let started = Instant::now();
        let result = loader
            .load(&origin.url(&format!("/hostile-{i}")), None)
            .await;
        let outcome = match &result {
            Ok(image) => format!("decoded {}x{}", image.width(), image.height()),
            Err(e) => format!("refused {}: {e}", e.http_status()),
        };
        println!(
            "{name} ({} bytes): {outcome}; {:.1} ms, peak RSS {} MiB (from {before})",
            body.len(),
            started.elapsed().as_secs_f64() * 1e3,
            peak_rss_mib()
        );
    }
    if phase.is_none() {
        downloads().await?;
        in_child("shared")?;
    }
    Ok(())
}

/// Loads every URL at once, each in a task of its own, and counts the loads by HTTP status
/// (200 for an image).
async fn load_all_at_once(
    loader: &Loader,
    urls: &[String],
) -> anyhow::Result<std::collections::BTreeMap<u16, usize>> {
    let tasks: Vec<_> = urls
        .iter()
        .map(|url| {
            let (loader, url) = (loader.clone(), url.clone());
            tokio::spawn(async move { loader.load(&url, None).await.map(|i| i.byte_len()) })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for t in tasks {
        let status = t.await?.map_or_else(|e| e.http_status(), |_| 200);
        *statuses.entry(status).or_insert(0) += 1;
    }
    Ok(statuses)
}

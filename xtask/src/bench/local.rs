//! Rows measured on one machine without a cluster: decode speed, decoded-cache inserts, and
//! the policy check that precedes every shared-cache lookup.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_decode::{DecodeLimits, JpegDecoder, JpegDecoderChoice, decode, select_jpeg_decoder};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;

use mmcache_loader::Source;

use super::outcome::{failed, from_sources, loaded};
use super::{Measure, Opts, Row, ops, worker};
use crate::common::ms;

/// Times `n` calls of `op` on this thread.
fn time_calls(n: usize, op: &dyn Fn() -> bool) -> anyhow::Result<Measure> {
    let mut lat = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        anyhow::ensure!(op(), "a decode failed");
        lat.push(t.elapsed());
    }
    let elapsed = started.elapsed();
    Ok(Measure::from_latencies(n, elapsed, lat))
}

/// One thread decoding the same file over and over: the default path (libjpeg-turbo for
/// JPEG, the row-by-row PNG decoder) against the previous one (`image` with zune-jpeg, and
/// `image`'s own PNG and WebP decode to RGB8), alternating rounds, median ratio.
pub(super) fn decode_rows(o: &Opts) -> anyhow::Result<Vec<Row>> {
    let selected = select_jpeg_decoder(JpegDecoderChoice::LibjpegTurbo, None)
        .context("the decode bench compares libjpeg-turbo with the pure-Rust decoder")?;
    let default = DecodeLimits::default().with_jpeg_decoder(selected.decoder);
    let pure = DecodeLimits::default().with_jpeg_decoder(JpegDecoder::PureRust);
    let classes: [(&str, Vec<u8>, usize); 6] = [
        ("JPEG 512 px", images::jpeg(512, 512, 1), 600),
        ("JPEG 1024 px", images::jpeg(1024, 1024, 2), 150),
        (
            "JPEG photo-like 512 px",
            images::photo_jpeg(512, 512, 1),
            600,
        ),
        (
            "JPEG photo-like 1024 px",
            images::photo_jpeg(1024, 1024, 2),
            150,
        ),
        ("PNG 1024 px", images::png(1024, 1024, 3), 150),
        ("WebP 512 px", images::webp(512, 512, 4), 300),
    ];
    let mut rows = Vec::new();
    for (class, body, full) in classes {
        let n = ops(o, full);
        let jpeg = class.starts_with("JPEG");
        let previous = || {
            if jpeg {
                decode(&body, &pure).is_ok()
            } else {
                image::load_from_memory(&body).is_ok_and(|i| !i.into_rgb8().is_empty())
            }
        };
        let current = || decode(&body, &default).is_ok();
        let mut pairs = Vec::new();
        for _ in 0..o.rounds() {
            pairs.push((time_calls(n, &previous)?, time_calls(n, &current)?));
        }
        pairs.sort_by(|x, y| (x.0.rate() / x.1.rate()).total_cmp(&(y.0.rate() / y.1.rate())));
        let (b, s) = pairs[pairs.len() / 2];
        let (baseline_name, target) = if jpeg {
            ("pure-Rust decoder (zune-jpeg)", "<= 0.77 (1.3x faster)")
        } else {
            ("image crate decode + to RGB8", "<= 1.05")
        };
        rows.push(Row {
            scenario: format!("decode {class} (1 thread)"),
            subject: s,
            baseline_name: baseline_name.into(),
            baseline: Some(b),
            ratio_kind: "time/op",
            ratio: Some(b.rate() / s.rate()),
            target: target.into(),
            note: format!("{} KiB file, {:.0} decodes/s", body.len() >> 10, s.rate()),
        });
    }
    Ok(rows)
}

/// Inserting into a decoded cache that holds 10^6 entries (every insert evicts one) against
/// inserting into an empty one: with O(1) eviction the ratio stays near 1. The hand-written LRU
/// this replaced scanned every entry per eviction.
pub(super) fn cache_insert(o: &Opts) -> anyhow::Result<Vec<Row>> {
    use mmcache_decode::{DecodedCache, ENTRY_OVERHEAD_BYTES};
    let resident: usize = if o.quick { 200_000 } else { 1_000_000 };
    let n = if o.quick { 50_000 } else { 200_000 };
    let image = Arc::new(decode(&images::png(1, 1, 1), &DecodeLimits::default())?);
    let weight = image.byte_len() as u64 + ENTRY_OVERHEAD_BYTES;
    let ids: Vec<CacheIdentity> = (0..resident + n)
        .map(|i| CacheIdentity::unscoped(&format!("https://example.com/{i}.png")))
        .collect();
    let insert_all = |cache: &DecodedCache, ids: &[CacheIdentity]| {
        let mut lat = Vec::with_capacity(ids.len());
        let started = Instant::now();
        for id in ids {
            let t = Instant::now();
            cache.insert(id, image.clone());
            lat.push(t.elapsed());
        }
        let elapsed = started.elapsed();
        Measure::from_latencies(ids.len(), elapsed, lat)
    };
    // Baseline: the same inserts into a cache that is nearly empty.
    let empty = DecodedCache::new(weight * (n as u64 + 16), None);
    let b = insert_all(&empty, &ids[..n]);
    // Subject: a cache filled to `resident` entries, then every insert evicts.
    let full = DecodedCache::new(weight * resident as u64, None);
    for id in &ids[..resident] {
        full.insert(id, image.clone());
    }
    let filled = full.stats().entries;
    let s = insert_all(&full, &ids[resident..]);
    anyhow::ensure!(
        full.stats().bytes <= weight * resident as u64,
        "budget broken"
    );
    Ok(vec![Row {
        scenario: format!("decoded-cache insert, {filled} entries resident"),
        subject: s,
        baseline_name: "insert into an empty cache".into(),
        baseline: Some(b),
        ratio_kind: "time/op",
        ratio: Some(b.rate() / s.rate()),
        target: "<= 3 (O(1) eviction)".into(),
        note: format!(
            "{:.2} us per insert with eviction, max {} ms",
            s.elapsed.as_secs_f64() * 1e6 / s.ops as f64,
            ms(s.max)
        ),
    }])
}

/// The policy check that precedes every shared-cache lookup, DNS included: a hostname whose
/// answer is cached against the check of an IP-literal URL (no resolution at all).
pub(super) async fn policy_dns(o: &Opts, origin: &TestOrigin) -> anyhow::Result<Vec<Row>> {
    let by_ip = origin.url("/policy.png");
    let by_name = by_ip.replace("127.0.0.1", "localhost");
    let loader = worker(None).build()?;
    let n = ops(o, 200_000);
    let check = |url: &str| {
        let origin = loader.origin().clone();
        let url = url.to_owned();
        async move {
            let mut lat = Vec::with_capacity(n);
            let started = Instant::now();
            for _ in 0..n {
                let t = Instant::now();
                anyhow::ensure!(origin.check_resolved(&url).await.is_ok(), "refused");
                lat.push(t.elapsed());
            }
            let elapsed = started.elapsed();
            anyhow::Ok(Measure::from_latencies(n, elapsed, lat))
        }
    };
    // The first check of the name resolves it (localhost: no query); the rest hit the cache.
    let first = Instant::now();
    loader.origin().check_resolved(&by_name).await?;
    let cold = first.elapsed();
    let b = check(&by_ip).await?;
    let s = check(&by_name).await?;
    Ok(vec![Row {
        scenario: "policy check with DNS (cached answer)".into(),
        subject: s,
        baseline_name: "policy check of an IP literal".into(),
        baseline: Some(b),
        ratio_kind: "time/op",
        ratio: Some(b.rate() / s.rate()),
        target: "-".into(),
        note: format!(
            "{:.2} us per check; first resolution {} ms",
            s.elapsed.as_secs_f64() * 1e6 / s.ops as f64,
            ms(cold)
        ),
    }])
}

/// The host's disk tier: hits (every load a disk read + decode, memory cache off) against a
/// plain file read + decode of the same files, and a restarted worker (warm directory) against
/// a cold start that downloads from an origin adding 20 ms per image.
pub(super) async fn disk_rows(o: &Opts, origin: &TestOrigin) -> anyhow::Result<Vec<Row>> {
    use mmcache_test_support::origin::Route;
    let dir = std::path::PathBuf::from("target/bench-disk");
    let _ = std::fs::remove_dir_all(&dir);
    let body = images::jpeg(440, 330, 7);
    let urls = super::serve(origin, "disk", 64, &body);
    let loader = worker(None)
        .decoded_cache_entries(Some(0))
        .disk_cache_dir(&dir)
        .build()?;
    for u in urls.iter() {
        loader.load(u, None).await?;
    }
    let disk = loader.disk_cache().context("enabled")?.clone();
    let paths: Arc<Vec<std::path::PathBuf>> = Arc::new(
        urls.iter()
            .map(|u| disk.path_of(&CacheIdentity::unscoped(u)))
            .collect(),
    );
    let n = ops(o, 3000);
    let (b, s) = super::paired(
        o.rounds(),
        || {
            let paths = paths.clone();
            super::drive(o.concurrency, n, move |i| {
                let path = paths[i % paths.len()].clone();
                async move {
                    let shown = path.display().to_string();
                    tokio::task::spawn_blocking(move || {
                        let bytes = std::fs::read(&path)
                            .map_err(|e| failed(format_args!("read: {e}"), &shown))?;
                        decode(&bytes, &DecodeLimits::default())
                            .map(|_| ())
                            .map_err(|e| failed(format_args!("decode: {e}"), &shown))
                    })
                    .await
                    .unwrap_or_else(|e| Err(format!("the read's task: {e}")))
                }
            })
        },
        || {
            let (l, urls) = (loader.clone(), urls.clone());
            super::drive(o.concurrency, n, move |i| {
                let (l, u) = (l.clone(), urls[i % urls.len()].clone());
                async move { from_sources(&l.load_detailed(&u, None).await, &[Source::Disk], &u) }
            })
        },
    )
    .await?;
    let mut rows = vec![Row {
        scenario: format!("disk hit ({} KiB JPEG)", body.len() >> 10),
        subject: s,
        baseline_name: "file read + decode".into(),
        baseline: Some(b),
        ratio_kind: "time/op",
        ratio: Some(b.rate() / s.rate()),
        target: "<= 1.20".into(),
        note: String::new(),
    }];
    // Restart: a fresh worker loads every image once, from a cold or a warm directory.
    let slow: Arc<Vec<String>> = Arc::new(
        (0..64)
            .map(|i| {
                let path = format!("/disk-slow/{i}");
                origin.set(
                    &path,
                    Route::Delay(
                        Duration::from_millis(20),
                        Box::new(Route::ok(images::jpeg(440, 330, 100 + i))),
                    ),
                );
                origin.url(&path)
            })
            .collect(),
    );
    let once = |warm: bool| {
        let (slow, dir) = (slow.clone(), dir.clone());
        async move {
            if !warm {
                let _ = std::fs::remove_dir_all(&dir);
            }
            let fresh = worker(None).disk_cache_dir(&dir).build()?;
            super::drive(o.concurrency, slow.len(), move |i| {
                let (l, u) = (fresh.clone(), slow[i].clone());
                async move { loaded(&l.load(&u, None).await, &u) }
            })
            .await
        }
    };
    let cold = once(false).await?;
    let warm = once(true).await?;
    rows.push(Row {
        scenario: "restart: 64 images, warm directory".into(),
        subject: warm,
        baseline_name: "cold directory (20 ms origin)".into(),
        baseline: Some(cold),
        ratio_kind: "time/op",
        ratio: Some(cold.rate() / warm.rate()),
        target: "-".into(),
        note: format!(
            "{:.0} ms cold, {:.0} ms warm for the whole set",
            cold.elapsed.as_secs_f64() * 1e3,
            warm.elapsed.as_secs_f64() * 1e3
        ),
    });
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

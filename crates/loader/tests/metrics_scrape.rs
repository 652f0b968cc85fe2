// Not in tests/it: it installs the process-global metrics recorder.
//! Every declared metric is in a real scrape, and every scraped family is declared: real
//! components (a Redis cluster, an HTTP origin on 127.0.0.1, disk and host pixel directories),
//! loads through every tier and the embeddings API, then the Prometheus recorder's text read
//! both ways.
//! One test per binary: the recorder is process-global.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput};
use mmcache_loader::{Loader, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

/// Declared metrics a healthy run may not show, and why.
const NOT_ALWAYS: &[(&str, &str)] = &[(
    "mmcache_libjpeg_turbo_info",
    "set only while libjpeg-turbo is the JPEG decoder (the pure-Rust one needs no library)",
)];

/// A fresh directory under the temp dir, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("mmcache-scrape-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Family name → type, from the `# TYPE` lines.
fn families(scrape: &str) -> BTreeMap<String, String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_declared_metric_is_scraped_and_every_scraped_one_declared() {
    if !require_redis("every_declared_metric_is_scraped_and_every_scraped_one_declared") {
        return;
    }
    let handle = mmcache_loader::metrics::install_prometheus().unwrap();
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let origin = TestOrigin::start();
    let png = images::png(16, 16, 3);
    origin.set("/a.png", Route::ok(png.clone()));
    origin.set(
        "/slow.png",
        Route::Delay(
            Duration::from_millis(300),
            Box::new(Route::ok(images::png(8, 8, 4))),
        ),
    );
    let (disk_a, disk_b) = (Dir::new("a"), Dir::new("b"));
    let worker = |disk: &Dir, shared: bool| {
        let mut b = Loader::builder()
            .allow_internal(true)
            .disk_cache_dir(&disk.0)
            .embedding_fleet(true);
        if shared {
            b = b
                .shared_cache_url(cluster.url())
                .shared_cache_io_timeout(Duration::from_secs(1));
        }
        b.build().unwrap()
    };
    let a = worker(&disk_a, true);
    let url = origin.url("/a.png");
    let source = |l: &Loader, url: String| {
        let l = l.clone();
        async move { l.load_detailed(&url, None).await.unwrap().source }
    };
    assert_eq!(source(&a, url.clone()).await, Source::Origin);
    assert_eq!(source(&a, url.clone()).await, Source::Memory);
    let slow = origin.url("/slow.png");
    let (first, second) = tokio::join!(source(&a, slow.clone()), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        source(&a, slow.clone()).await
    });
    assert_eq!((first, second), (Source::Origin, Source::Inflight));
    assert!(
        a.shutdown(Duration::from_secs(10)).await,
        "disk writes landed"
    );
    // Another process of the host: the disk entry A wrote; it writes the image's pixels to the
    // host pixel tier, where a third one maps them.
    let pixels = Dir::new("pixels");
    let c = Loader::builder()
        .allow_internal(true)
        .disk_cache_dir(&disk_a.0)
        .host_pixels_dir(&pixels.0)
        .build()
        .unwrap();
    assert_eq!(source(&c, url.clone()).await, Source::Disk);
    assert!(c.shutdown(Duration::from_secs(10)).await, "pixels written");
    let d = Loader::builder()
        .allow_internal(true)
        .host_pixels_dir(&pixels.0)
        .build()
        .unwrap();
    assert_eq!(source(&d, url.clone()).await, Source::Host);
    // Another host: the shared cache.
    let b = worker(&disk_b, true);
    assert_eq!(source(&b, url.clone()).await, Source::Shared);
    let data = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    assert_eq!(source(&b, data).await, Source::Data);
    // Embeddings: a compute, then a memory hit.
    let key = EmbeddingKeyInput::caller("scrape");
    for _ in 0..2 {
        b.embeddings()
            .get_or_compute(&key, "model", None, || {
                std::future::ready(
                    Embedding::from_f32(vec![1, 4], vec![0.5; 4]).map_err(|e| e.to_string()),
                )
            })
            .await
            .unwrap();
    }

    let scrape = handle.render();
    let scraped = families(&scrape);
    let mut missing = Vec::new();
    for m in mmcache_loader::metrics::all() {
        match scraped.get(m.name) {
            Some(kind) => assert_eq!(kind, m.kind.as_str(), "{} is scraped as {kind}", m.name),
            None if NOT_ALWAYS.iter().any(|(n, _)| *n == m.name) => {}
            None => missing.push(m.name),
        }
    }
    assert!(
        missing.is_empty(),
        "declared, not scraped: {missing:?}\n{scrape}"
    );
    let undeclared: Vec<&String> = scraped
        .keys()
        .filter(|n| n.starts_with("mmcache_") || n.starts_with("dynamo_"))
        .filter(|n| mmcache_loader::metrics::all().all(|m| m.name != n.as_str()))
        .collect();
    assert!(
        undeclared.is_empty(),
        "scraped, not declared: {undeclared:?}"
    );
    // The stats and the metrics are one count: the shared caches' stats (A's and B's, the
    // only ones in this process) add up to the scraped series.
    let scraped_sum = |series: &str| -> u64 {
        scrape
            .lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let stats = [&a, &b].map(|l| l.shared_cache().unwrap().stats());
    let total = |f: fn(&mmcache_shared_cache::SharedCacheStats) -> u64| -> u64 {
        stats.iter().map(f).sum()
    };
    let get = "dynamo_component_image_shared_cache_get_duration_seconds_count{outcome=";
    let set = "dynamo_component_image_shared_cache_set_duration_seconds_count{outcome=";
    let pairs = [
        (total(|s| s.get_hits), format!("{get}\"hit\"")),
        (total(|s| s.get_misses), format!("{get}\"miss\"")),
        (total(|s| s.set_ok), format!("{set}\"success\"")),
    ];
    for (from_stats, series) in pairs {
        assert!(from_stats > 0, "{series}: nothing counted");
        assert_eq!(from_stats, scraped_sum(&series), "{series}\n{scrape}");
    }
    // Every tier was counted where it served.
    for source in ["origin", "memory", "inflight", "disk", "shared", "data"] {
        let series = format!("mmcache_loads_total{{source=\"{source}\",outcome=\"ok\"}} ");
        assert!(
            scrape
                .lines()
                .any(|l| l.starts_with(&series) && !l.ends_with(" 0")),
            "{series} missing or 0\n{scrape}"
        );
    }
}

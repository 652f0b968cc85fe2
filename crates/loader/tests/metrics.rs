// Not in tests/it: it installs the process-global metrics recorder.
//! Metric names, labels and bucket counts, read back from a real Prometheus recorder.
//! One test per binary: the recorder is process-global.

use std::time::Duration;

use mmcache_loader::{Loader, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_cache_histograms_by_outcome_and_size_bucket() {
    if !require_redis("shared_cache_histograms_by_outcome_and_size_bucket") {
        return;
    }
    let handle = mmcache_loader::metrics::install_prometheus().unwrap();

    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let origin = TestOrigin::start();
    let small = images::png(16, 16, 1);
    let medium = images::noise_png(300, 300, 7); // ~270 KB: le_1mib
    assert!(
        medium.len() > 256 * 1024 && medium.len() <= 1024 * 1024,
        "{}",
        medium.len()
    );
    origin.set("/small.png", Route::ok(small));
    origin.set("/medium.png", Route::ok(medium));
    let worker = || {
        Loader::builder()
            .allow_internal(true)
            .shared_cache_url(cluster.url())
            .shared_cache_io_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let (a, b) = (worker(), worker());
    for path in ["/small.png", "/medium.png"] {
        assert_eq!(
            a.load_detailed(&origin.url(path), None)
                .await
                .unwrap()
                .source,
            Source::Origin
        );
        assert_eq!(
            b.load_detailed(&origin.url(path), None)
                .await
                .unwrap()
                .source,
            Source::Shared
        );
        assert_eq!(
            b.load_detailed(&origin.url(path), None)
                .await
                .unwrap()
                .source,
            Source::Memory
        );
    }
    // A dead cache: GET error, SET error.
    let port = mmcache_test_support::closed_port();
    let dead = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(format!("redis://127.0.0.1:{port}"))
        .build()
        .unwrap();
    dead.load(&origin.url("/small.png"), None).await.unwrap();

    let scrape = handle.render();
    let get = "dynamo_component_image_shared_cache_get_duration_seconds";
    let set = "dynamo_component_image_shared_cache_set_duration_seconds";
    let expect = [
        (
            format!("{get}_count{{outcome=\"miss\",size_bucket=\"unknown\"}}"),
            2.0,
        ),
        (
            format!("{get}_count{{outcome=\"hit\",size_bucket=\"le_64kib\"}}"),
            1.0,
        ),
        (
            format!("{get}_count{{outcome=\"hit\",size_bucket=\"le_1mib\"}}"),
            1.0,
        ),
        (
            format!("{get}_count{{outcome=\"error\",size_bucket=\"unknown\"}}"),
            1.0,
        ),
        (
            format!("{set}_count{{outcome=\"success\",size_bucket=\"le_64kib\"}}"),
            1.0,
        ),
        (
            format!("{set}_count{{outcome=\"success\",size_bucket=\"le_1mib\"}}"),
            1.0,
        ),
        (
            format!("{set}_count{{outcome=\"error\",size_bucket=\"le_64kib\"}}"),
            1.0,
        ),
        (
            "mmcache_loads_total{source=\"origin\",outcome=\"ok\"}".to_owned(),
            3.0,
        ),
        (
            "mmcache_loads_total{source=\"shared\",outcome=\"ok\"}".to_owned(),
            2.0,
        ),
        (
            "mmcache_loads_total{source=\"memory\",outcome=\"ok\"}".to_owned(),
            2.0,
        ),
    ];
    for (series, want) in expect {
        assert_eq!(value(&scrape, &series), Some(want), "{series}\n{scrape}");
    }
    // Latency buckets from 1 ms to 4 s.
    assert!(
        scrape.contains(&format!(
            "{get}_bucket{{outcome=\"hit\",size_bucket=\"le_64kib\",le=\"0.001\"}}"
        )),
        "{scrape}"
    );
    assert!(
        scrape.contains(&format!(
            "{get}_bucket{{outcome=\"hit\",size_bucket=\"le_64kib\",le=\"4\"}}"
        )),
        "{scrape}"
    );
    assert!(
        scrape.contains("mmcache_shared_cache_errors_total{op=\"get\",kind=\"connect\"} 1"),
        "{scrape}"
    );
    // Never a URL, key or address in a label.
    for secret in ["127.0.0.1", "dynamo:mm:image", "/small.png"] {
        assert!(!scrape.contains(secret), "{secret} leaked into the scrape");
    }
}

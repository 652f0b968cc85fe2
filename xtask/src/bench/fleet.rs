//! Fleet scenarios of `cargo xtask bench`: the stampede (many loaders, one never-seen URL) and
//! a Zipf workload over several loaders.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_loader::LeaseConfig;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::RedisCluster;

use super::{Measure, Opts, Row, worker};
use crate::common::{self, Plan};

pub(super) async fn stampede(
    o: &Opts,
    cluster: &RedisCluster,
    origin: &TestOrigin,
) -> anyhow::Result<Vec<Row>> {
    let urls_n = if o.quick { 10 } else { 30 };
    let mut rows = Vec::new();
    for lease in [false, true] {
        let body = Arc::new(images::jpeg(192, 144, 6));
        let prefix = format!("stampede-{lease}");
        let urls: Vec<String> = (0..urls_n)
            .map(|i| {
                let path = format!("/{prefix}/{i}");
                let route = Route::Body {
                    status: 200,
                    content_type: "image/jpeg".into(),
                    body: body.clone(),
                };
                origin.set(
                    &path,
                    Route::Delay(Duration::from_millis(50), Box::new(route)),
                );
                origin.url(&path)
            })
            .collect();
        let mut settings = LeaseConfig::default();
        settings.enabled = lease;
        let loaders = (0..o.loaders)
            .map(|_| {
                Ok(worker(Some(&cluster.url()))
                    .shared_cache_lease(settings)
                    .build()?)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        for l in &loaders {
            l.shared_cache().context("enabled")?.connect().await;
        }
        let before = origin.total_hits();
        let started = Instant::now();
        let mut lat = Vec::new();
        for url in &urls {
            let mut set = tokio::task::JoinSet::new();
            for l in &loaders {
                let (l, url) = (l.clone(), url.clone());
                set.spawn(async move {
                    let t = Instant::now();
                    l.load(&url, None).await.map(|_| t.elapsed())
                });
            }
            while let Some(r) = set.join_next().await {
                lat.push(r??);
            }
        }
        let elapsed = started.elapsed();
        let fetches = origin.total_hits() - before;
        let per_url = fetches as f64 / urls_n as f64;
        let m = Measure::from_latencies(lat.len(), elapsed, lat);
        rows.push(Row {
            scenario: format!(
                "stampede, {} loaders, lease {}",
                o.loaders,
                if lease { "on" } else { "off" }
            ),
            subject: m,
            baseline_name: "-".into(),
            baseline: None,
            ratio_kind: "origin fetches/URL",
            ratio: Some(per_url),
            target: if lease { "= 1.0".into() } else { "-".into() },
            note: format!("{fetches} origin fetches for {urls_n} URLs"),
        });
    }
    Ok(rows)
}

pub(super) async fn zipf(o: &Opts, cluster: &RedisCluster) -> anyhow::Result<Vec<Row>> {
    let (images_n, loads) = if o.quick { (500, 4000) } else { (2000, 20_000) };
    let (_origin, urls) = common::image_origin(images_n, Duration::ZERO);
    let loaders = (0..4)
        .map(|_| Ok(worker(Some(&cluster.url())).build()?))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let plan = Plan {
        loads_per_worker: loads / 4,
        lanes: o.concurrency.div_ceil(4),
        zipf_s: 1.1,
        seed: 11,
        duration: None,
        stop: None,
        pace: Duration::ZERO,
    };
    let started = Instant::now();
    let records = common::run_fleet(&loaders, Arc::new(urls), &plan).await;
    let elapsed = started.elapsed();
    let s = common::summarize(&records);
    anyhow::ensure!(s.failures == 0, "{} loads failed", s.failures);
    let pct = |n: usize| 100.0 * n as f64 / s.loads as f64;
    let lat: Vec<Duration> = records.iter().map(|r| r.latency).collect();
    let m = Measure::from_latencies(s.loads, elapsed, lat);
    Ok(vec![Row {
        scenario: format!("zipf s=1.1, {loads} loads over {images_n} images, 4 loaders"),
        subject: m,
        baseline_name: "-".into(),
        baseline: None,
        ratio_kind: "origin downloads/image",
        ratio: Some(
            s.origin as f64
                / records
                    .iter()
                    .map(|r| r.image)
                    .collect::<std::collections::HashSet<_>>()
                    .len() as f64,
        ),
        target: "-".into(),
        note: format!(
            "memory {:.1}%, inflight {:.1}%, shared {:.1}%, origin {:.1}% ({} downloads)",
            pct(s.memory),
            pct(s.inflight),
            pct(s.shared),
            pct(s.origin),
            s.origin
        ),
    }])
}

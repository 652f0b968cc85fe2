//! `cargo xtask demo`: a fleet of workers loads a repeating request mix from a local origin,
//! first with per-worker caches only, then sharing a local Redis Cluster, and reports where
//! loads were served from and how many origin downloads each image cost.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_loader::{LeaseConfig, Loader};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, redis_available};

use crate::common::{self, Plan, Record, Summary, ms};

mod embed;

const WORKERS: usize = 4;
const IMAGES: usize = 60;
const ORIGIN_DELAY: Duration = Duration::from_millis(20);

struct Row {
    name: String,
    summary: Summary,
    downloads: usize,
    unique: usize,
    elapsed: Duration,
}

/// `cargo xtask demo`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the Prometheus scrape (mmcache and shared-cache series) at the end
    #[arg(long)]
    metrics: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    // The shared-cache phase needs redis-server: install it where we can (root + apt-get);
    // otherwise the demo still runs its first phase and says how to get the second.
    if let Err(e) = crate::setup::ensure_prerequisites() {
        eprintln!("note: {e:#}");
    }
    let metrics = common::install_metrics()?;
    let rt = common::runtime()?;
    let (origin, urls) = common::image_origin(IMAGES, ORIGIN_DELAY);
    let urls = Arc::new(urls);
    let plan = Plan {
        loads_per_worker: 400,
        lanes: 4,
        zipf_s: 1.1,
        seed: 42,
        duration: None,
        stop: None,
        pace: Duration::ZERO,
    };
    println!(
        "mmcache demo: {WORKERS} workers x {} loads, Zipf(1.1) over {IMAGES} images, origin on {} adding {} ms per download\n",
        plan.loads_per_worker,
        origin.addr(),
        ORIGIN_DELAY.as_millis()
    );

    let mut rows = Vec::new();
    // One phase: the fleet runs the plan; the row counts the origin downloads it caused.
    let phase = |name: &str, loaders: &[Loader]| {
        let before = origin.total_hits();
        let t0 = Instant::now();
        let records = rt.block_on(common::run_fleet(loaders, urls.clone(), &plan));
        row(name, &records, origin.total_hits() - before, t0.elapsed())
    };
    let fleet = |url: Option<&str>, lease: bool| -> anyhow::Result<Vec<Loader>> {
        let mut settings = LeaseConfig::default();
        settings.enabled = lease;
        (0..WORKERS)
            .map(|_| {
                let mut b = Loader::builder().allow_internal(true);
                if let Some(url) = url {
                    b = b.shared_cache_url(url).shared_cache_lease(settings);
                }
                Ok(b.build()?)
            })
            .collect()
    };

    rows.push(phase("per-worker caches only", &fleet(None, false)?));

    // The host's disk tier, no Redis: the workers share one directory (separate loaders here,
    // as separate processes would be; crates/cli/tests/it/disk_tier.rs runs real processes).
    let disk_dir = std::path::PathBuf::from("target/demo-disk");
    let _ = std::fs::remove_dir_all(&disk_dir);
    for name in [
        "disk tier, no Redis (one directory)",
        "disk tier, workers restarted (warm)",
    ] {
        let loaders = (0..WORKERS)
            .map(|_| {
                Ok(Loader::builder()
                    .allow_internal(true)
                    .disk_cache_dir(&disk_dir)
                    .build()?)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        rows.push(phase(name, &loaders));
    }
    let _ = std::fs::remove_dir_all(&disk_dir);

    let mut encoder_rows = vec![rt.block_on(embed::phase(
        "per-worker caches only",
        &fleet(None, false)?,
        urls.clone(),
        100,
        4,
    ))];
    let note = if redis_available() {
        let cluster = RedisCluster::start(ClusterOptions::default())
            .context("start a local Redis Cluster")?;
        let mut gets = (0, 0, 0);
        for (name, lease) in [
            ("shared cache (3-master Redis Cluster)", false),
            ("shared cache + stampede lease", true),
        ] {
            // A fresh cluster per phase, so the second does not start warm.
            let _ = cluster.cli_cluster(&["FLUSHALL"]);
            for i in 1..cluster.nodes.len() {
                let _ = cluster.cli(i, &["FLUSHALL"]);
            }
            let loaders = fleet(Some(&cluster.url()), lease)?;
            rows.push(phase(name, &loaders));
            if !lease {
                for l in &loaders {
                    let s = l.shared_cache().expect("enabled").stats();
                    gets = (
                        gets.0 + s.get_hits,
                        gets.1 + s.get_misses,
                        gets.2 + s.set_ok,
                    );
                }
            }
        }
        let _ = cluster.cli_cluster(&["FLUSHALL"]);
        for i in 1..cluster.nodes.len() {
            let _ = cluster.cli(i, &["FLUSHALL"]);
        }
        encoder_rows.push(rt.block_on(embed::phase(
            "shared cache + stampede lease (the fleet tiers)",
            &fleet(Some(&cluster.url()), true)?,
            urls.clone(),
            100,
            4,
        )));
        drop(cluster);
        format!(
            "shared cache (without lease): {} GET hits, {} GET misses, {} SETs across the fleet",
            gets.0, gets.1, gets.2
        )
    } else {
        "redis-server not found: shared-cache phase skipped (run `cargo xtask test` once, or \
         apt-get install -y redis-server)"
            .to_owned()
    };

    print_table(&rows);
    embed::print(&encoder_rows);
    println!("\n{note}");
    let find = |prefix: &str| rows.iter().find(|r| r.name.starts_with(prefix));
    if let (Some(without), Some(disk)) = (find("per-worker"), find("disk tier, no Redis")) {
        println!(
            "origin downloads per image: {:.2} with per-worker caches only, {:.2} with the host's disk tier",
            per_image(without),
            per_image(disk),
        );
        if let (Some(with), Some(leased)) = (find("shared cache ("), find("shared cache +")) {
            println!(
                "                            {:.2} with the shared cache, {:.2} with the lease ({:.1}x fewer downloads)",
                per_image(with),
                per_image(leased),
                without.downloads as f64 / leased.downloads.max(1) as f64
            );
        }
    }
    if args.metrics {
        println!("\n# Prometheus scrape (mmcache and shared-cache series)");
        for line in metrics.render().lines() {
            if line.starts_with("mmcache_") || line.starts_with("dynamo_") {
                println!("{line}");
            }
        }
    }
    let failures: usize = rows.iter().map(|r| r.summary.failures).sum::<usize>()
        + encoder_rows.iter().map(|r| r.failures).sum::<usize>();
    anyhow::ensure!(failures == 0, "{failures} loads failed");
    Ok(())
}

fn row(name: &str, records: &[Record], downloads: usize, elapsed: Duration) -> Row {
    for r in records.iter().filter(|r| r.error.is_some()).take(3) {
        eprintln!(
            "worker {} failed a load: {}",
            r.worker,
            r.error.as_deref().unwrap_or_default()
        );
    }
    let unique = records
        .iter()
        .map(|r| r.image)
        .collect::<HashSet<_>>()
        .len();
    Row {
        name: name.to_owned(),
        summary: common::summarize(records),
        downloads,
        unique,
        elapsed,
    }
}

fn per_image(r: &Row) -> f64 {
    r.downloads as f64 / r.unique.max(1) as f64
}

fn print_table(rows: &[Row]) {
    println!(
        "| {:<38} | {:>5} | {:>6} | {:>8} | {:>5} | {:>6} | {:>6} | {:>9} | {:>6} | {:>7} | {:>7} | {:>7} |",
        "phase",
        "loads",
        "memory",
        "inflight",
        "disk",
        "shared",
        "origin",
        "downloads",
        "images",
        "p50 ms",
        "p99 ms",
        "loads/s"
    );
    println!(
        "|{}|",
        [40, 7, 8, 10, 7, 8, 8, 11, 8, 9, 9, 9]
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in rows {
        let s = &r.summary;
        println!(
            "| {:<38} | {:>5} | {:>6} | {:>8} | {:>5} | {:>6} | {:>6} | {:>9} | {:>6} | {:>7.3} | {:>7.2} | {:>7.0} |",
            r.name,
            s.loads,
            s.memory,
            s.inflight,
            s.disk,
            s.shared,
            s.origin,
            r.downloads,
            r.unique,
            ms(s.p50),
            ms(s.p99),
            s.loads as f64 / r.elapsed.as_secs_f64()
        );
    }
}

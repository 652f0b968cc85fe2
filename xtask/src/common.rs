//! Shared pieces of the xtask jobs: workload generation, a fleet runner, statistics, and the
//! Prometheus recorder.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_loader::metrics::prometheus::PrometheusHandle;
use mmcache_loader::{Loader, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

/// xorshift64*: small, seeded, good enough for request mixes.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) over `n` ranks by inverse CDF on a precomputed table.
#[derive(Debug, Clone)]
pub(crate) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub(crate) fn new(n: usize, s: f64) -> Self {
        let weights: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights.iter().map(|w| {
            acc += w / total;
            acc
        });
        Self { cdf: cdf.collect() }
    }

    pub(crate) fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Serves `n` generated images (JPEG and PNG, a few sizes) under `/img/<i>.<ext>`, each after
/// `delay` to stand in for a remote origin. Returns the origin and the URLs.
pub(crate) fn image_origin(n: usize, delay: Duration) -> (TestOrigin, Vec<String>) {
    let origin = TestOrigin::start();
    let mut urls = Vec::with_capacity(n);
    for i in 0..n {
        let seed = i as u32;
        let (path, body) = match i % 3 {
            0 => (
                format!("/img/{i}.png"),
                images::png(160 + (i as u32 % 5) * 16, 120, seed),
            ),
            _ => (
                format!("/img/{i}.jpg"),
                images::jpeg(320 + (i as u32 % 7) * 32, 240, seed),
            ),
        };
        let route = if delay.is_zero() {
            Route::ok(body)
        } else {
            Route::Delay(delay, Box::new(Route::ok(body)))
        };
        origin.set(&path, route);
        urls.push(origin.url(&path));
    }
    (origin, urls)
}

/// One load as seen by a worker.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// Since the run started.
    pub(crate) at: Duration,
    pub(crate) worker: usize,
    /// Index of the image in the URL list.
    pub(crate) image: usize,
    pub(crate) source: Option<Source>,
    pub(crate) latency: Duration,
    pub(crate) error: Option<String>,
}

/// How a fleet loads.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Loads per worker (upper bound when `duration` is set).
    pub(crate) loads_per_worker: usize,
    /// Concurrent lanes per worker.
    pub(crate) lanes: usize,
    /// Zipf exponent of the request mix.
    pub(crate) zipf_s: f64,
    pub(crate) seed: u64,
    /// Stop after this long even if loads remain.
    pub(crate) duration: Option<Duration>,
    /// Stop as soon as this is set (checked before each load).
    pub(crate) stop: Option<Arc<AtomicBool>>,
    /// Pause between two loads of a lane.
    pub(crate) pace: Duration,
}

/// Runs every loader as an independent worker through the same kind of request mix.
pub(crate) async fn run_fleet(
    loaders: &[Loader],
    urls: Arc<Vec<String>>,
    plan: &Plan,
) -> Vec<Record> {
    run_fleet_from(Instant::now(), loaders, urls, plan).await
}

/// [`run_fleet`] with record times measured from `started`.
pub(crate) async fn run_fleet_from(
    started: Instant,
    loaders: &[Loader],
    urls: Arc<Vec<String>>,
    plan: &Plan,
) -> Vec<Record> {
    let zipf = Arc::new(Zipf::new(urls.len(), plan.zipf_s));
    let mut tasks = tokio::task::JoinSet::new();
    for (w, loader) in loaders.iter().enumerate() {
        for lane in 0..plan.lanes {
            let (loader, urls, zipf, plan) =
                (loader.clone(), urls.clone(), zipf.clone(), plan.clone());
            tasks.spawn(async move {
                let mut rng = Rng::new(plan.seed ^ ((w as u64) << 32) ^ (lane as u64 + 1));
                let per_lane = plan.loads_per_worker.div_ceil(plan.lanes);
                let mut out = Vec::with_capacity(per_lane);
                for _ in 0..per_lane {
                    if plan.duration.is_some_and(|d| started.elapsed() >= d)
                        || plan
                            .stop
                            .as_ref()
                            .is_some_and(|s| s.load(Ordering::Relaxed))
                    {
                        break;
                    }
                    let image = zipf.sample(&mut rng);
                    let url = &urls[image];
                    let t0 = Instant::now();
                    let result = loader.load_detailed(url, None).await;
                    let latency = t0.elapsed();
                    out.push(Record {
                        at: t0 - started,
                        worker: w,
                        image,
                        source: result.as_ref().ok().map(|l| l.source),
                        latency,
                        error: result.err().map(|e| e.to_string()),
                    });
                    if !plan.pace.is_zero() {
                        tokio::time::sleep(plan.pace).await;
                    }
                }
                out
            });
        }
    }
    let mut records = Vec::new();
    while let Some(r) = tasks.join_next().await {
        records.extend(r.expect("worker lane panicked"));
    }
    records.sort_by_key(|r| r.at);
    records
}

/// Summary of a set of records.
#[derive(Debug, Clone, Default)]
pub(crate) struct Summary {
    pub(crate) loads: usize,
    pub(crate) failures: usize,
    pub(crate) memory: usize,
    pub(crate) inflight: usize,
    pub(crate) disk: usize,
    pub(crate) shared: usize,
    pub(crate) origin: usize,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
}

pub(crate) fn summarize(records: &[Record]) -> Summary {
    let mut s = Summary {
        loads: records.len(),
        ..Default::default()
    };
    let mut lat: Vec<Duration> = records.iter().map(|r| r.latency).collect();
    lat.sort();
    for r in records {
        match r.source {
            None => s.failures += 1,
            Some(Source::Memory) => s.memory += 1,
            Some(Source::Inflight) => s.inflight += 1,
            Some(Source::Disk) => s.disk += 1,
            Some(Source::Shared) => s.shared += 1,
            Some(_) => s.origin += 1,
        }
    }
    s.p50 = percentile(&lat, 0.50);
    s.p99 = percentile(&lat, 0.99);
    s.max = lat.last().copied().unwrap_or_default();
    s
}

/// The `q` quantile of sorted durations (nearest rank).
pub(crate) fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Installs the Prometheus recorder with our buckets (once per process).
pub(crate) fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    mmcache_loader::metrics::install_prometheus().context("install the Prometheus recorder")
}

/// A multi-thread runtime for the async parts of a job.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// `cargo xtask cluster`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct ClusterArgs {
    /// Masters of the cluster
    #[arg(long, value_name = "N", default_value_t = ClusterOptions::default().masters)]
    masters: usize,
    /// Replicas of each master
    #[arg(long, value_name = "N", default_value_t = ClusterOptions::default().replicas)]
    replicas: usize,
    /// TLS on every node (the CA certificate's path is printed)
    #[arg(long)]
    tls: bool,
}

/// `cargo xtask cluster`: start a cluster and keep it until Enter or end of input.
pub(crate) fn run_cluster(args: &ClusterArgs) -> anyhow::Result<()> {
    crate::setup::ensure_prerequisites()?;
    let cluster = RedisCluster::start(ClusterOptions {
        masters: args.masters,
        replicas: args.replicas,
        tls: args.tls,
        ..ClusterOptions::default()
    })?;
    println!("Redis Cluster up. Discovery URL: {}", cluster.url());
    if let Some(ca) = cluster.ca_path() {
        println!(
            "CA certificate: {} (MMCACHE_SHARED_IMAGE_CACHE_TLS_CA_FILE)",
            ca.display()
        );
    }
    println!("Press Enter to stop.");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(())
}

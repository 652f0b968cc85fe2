//! Embedding scenarios of `cargo xtask bench` (`embed`): the cost of a memory hit, 64
//! concurrent calls for one key, and encoder calls per image across several loaders with and
//! without the fleet tiers, and a large read through the shared tier. Image hits while large
//! embeddings stream are embed_stream.rs's row, run after these.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_loader::Loader;
use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput};
use mmcache_test_support::redis::RedisCluster;

use super::{Measure, Opts, Row, worker};

/// The model id every row uses (it names the processor setting too, as docs/embeddings.md asks).
pub(super) const MODEL: &str = "bench/encoder@max_pixels=1003520";
/// What the fleet row's encoder costs per call: a GPU forward pass of a small model.
const COMPUTE: Duration = Duration::from_millis(30);

/// A Qwen2.5-VL-like embedding of `tokens` × 64 f32 (small, so the rows measure the cache).
fn embedding(tokens: usize) -> Embedding {
    Embedding::from_f32(vec![tokens, 64], vec![0.25; tokens * 64]).expect("shape matches")
}

/// A 30 ms encoder of a 1300-token embedding that counts its calls.
fn encoder(
    calls: Arc<AtomicUsize>,
) -> impl FnOnce() -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Embedding, std::io::Error>> + Send>,
> + Send
+ 'static {
    move || {
        Box::pin(async move {
            calls.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(COMPUTE).await;
            Ok(embedding(1300))
        })
    }
}

/// The embedding rows but the stream's (embed_stream.rs, which builds on this file's helpers).
pub(super) async fn rows(o: &Opts, cluster: &RedisCluster) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![memory_hit(o).await?, one_key(o).await?];
    for fleet in [false, true] {
        rows.push(fleet_row(o, cluster, fleet).await?);
    }
    rows.push(large_shared_read(o, cluster).await?);
    Ok(rows)
}

/// One Qwen2.5-VL-7B embedding of a 1024 px image: 1300 tokens x 3584 bf16, 9.3 MB.
pub(super) fn large_embedding() -> anyhow::Result<Embedding> {
    let (tokens, width) = (1300, 3584);
    Ok(Embedding::from_u16_bits(
        mmcache_loader::embeddings::DType::BF16,
        vec![tokens, width],
        (0..tokens * width).map(|i| i as u16).collect(),
    )?)
}

/// Reads `key` through `reader`'s shared tier; its compute fails, so the tier must have it.
pub(super) async fn read_from_shared(
    reader: &Loader,
    key: &EmbeddingKeyInput,
) -> anyhow::Result<()> {
    let got = reader
        .embeddings()
        .get_or_compute(key, MODEL, None, || async {
            Err::<Embedding, _>(std::io::Error::other("the shared tier has it"))
        })
        .await?;
    anyhow::ensure!(
        got.source.as_str() == "shared",
        "read from {:?}",
        got.source
    );
    Ok(())
}

/// One large embedding (see [`large_embedding`]) read
/// through the shared tier (chunked, checked, assembled) against a raw GETRANGE of a value of
/// the same size from the same cluster.
async fn large_shared_read(o: &Opts, cluster: &RedisCluster) -> anyhow::Result<Row> {
    let e = large_embedding()?;
    let bytes = e.bytes().len();
    let writer = worker(Some(&cluster.url())).build()?;
    // No memory cache: every call of the reader goes to the shared tier.
    let reader = worker(Some(&cluster.url()))
        .embedding_cache_bytes(0)
        .build()?;
    for l in [&writer, &reader] {
        l.shared_cache().context("enabled")?.connect().await;
    }
    let key = EmbeddingKeyInput::caller(format!("large-{}", std::process::id()));
    let stored = e.clone();
    writer
        .embeddings()
        .get_or_compute(&key, MODEL, None, move || async move {
            Ok::<_, std::io::Error>(stored)
        })
        .await?;
    writer.shutdown(Duration::from_secs(10)).await;
    let client = redis::cluster::ClusterClient::builder(vec![cluster.url()])
        .retries(0)
        .build()?;
    let mut raw = client.get_async_connection().await?;
    let raw_key = format!("bench:raw:{{large-{}}}", std::process::id());
    redis::cmd("SET")
        .arg(&raw_key)
        .arg(vec![7u8; bytes])
        .query_async::<()>(&mut raw)
        .await?;
    let n = if o.quick { 20 } else { 60 };
    let mut pairs = Vec::new();
    for _ in 0..o.rounds() {
        let started = Instant::now();
        for _ in 0..n {
            let v: Vec<u8> = redis::cmd("GETRANGE")
                .arg(&raw_key)
                .arg(0)
                .arg(-1)
                .query_async(&mut raw)
                .await?;
            anyhow::ensure!(v.len() == bytes, "raw read short");
        }
        let b = Measure::from_latencies(n, started.elapsed(), vec![]);
        let started = Instant::now();
        for _ in 0..n {
            read_from_shared(&reader, &key).await?;
        }
        let s = Measure::from_latencies(n, started.elapsed(), vec![]);
        pairs.push((b, s));
    }
    pairs.sort_by(|x, y| (x.1.rate() / x.0.rate()).total_cmp(&(y.1.rate() / y.0.rate())));
    let (b, s) = pairs[pairs.len() / 2];
    Ok(Row {
        scenario: format!(
            "embeddings: {:.1} MB read from the shared tier",
            bytes as f64 / 1e6
        ),
        subject: s,
        baseline_name: "raw GETRANGE, same size".into(),
        baseline: Some(b),
        ratio_kind: "throughput",
        ratio: Some(s.rate() / b.rate()),
        target: ">= 0.80".into(),
        note: format!(
            "{:.0} MB/s through the tier, {:.0} MB/s raw",
            s.rate() * bytes as f64 / 1e6,
            b.rate() * bytes as f64 / 1e6
        ),
    })
}

/// A memory hit through `get_or_compute` against a locked `HashMap` lookup and clone of the
/// same entries: the floor for any in-process map.
async fn memory_hit(o: &Opts) -> anyhow::Result<Row> {
    let loader = Loader::builder().build()?;
    let keys: Vec<EmbeddingKeyInput> = (0..256)
        .map(|i| EmbeddingKeyInput::caller(format!("image-{i}")))
        .collect();
    let mut map = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let e = embedding(16);
        map.insert(format!("image-{i}"), e.clone());
        loader
            .embeddings()
            .get_or_compute(key, MODEL, None, move || async move {
                Ok::<_, std::io::Error>(e)
            })
            .await?;
    }
    let n = if o.quick { 200_000 } else { 1_000_000 };
    let map = Mutex::new(map);
    let names: Vec<String> = (0..256).map(|i| format!("image-{i}")).collect();
    let mut baseline = None;
    let mut subject = None;
    for _ in 0..o.rounds() {
        let started = Instant::now();
        let mut found = 0usize;
        for i in 0..n {
            found += usize::from(
                map.lock()
                    .expect("lock")
                    .get(&names[i % 256])
                    .cloned()
                    .is_some(),
            );
        }
        let b = Measure::from_latencies(n, started.elapsed(), vec![]);
        anyhow::ensure!(found == n, "baseline missed");
        let started = Instant::now();
        for i in 0..n {
            let hit = loader
                .embeddings()
                .get_or_compute(&keys[i % 256], MODEL, None, || async {
                    Err::<Embedding, _>(std::io::Error::other("a hit never computes"))
                })
                .await?;
            std::hint::black_box(hit);
        }
        let s = Measure::from_latencies(n, started.elapsed(), vec![]);
        if subject.is_none_or(|p: Measure| s.rate() > p.rate()) {
            (baseline, subject) = (Some(b), Some(s));
        }
    }
    let (b, s) = (baseline.expect("rounds"), subject.expect("rounds"));
    Ok(Row {
        scenario: "embeddings: memory hit (get_or_compute)".into(),
        subject: s,
        baseline_name: "Mutex<HashMap> get + clone".into(),
        baseline: Some(b),
        ratio_kind: "time/op",
        ratio: Some(b.rate() / s.rate()),
        target: "report".into(),
        note: format!("{:.0} ns per hit", 1e9 / s.rate()),
    })
}

/// 64 concurrent calls for one key never seen: one compute, every caller served.
async fn one_key(o: &Opts) -> anyhow::Result<Row> {
    let loader = Loader::builder().build()?;
    let rounds = if o.quick { 5 } else { 20 };
    let computes = Arc::new(AtomicUsize::new(0));
    let mut lat = Vec::new();
    let started = Instant::now();
    for round in 0..rounds {
        let key = EmbeddingKeyInput::caller(format!("one-key-{round}"));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let (loader, key, computes) = (loader.clone(), key.clone(), computes.clone());
            set.spawn(async move {
                let t = Instant::now();
                loader
                    .embeddings()
                    .get_or_compute(&key, MODEL, None, encoder(computes))
                    .await
                    .map(|_| t.elapsed())
            });
        }
        while let Some(r) = set.join_next().await {
            lat.push(r??);
        }
    }
    let m = Measure::from_latencies(lat.len(), started.elapsed(), lat);
    let per_key = computes.load(Ordering::Relaxed) as f64 / rounds as f64;
    Ok(Row {
        scenario: "embeddings: 64 concurrent calls, one key".into(),
        subject: m,
        baseline_name: "-".into(),
        baseline: None,
        ratio_kind: "computes/key",
        ratio: Some(per_key),
        target: "1.00".into(),
        note: format!(
            "{per_key:.2} computes per key ({} ms compute), p99 {:.1} ms",
            COMPUTE.as_millis(),
            m.p99.as_secs_f64() * 1e3
        ),
    })
}

/// Four loaders (OS-process-like: separate caches) each asking for the same N images at
/// once, with a 30 ms encoder: computes per image with each loader on its own, and with the
/// fleet tiers (the shared cache and its lease) that the loaders' configuration turns on.
async fn fleet_row(o: &Opts, cluster: &RedisCluster, fleet: bool) -> anyhow::Result<Row> {
    let images = if o.quick { 10 } else { 40 };
    let loaders: Vec<Loader> = (0..4)
        .map(|_| {
            let b = if fleet {
                // The fleet-wide single flight is the lease (off by default, as for images).
                let mut lease = mmcache_loader::LeaseConfig::default();
                lease.enabled = true;
                worker(Some(&cluster.url())).shared_cache_lease(lease)
            } else {
                worker(None)
            };
            Ok(b.build()?)
        })
        .collect::<anyhow::Result<_>>()?;
    for l in &loaders {
        if let Some(c) = l.shared_cache() {
            c.connect().await;
        }
    }
    let computes = Arc::new(AtomicUsize::new(0));
    let mut lat = Vec::new();
    let started = Instant::now();
    for i in 0..images {
        let key = EmbeddingKeyInput::caller(format!("fleet-{fleet}-{}-{i}", std::process::id()));
        let mut set = tokio::task::JoinSet::new();
        for l in &loaders {
            let (l, key, computes) = (l.clone(), key.clone(), computes.clone());
            set.spawn(async move {
                let t = Instant::now();
                l.embeddings()
                    .get_or_compute(&key, MODEL, None, encoder(computes))
                    .await
                    .map(|_| t.elapsed())
            });
        }
        while let Some(r) = set.join_next().await {
            lat.push(r??);
        }
    }
    for l in &loaders {
        l.shutdown(Duration::from_secs(5)).await;
    }
    let m = Measure::from_latencies(lat.len(), started.elapsed(), lat);
    let per_image = computes.load(Ordering::Relaxed) as f64 / images as f64;
    Ok(Row {
        scenario: format!(
            "embeddings: {} loaders × {images} images, {}",
            loaders.len(),
            if fleet {
                "fleet tiers and lease on"
            } else {
                "each on its own"
            }
        ),
        subject: m,
        baseline_name: "-".into(),
        baseline: None,
        ratio_kind: "computes/image",
        ratio: Some(per_image),
        target: if fleet { "1.00" } else { "report" }.into(),
        note: format!(
            "{per_image:.2} encoder calls per image ({} ms each)",
            COMPUTE.as_millis()
        ),
    })
}

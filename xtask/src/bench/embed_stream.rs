//! The `embed` scenario's interference rows: image shared hits while 9.3 MB embeddings stream
//! through the same cluster's shared tier, against the same hits on a cluster with no stream;
//! and, in the same rounds, the same hits while a plain Redis client streams the same bytes by
//! raw GETRANGEs in the same chunk layout (no decoding, no checksum). The second row is what
//! Redis and CPU contention cost alone; the gap between the two is our chunk reader's.
//! Embedding values over the chunk size are spread over slots (docs/embeddings.md), so one
//! large value never holds one master's connection for every image GET that lands on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_decode::{DEFAULT_EMBEDDING_CHUNK_BYTES, encode_value};
use mmcache_loader::embeddings::EmbeddingKeyInput;
use mmcache_loader::{HedgeSettings, Loader, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;
use mmcache_test_support::redis::RedisCluster;
use redis::cluster_async::ClusterConnection;

use super::embed::{MODEL, large_embedding, read_from_shared};
use super::{Measure, Opts, Row, drive, ops, serve, worker};

pub(super) async fn image_hits_while_embeddings_stream(
    o: &Opts,
    cluster: &RedisCluster,
    origin: &TestOrigin,
) -> anyhow::Result<Vec<Row>> {
    let urls = serve(origin, "stream-hit", 64, &images::jpeg(192, 144, 1));
    let filler = worker(Some(&cluster.url())).build()?;
    for u in urls.iter() {
        filler.load(u, None).await?;
    }
    filler.shutdown(Duration::from_secs(10)).await;
    // No decoded cache: every image load is a shared hit. No hedge: a GET slowed by the
    // stream would race the (local, fast) origin, and a load the origin won is no shared hit;
    // the row measures the GET itself.
    let mut no_hedge = HedgeSettings::default();
    no_hedge.enabled = false;
    let reader = worker(Some(&cluster.url()))
        .decoded_cache_entries(Some(0))
        .shared_cache_hedge(no_hedge)
        .build()?;

    // Stored once; the streamer has no memory tier, so each of its calls reads every chunk.
    let e = large_embedding()?;
    let bytes = e.bytes().len();
    let key = EmbeddingKeyInput::caller(format!("stream-{}", std::process::id()));
    let raw = raw_chunks(cluster, &reader, &key, &e).await?;
    let writer = worker(Some(&cluster.url())).build()?;
    writer
        .embeddings()
        .get_or_compute(&key, MODEL, None, move || async move {
            Ok::<_, std::io::Error>(e)
        })
        .await?;
    writer.shutdown(Duration::from_secs(10)).await;
    let streamer = worker(Some(&cluster.url()))
        .embedding_cache_bytes(0)
        .build()?;
    for l in [&reader, &streamer] {
        l.shared_cache().context("enabled")?.connect().await;
    }

    let n = ops(o, 3000);
    let load = loadavg();
    let (mut ours, mut plain) = (Vec::new(), Vec::new());
    for round in 0..o.rounds() {
        let quiet = hits(&reader, &urls, o.concurrency, n).await?;
        // Interleaved, the order turned each round: neither stream always runs second.
        let ours_first = round % 2 == 0;
        for which in [ours_first, !ours_first] {
            let stop = Arc::new(AtomicBool::new(false));
            let streamed = Arc::new(AtomicUsize::new(0));
            let stream = if which {
                tokio::spawn(stream(
                    streamer.clone(),
                    key.clone(),
                    stop.clone(),
                    streamed.clone(),
                ))
            } else {
                tokio::spawn(raw.clone().stream(stop.clone(), streamed.clone()))
            };
            let started = Instant::now();
            let busy = hits(&reader, &urls, o.concurrency, n).await;
            let during = started.elapsed();
            stop.store(true, Ordering::Relaxed);
            stream.await??;
            let r = (quiet, busy?, streamed.load(Ordering::Relaxed), during);
            if which { ours.push(r) } else { plain.push(r) }
        }
    }
    let load = format!("load average {load} → {}", loadavg());
    let row = |mut rounds: Vec<Round>, what: &str, how: &str| {
        rounds.sort_by(|x, y| ratio(x).total_cmp(&ratio(y)));
        let all: Vec<String> = rounds.iter().map(|r| format!("{:.2}", ratio(r))).collect();
        let median = rounds[rounds.len() / 2];
        let (quiet, busy, streamed, during) = median;
        Row {
            scenario: format!(
                "image shared hits while {:.1} MB {what} stream",
                bytes as f64 / 1e6
            ),
            subject: busy,
            baseline_name: "same hits, no stream".into(),
            baseline: Some(quiet),
            ratio_kind: "p99",
            ratio: Some(ratio(&median)),
            target: if what == "embeddings" {
                "<= 1.20"
            } else {
                "(reference)"
            }
            .into(),
            note: format!(
                "{streamed} values ({:.0} MB/s) read {how} during the run; time/op {:.2}; \
                 p99 ratio of each round {}; {load}",
                streamed as f64 * bytes as f64 / 1e6 / during.as_secs_f64(),
                quiet.rate() / busy.rate(),
                all.join(" "),
            ),
        }
    };
    Ok(vec![
        row(ours, "embeddings", "through the shared tier"),
        row(plain, "raw chunk", "by raw GETRANGEs of the same chunks"),
    ])
}

/// One round's quiet hits, hits during a stream, values streamed, and how long the hits took.
type Round = (Measure, Measure, usize, Duration);

fn ratio(r: &Round) -> f64 {
    r.1.p99.as_secs_f64() / r.0.p99.as_secs_f64().max(1e-9)
}

/// The 1-minute load average (`/proc/loadavg`), or `?`.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The bytes of one stored embedding value under keys of a plain client, in the shared tier's
/// chunk layout: the same chunk size and count, each chunk under a hash tag of its own.
#[derive(Clone)]
struct RawChunks {
    conn: ClusterConnection,
    keys: Arc<Vec<String>>,
}

async fn raw_chunks(
    cluster: &RedisCluster,
    reader: &Loader,
    key: &EmbeddingKeyInput,
    e: &mmcache_loader::embeddings::Embedding,
) -> anyhow::Result<RawChunks> {
    let k = reader
        .embeddings()
        .key(key, MODEL, None)
        .context("unscoped key")?;
    let value = encode_value(&k, MODEL, e)?;
    let chunk = usize::try_from(reader.config().embedding_chunk_bytes)?;
    anyhow::ensure!(
        reader.config().embedding_chunk_bytes == DEFAULT_EMBEDDING_CHUNK_BYTES,
        "the bench measures the default chunk size"
    );
    let client = redis::cluster::ClusterClient::builder(vec![cluster.url()])
        .retries(0)
        .build()?;
    let mut conn = client.get_async_connection().await?;
    let mut keys = Vec::new();
    for (i, part) in value.chunks(chunk).enumerate() {
        let k = format!("bench:raw:{{stream-{}.{i}}}", std::process::id());
        redis::cmd("SET")
            .arg(&k)
            .arg(part)
            .query_async::<()>(&mut conn)
            .await?;
        keys.push(k);
    }
    Ok(RawChunks {
        conn,
        keys: Arc::new(keys),
    })
}

impl RawChunks {
    /// Reads every chunk at once (as the tier does, its 16 at a time covering them all), one
    /// value at a time, until `stop`.
    async fn stream(self, stop: Arc<AtomicBool>, streamed: Arc<AtomicUsize>) -> anyhow::Result<()> {
        for _ in 0..100_000 {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut set = tokio::task::JoinSet::new();
            for k in self.keys.iter() {
                let (mut conn, k) = (self.conn.clone(), k.clone());
                set.spawn(async move {
                    redis::cmd("GETRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .query_async::<Vec<u8>>(&mut conn)
                        .await
                });
            }
            while let Some(r) = set.join_next().await {
                anyhow::ensure!(!r??.is_empty(), "raw chunk missing");
            }
            streamed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// `n` image loads by `concurrency` tasks, each of which must be a shared hit.
async fn hits(
    reader: &Loader,
    urls: &Arc<Vec<String>>,
    concurrency: usize,
    n: usize,
) -> anyhow::Result<Measure> {
    let (reader, urls) = (reader.clone(), urls.clone());
    drive(concurrency, n, move |i| {
        let (reader, url) = (reader.clone(), urls[i % urls.len()].clone());
        async move {
            matches!(reader.load_detailed(&url, None).await, Ok(l) if l.source == Source::Shared)
        }
    })
    .await
}

/// Reads the embedding of `key` through the shared tier, one read at a time, until `stop`.
async fn stream(
    streamer: Loader,
    key: EmbeddingKeyInput,
    stop: Arc<AtomicBool>,
    streamed: Arc<AtomicUsize>,
) -> anyhow::Result<()> {
    // Bounded: the image run it overlaps lasts seconds; a read takes tens of milliseconds.
    for _ in 0..100_000 {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        read_from_shared(&streamer, &key).await?;
        streamed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

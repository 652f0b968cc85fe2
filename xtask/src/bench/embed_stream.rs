//! The `embed` scenario's interference row: image shared hits while 9.3 MB embeddings stream
//! through the same cluster's shared tier, against the same hits on a cluster with no stream.
//! Embedding values over the chunk size are spread over slots (docs/embeddings.md), so one
//! large value never holds one master's connection for every image GET that lands on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_loader::embeddings::EmbeddingKeyInput;
use mmcache_loader::{Loader, Source};
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;
use mmcache_test_support::redis::RedisCluster;

use super::embed::{MODEL, large_embedding, read_from_shared};
use super::{Measure, Opts, Row, drive, ops, serve, worker};

pub(super) async fn image_hits_while_embeddings_stream(
    o: &Opts,
    cluster: &RedisCluster,
    origin: &TestOrigin,
) -> anyhow::Result<Row> {
    let urls = serve(origin, "stream-hit", 64, &images::jpeg(192, 144, 1));
    let filler = worker(Some(&cluster.url())).build()?;
    for u in urls.iter() {
        filler.load(u, None).await?;
    }
    filler.shutdown(Duration::from_secs(10)).await;
    // No decoded cache: every image load is a shared hit.
    let reader = worker(Some(&cluster.url()))
        .decoded_cache_entries(Some(0))
        .build()?;

    // Stored once; the streamer has no memory tier, so each of its calls reads every chunk.
    let e = large_embedding()?;
    let bytes = e.bytes().len();
    let key = EmbeddingKeyInput::caller(format!("stream-{}", std::process::id()));
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
    let mut rounds = Vec::new();
    for _ in 0..o.rounds() {
        let quiet = hits(&reader, &urls, o.concurrency, n).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let streamed = Arc::new(AtomicUsize::new(0));
        let stream = tokio::spawn(stream(
            streamer.clone(),
            key.clone(),
            stop.clone(),
            streamed.clone(),
        ));
        let started = Instant::now();
        let busy = hits(&reader, &urls, o.concurrency, n).await;
        let during = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        stream.await??;
        rounds.push((quiet, busy?, streamed.load(Ordering::Relaxed), during));
    }
    let ratio = |r: &(Measure, Measure, usize, Duration)| {
        r.1.p99.as_secs_f64() / r.0.p99.as_secs_f64().max(1e-9)
    };
    rounds.sort_by(|x, y| ratio(x).total_cmp(&ratio(y)));
    let median = rounds[rounds.len() / 2];
    let (quiet, busy, streamed, during) = median;
    Ok(Row {
        scenario: format!(
            "image shared hits while {:.1} MB embeddings stream",
            bytes as f64 / 1e6
        ),
        subject: busy,
        baseline_name: "same hits, no stream".into(),
        baseline: Some(quiet),
        ratio_kind: "p99",
        ratio: Some(ratio(&median)),
        target: "<= 1.20".into(),
        note: format!(
            "{streamed} embeddings ({:.0} MB/s) read through the shared tier during the run; \
             time/op {:.2}",
            streamed as f64 * bytes as f64 / 1e6 / during.as_secs_f64(),
            quiet.rate() / busy.rate()
        ),
    })
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

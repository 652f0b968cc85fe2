//! Memory of the embedding fleet tiers under stress, measured (Linux: VmRSS, VmHWM).
//!
//! `writes`: a 1-master Redis Cluster behind a forwarder that holds every reply 1.5 s (the
//! default response timeout is 2 s: a master slow but in time; at 1.9 s the SETs of 256 KiB
//! chunks, queued on one connection, already met the timeout on a busy 2-core machine);
//! one loader with the default settings computes 9.3 MB values (bf16, 1300 x 3584) of
//! distinct keys at 10 a second for 60 s (`-- writes <secs> <cache bytes>` to change the run
//! and the embedding cache's budget). Prints the resident set every 5 s, its peak, and the
//! writes pending (and at their peak), against the bounds: the embedding cache's budget
//! (the values computed stay there) and the write allowance (a quarter of the download
//! budget) for the writes.
//!
//! `reads`: 8 values of 64 MB in a 3-master cluster (256 chunks each), read at once by a
//! loader with the default settings and no embedding cache: the peak against the download
//! budget (512 MiB), in which each chunked read reserves its assembly buffer.
//!
//! ```sh
//! cargo run --release -p mmcache-loader --example embed_memory -- writes
//! cargo run --release -p mmcache-loader --example embed_memory -- writes 60 0
//! cargo run --release -p mmcache-loader --example embed_memory -- reads
//! ```

use std::time::{Duration, Instant};

use mmcache_loader::Loader;
use mmcache_loader::embeddings::{DType, Embedding, EmbeddingKeyInput};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};
use mmcache_test_support::scrape::counter;

const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";

/// A line of /proc/self/status, in MiB.
fn status_mib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

async fn writes(secs: u64, cache_bytes: Option<u64>) -> anyhow::Result<()> {
    const PER_SEC: u64 = 10;
    let metrics = mmcache_loader::metrics::install_prometheus()?;
    let cluster = RedisCluster::start(ClusterOptions {
        masters: 1,
        ..ClusterOptions::default()
    })?;
    let slow = cluster.behind_forwarder(0)?;
    let mut builder = Loader::builder().shared_cache_url(cluster.url_at(slow.addr()));
    if let Some(bytes) = cache_bytes {
        builder = builder.embedding_cache_bytes(bytes);
    }
    let loader = builder.build()?;
    anyhow::ensure!(loader.shared_cache().unwrap().connect().await, "connect");
    slow.set_reply_delay(Duration::from_millis(1500));
    let cache = loader.embeddings().max_bytes();
    let allowance = loader.config().download_memory_bytes / 4;
    let baseline = status_mib("VmRSS:");
    println!(
        "baseline RSS {baseline} MiB; bounds: embedding cache {} MiB + write allowance {} MiB",
        cache >> 20,
        allowance >> 20
    );
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / PER_SEC));
    let mut tasks = tokio::task::JoinSet::new();
    let mut peak_rss = 0;
    for i in 0..secs * PER_SEC {
        tick.tick().await;
        let l = loader.clone();
        tasks.spawn(async move {
            let key = EmbeddingKeyInput::caller(format!("rss-{i}"));
            let compute = move || async move {
                let bits: Vec<u16> = (0..1300 * 3584).map(|j| (j as u16) ^ (i as u16)).collect();
                Embedding::from_u16_bits(DType::BF16, vec![1300, 3584], bits)
            };
            l.embeddings()
                .get_or_compute(&key, MODEL, None, compute)
                .await
                .map(|_| ())
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
        peak_rss = peak_rss.max(status_mib("VmRSS:"));
        if (i + 1) % (5 * PER_SEC) == 0 {
            let w = loader.embeddings().fleet_writes();
            println!(
                "{:5.1} s: RSS {} MiB, writes pending {} ({} MiB)",
                started.elapsed().as_secs_f64(),
                status_mib("VmRSS:"),
                w.pending,
                w.pending_bytes >> 20
            );
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let drained = loader.shutdown(Duration::from_secs(600)).await;
    let w = loader.embeddings().fleet_writes();
    let scrape = metrics.render();
    let dropped = |reason: &str| {
        let reason = format!("reason=\"{reason}\"");
        counter(
            &scrape,
            "mmcache_embedding_cache_writes_dropped_total",
            &["tier=\"shared\"", &reason],
        )
    };
    println!(
        "{} computes in {:.1} s; peak RSS {} MiB (VmHWM {} MiB), {} MiB over the baseline; \
         writes pending at most {} ({} MiB); shared writes dropped: {} no_memory, {} \
         queue_full, {} deadline; {} written; drained: {drained}",
        secs * PER_SEC,
        started.elapsed().as_secs_f64(),
        peak_rss,
        status_mib("VmHWM:"),
        peak_rss.saturating_sub(baseline),
        w.peak,
        w.peak_bytes >> 20,
        dropped("no_memory"),
        dropped("queue_full"),
        dropped("deadline"),
        counter(
            &scrape,
            "mmcache_embedding_cache_writes_total",
            &["tier=\"shared\"", "outcome=\"ok\""],
        ),
    );
    Ok(())
}

async fn reads() -> anyhow::Result<()> {
    const VALUES: usize = 8;
    let cluster = RedisCluster::start(ClusterOptions::default())?;
    // 16 M f32 = 64,000,000 bytes of tensor: a value just under the 64 MiB cap.
    let value = |i: usize| Embedding::from_f32(vec![16_000_000], vec![i as f32; 16_000_000]);
    let writer = Loader::builder().shared_cache_url(cluster.url()).build()?;
    for i in 0..VALUES {
        let key = EmbeddingKeyInput::caller(format!("read-{i}"));
        let e = value(i)?;
        writer
            .embeddings()
            .get_or_compute(&key, MODEL, None, move || async move {
                Ok::<_, std::io::Error>(e)
            })
            .await?;
        // One at a time: a write holds its value under the allowance (128 MiB).
        writer.shutdown(Duration::from_secs(60)).await;
    }
    drop(writer);
    let reader = Loader::builder()
        .shared_cache_url(cluster.url())
        .embedding_cache_bytes(0)
        .build()?;
    anyhow::ensure!(reader.shared_cache().unwrap().connect().await, "connect");
    let budget = reader.config().download_memory_bytes;
    let baseline = status_mib("VmRSS:");
    let _ = std::fs::write("/proc/self/clear_refs", "5"); // reset VmHWM
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..VALUES {
        let r = reader.clone();
        tasks.spawn(async move {
            let key = EmbeddingKeyInput::caller(format!("read-{i}"));
            let got = r
                .embeddings()
                .get_or_compute(&key, MODEL, None, || async {
                    Err::<Embedding, _>("not in the shared cache")
                })
                .await;
            // Dropped at once: what is measured is the read, not the caller's copies.
            got.map_or("miss", |g| g.source.as_str())
        });
    }
    let mut sources = Vec::new();
    while let Some(done) = tasks.join_next().await {
        sources.push(done?);
    }
    println!(
        "{VALUES} concurrent 64 MB shared hits: {sources:?} in {:.1} s; baseline RSS {baseline} \
         MiB, peak (VmHWM) {} MiB, {} MiB over the baseline, against a download budget of {} MiB",
        started.elapsed().as_secs_f64(),
        status_mib("VmHWM:"),
        status_mib("VmHWM:").saturating_sub(baseline),
        budget >> 20
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("writes") => {
            let secs = args.get(1).map_or(Ok(60), |s| s.parse())?;
            let cache = args.get(2).map(|s| s.parse()).transpose()?;
            writes(secs, cache).await
        }
        Some("reads") => reads().await,
        _ => anyhow::bail!("usage: embed_memory writes [secs [cache bytes]] | reads"),
    }
}

//! The `embed` scenario's interference rows: image shared hits while 9.3 MB embeddings stream
//! through the same cluster's shared tier, against the same hits on a cluster with no stream;
//! and, in the same rounds, the same hits while a plain Redis client reads the same bytes in
//! the same chunk layout the plain way, every chunk's GETRANGE at once (no checksum, no
//! assembly). That reference is what the bytes cost read without care for the GETs beside
//! them; the tier reads one chunk at a time and puts each into the value as it lands
//! (docs/embeddings.md), so one large value never holds a master, or the reader's CPU, for
//! long.
//!
//! Each comes driven two ways: saturating (hits and stream back to back) and paced (fixed
//! rates, open loop).

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
use super::outcome::from_sources;
use super::{Measure, Opts, Row, drive, paced, serve, worker};

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
    // The paced rows' worker: its embedding reads, too, all go to the shared tier.
    let paced_worker = worker(Some(&cluster.url()))
        .decoded_cache_entries(Some(0))
        .embedding_cache_bytes(0)
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
    for l in [&reader, &streamer, &paced_worker] {
        l.shared_cache().context("enabled")?.connect().await;
    }

    // Saturating: hits by `concurrency` tasks back to back while another loader reads values
    // back to back; on a machine with few cores that is mostly a contest for the CPU. Paced:
    // one worker's image hits and its own embedding reads (one loader, as a worker has) at
    // fixed rates, open loop, below what the machine can do: what a GET queued behind the
    // stream's chunks pays.
    let paced = Pace::Paced {
        images_per_sec: PACED_IMAGES_PER_SEC,
        values_per_sec: PACED_VALUES_PER_SEC,
    };
    let ways = [
        (
            Pace::Saturating(o.concurrency),
            &reader,
            &streamer,
            "through the shared tier",
        ),
        (
            paced,
            &paced_worker,
            &paced_worker,
            "through the same worker's shared tier",
        ),
    ];
    let mut rows = Vec::new();
    for (pace, hits_by, streamed_by, how) in ways {
        let load = loadavg();
        let (ours, plain) = rounds(o, hits_by, &urls, pace, || {
            (
                Stream::Tier(streamed_by.clone(), key.clone()),
                Stream::Raw(raw.clone()),
            )
        })
        .await?;
        let load = format!("load average {load} → {}", loadavg());
        rows.push(row(ours, bytes, pace, "embeddings", how, &load));
        let how = "by raw GETRANGEs of the same chunks";
        rows.push(row(plain, bytes, pace, "raw chunk", how, &load));
    }
    paced_worker.shutdown(Duration::from_secs(10)).await;
    Ok(rows)
}

/// A worker's image hits per second in the paced rows: about a quarter of what this
/// scenario's reader serves at saturation on two cores.
const PACED_IMAGES_PER_SEC: f64 = 1000.0;
/// Its 9.3 MB embedding reads per second (93 MB/s): a worker whose GPU is fed ten images a
/// second from the fleet's embeddings instead of its encoder.
const PACED_VALUES_PER_SEC: f64 = 10.0;

/// How the image hits and the stream are driven.
#[derive(Clone, Copy)]
enum Pace {
    /// This many tasks of hits back to back; the stream back to back.
    Saturating(usize),
    /// Open loop at fixed rates.
    Paced {
        images_per_sec: f64,
        values_per_sec: f64,
    },
}

/// What reads the embedding during the hits.
enum Stream {
    Tier(Loader, EmbeddingKeyInput),
    Raw(RawChunks),
}

/// `o.rounds()` rounds; in each, one run of hits per stream (the order turned each round:
/// neither always runs first), during which the stream runs in phases, on and off (see
/// [`Phase`]). A hit counts as quiet or busy by the phase it started in: both
/// kinds come from the same seconds of the same run, so a machine that slows down or speeds
/// up (other VMs on the host) moves both alike.
async fn rounds(
    o: &Opts,
    reader: &Loader,
    urls: &Arc<Vec<String>>,
    pace: Pace,
    streams: impl Fn() -> (Stream, Stream),
) -> anyhow::Result<(Vec<Round>, Vec<Round>)> {
    // Enough hits for 10 (quick: 4) seconds, 10 phases of each kind: a p99 of thousands.
    let n = match (pace, o.quick) {
        (Pace::Saturating(_), true) => 12_000,
        (Pace::Saturating(_), false) => 30_000,
        (Pace::Paced { .. }, true) => 4_000,
        (Pace::Paced { .. }, false) => 10_000,
    };
    let (mut ours, mut plain) = (Vec::new(), Vec::new());
    for round in 0..o.rounds() {
        let (tier, raw) = streams();
        let order = if round % 2 == 0 {
            [tier, raw]
        } else {
            [raw, tier]
        };
        for s in order {
            let is_tier = matches!(s, Stream::Tier(..));
            let phase = Arc::new(Phases::default());
            let task = tokio::spawn(s.run(pace, phase.clone()));
            let split = hits(reader, urls, pace, n, phase.clone()).await;
            phase.stop.store(true, Ordering::Relaxed);
            task.await??;
            let r = phase.round(split?)?;
            if is_tier { ours.push(r) } else { plain.push(r) }
        }
    }
    Ok((ours, plain))
}

/// How long the stream runs, then rests, in turn.
const PHASE: Duration = Duration::from_millis(500);
/// Hits starting this close before the stream starts count in neither phase (nor do those
/// starting in the same time after it stops).
const SETTLE: Duration = Duration::from_millis(25);

/// Where the stream is in its cycle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Phase {
    Quiet = 0,
    Settling = 1,
    On = 2,
}

/// The stream's phase, shared with the hits, and what it did.
#[derive(Default)]
struct Phases {
    now: std::sync::atomic::AtomicU8,
    stop: AtomicBool,
    streamed: AtomicUsize,
    /// Nanoseconds spent quiet and on.
    quiet_ns: std::sync::atomic::AtomicU64,
    on_ns: std::sync::atomic::AtomicU64,
}

impl Phases {
    fn get(&self) -> Phase {
        match self.now.load(Ordering::Acquire) {
            0 => Phase::Quiet,
            2 => Phase::On,
            _ => Phase::Settling,
        }
    }

    fn set(&self, p: Phase) {
        self.now.store(p as u8, Ordering::Release);
    }

    /// Holds `p` for `d` (or until stopped), counting the time.
    async fn hold(&self, p: Phase, d: Duration) {
        self.set(p);
        tokio::time::sleep(d).await;
        if p == Phase::Quiet {
            self.quiet_ns
                .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    fn round(&self, (quiet, busy): (Vec<Duration>, Vec<Duration>)) -> anyhow::Result<Round> {
        anyhow::ensure!(
            quiet.len() >= 100 && busy.len() >= 100,
            "too few hits in a phase: {} quiet, {} busy",
            quiet.len(),
            busy.len()
        );
        let ns = |a: &std::sync::atomic::AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        let on = ns(&self.on_ns);
        Ok((
            Measure::from_latencies(quiet.len(), ns(&self.quiet_ns), quiet),
            Measure::from_latencies(busy.len(), on, busy),
            self.streamed.load(Ordering::Relaxed),
            on,
        ))
    }
}

/// The row of one stream's rounds: the round with the median p99 ratio, and every round's.
fn row(mut rounds: Vec<Round>, bytes: usize, pace: Pace, what: &str, how: &str, load: &str) -> Row {
    rounds.sort_by(|x, y| ratio(x).total_cmp(&ratio(y)));
    let all: Vec<String> = rounds.iter().map(|r| format!("{:.2}", ratio(r))).collect();
    let median = rounds[rounds.len() / 2];
    let (quiet, busy, streamed, during) = median;
    let how_driven = match pace {
        Pace::Saturating(c) => format!("{c} tasks of hits, stream back to back"),
        Pace::Paced {
            images_per_sec,
            values_per_sec,
        } => format!("{images_per_sec:.0} hits/s, {values_per_sec:.0} values/s, open loop"),
    };
    let target = if what == "embeddings" {
        "<= 1.20"
    } else {
        "(reference)"
    };
    Row {
        scenario: format!(
            "image shared hits while {:.1} MB {what} stream ({how_driven})",
            bytes as f64 / 1e6
        ),
        subject: busy,
        baseline_name: "same run's hits, stream off".into(),
        baseline: Some(quiet),
        ratio_kind: "p99",
        ratio: Some(ratio(&median)),
        target: target.into(),
        note: format!(
            "{streamed} values ({:.0} MB/s while on) read {how}, in phases of 0.5 s on and \
             0.5 s off; {} quiet and {} busy hits; time/op {:.2}; \
             p99 ratio of each round {}; {load}",
            streamed as f64 * bytes as f64 / 1e6 / during.as_secs_f64(),
            quiet.ops,
            busy.ops,
            quiet.rate() / busy.rate(),
            all.join(" "),
        ),
    }
}

/// One round's quiet hits, busy hits, values streamed, and the time the stream was on.
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
    /// Reads every chunk of the value at once.
    async fn read(&self) -> anyhow::Result<()> {
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
        Ok(())
    }
}

impl Stream {
    /// Until stopped: [`PHASE`] quiet, then [`PHASE`] reading the value one read at a time
    /// (back to back or at the paced rate), with [`SETTLE`] between the two either way.
    async fn run(self, pace: Pace, phase: Arc<Phases>) -> anyhow::Result<()> {
        // Bounded: the hits it overlaps last seconds; a cycle lasts a second.
        for _ in 0..10_000 {
            if phase.stop.load(Ordering::Relaxed) {
                break;
            }
            phase.hold(Phase::Quiet, PHASE - SETTLE).await;
            phase.hold(Phase::Settling, SETTLE).await;
            let mut tick = match pace {
                Pace::Saturating(_) => None,
                Pace::Paced { values_per_sec, .. } => {
                    let mut t =
                        tokio::time::interval(Duration::from_secs_f64(1.0 / values_per_sec));
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    Some(t)
                }
            };
            phase.set(Phase::On);
            let started = Instant::now();
            // A read started in the phase finishes in it.
            while started.elapsed() < PHASE && !phase.stop.load(Ordering::Relaxed) {
                if let Some(t) = &mut tick {
                    t.tick().await;
                    // The phase's last tick falls at its end: not a read of this phase.
                    if started.elapsed() >= PHASE {
                        break;
                    }
                }
                match &self {
                    Stream::Tier(loader, key) => read_from_shared(loader, key).await?,
                    Stream::Raw(raw) => raw.read().await?,
                }
                phase.streamed.fetch_add(1, Ordering::Relaxed);
            }
            phase
                .on_ns
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            phase.hold(Phase::Settling, SETTLE).await;
        }
        Ok(())
    }
}

/// `n` image loads, driven as `pace` says, each of which must be a shared hit (or join one);
/// their latencies split by the phase each started in (quiet or on).
async fn hits(
    reader: &Loader,
    urls: &Arc<Vec<String>>,
    pace: Pace,
    n: usize,
    phase: Arc<Phases>,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let (reader, urls) = (reader.clone(), urls.clone());
    let split = Arc::new(std::sync::Mutex::new((Vec::new(), Vec::new())));
    let kept = split.clone();
    let op = move |i: usize| {
        let (reader, url) = (reader.clone(), urls[i % urls.len()].clone());
        let (phase, split) = (phase.clone(), split.clone());
        async move {
            // By the phase it started in: a slow hit is never dropped for ending in another
            // (a quiet one reaches the stream only if it takes longer than [`SETTLE`]).
            let (started_in, t) = (phase.get(), Instant::now());
            let r = reader.load_detailed(&url, None).await;
            let took = t.elapsed();
            {
                let mut split = split.lock().expect("not poisoned");
                match started_in {
                    Phase::Quiet => split.0.push(took),
                    Phase::On => split.1.push(took),
                    Phase::Settling => {}
                }
            }
            // A load that joined another's of the same URL (a task one lap of the URLs
            // ahead of a slow one) shares that shared hit.
            from_sources(&r, &[Source::Shared, Source::Inflight], &url)
        }
    };
    match pace {
        Pace::Saturating(c) => drive(c, n, op).await?,
        Pace::Paced { images_per_sec, .. } => paced(images_per_sec, n, op).await?,
    };
    let split = std::mem::take(&mut *kept.lock().expect("not poisoned"));
    Ok(split)
}

// Not in tests/it: it installs the process-global metrics recorder (its tests share it).
//! Embedding writes are bounded as image writes are: against a real master that answers late
//! but in time (a forwarder that holds every reply 1.5 s; the default response timeout is
//! 2 s), with the default settings, many computes of 9.3 MB values at once never hold more
//! pending writes than the write allowance (a quarter of the default 512 MiB download budget)
//! takes, each chunked write stops at its deadline, and every write not made is counted. Counts
//! only: no timing is asserted, but one order is assumed: every compute ends before the first
//! write's deadline. And a value over the disk tier's entry cap is counted as dropped, never as
//! written. The metrics recorder is process-global: the tests share one, and each reads only
//! labels no other test touches.

use std::sync::OnceLock;
use std::time::Duration;

use mmcache_loader::Loader;
use mmcache_loader::embeddings::{DType, Embedding, EmbeddingKeyInput, EmbeddingSource};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};
use mmcache_test_support::scrape::counter;

const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";
/// Computes started at once: about 1.7 times what the write allowance holds.
const COMPUTES: usize = 24;

/// One 1024 px image in Qwen2.5-VL-7B: about 1300 tokens x 3584 x bf16 = 9.3 MB.
fn big(seed: u16) -> Embedding {
    let bits: Vec<u16> = (0..1300 * 3584).map(|i| (i as u16) ^ seed).collect();
    Embedding::from_u16_bits(DType::BF16, vec![1300, 3584], bits).unwrap()
}

fn metrics() -> &'static mmcache_loader::metrics::prometheus::PrometheusHandle {
    static HANDLE: OnceLock<mmcache_loader::metrics::prometheus::PrometheusHandle> =
        OnceLock::new();
    HANDLE.get_or_init(|| mmcache_loader::metrics::install_prometheus().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_slow_master_are_bounded_and_what_is_dropped_is_counted() {
    let metrics = metrics();
    let cluster = RedisCluster::start(ClusterOptions {
        masters: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    let slow = cluster.behind_forwarder(0).unwrap();
    let loader = Loader::builder()
        .shared_cache_url(cluster.url_at(slow.addr()))
        .build()
        .unwrap();
    assert!(loader.shared_cache().unwrap().connect().await);
    slow.set_reply_delay(Duration::from_millis(1500));
    let value_len = mmcache_decode::encoded_len(MODEL, &big(0)).unwrap() as u64;
    let allowance = loader.config().download_memory_bytes / 4;
    let fits = allowance / value_len;
    // Made before any compute starts, so the computes end together. Made inside them (4.7 M
    // values each, unoptimised), in a gate run on a busy machine one ended after a first write
    // had reached its deadline and given its allowance back (9 dropped, not 10).
    let values: Vec<Embedding> = (0..COMPUTES).map(|i| big(i as u16)).collect();
    let tasks: Vec<_> =
        values
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                let l = loader.clone();
                tokio::spawn(async move {
                    let key = EmbeddingKeyInput::caller(format!("bounded-{i}"));
                    let got =
                        l.embeddings()
                            .get_or_compute(&key, MODEL, None, move || async move {
                                Ok::<_, String>(value)
                            })
                            .await
                            .expect("embedding");
                    assert_eq!(got.source, EmbeddingSource::Computed);
                })
            })
            .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let w = loader.embeddings().fleet_writes();
    assert!(
        w.peak_bytes <= allowance && w.peak as u64 <= fits,
        "pending writes never pass the bound ({fits} values, {allowance} bytes): {w:?}"
    );
    assert!(
        loader.shutdown(Duration::from_secs(60)).await,
        "each write ends by its deadline"
    );
    let w = loader.embeddings().fleet_writes();
    assert_eq!((w.pending, w.pending_bytes), (0, 0));
    let scrape = metrics.render();
    let dropped = |reason: &str| {
        let reason = format!("reason=\"{reason}\"");
        counter(
            &scrape,
            "mmcache_embedding_cache_writes_dropped_total",
            &["tier=\"shared\"", &reason],
        )
    };
    // Over the allowance, or over the write queue's half that embeddings may hold (with the
    // defaults both are 128 MiB, and the queue is asked first).
    let over = dropped("no_memory") + dropped("queue_full");
    let deadline = dropped("deadline");
    assert!(
        over >= COMPUTES as u64 - fits,
        "writes over the allowance are dropped and counted: {over}, {w:?}"
    );
    // The master answers each SET in time but 36 chunks take more than the write's deadline:
    // every accepted write stops there, counted, and none landed.
    assert_eq!(over + deadline, COMPUTES as u64, "{scrape}");
    let written = counter(
        &scrape,
        "mmcache_embedding_cache_writes_total",
        &["tier=\"shared\"", "outcome=\"ok\""],
    );
    assert_eq!(written, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_over_the_disk_entry_cap_is_counted_as_dropped_not_written() {
    let metrics = metrics();
    let dir = std::env::temp_dir().join(format!("mmcache-embb-cap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // DYN_MM_MAX_FILE_SIZE_MB=8: a 9.3 MB embedding never fits the disk tier.
    let loader = Loader::builder()
        .disk_cache_dir(&dir)
        .max_file_size_bytes(8 << 20)
        .build()
        .unwrap();
    for i in 0..2u16 {
        let key = EmbeddingKeyInput::caller(format!("over-cap-{i}"));
        let got = loader
            .embeddings()
            .get_or_compute(
                &key,
                MODEL,
                None,
                move || async move { Ok::<_, String>(big(i)) },
            )
            .await
            .unwrap();
        assert_eq!(got.source, EmbeddingSource::Computed);
    }
    assert!(loader.shutdown(Duration::from_secs(20)).await);
    let scrape = metrics.render();
    let disk = ["tier=\"disk\""];
    let too_large = counter(
        &scrape,
        "mmcache_embedding_cache_writes_dropped_total",
        &[disk[0], "reason=\"too_large\""],
    );
    let written = counter(
        &scrape,
        "mmcache_embedding_cache_writes_total",
        &[disk[0], "outcome=\"ok\""],
    );
    let bytes = counter(
        &scrape,
        "mmcache_embedding_cache_written_bytes_total",
        &disk,
    );
    assert_eq!((too_large, written, bytes), (2, 0, 0), "{scrape}");
    let _ = std::fs::remove_dir_all(&dir);
}

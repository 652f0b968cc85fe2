//! The compute deadline (`MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`): a compute that never
//! returns gives every waiter of its key a typed 408 at the deadline, its future is dropped,
//! the in-flight slot is freed (the next call computes again), a held fleet lease is released,
//! and nothing is cached. With the defaults the deadline is 60 s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mmcache_loader::embeddings::{Embedding, EmbeddingError, EmbeddingKeyInput, EmbeddingSource};
use mmcache_loader::{LeaseConfig, Loader};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

use crate::common::DropFlag;

const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";

fn small() -> Embedding {
    Embedding::from_f32(vec![2, 4], vec![0.5; 8]).unwrap()
}

/// `get_or_compute` of `key` with a compute that never returns; `dropped` is set when its
/// future is dropped.
async fn hung(
    loader: &Loader,
    key: &str,
    dropped: &Arc<AtomicBool>,
) -> Result<EmbeddingSource, EmbeddingError> {
    let flag = DropFlag(dropped.clone());
    loader
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller(key),
            MODEL,
            None,
            move || async move {
                let _flag = flag;
                std::future::pending::<Result<Embedding, String>>().await
            },
        )
        .await
        .map(|l| l.source)
}

async fn ok(loader: &Loader, key: &str) -> EmbeddingSource {
    loader
        .embeddings()
        .get_or_compute(&EmbeddingKeyInput::caller(key), MODEL, None, || async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, String>(small())
        })
        .await
        .expect("a normal compute")
        .source
}

/// Waits (at most 2 s) for `cond`.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

fn assert_timeout(who: &str, got: Result<EmbeddingSource, EmbeddingError>, after: Duration) {
    let err = got.expect_err(who);
    assert!(
        matches!(err, EmbeddingError::Timeout { after: a } if a == after),
        "{who}: {err:?}"
    );
    assert_eq!(err.http_status(), 408, "{who}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compute_that_never_returns_gives_every_waiter_408_and_frees_the_slot() {
    let deadline = Duration::from_millis(300);
    let loader = Loader::builder()
        .embedding_compute_timeout(Some(deadline))
        .build()
        .unwrap();
    assert_eq!(loader.config().embedding_compute_timeout(), deadline);
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let first = tokio::spawn({
        let (loader, dropped) = (loader.clone(), dropped.clone());
        async move { hung(&loader, "k", &dropped).await }
    });
    assert!(eventually(|| loader.embeddings().inflight() == 1).await);
    let joined_flag = Arc::new(AtomicBool::new(false));
    let joined = tokio::time::timeout(Duration::from_secs(20), hung(&loader, "k", &joined_flag))
        .await
        .expect("the joined waiter is answered at the deadline");
    let first = tokio::time::timeout(Duration::from_secs(20), first)
        .await
        .expect("the first caller is answered at the deadline")
        .unwrap();
    assert!(started.elapsed() >= deadline);
    assert_timeout("caller", first, deadline);
    assert_timeout("joined waiter", joined, deadline);
    assert!(
        eventually(|| dropped.load(Ordering::SeqCst)).await,
        "the compute's future was dropped"
    );
    assert_eq!(loader.embeddings().inflight(), 0, "the slot is free");
    // Not cached: the next call computes again.
    assert_eq!(ok(&loader, "k").await, EmbeddingSource::Computed);
    assert_eq!(ok(&loader, "k").await, EmbeddingSource::Memory);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_deadline_leaves_a_slow_but_healthy_compute_alone() {
    let loader = Loader::builder().build().unwrap();
    let config = loader.config();
    assert_eq!(config.embedding_compute_timeout(), Duration::from_secs(60));
    assert_eq!(ok(&loader, "fine").await, EmbeddingSource::Computed);
    // Slower than the lease TTL (5 s), as an encoder queued on a loaded GPU can be: under the
    // default deadline it still computes, and its result is cached.
    let slow = config.shared.lease.ttl + Duration::from_millis(500);
    let got = loader
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller("slow"),
            MODEL,
            None,
            move || async move {
                tokio::time::sleep(slow).await;
                Ok::<_, String>(small())
            },
        )
        .await
        .expect("a slow compute under the default deadline");
    assert_eq!(got.source, EmbeddingSource::Computed);
    assert_eq!(ok(&loader, "slow").await, EmbeddingSource::Memory);
    assert_eq!(loader.embeddings().inflight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_compute_releases_its_fleet_lease_and_writes_nothing() {
    let cluster = RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster");
    let mut lease = LeaseConfig::default();
    lease.enabled = true;
    // The lease lives 30 s: gone within 2 s of the deadline, it was released, not expired.
    lease.ttl = Duration::from_secs(30);
    let deadline = Duration::from_millis(300);
    let loader = Loader::builder()
        .shared_cache_url(cluster.url())
        .shared_cache_lease(lease)
        .embedding_compute_timeout(Some(deadline))
        .build()
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let first = tokio::spawn({
        let (loader, dropped) = (loader.clone(), dropped.clone());
        async move { hung(&loader, "leased", &dropped).await }
    });
    let mut held = false;
    for _ in 0..200 {
        if !cluster.keys_on_masters("mmcache:emb:v1:*:lease").is_empty() {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(held, "the compute holds the lease");
    let got = tokio::time::timeout(Duration::from_secs(20), first)
        .await
        .expect("answered at the deadline")
        .unwrap();
    assert_timeout("caller", got, deadline);
    let mut released = false;
    for _ in 0..200 {
        if cluster.keys_on_masters("mmcache:emb:v1:*:lease").is_empty() {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(released, "the lease was released at the deadline");
    assert!(
        cluster.keys_on_masters("mmcache:emb:v1:*").is_empty(),
        "a failure is never cached"
    );
    assert!(loader.shutdown(Duration::from_secs(20)).await);
    assert!(dropped.load(Ordering::SeqCst));
}

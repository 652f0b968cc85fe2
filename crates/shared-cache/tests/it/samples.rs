//! The GET/SET latency sample buffer (what Dynamo's `snapshot_and_drain` scrapes) against a
//! real Redis Cluster: off by default, the labels Dynamo gives each operation, the cap of
//! pending samples with its drop count, and drains that take everything once.

use std::time::Duration;

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{
    DrainedSamples, GetOutcome, LeaseOutcome, MAX_PENDING_SAMPLES, SampleOp, SharedCache,
    SharedCacheConfig, WriteOutcome,
};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

fn id(n: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://example.com/samples-{n}.png"))
}

/// `(op, outcome, size_bucket, number of samples)` of each series of a drain.
fn counts(d: &DrainedSamples) -> Vec<(&'static str, &'static str, &'static str, usize)> {
    d.series
        .iter()
        .map(|s| (s.op.as_str(), s.outcome, s.size_bucket, s.seconds.len()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_are_off_by_default_and_labelled_as_dynamo_labels_them() {
    if !require_redis("samples_are_off_by_default_and_labelled_as_dynamo_labels_them") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let mut config = SharedCacheConfig::new(cluster.url());
    config.max_read_bytes = 100_000;
    let cache = SharedCache::new(config).unwrap();
    assert!(cache.connect().await);

    // Off by default: operations keep nothing.
    assert_eq!(cache.get_with_outcome(&id(0)).await.1, GetOutcome::Miss);
    assert_eq!(cache.drain_duration_samples(), None);

    cache.enable_duration_samples();
    cache.enable_duration_samples(); // idempotent: keeps one buffer
    assert_eq!(
        cache.drain_duration_samples(),
        Some(DrainedSamples::default())
    );

    let value = Bytes::from(vec![7u8; 70 * 1024]); // le_256kib
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Miss);
    assert_eq!(
        cache.set(&id(1), value.clone()).await,
        WriteOutcome::Success
    );
    assert_eq!(cache.get(&id(1)).await, Some(value));
    // The lease (SET NX PX, compare-and-delete) has no Dynamo name: not sampled.
    let LeaseOutcome::Won(token) = cache.try_lease(&id(1), Duration::from_secs(5)).await else {
        panic!("lease not won");
    };
    cache.release_lease(&id(1), token).await;
    // Over the read cap: a hit of unknown size, as the facade histogram records it.
    cluster
        .set_raw(
            &mmcache_shared_cache::entry_key(&id(2)),
            &[1u8; 100_001],
            Some(60),
        )
        .unwrap();
    assert_eq!(
        cache.get_with_outcome(&id(2)).await.1,
        GetOutcome::Oversized
    );
    // A value over the write cap is not attempted: nothing to time.
    let huge = Bytes::from(vec![0u8; cache.config().max_value_bytes + 1]);
    assert_eq!(cache.set(&id(3), huge).await, WriteOutcome::Skipped);

    let drained = cache.drain_duration_samples().unwrap();
    assert_eq!(
        counts(&drained),
        vec![
            ("get", "hit", "le_256kib", 1),
            ("get", "hit", "unknown", 1),
            ("get", "miss", "unknown", 1),
            ("set", "success", "le_256kib", 1),
        ]
    );
    assert_eq!(drained.dropped, 0);
    for s in &drained.series {
        assert!(s.seconds.iter().all(|&x| (0.0..30.0).contains(&x)), "{s:?}");
    }
    // Drained: the next drain is empty.
    assert_eq!(
        cache.drain_duration_samples(),
        Some(DrainedSamples::default())
    );

    // Write-behind SETs are sampled when they end, with their real outcome.
    let mut config = SharedCacheConfig::new(cluster.url());
    config.write_behind.enabled = true;
    let behind = SharedCache::new(config).unwrap();
    behind.enable_duration_samples();
    let small = Bytes::from_static(b"\x89PNG small");
    assert_eq!(behind.store(&id(4), small).await, WriteOutcome::Success);
    assert!(behind.flush(Duration::from_secs(10)).await);
    let drained = behind.drain_duration_samples().unwrap();
    assert_eq!(counts(&drained), vec![("set", "success", "le_64kib", 1)]);
    assert_eq!(drained.series[0].op, SampleOp::Set);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_operations_are_errors_of_unknown_or_real_size() {
    // Nothing listens on port 1: each operation fails (a real refused connect).
    let mut config = SharedCacheConfig::new("redis://127.0.0.1:1");
    config.breaker.enabled = false; // every operation is attempted, none skipped
    let cache = SharedCache::new(config).unwrap();
    cache.enable_duration_samples();
    assert_eq!(cache.get_with_outcome(&id(0)).await.1, GetOutcome::Error);
    let value = Bytes::from(vec![1u8; 300 * 1024]); // le_1mib
    assert_eq!(cache.set(&id(0), value).await, WriteOutcome::Error);
    let drained = cache.drain_duration_samples().unwrap();
    assert_eq!(
        counts(&drained),
        vec![
            ("get", "error", "unknown", 1),
            ("set", "error", "le_1mib", 1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_samples_are_capped_as_in_dynamo_and_drops_are_counted() {
    if !require_redis("pending_samples_are_capped_as_in_dynamo_and_drops_are_counted") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let cache = SharedCache::new(SharedCacheConfig::new(cluster.url())).unwrap();
    assert!(cache.connect().await);
    cache.enable_duration_samples();
    const EXTRA: usize = 7;
    let total = MAX_PENDING_SAMPLES + EXTRA;
    // Real GETs (misses), 100 at a time; bounded in count and, as a whole, in time.
    let run = async {
        for start in (0..total).step_by(100) {
            let mut batch = tokio::task::JoinSet::new();
            for n in start..(start + 100).min(total) {
                let cache = cache.clone();
                batch.spawn(async move { cache.get_with_outcome(&id(n)).await.1 });
            }
            while let Some(outcome) = batch.join_next().await {
                assert_eq!(outcome.unwrap(), GetOutcome::Miss);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("10k GETs on loopback took over 120 s");
    assert_eq!(cache.stats().get_misses, total as u64);

    let drained = cache.drain_duration_samples().unwrap();
    assert_eq!(
        counts(&drained),
        vec![("get", "miss", "unknown", MAX_PENDING_SAMPLES)]
    );
    assert_eq!(drained.dropped, EXTRA as u64);
    assert_eq!(cache.duration_samples_dropped(), EXTRA as u64);
    // After a drain there is room again, and the drop count starts over (the total stays).
    assert_eq!(cache.get_with_outcome(&id(0)).await.1, GetOutcome::Miss);
    let drained = cache.drain_duration_samples().unwrap();
    assert_eq!(counts(&drained), vec![("get", "miss", "unknown", 1)]);
    assert_eq!(drained.dropped, 0);
    assert_eq!(cache.duration_samples_dropped(), EXTRA as u64);
}

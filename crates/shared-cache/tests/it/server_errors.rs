//! Error replies (WRONGTYPE, OOM, ...) come from a node that answered: they fail the one
//! operation open, but must neither open that node's breaker nor make the client rediscover.
//! Real Redis Cluster processes on loopback.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{
    BreakerState, GetOutcome, ManualClock, SharedCache, SharedCacheConfig, WriteOutcome, entry_key,
};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

fn id(n: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://example.com/reply-{n}.png"))
}

/// Default settings but a clock the test moves, so "failing for longer than the
/// rediscovery delay" costs no real time.
fn cache(url: String, clock: Arc<ManualClock>) -> SharedCache {
    let mut c = SharedCacheConfig::new(url);
    c.set_clock(clock);
    SharedCache::new(c).unwrap()
}

/// Many error replies from one master, the clock moved past the rediscovery delay between
/// them: the breaker stays closed, the next normal operation on that master is served, and
/// the connection is never rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_replies_neither_open_the_breaker_nor_rediscover() {
    if !require_redis("error_replies_neither_open_the_breaker_nor_rediscover") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let clock = Arc::new(ManualClock::default());
    let cache = cache(cluster.url(), clock.clone());
    assert!(cache.connect().await);
    let wrong = id(1);
    let key = entry_key(&wrong);
    let master = cluster.master_of(&key).unwrap();
    // A healthy key on the same master, for "the next normal operation is served".
    let normal = (2..500)
        .map(id)
        .find(|i| cluster.master_of(&entry_key(i)).unwrap() == master)
        .unwrap();
    assert_eq!(
        cache.set(&normal, Bytes::from_static(b"fine")).await,
        WriteOutcome::Success
    );

    // WRONGTYPE: the key holds a list, GETRANGE refuses it.
    cluster.cli_cluster(&["RPUSH", &key, "x"]).unwrap();
    for _ in 0..20 {
        assert_eq!(cache.get_with_outcome(&wrong).await.1, GetOutcome::Error);
        clock.advance(Duration::from_millis(500));
    }
    assert_eq!(cache.breaker_state(&wrong), BreakerState::Closed);
    assert_eq!(
        cache.get(&normal).await.as_deref(),
        Some(&b"fine"[..]),
        "the next normal GET on that master is served, not skipped"
    );

    // OOM: the master refuses writes (maxmemory 1, noeviction); reads still work.
    cluster
        .cli(master, &["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .unwrap();
    cluster
        .cli(master, &["CONFIG", "SET", "maxmemory", "1"])
        .unwrap();
    for n in 0..20 {
        assert_eq!(
            cache.set(&normal, Bytes::from(format!("v{n}"))).await,
            WriteOutcome::Error
        );
        clock.advance(Duration::from_millis(500));
    }
    assert_eq!(cache.breaker_state(&normal), BreakerState::Closed);
    assert_eq!(cache.get(&normal).await.as_deref(), Some(&b"fine"[..]));
    cluster
        .cli(master, &["CONFIG", "SET", "maxmemory", "0"])
        .unwrap();
    assert_eq!(
        cache.set(&normal, Bytes::from_static(b"again")).await,
        WriteOutcome::Success,
        "the next normal SET on that master is served"
    );

    let s = cache.stats();
    assert_eq!(s.skipped, 0, "no operation skipped: {s:?}");
    assert_eq!(s.breaker_opens, 0, "no breaker opened: {s:?}");
    assert_eq!(s.rediscoveries, 0, "no rediscovery: {s:?}");
    assert_eq!((s.get_errors, s.set_errors), (20, 20), "{s:?}");
    assert_eq!(s.error_replies, 40, "error replies counted apart: {s:?}");
}

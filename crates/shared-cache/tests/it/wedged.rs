//! Connections that are gone for good: a master that stops answering after the cluster
//! formed (SIGSTOP), an endpoint that accepts TCP and never answers, and a single node that
//! is both the configured URL and its own announced address, killed and restarted. Default
//! settings (0.1 s connect, 2.0 s I/O timeouts), real processes and sockets.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{GetOutcome, SharedCache, SharedCacheConfig, WriteOutcome, entry_key};
use mmcache_test_support::forward::Silent;
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

fn id(n: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://example.com/wedged-{n}.png"))
}

/// Generous for a loaded 2-core machine, and still far below "parked".
const SLACK: Duration = Duration::from_millis(1500);

/// Runs `n` GETs and `n` SETs of `ids` at once; returns the slowest and every outcome.
async fn burst(cache: &SharedCache, ids: &[CacheIdentity]) -> (Duration, Vec<String>) {
    let mut tasks = Vec::new();
    for identity in ids {
        let (c, i) = (cache.clone(), identity.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let g = c.get_with_outcome(&i).await.1;
            (t.elapsed(), format!("get {g:?}"))
        }));
        let (c, i) = (cache.clone(), identity.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let s = c.set(&i, Bytes::from_static(b"v")).await;
            (t.elapsed(), format!("set {s:?}"))
        }));
    }
    let mut slowest = Duration::ZERO;
    let mut outcomes = Vec::new();
    for t in tasks {
        let (took, outcome) = t.await.unwrap();
        slowest = slowest.max(took);
        outcomes.push(outcome);
    }
    (slowest, outcomes)
}

/// GETs and SETs on a master stopped after the cluster formed, in waves (the client then
/// holds requests that timed out, and refreshes its slot map meanwhile): each returns within
/// the operation deadline; the other masters keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_costs_each_operation_at_most_its_deadline() {
    if !require_redis("a_hung_master_costs_each_operation_at_most_its_deadline") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let defaults = SharedCache::new(SharedCacheConfig::new(cluster.url())).unwrap();
    // Also with the breaker off, so that every operation of every wave reaches the hung
    // master's connection instead of being skipped.
    let mut config = SharedCacheConfig::new(cluster.url());
    config.breaker.enabled = false;
    let no_breaker = SharedCache::new(config).unwrap();
    let deadline = defaults.config().op_deadline();
    assert!(defaults.connect().await && no_breaker.connect().await);
    let hung = 1; // not the discovery URL's node
    let (on_hung, healthy): (Vec<_>, Vec<_>) = (0..120)
        .map(id)
        .partition(|i| cluster.master_of(&entry_key(i)).unwrap() == hung);
    let on_hung = &on_hung[..on_hung.len().min(16)];
    for i in &healthy {
        assert_eq!(
            defaults.set(i, Bytes::from_static(b"ok")).await,
            WriteOutcome::Success
        );
    }
    cluster.hang(hung).unwrap();
    for (wave, cache) in [&defaults, &no_breaker, &no_breaker, &defaults, &no_breaker]
        .into_iter()
        .enumerate()
    {
        // A slot-map read beside the wave (it may go to the hung master too).
        let refresh = tokio::spawn({
            let c = cache.clone();
            async move {
                let t = Instant::now();
                c.connect().await;
                t.elapsed()
            }
        });
        let (slowest, outcomes) = burst(cache, on_hung).await;
        assert!(
            slowest <= deadline + SLACK,
            "wave {wave}: an operation on the hung master took {slowest:?} (deadline {deadline:?})"
        );
        assert!(
            outcomes
                .iter()
                .all(|o| o.ends_with("Error") || o.ends_with("Skipped")),
            "wave {wave}: {outcomes:?}"
        );
        let took = refresh.await.unwrap();
        assert!(took <= deadline * 2 + SLACK, "slot-map read took {took:?}");
        let t = Instant::now();
        assert_eq!(
            cache.get(&healthy[wave]).await.as_deref(),
            Some(&b"ok"[..]),
            "wave {wave}: the healthy masters keep serving"
        );
        assert!(
            t.elapsed() <= deadline,
            "healthy GET took {:?}",
            t.elapsed()
        );
    }
    cluster.resume(hung).unwrap();
}

/// An endpoint that completes the TCP handshake and never answers: the first operations
/// wait for the connect attempt, later ones for the reconnect backoff; none waits past its
/// deadline, however many run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_costs_each_operation_at_most_its_deadline() {
    let silent = Silent::start(Ipv4Addr::LOCALHOST.into()).unwrap();
    let cache =
        SharedCache::new(SharedCacheConfig::new(format!("redis://{}", silent.addr()))).unwrap();
    let deadline = cache.config().op_deadline();
    let ids: Vec<_> = (0..8).map(id).collect();
    for wave in 0..3 {
        let (slowest, outcomes) = burst(&cache, &ids).await;
        assert!(
            slowest <= deadline + SLACK,
            "wave {wave}: an operation took {slowest:?} (deadline {deadline:?})"
        );
        assert!(
            outcomes
                .iter()
                .all(|o| o.ends_with("Error") || o.ends_with("Skipped")),
            "wave {wave}: {outcomes:?}"
        );
    }
    assert!(silent.accepted() >= 1, "the client did connect to it");
    assert_eq!(cache.get_with_outcome(&id(0)).await.0, None);
}

/// Waits (bounded) until a SET and a GET of `probe` both work.
async fn recovered(cache: &SharedCache, probe: &CacheIdentity, within: Duration) -> bool {
    let until = Instant::now() + within;
    for _ in 0..1000 {
        if Instant::now() >= until {
            break;
        }
        if cache.set(probe, Bytes::from_static(b"back")).await == WriteOutcome::Success
            && cache.get(probe).await.as_deref() == Some(&b"back"[..])
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// One node owning every slot, announcing the very address the URL names (no forwarder):
/// killed, failed against for longer than the rediscovery delay, restarted on the same port,
/// three times over. Each time the client must find it again through the URL: the URL stays
/// the discovery endpoint however many operations failed (redis-py 6.2-7.1 drops such a URL
/// from its startup nodes after one failure and never recovers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_is_the_node_itself_stays_the_discovery_endpoint() {
    if !require_redis("a_url_that_is_the_node_itself_stays_the_discovery_endpoint") {
        return;
    }
    let mut cluster = RedisCluster::start(ClusterOptions {
        masters: 1,
        ..Default::default()
    })
    .unwrap();
    let url = cluster.url();
    assert!(url.ends_with(&cluster.nodes[0].addr().to_string()));
    let cache = SharedCache::new(SharedCacheConfig::new(url)).unwrap();
    assert!(recovered(&cache, &id(0), Duration::from_secs(5)).await);
    for round in 0..3 {
        cluster.kill(0);
        // Failing for longer than the rediscovery delay, with every operation failing open.
        let until = Instant::now() + mmcache_shared_cache::REDISCOVER_AFTER * 2;
        for _ in 0..200 {
            if Instant::now() >= until {
                break;
            }
            assert_eq!(
                cache.get_with_outcome(&id(1)).await.0,
                None,
                "round {round}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            cache.get_with_outcome(&id(1)).await.1 != GetOutcome::Hit,
            "round {round}: the node is down"
        );
        cluster.restart(0).unwrap();
        cluster.wait_ok(Duration::from_secs(30)).unwrap();
        assert!(
            recovered(&cache, &id(100 + round), Duration::from_secs(15)).await,
            "round {round}: the client found the node again through the URL ({:?})",
            cache.stats()
        );
    }
    assert!(
        cache.stats().rediscoveries >= 1,
        "the connection was rebuilt through the URL: {:?}",
        cache.stats()
    );
}

//! The shared cache against real Redis Cluster processes on loopback.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_scope::{CacheIdentity, Scope};
use mmcache_shared_cache::{
    GetOutcome, ManualClock, SharedCache, SharedCacheConfig, WriteOutcome, entry_key,
};
use mmcache_test_support::forward::Forwarder;
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

// The denial tests run wherever this file does (on Valkey too, in the gate).
mod denied;

fn cache(url: String) -> SharedCache {
    let mut c = SharedCacheConfig::new(url);
    c.connect_timeout = Duration::from_millis(200);
    c.io_timeout = Duration::from_millis(500);
    SharedCache::new(c).unwrap()
}

fn id(n: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://example.com/img-{n}.png"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_on_a_three_master_cluster() {
    if !require_redis("round_trip_on_a_three_master_cluster") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let mut config = SharedCacheConfig::new(cluster.url());
    config.ttl = Duration::from_secs(77);
    let cache = SharedCache::new(config).unwrap();
    assert!(cache.connect().await);
    // Keys spread over every master: all must work through one connection.
    for n in 0..30 {
        let value = Bytes::from(format!("value-{n}").repeat(n + 1));
        assert_eq!(cache.get_with_outcome(&id(n)).await.1, GetOutcome::Miss);
        assert_eq!(
            cache.set(&id(n), value.clone()).await,
            WriteOutcome::Success
        );
        assert_eq!(cache.get(&id(n)).await, Some(value));
    }
    // Exact bytes and the configured TTL, seen by another client.
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    cache.set(&id(1000), Bytes::from(binary.clone())).await;
    let key = entry_key(&id(1000));
    assert_eq!(cluster.get_raw(&key).unwrap(), Some(binary));
    let ttl = cluster.ttl(&key).unwrap();
    assert!((70..=77).contains(&ttl), "ttl {ttl}");
    // A GET hit does not refresh the TTL.
    cluster.cli_cluster(&["EXPIRE", &key, "20"]).unwrap();
    assert!(cache.get(&id(1000)).await.is_some());
    let ttl = cluster.ttl(&key).unwrap();
    assert!(ttl <= 20, "ttl {ttl}");
    // DEL.
    assert_eq!(cache.delete(&id(1000)).await, WriteOutcome::Success);
    assert_eq!(cluster.get_raw(&key).unwrap(), None);
    let s = cache.stats();
    assert_eq!(
        (s.get_hits, s.get_errors, s.set_errors, s.del_ok),
        (31, 0, 0, 1)
    );
}

#[tokio::test]
async fn python_compatible_keys_and_values() {
    if !require_redis("python_compatible_keys_and_values") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let cache = cache(cluster.url());
    // Written by another client at the documented key: a hit for us.
    let url = "https://example.com/img.png";
    let python_key =
        "dynamo:mm:image:{48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0}:bytes";
    cluster
        .set_raw(python_key, b"\x89PNG python bytes", Some(3600))
        .unwrap();
    assert_eq!(
        cache.get(&CacheIdentity::unscoped(url)).await.as_deref(),
        Some(&b"\x89PNG python bytes"[..])
    );
    // Our scoped write lands at the documented scoped key.
    let scoped = CacheIdentity::scoped(&Scope::new("session-a").unwrap(), url);
    cache.set(&scoped, Bytes::from_static(b"rust bytes")).await;
    let scoped_key =
        "dynamo:mm:image:{0895b8e0928cf6a3a67afb3c3b31407b6ff56e8130ad550729782f8465e15fc0}:bytes";
    assert_eq!(
        cluster.get_raw(scoped_key).unwrap().as_deref(),
        Some(&b"rust bytes"[..])
    );
}

#[tokio::test]
async fn values_over_the_read_cap_are_never_read() {
    if !require_redis("values_over_the_read_cap_are_never_read") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let mut config = SharedCacheConfig::new(cluster.url());
    config.max_read_bytes = 1000;
    let cache = SharedCache::new(config).unwrap();
    let at_cap = vec![7u8; 1000];
    let over_cap = vec![8u8; 1001];
    cluster.set_raw(&entry_key(&id(1)), &at_cap, None).unwrap();
    cluster
        .set_raw(&entry_key(&id(2)), &over_cap, None)
        .unwrap();
    // Exactly at the cap: read whole.
    assert_eq!(
        cache.get_with_outcome(&id(1)).await,
        (Some(Bytes::from(at_cap)), GetOutcome::Hit)
    );
    // One byte over: not returned, reported as oversized, left for the caller to judge.
    assert_eq!(
        cache.get_with_outcome(&id(2)).await,
        (None, GetOutcome::Oversized)
    );
    assert_eq!(
        cluster.get_raw(&entry_key(&id(2))).unwrap().as_ref(),
        Some(&over_cap)
    );
    // Absent: a miss, as with GET.
    assert_eq!(
        cache.get_with_outcome(&id(3)).await,
        (None, GetOutcome::Miss)
    );
    let s = cache.stats();
    assert_eq!((s.get_hits, s.get_misses, s.get_errors), (2, 1, 0));
    // A cap beyond what Redis can express reads everything.
    let mut config = SharedCacheConfig::new(cluster.url());
    config.max_read_bytes = usize::MAX;
    let uncapped = SharedCache::new(config).unwrap();
    assert_eq!(
        uncapped.get_with_outcome(&id(2)).await,
        (Some(Bytes::from(over_cap)), GetOutcome::Hit)
    );
}

#[tokio::test]
async fn failures_fail_open_and_warnings_are_rate_limited() {
    let port = mmcache_test_support::closed_port();
    let clock = Arc::new(ManualClock::default());
    let mut config = SharedCacheConfig::new(format!("redis://127.0.0.1:{port}"));
    config.set_clock(clock.clone());
    config.breaker.enabled = false; // count every failure; the breaker has its own test
    let cache = SharedCache::new(config).unwrap();
    let started = Instant::now();
    assert_eq!(
        cache.get_with_outcome(&id(1)).await,
        (None, GetOutcome::Error)
    );
    assert_eq!(
        cache.set(&id(1), Bytes::from_static(b"x")).await,
        WriteOutcome::Error
    );
    assert_eq!(cache.delete(&id(1)).await, WriteOutcome::Error);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused connections fail fast"
    );
    assert_eq!(cache.stats().warnings, 1, "the first failure warns at once");
    for _ in 0..20 {
        cache.get(&id(2)).await;
    }
    assert_eq!(cache.stats().warnings, 1, "then nothing within the minute");
    clock.advance(Duration::from_secs(61));
    cache.get(&id(3)).await;
    assert_eq!(cache.stats().warnings, 2, "one more after a minute");
    let s = cache.stats();
    assert_eq!((s.get_errors, s.set_errors, s.del_errors), (22, 1, 1));
}

#[tokio::test]
async fn bad_config_is_refused_without_echoing_the_url() {
    let err = SharedCache::new(SharedCacheConfig::new("http://user:secret@host:6379")).unwrap_err();
    assert!(!err.to_string().contains("secret"));
    let mut c = SharedCacheConfig::new("redis://127.0.0.1:6379");
    c.io_timeout = Duration::ZERO;
    assert!(SharedCache::new(c).is_err());
    let c = SharedCacheConfig::new("redis://:secret@127.0.0.1:6379");
    assert!(!format!("{c:?}").contains("secret"));
}

#[tokio::test]
async fn cluster_down_at_start_is_picked_up_later() {
    if !require_redis("cluster_down_at_start_is_picked_up_later") {
        return;
    }
    let mut cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let url = cluster.url();
    cluster.kill_all();
    let cache = cache(url);
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
    for i in 0..cluster.nodes.len() {
        cluster.restart(i).unwrap();
    }
    cluster.wait_ok(Duration::from_secs(30)).unwrap();
    // Bounded wait for the cache to come back (reconnect backoff is 250 ms).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut outcome = GetOutcome::Error;
    while Instant::now() < deadline {
        outcome = cache.get_with_outcome(&id(1)).await.1;
        if outcome == GetOutcome::Miss {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(outcome, GetOutcome::Miss);
    assert_eq!(
        cache.set(&id(1), Bytes::from_static(b"v")).await,
        WriteOutcome::Success
    );
}

#[tokio::test]
async fn single_node_cluster_like_dragonfly() {
    if !require_redis("single_node_cluster_like_dragonfly") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions {
        masters: 1,
        ..Default::default()
    })
    .unwrap();
    let cache = cache(cluster.url());
    for n in 0..10 {
        cache.set(&id(n), Bytes::from(vec![n as u8; 100])).await;
        assert_eq!(
            cache.get(&id(n)).await,
            Some(Bytes::from(vec![n as u8; 100]))
        );
    }
}

#[tokio::test]
async fn tls_cluster_round_trip() {
    if !require_redis("tls_cluster_round_trip") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions {
        tls: true,
        ..Default::default()
    })
    .unwrap();
    assert!(cluster.url().starts_with("rediss://"));
    let mut config = SharedCacheConfig::new(cluster.url());
    config.tls_root_ca_pem = cluster.ca_pem();
    config.connect_timeout = Duration::from_secs(1);
    let cache = SharedCache::new(config).unwrap();
    cache.set(&id(7), Bytes::from_static(b"over tls")).await;
    assert_eq!(cache.get(&id(7)).await.as_deref(), Some(&b"over tls"[..]));
    // Without our CA the server is not trusted: fail open.
    let untrusted = cache_with_url(cluster.url());
    assert_eq!(
        untrusted.get_with_outcome(&id(7)).await.1,
        GetOutcome::Error
    );
}

fn cache_with_url(url: String) -> SharedCache {
    cache(url)
}

#[tokio::test]
async fn password_from_the_url() {
    if !require_redis("password_from_the_url") {
        return;
    }
    let opts = ClusterOptions {
        password: Some("s3cret".into()),
        ..Default::default()
    };
    let cluster = RedisCluster::start(opts).unwrap();
    let good = cache(cluster.url());
    good.set(&id(1), Bytes::from_static(b"v")).await;
    assert_eq!(good.get(&id(1)).await.as_deref(), Some(&b"v"[..]));
    let addr = cluster.nodes[0].addr();
    let wrong = cache(format!("redis://:wrong@{addr}"));
    assert_eq!(wrong.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_after_every_node_moved_behind_a_stable_endpoint() {
    if !require_redis("recovers_after_every_node_moved_behind_a_stable_endpoint") {
        return;
    }
    let ips = [
        Ipv4Addr::new(127, 0, 0, 11),
        Ipv4Addr::new(127, 0, 0, 12),
        Ipv4Addr::new(127, 0, 0, 13),
    ];
    let mut cluster = RedisCluster::start(ClusterOptions {
        ips: ips.to_vec(),
        ..Default::default()
    })
    .unwrap();
    let endpoint = Forwarder::start(
        Ipv4Addr::new(127, 0, 0, 10).into(),
        Some(cluster.nodes[0].addr()),
    )
    .unwrap();
    let cache = cache(format!("redis://{}", endpoint.addr()));
    for n in 0..20 {
        assert_eq!(
            cache.set(&id(n), Bytes::from_static(b"before")).await,
            WriteOutcome::Success
        );
    }
    let new_ips = [
        Ipv4Addr::new(127, 0, 0, 21),
        Ipv4Addr::new(127, 0, 0, 22),
        Ipv4Addr::new(127, 0, 0, 23),
    ];
    cluster.kill_all();
    // During the outage every operation fails open.
    for n in 0..5 {
        assert_eq!(cache.get(&id(n)).await, None);
    }
    cluster.move_all(&new_ips).unwrap();
    endpoint.set_target(Some(cluster.nodes[0].addr()));
    let healthy = Instant::now();
    // Data was in memory only (no persistence): after recovery, writes and reads work again.
    let deadline = healthy + Duration::from_secs(15);
    let mut recovered = None;
    while Instant::now() < deadline {
        if cache.set(&id(99), Bytes::from_static(b"after")).await == WriteOutcome::Success
            && cache.get(&id(99)).await.as_deref() == Some(&b"after"[..])
        {
            recovered = Some(healthy.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took =
        recovered.expect("the cache recovers through the endpoint without a rebuild by the caller");
    eprintln!("recovered {took:?} after the cluster was healthy at new addresses");
    // Every slot works, not just one.
    for n in 100..130 {
        assert_eq!(
            cache.set(&id(n), Bytes::from_static(b"x")).await,
            WriteOutcome::Success,
            "key {n}"
        );
    }
}

fn breaker_cache(url: String, clock: Arc<ManualClock>) -> SharedCache {
    let mut c = SharedCacheConfig::new(url);
    c.connect_timeout = Duration::from_millis(200);
    c.io_timeout = Duration::from_millis(300);
    c.set_clock(clock);
    SharedCache::new(c).unwrap()
}

#[tokio::test]
async fn breaker_opens_on_a_closed_port_and_probes_after_the_cooldown() {
    let port = mmcache_test_support::closed_port();
    let clock = Arc::new(ManualClock::default());
    let cache = breaker_cache(format!("redis://127.0.0.1:{port}"), clock.clone());
    for _ in 0..5 {
        assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
        // Past the reconnect backoff, so each attempt really dials.
        tokio::time::sleep(Duration::from_millis(260)).await;
    }
    assert_eq!(
        cache.breaker_state(&id(1)),
        mmcache_shared_cache::BreakerState::Open
    );
    for _ in 0..50 {
        assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Skipped);
        assert_eq!(
            cache.set(&id(1), Bytes::from_static(b"v")).await,
            WriteOutcome::Skipped
        );
    }
    let s = cache.stats();
    assert_eq!((s.get_errors, s.skipped, s.breaker_opens), (5, 100, 1));
    clock.advance(Duration::from_secs(1));
    // One probe goes through (and fails), then the breaker is open again.
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Skipped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_isolates_a_hung_master_and_closes_after_it_resumes() {
    if !require_redis("breaker_isolates_a_hung_master_and_closes_after_it_resumes") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let clock = Arc::new(ManualClock::default());
    let cache = breaker_cache(cluster.url(), clock.clone());
    assert!(cache.connect().await);
    // One key on the master we hang, one on another master.
    let hung_id = id(1);
    let hung = cluster.master_of(&entry_key(&hung_id)).unwrap();
    let other_id = (2..200)
        .map(id)
        .find(|i| cluster.master_of(&entry_key(i)).unwrap() != hung)
        .unwrap();
    cache.set(&other_id, Bytes::from_static(b"ok")).await;
    cluster.hang(hung).unwrap();
    for _ in 0..5 {
        assert_eq!(cache.get_with_outcome(&hung_id).await.1, GetOutcome::Error);
    }
    // Skipped: no request reached the stopped master, so nothing waited on it.
    assert_eq!(
        cache.get_with_outcome(&hung_id).await.1,
        GetOutcome::Skipped
    );
    // The healthy master is unaffected.
    assert_eq!(cache.get(&other_id).await.as_deref(), Some(&b"ok"[..]));
    assert_eq!(
        cache.breaker_state(&other_id),
        mmcache_shared_cache::BreakerState::Closed
    );
    cluster.resume(hung).unwrap();
    clock.advance(Duration::from_secs(1));
    // Bounded: the probe may still meet the tail of the hang.
    let mut closed = false;
    for _ in 0..20 {
        if cache.get_with_outcome(&hung_id).await.1 == GetOutcome::Miss {
            closed = true;
            break;
        }
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed, "the breaker closes once the master answers");
    assert_eq!(
        cache.breaker_state(&hung_id),
        mmcache_shared_cache::BreakerState::Closed
    );
}

#[tokio::test]
async fn a_lease_is_released_only_by_its_holder() {
    if !require_redis("a_lease_is_released_only_by_its_holder") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let cache = cache(cluster.url());
    let ident = id(7);
    let key = mmcache_shared_cache::lease_key(&ident);
    let ttl = Duration::from_secs(30);
    let mmcache_shared_cache::LeaseOutcome::Won(first) = cache.try_lease(&ident, ttl).await else {
        panic!("the first lease is won");
    };
    assert_eq!(
        cache.try_lease(&ident, ttl).await,
        mmcache_shared_cache::LeaseOutcome::Held
    );
    // The first holder's fill outlived its lease; the next holder took it.
    cluster.set_raw(&key, b"next-holder", Some(30)).unwrap();
    cache.release_lease(&ident, first).await;
    assert_eq!(
        cluster.get_raw(&key).unwrap().as_deref(),
        Some(&b"next-holder"[..]),
        "a stale holder must not delete the next holder's lease"
    );
    // Its own lease, it releases.
    cluster.cli_cluster(&["DEL", &key]).unwrap();
    let mmcache_shared_cache::LeaseOutcome::Won(second) = cache.try_lease(&ident, ttl).await else {
        panic!("free again");
    };
    cache.release_lease(&ident, second).await;
    assert_eq!(cluster.get_raw(&key).unwrap(), None);
}

#[tokio::test]
async fn a_lease_is_renewed_and_abandoned_only_by_its_holder_and_values_deleted_only_as_read() {
    use mmcache_shared_cache::{LEASE_NOT_STORED, LeaseHolder, LeaseOutcome};
    if !require_redis("renewed_and_abandoned_only_by_its_holder") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let cache = cache(cluster.url());
    let key = "mmcache:emb:v1:{renew}:lease";
    let LeaseOutcome::Won(token) = cache.try_lease_key(key, Duration::from_secs(2)).await else {
        panic!("the first lease is won");
    };
    assert!(matches!(
        cache.lease_holder(key).await,
        LeaseHolder::Token(_)
    ));
    // Renewed past its first TTL: still held, by this holder.
    assert_eq!(
        cache
            .renew_lease_key(key, token, Duration::from_secs(60))
            .await,
        Some(true)
    );
    let pttl: i64 = cluster
        .cli_cluster(&["PTTL", key])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pttl > 2_000, "renewed to 60 s: {pttl} ms left");
    // Another token neither renews nor abandons it.
    assert_eq!(
        cache
            .renew_lease_key(key, token ^ 1, Duration::from_secs(1))
            .await,
        Some(false)
    );
    cache
        .abandon_lease_key(key, token ^ 1, Duration::from_secs(5))
        .await;
    assert!(matches!(
        cache.lease_holder(key).await,
        LeaseHolder::Token(_)
    ));
    // Its holder abandons it: the marker, which nobody takes as a lease while it lives.
    cache
        .abandon_lease_key(key, token, Duration::from_secs(5))
        .await;
    assert_eq!(cache.lease_holder(key).await, LeaseHolder::NotStored);
    assert_eq!(
        cluster.get_raw(key).unwrap().as_deref(),
        Some(LEASE_NOT_STORED.as_bytes())
    );
    assert_eq!(
        cache.try_lease_key(key, Duration::from_secs(2)).await,
        LeaseOutcome::Held
    );
    assert_eq!(
        cache
            .renew_lease_key(key, token, Duration::from_secs(1))
            .await,
        Some(false),
        "the marker is nobody's lease"
    );
    cluster.cli_cluster(&["DEL", key]).unwrap();
    assert_eq!(cache.lease_holder(key).await, LeaseHolder::Free);

    // Compare-and-delete: a value replaced since it was read survives; the value read goes.
    let value = "mmcache:emb:v1:{cad}";
    cluster.set_raw(value, b"bad value", None).unwrap();
    let read = cache.get_key(value, 1 << 20).await.0.expect("value");
    cluster.set_raw(value, b"good value", None).unwrap();
    cache.compare_and_delete_key(value, &read).await;
    assert_eq!(
        cluster.get_raw(value).unwrap().as_deref(),
        Some(&b"good value"[..]),
        "a value stored after the read must survive the reader's delete"
    );
    let read = cache.get_key(value, 1 << 20).await.0.expect("value");
    cache.compare_and_delete_key(value, &read).await;
    assert_eq!(cluster.get_raw(value).unwrap(), None);
}

#[tokio::test]
async fn write_room_is_bounded_by_half_the_queue() {
    // The other half is the image writes': large values on their way never fill it.
    let mut c = SharedCacheConfig::new("redis://127.0.0.1:1");
    c.write_behind.max_queued = 4;
    c.write_behind.max_queued_bytes = 200;
    let cache = SharedCache::new(c).unwrap();
    assert!(cache.reserve_write(101).is_none(), "over half the bytes");
    let a = cache.reserve_write(60).expect("room");
    assert!(cache.reserve_write(60).is_none(), "bytes bound");
    let b = cache.reserve_write(10).expect("room");
    assert!(cache.reserve_write(1).is_none(), "entries bound");
    drop((a, b));
    assert!(cache.reserve_write(100).is_some(), "room again");
}

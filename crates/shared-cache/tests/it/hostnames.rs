//! Nodes that announce hostnames (`cluster-announce-hostname`, `cluster-preferred-endpoint-type
//! hostname`), as deploy/kubernetes/redis-cluster.yaml configures them: the client reaches them
//! by name, and when every node comes back at a new address under the same name (a StatefulSet's
//! pods rescheduled), it recovers through the names without a rebuild by the caller.
//!
//! The names are Kubernetes-shaped (`<pod>.<service>.<namespace>.svc.cluster.local`) and are
//! answered by a real name server on loopback, which the system resolver asks in a private
//! mount namespace (`TestDns::isolated`; root only, so under CI it must run).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::{SharedCache, SharedCacheConfig, WriteOutcome};
use mmcache_test_support::dns::TestDns;
use mmcache_test_support::forward::Forwarder;
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

const NAMESPACE: &str = "mmcache-test";

fn node_name(i: usize) -> String {
    format!("image-cache-{i}.image-cache-nodes.{NAMESPACE}.svc.cluster.local")
}

fn id(n: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://example.com/named-{n}.png"))
}

/// Writes and reads back keys `from..from + 30` (spread over every master); the first that
/// fails, or `None`.
async fn round_trips(cache: &SharedCache, from: usize) -> Option<usize> {
    for n in from..from + 30 {
        let value = Bytes::from(format!("value-{n}"));
        if cache.set(&id(n), value.clone()).await != WriteOutcome::Success
            || cache.get(&id(n)).await != Some(value)
        {
            return Some(n);
        }
    }
    None
}

#[test]
fn nodes_announced_by_hostname_are_found_again_after_they_all_moved() {
    const TEST: &str =
        "hostnames::nodes_announced_by_hostname_are_found_again_after_they_all_moved";
    if !require_redis(TEST) {
        return;
    }
    let Some(dns) = TestDns::isolated(TEST) else {
        return;
    };
    let ips: Vec<Ipv4Addr> = (51..=53).map(|d| Ipv4Addr::new(127, 0, 0, d)).collect();
    let moved: Vec<Ipv4Addr> = (61..=63).map(|d| Ipv4Addr::new(127, 0, 0, d)).collect();
    let names: Vec<String> = (0..3).map(node_name).collect();
    for (name, ip) in names.iter().zip(&ips) {
        dns.set_a(name, *ip);
    }
    let mut cluster = RedisCluster::start(ClusterOptions {
        ips: ips.clone(),
        hostnames: names.clone(),
        ..Default::default()
    })
    .unwrap();
    // The nodes really announce names: CLUSTER SLOTS gives them as the endpoints.
    let slots = cluster.cli(0, &["CLUSTER", "SLOTS"]).unwrap();
    for name in &names {
        assert!(
            slots.contains(name.as_str()),
            "{name} not in CLUSTER SLOTS:\n{slots}"
        );
    }
    // The discovery endpoint: a Service name in front of a stable forwarder.
    let service = format!("image-cache.{NAMESPACE}.svc.cluster.local");
    let endpoint = Forwarder::start(
        Ipv4Addr::new(127, 0, 0, 50).into(),
        Some(cluster.nodes[0].addr()),
    )
    .unwrap();
    dns.set_a(&service, Ipv4Addr::new(127, 0, 0, 50));
    let url = format!("redis://{service}:{}", endpoint.addr().port());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The default settings, as workers run them.
        let cache = SharedCache::new(SharedCacheConfig::new(url)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while round_trips(&cache, 0).await.is_some() {
            assert!(
                Instant::now() < deadline,
                "no round trips through the named nodes"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let asked: Vec<usize> = names.iter().map(|n| dns.queries(n)).collect();
        assert!(
            asked.iter().all(|&q| q > 0),
            "the client did not resolve every node's name: {asked:?}"
        );

        // Every pod rescheduled: the same names, new addresses (and ports), nodes.conf kept.
        cluster.kill_all();
        endpoint.set_target(None);
        for (name, ip) in names.iter().zip(&moved) {
            dns.set_a(name, *ip);
        }
        cluster.move_all(&moved).unwrap();
        endpoint.set_target(Some(cluster.nodes[0].addr()));
        let healthy = Instant::now();
        let deadline = healthy + Duration::from_secs(15);
        let mut failing = round_trips(&cache, 100).await;
        while failing.is_some() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            failing = round_trips(&cache, 100).await;
        }
        assert_eq!(
            failing, None,
            "no recovery within 15 s of the cluster being healthy at its new addresses"
        );
        eprintln!(
            "recovered {:?} after the cluster was healthy at new addresses",
            healthy.elapsed()
        );
        // Nothing listens at the old addresses: the hits came through the names again.
        for (i, name) in names.iter().enumerate() {
            assert!(
                dns.queries(name) > asked[i],
                "{name} was not resolved again after the move"
            );
        }
    });
}

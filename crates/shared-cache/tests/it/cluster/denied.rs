//! Permission denials on real nodes, Redis and Valkey (`MMCACHE_TEST_SERVER`): each kind of
//! refusal (a command, a key pattern, a script's call, the credentials, discovery) is
//! classified, named without a key, held back for the cool-down and probed again after it.

use mmcache_shared_cache::{DENIED_COOLDOWN, Denial, LeaseOutcome, Refused, lease_key};
use mmcache_test_support::redis::acl_recipe;

use super::*;

const IMAGES: &str = "dynamo:mm:image:";
const EMBEDDINGS: &str = "mmcache:emb:v1:";

fn one_master() -> RedisCluster {
    RedisCluster::start(ClusterOptions {
        masters: 1,
        ..ClusterOptions::default()
    })
    .unwrap()
}

/// A cache as the user `rules` make (the recipe's password), on a clock the test moves.
fn as_user(cluster: &RedisCluster, rules: &[&str], clock: &Arc<ManualClock>) -> SharedCache {
    let recipe = acl_recipe();
    cluster.set_user(&recipe.user, rules).unwrap();
    let mut c = SharedCacheConfig::new(cluster.url_as(&recipe.user, &recipe.password));
    c.set_clock(clock.clone());
    SharedCache::new(c).unwrap()
}

fn denial(
    command: &str,
    prefix: Option<&str>,
    refused: Refused,
) -> Vec<(String, Option<String>, Refused)> {
    vec![(command.to_owned(), prefix.map(str::to_owned), refused)]
}

fn seen(cache: &SharedCache) -> Vec<(String, Option<String>, Refused)> {
    cache
        .denials()
        .into_iter()
        .map(
            |Denial {
                 command,
                 key_prefix,
                 refused,
                 ..
             }| (command, key_prefix, refused),
        )
        .collect()
}

#[tokio::test]
async fn a_denied_command_is_skipped_for_the_cooldown_then_probed() {
    if !require_redis("a_denied_command_is_skipped_for_the_cooldown_then_probed") {
        return;
    }
    let cluster = one_master();
    let clock = Arc::new(ManualClock::default());
    let recipe = acl_recipe();
    let cache = as_user(&cluster, &recipe.without("+strlen"), &clock);
    for _ in 0..5 {
        assert_eq!(cache.get_with_outcome(&id(1)).await.0, None);
    }
    assert_eq!(
        seen(&cache),
        denial("STRLEN", Some(IMAGES), Refused::Command)
    );
    let s = cache.stats();
    assert_eq!((s.denied, s.denied_skips, s.get_errors), (1, 4, 1), "{s:?}");
    assert_eq!(cluster.acl_denied("command", "strlen").unwrap(), 1);
    // Other commands, and the same command on other key spaces, still go.
    assert_eq!(
        cache.set(&id(1), Bytes::from_static(b"v")).await,
        WriteOutcome::Success
    );
    let emb = format!("{EMBEDDINGS}{{k}}");
    assert_eq!(cache.get_key(&emb, 64).await.1, GetOutcome::Error);
    assert_eq!(cluster.acl_denied("command", "strlen").unwrap(), 2);
    // After the cool-down one read probes (denied again); the fixed ACL is found by the next.
    clock.advance(DENIED_COOLDOWN);
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
    assert_eq!(cluster.acl_denied("command", "strlen").unwrap(), 3);
    cluster.set_user(&recipe.user, &recipe.rules()).unwrap();
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Skipped);
    clock.advance(DENIED_COOLDOWN);
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"v"[..]));
    // The embeddings' key space is probed by its own next read.
    assert_eq!(
        seen(&cache),
        denial("STRLEN", Some(EMBEDDINGS), Refused::Command)
    );
    assert_eq!(cache.get_key(&emb, 64).await.1, GetOutcome::Miss);
    assert!(cache.denials().is_empty());
    // The node's breaker never opened: a denial is an answer from a healthy node.
    assert_eq!(cache.stats().breaker_opens, 0);
}

#[tokio::test]
async fn a_key_pattern_and_a_script_call_are_denials_too() {
    if !require_redis("a_key_pattern_and_a_script_call_are_denials_too") {
        return;
    }
    let cluster = one_master();
    let clock = Arc::new(ManualClock::default());
    // The old recipe's key pattern: image keys only.
    let cache = as_user(
        &cluster,
        &["reset", "on", ">CHANGE-ME", "~dynamo:mm:*", "+@all"],
        &clock,
    );
    let emb = format!("{EMBEDDINGS}{{k}}");
    assert_eq!(cache.get_key(&emb, 64).await.1, GetOutcome::Error);
    assert_eq!(
        seen(&cache),
        denial("STRLEN", Some(EMBEDDINGS), Refused::Key)
    );
    assert_eq!(
        cache.get_with_outcome(&id(1)).await.1,
        GetOutcome::Miss,
        "images still read"
    );

    // A lease's release calls GET in its script: refused by Redis 7.0 with ERR (unnamed, so
    // the EVAL is named), by Valkey with the command's name.
    let clock = Arc::new(ManualClock::default());
    let recipe = acl_recipe();
    let cache = as_user(&cluster, &recipe.without("+get"), &clock);
    let LeaseOutcome::Won(token) = cache.try_lease(&id(2), Duration::from_secs(30)).await else {
        panic!("the lease is SET NX, which the user may send");
    };
    cache.release_lease(&id(2), token).await;
    let got = seen(&cache);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(matches!(got[0].0.as_str(), "EVAL" | "GET"), "{got:?}");
    assert_eq!(
        (got[0].1.as_deref(), got[0].2),
        (Some(IMAGES), Refused::Command)
    );
    assert!(
        cluster.get_raw(&lease_key(&id(2))).unwrap().is_some(),
        "left to its TTL"
    );
    assert_eq!(cache.stats().denied, 1);
}

#[tokio::test]
async fn refused_credentials_and_discovery_hold_back_every_operation() {
    if !require_redis("refused_credentials_and_discovery_hold_back_every_operation") {
        return;
    }
    let cluster = one_master();
    let recipe = acl_recipe();
    cluster.set_user(&recipe.user, &recipe.rules()).unwrap();
    let wrong = cluster.url_as(&recipe.user, "not-the-password");
    // NOAUTH: the default user wants a password the URL lacks.
    let noauth_cluster = RedisCluster::start(ClusterOptions {
        masters: 1,
        password: Some("pw".into()),
        ..ClusterOptions::default()
    })
    .unwrap();
    let bare = format!("redis://{}", noauth_cluster.nodes[0].addr());
    for (url, command, refused) in [
        (wrong, "AUTH", Refused::Credentials),
        (bare, "AUTH", Refused::Credentials),
    ] {
        let clock = Arc::new(ManualClock::default());
        let mut c = SharedCacheConfig::new(url);
        c.set_clock(clock.clone());
        let cache = SharedCache::new(c).unwrap();
        // The first GET waits for the connect, which is denied; then nothing tries one.
        assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
        for _ in 0..2 {
            assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Skipped);
        }
        for _ in 0..3 {
            assert_eq!(
                cache.set(&id(1), Bytes::from_static(b"v")).await,
                WriteOutcome::Skipped
            );
        }
        assert_eq!(seen(&cache), denial(command, None, refused));
        let s = cache.stats();
        assert_eq!((s.denied, s.denied_skips), (1, 5), "{s:?}");
        clock.advance(DENIED_COOLDOWN);
        assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
        assert_eq!(cache.stats().denied, 2, "probed again after the cool-down");
    }
    // Discovery's CLUSTER SLOTS refused: nothing can be routed.
    let clock = Arc::new(ManualClock::default());
    let cache = as_user(&cluster, &recipe.without("+cluster|slots"), &clock);
    assert_eq!(cache.get_with_outcome(&id(1)).await.1, GetOutcome::Error);
    assert_eq!(
        seen(&cache),
        denial("CLUSTER SLOTS", None, Refused::Command)
    );
    assert!(!cache.connect().await);
}

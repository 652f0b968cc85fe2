//! The hedge against a slow master, with the default settings, on a real Redis Cluster and a
//! real HTTP origin: a slow master's GETs answer late and all at once, and that burst must not
//! lift the hedge delay to the cap for everyone; a spent hedge budget must not make a load
//! wait for the whole GET.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mmcache_loader::{HedgeSettings, Loader, Source};
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::entry_key;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

fn key_for(url: &str) -> String {
    entry_key(&CacheIdentity::unscoped(url))
}

fn defaults(cluster: &RedisCluster) -> Loader {
    Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .decoded_cache_entries(Some(0)) // every load asks the shared cache
        .build()
        .unwrap()
}

/// `n` URLs served by `origin` and cached in the shared cache.
async fn cached_urls(origin: &TestOrigin, cluster: &RedisCluster, n: usize) -> Vec<String> {
    let urls: Vec<String> = (0..n)
        .map(|i| {
            let path = format!("/h-{i}.png");
            origin.set(&path, Route::ok(images::png(16, 16, i as u32)));
            origin.url(&path)
        })
        .collect();
    let filler = defaults(cluster);
    for u in &urls {
        filler.load(u, None).await.unwrap();
    }
    assert!(filler.shutdown(Duration::from_secs(10)).await);
    urls
}

/// One master of three stops for 1.5 s while 16 loads at a time go to every master; its
/// GETs (a third of all) then answer together. The delay must stay with the healthy
/// majority: near the floor, never the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_late_answers_does_not_lift_the_delay_to_the_cap() {
    if !require_redis("a_burst_of_late_answers_does_not_lift_the_delay_to_the_cap") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let origin = TestOrigin::start();
    let urls = Arc::new(cached_urls(&origin, &cluster, 48).await);
    let slow = 1;
    let loader = defaults(&cluster);
    for u in urls.iter() {
        loader.load(u, None).await.unwrap(); // past the warm-up
    }
    let floor = HedgeSettings::default().min_delay;
    let stop = Arc::new(AtomicBool::new(false));
    let max_delay_us = Arc::new(AtomicU64::new(0));
    // Watches the delay the whole time (bounded by the flag and a count).
    let watch = tokio::spawn({
        let (loader, stop, max) = (loader.clone(), stop.clone(), max_delay_us.clone());
        async move {
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let d = loader.hedge_stats().delay.as_micros() as u64;
                max.fetch_max(d, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    let mut workers = Vec::new();
    for w in 0..16 {
        let (loader, urls, stop) = (loader.clone(), urls.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            for i in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let u = &urls[(w * 7 + i) % urls.len()];
                let t = Instant::now();
                loader.load(u, None).await.unwrap();
                slowest = slowest.max(t.elapsed());
            }
            slowest
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..2 {
        cluster.hang(slow).unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cluster.resume(slow).unwrap();
        // The late answers land now; give the delay time to follow them (or not).
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut slowest = Duration::ZERO;
    for w in workers {
        slowest = slowest.max(w.await.unwrap());
    }
    watch.await.unwrap();
    let max_delay = Duration::from_micros(max_delay_us.load(Ordering::Relaxed));
    let stats = loader.hedge_stats();
    eprintln!("max delay {max_delay:?}, slowest load {slowest:?}, {stats:?}");
    assert!(
        stats.hedged > 0,
        "loads on the stopped master hedged: {stats:?}"
    );
    assert!(
        max_delay <= floor * 4,
        "the hedge delay reached {max_delay:?} (floor {floor:?}): a burst of late answers \
         made every load to the slow master wait it; {stats:?}"
    );
}

/// A master hangs and many loads of its keys start at once, more than the hedge budget's
/// burst: no load waits the whole GET (the 2.1 s operation deadline); the ones past the
/// budget wait at most the cap, then go to the origin all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_hedge_budget_costs_at_most_the_cap() {
    if !require_redis("a_spent_hedge_budget_costs_at_most_the_cap") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let origin = TestOrigin::start();
    let hung = 1;
    let all = cached_urls(&origin, &cluster, 600).await;
    let on_hung: Vec<String> = all
        .iter()
        .filter(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .take(150)
        .cloned()
        .collect();
    assert!(
        on_hung.len() >= 120,
        "{} keys on master {hung}",
        on_hung.len()
    );
    let loader = defaults(&cluster);
    for u in &all[..32] {
        loader.load(u, None).await.unwrap(); // past the warm-up
    }
    cluster.hang(hung).unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for u in on_hung {
        let loader = loader.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let loaded = loader.load_detailed(&u, None).await.unwrap();
            (loaded.source, t.elapsed())
        }));
    }
    let mut slowest = Duration::ZERO;
    for t in tasks {
        let (source, took) = t.await.unwrap();
        assert_eq!(source, Source::Origin);
        slowest = slowest.max(took);
    }
    let all_done = started.elapsed();
    cluster.resume(hung).unwrap();
    let stats = loader.hedge_stats();
    eprintln!("slowest {slowest:?}, all done in {all_done:?}, {stats:?}");
    assert!(
        stats.over_budget > 0,
        "the burst spent the budget: {stats:?}"
    );
    let deadline = loader.config().shared.io_timeout;
    // A hang bound, generous for a loaded machine: well before the GET's own timeout.
    assert!(
        slowest < deadline / 2,
        "a load past the budget took {slowest:?}: it waited for the GET's timeout"
    );
}

/// Stops and resumes master `i` in a cycle (`stopped` of every `period`) until `stop` is
/// set; bounded by a cycle count as well.
fn cycle(
    pid: Option<u32>,
    stopped: Duration,
    period: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Some(pid) = pid else { return };
        let kill = |sig: &str| {
            let _ = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status();
        };
        for _ in 0..2_000 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            kill("-STOP");
            std::thread::sleep(stopped);
            kill("-CONT");
            std::thread::sleep(period.saturating_sub(stopped));
        }
        kill("-CONT");
    })
}

/// A saturated machine: every GET is slower (the healthy masters answer within ~20 ms, a
/// median around 10 ms) while one master answers after up to 300 ms. 8 x the median would put
/// the delay near 100 ms, and every load to the slow master would wait it: while only a
/// minority of GETs is late, the delay stays within 4 x the floor (the cap is for a cluster
/// slow as a whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_minority_keeps_the_delay_within_four_floors_on_a_slow_machine() {
    if !require_redis("a_slow_minority_keeps_the_delay_within_four_floors_on_a_slow_machine") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let origin = TestOrigin::start();
    let urls = Arc::new(cached_urls(&origin, &cluster, 48).await);
    let loader = defaults(&cluster);
    for u in urls.iter() {
        loader.load(u, None).await.unwrap(); // past the warm-up
    }
    let floor = HedgeSettings::default().min_delay;
    let stop = Arc::new(AtomicBool::new(false));
    let ms = Duration::from_millis;
    let cyclers = vec![
        cycle(cluster.nodes[0].pid(), ms(300), ms(320), stop.clone()),
        cycle(cluster.nodes[1].pid(), ms(20), ms(25), stop.clone()),
        cycle(cluster.nodes[2].pid(), ms(20), ms(25), stop.clone()),
    ];
    let max_delay_us = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    // 8 loads at a time: enough to keep every master busy, not so many that this test's own
    // runtime (a debug build on 2 cores) makes every GET late.
    for w in 0..8 {
        let (loader, urls, stop, max) = (
            loader.clone(),
            urls.clone(),
            stop.clone(),
            max_delay_us.clone(),
        );
        workers.push(tokio::spawn(async move {
            for i in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let u = &urls[(w * 7 + i) % urls.len()];
                loader.load(u, None).await.unwrap();
                let d = loader.hedge_stats().delay.as_micros() as u64;
                max.fetch_max(d, Ordering::Relaxed);
            }
        }));
    }
    // Long enough for several recomputes of the delay (one every 32 GETs) at this pace.
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    for c in cyclers {
        c.join().unwrap();
    }
    let max_delay = Duration::from_micros(max_delay_us.load(Ordering::Relaxed));
    let stats = loader.hedge_stats();
    eprintln!("max delay {max_delay:?}, {stats:?}");
    assert!(
        stats.answered_gets > 200,
        "enough GETs to move the delay: {stats:?}"
    );
    assert!(
        max_delay <= floor * 4,
        "the hedge delay reached {max_delay:?} (floor {floor:?}) while a minority of GETs was \
         late: every load to the slow master waited it; {stats:?}"
    );
}

/// What 8 lanes of loads over `urls` saw during `window`: loads, and loads of keys on master
/// `watched` (bounded by the window and a count per lane).
async fn run_lanes(
    loader: &Loader,
    urls: &Arc<Vec<String>>,
    on_watched: &Arc<Vec<bool>>,
    window: Duration,
) -> (u64, u64) {
    let mut lanes = Vec::new();
    for w in 0..8 {
        let (loader, urls, on_watched) = (loader.clone(), urls.clone(), on_watched.clone());
        lanes.push(tokio::spawn(async move {
            let (started, mut loads, mut watched) = (Instant::now(), 0, 0);
            for i in 0..100_000 {
                if started.elapsed() >= window {
                    break;
                }
                let at = (w * 7 + i) % urls.len();
                loader.load(&urls[at], None).await.unwrap();
                loads += 1;
                watched += u64::from(on_watched[at]);
            }
            (loads, watched)
        }));
    }
    let mut total = (0, 0);
    for l in lanes {
        let (loads, watched) = l.await.unwrap();
        total = (total.0 + loads, total.1 + watched);
    }
    total
}

/// One master of three answers after up to 300 ms (SIGSTOP 300 ms, SIGCONT 20 ms, repeated),
/// with the default settings: its keys go straight to the origin once most of its GETs were
/// late, instead of each waiting the hedge delay; background probes bring it back once it is
/// healthy. A healthy cluster routes nothing around.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slower_than_the_delay_is_routed_around_until_it_recovers() {
    if !require_redis("a_node_slower_than_the_delay_is_routed_around_until_it_recovers") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let origin = TestOrigin::start();
    let urls = Arc::new(cached_urls(&origin, &cluster, 96).await);
    let slow = 0;
    let on_slow: Arc<Vec<bool>> = Arc::new(
        urls.iter()
            .map(|u| cluster.master_of(&key_for(u)).unwrap() == slow)
            .collect(),
    );
    let loader = defaults(&cluster);
    for u in urls.iter() {
        loader.load(u, None).await.unwrap(); // past the warm-up
    }
    // Healthy: nothing is routed around.
    let (loads, _) = run_lanes(&loader, &urls, &on_slow, Duration::from_secs(1)).await;
    let healthy = loader.hedge_stats();
    assert!(loads > 100, "{loads} loads");
    assert_eq!(
        (healthy.routed_around, healthy.slow_nodes),
        (0, 0),
        "a healthy cluster routed loads around: {healthy:?}"
    );
    // Slow: most loads of its keys skip its GET.
    let stop = Arc::new(AtomicBool::new(false));
    let ms = Duration::from_millis;
    let cycler = cycle(cluster.nodes[slow].pid(), ms(300), ms(320), stop.clone());
    let (loads, on_sick) = run_lanes(&loader, &urls, &on_slow, Duration::from_secs(3)).await;
    let sick = loader.hedge_stats();
    // A routed key whose origin fails is still served, from the slow master itself.
    let i = on_slow.iter().position(|on| *on).unwrap();
    origin.set(&format!("/h-{i}.png"), Route::status(503));
    let served = loader.load_detailed(&urls[i], None).await;
    origin.set(
        &format!("/h-{i}.png"),
        Route::ok(images::png(16, 16, i as u32)),
    );
    let routed_once = loader.hedge_stats().routed_around - sick.routed_around;
    stop.store(true, Ordering::Relaxed);
    cycler.join().unwrap();
    eprintln!("slow: {loads} loads, {on_sick} on the slow master; {sick:?}");
    assert_eq!(
        sick.slow_nodes, 1,
        "the slow master is routed around: {sick:?}"
    );
    assert_eq!(
        (served.unwrap().source, routed_once),
        (Source::Shared, 1),
        "a routed load whose origin failed"
    );
    // Without the routing most of them wait the delay, then hedge (a load that joins one in
    // flight neither hedges nor is routed).
    let waited = sick.hedged + sick.over_budget;
    assert!(
        sick.routed_around > 0 && waited * 10 < on_sick,
        "{waited} of {on_sick} loads on the slow master's keys waited the hedge delay: {sick:?}"
    );
    // Healthy again: the probes bring it back within a few probe intervals (bounded here by
    // 100 rounds of 50 ms), and then its keys use it again.
    for _ in 0..100 {
        if loader.hedge_stats().slow_nodes == 0 {
            break;
        }
        run_lanes(&loader, &urls, &on_slow, ms(50)).await;
    }
    let back = loader.hedge_stats();
    assert_eq!(back.slow_nodes, 0, "the master never came back: {back:?}");
    let (loads, _) = run_lanes(&loader, &urls, &on_slow, Duration::from_secs(1)).await;
    let after = loader.hedge_stats();
    eprintln!("recovered: {loads} loads; {after:?}");
    assert!(
        after.routed_around - back.routed_around < loads / 20,
        "loads still routed around after the master recovered: {after:?}"
    );
    // Its keys are shared hits again.
    let mut from_it = 0;
    for (u, _) in urls.iter().zip(on_slow.iter()).filter(|(_, on)| **on) {
        let loaded = loader.load_detailed(u, None).await.unwrap();
        from_it += usize::from(loaded.source == Source::Shared);
    }
    let on_it = on_slow.iter().filter(|on| **on).count();
    assert!(from_it * 2 > on_it, "{from_it} of {on_it} shared hits");
}

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

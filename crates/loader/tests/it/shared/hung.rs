//! A master that hangs or is slow: what it costs a load (timeouts, hedged GETs), with the test
//! timeouts and with the defaults.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_costs_at_most_the_timeouts() {
    if !require_redis("a_hung_master_costs_at_most_the_timeouts") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    origin.set("/h.png", Route::ok(images::png(8, 8, 1)));
    let url = origin.url("/h.png");
    let loader = worker(&cluster.url()).build().unwrap();
    assert!(loader.shared_cache().unwrap().connect().await);
    let master = cluster.master_of(&key_for(&url)).unwrap();
    cluster.hang(master).unwrap();
    let started = std::time::Instant::now();
    let loaded = loader.load_detailed(&url, None).await;
    let took = started.elapsed();
    cluster.resume(master).unwrap();
    assert_eq!(loaded.unwrap().source, Source::Origin);
    // GET and SET each bounded by connect + I/O timeouts (0.8 s); plus a margin.
    assert!(took < Duration::from_millis(2 * 800 + 700), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_default_timeouts_a_hung_master_is_hedged_not_waited_for() {
    if !require_redis("with_default_timeouts_a_hung_master_is_hedged_not_waited_for") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    // The defaults users run: 0.1 s connect, 2.0 s I/O, hedging on.
    let defaults = || {
        Loader::builder()
            .allow_internal(true)
            .shared_cache_url(cluster.url())
    };
    let urls: Vec<String> = (0..12)
        .map(|i| {
            let path = format!("/hedge-{i}.png");
            origin.set(&path, Route::ok(images::png(16, 16, i)));
            origin.url(&path)
        })
        .collect();
    let filler = defaults().build().unwrap();
    for url in &urls {
        filler.load(url, None).await.unwrap();
    }
    let hung = cluster.master_of(&key_for(&urls[0])).unwrap();
    let on_hung: Vec<&String> = urls
        .iter()
        .filter(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .collect();
    // Nothing kept in memory, so every load asks the shared cache; two rounds of loads teach
    // the loader what a healthy GET costs (it hedges only once it knows).
    let loader = defaults().decoded_cache_entries(Some(0)).build().unwrap();
    for _ in 0..2 {
        for url in &urls {
            loader.load(url, None).await.unwrap();
        }
    }
    assert!(loader.hedge_stats().answered_gets >= 16);
    cluster.hang(hung).unwrap();
    let io_timeout = loader.config().shared.io_timeout;
    let mut tasks = Vec::new();
    for url in &urls {
        let (loader, url) = (loader.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let loaded = loader.load_detailed(&url, None).await;
            (url, loaded, started.elapsed())
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    // A URL whose SET hangs too: the load returns, the write goes on in the background.
    let fresh = (0..256)
        .map(|i| origin.url(&format!("/hedge-fresh-{i}.png")))
        .find(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .expect("a key on every master among 256");
    let path = fresh.rsplit_once('/').unwrap().1;
    origin.set(&format!("/{path}"), Route::ok(images::png(16, 16, 99)));
    let fresh_loaded = loader.load_detailed(&fresh, None).await;
    cluster.resume(hung).unwrap();
    for (url, loaded, took) in results {
        let loaded = loaded.unwrap();
        let expected = if on_hung.contains(&&url) {
            Source::Origin
        } else {
            Source::Shared
        };
        assert_eq!(loaded.source, expected, "{url}");
        // Nobody waited for the GET timeout: the hedge answered from the origin.
        assert!(took < io_timeout, "{url} took {took:?}");
    }
    assert!(!on_hung.is_empty());
    assert_eq!(fresh_loaded.unwrap().source, Source::Origin);
    let stats = loader.shared_cache().unwrap().stats();
    assert!(stats.set_backgrounded >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_a_master_hangs_hedges_its_first_loads() {
    if !require_redis("a_worker_started_while_a_master_hangs_hedges_its_first_loads") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    // Master 1 hangs (node 0 is the discovery URL: the new worker still learns the slot map).
    let hung = 1;
    let urls: Vec<String> = (0..256)
        .map(|i| origin.url(&format!("/cold-{i}.png")))
        .filter(|u| cluster.master_of(&key_for(u)).unwrap() == hung)
        .take(8)
        .collect();
    assert_eq!(urls.len(), 8, "8 keys on master {hung} among 256");
    for (i, url) in urls.iter().enumerate() {
        let path = url.rsplit_once('/').unwrap().1;
        origin.set(&format!("/{path}"), Route::ok(images::png(8, 8, i as u32)));
    }
    let filler = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    for url in &urls {
        filler.load(url, None).await.unwrap();
    }
    // Every entry written (a SET may have gone on in the background).
    assert!(filler.shutdown(Duration::from_secs(5)).await);
    // A worker with the default settings has just started: four loads connected it to every
    // master (far fewer GETs than it needs to learn their latency) when master 1 hangs.
    let loader = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    for url in &urls[..4] {
        loader.load_detailed(url, None).await.unwrap();
    }
    // (A warm-up GET slower than the cap on a loaded machine may itself have hedged.)
    let hedged_before = loader.hedge_stats().hedged;
    cluster.hang(hung).unwrap();
    let io_timeout = loader.config().shared.io_timeout;
    let mut tasks = Vec::new();
    for url in &urls[4..] {
        let (loader, url) = (loader.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            (loader.load_detailed(&url, None).await, started.elapsed())
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    cluster.resume(hung).unwrap();
    for (loaded, took) in results {
        assert_eq!(loaded.unwrap().source, Source::Origin);
        // It hedged at the cap instead of waiting for the GET's I/O timeout.
        assert!(took < io_timeout, "took {took:?}");
    }
    assert_eq!(loader.hedge_stats().hedged - hedged_before, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_origin_failure_does_not_beat_a_slow_hit() {
    if !require_redis("a_fast_origin_failure_does_not_beat_a_slow_hit") {
        return;
    }
    let cluster = cluster();
    let origin = TestOrigin::start();
    let warm: Vec<String> = (0..8)
        .map(|i| {
            let path = format!("/warm-{i}.png");
            origin.set(&path, Route::ok(images::png(8, 8, i)));
            origin.url(&path)
        })
        .collect();
    origin.set("/gone.png", Route::ok(images::png(8, 8, 42)));
    let gone = origin.url("/gone.png");
    let loader = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(cluster.url())
        .decoded_cache_entries(Some(0))
        .build()
        .unwrap();
    loader.load(&gone, None).await.unwrap(); // cached in the shared cache
    for _ in 0..2 {
        for url in &warm {
            loader.load(url, None).await.unwrap();
        }
    }
    // The origin now fails at once; the entry's master answers only after 300 ms.
    origin.set("/gone.png", Route::status(503));
    let master = cluster.master_of(&key_for(&gone)).unwrap();
    cluster.hang(master).unwrap();
    let load = tokio::spawn({
        let (loader, gone) = (loader.clone(), gone.clone());
        async move { loader.load_detailed(&gone, None).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.resume(master).unwrap();
    let loaded = load
        .await
        .unwrap()
        .expect("the slow hit wins over the failed origin");
    assert_eq!(loaded.source, Source::Shared);
    assert!(loader.hedge_stats().hedged >= 1, "the load did hedge");
    assert_eq!(origin.hits("/gone.png"), 2);
}

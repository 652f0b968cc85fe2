use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the scripted name server does for a host.
#[derive(Clone, Copy)]
enum Ns {
    Answer,
    Silent,
    Gone,
    Fail,
}

fn scripted(calls: &Arc<AtomicUsize>, ns: &Arc<Mutex<Ns>>) -> Arc<Lookup> {
    let (calls, ns) = (calls.clone(), ns.clone());
    Arc::new(move |host: &str| {
        calls.fetch_add(1, Ordering::Relaxed);
        let mode = if host.starts_with("hole") {
            Ns::Silent
        } else {
            *ns.lock().unwrap()
        };
        Box::pin(async move {
            if matches!(mode, Ns::Answer) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            match mode {
                Ns::Answer => Ok(vec![IpAddr::from([192, 0, 2, 1])]),
                Ns::Silent => std::future::pending().await,
                Ns::Gone => Err(LookupError::NotFound("no such name".into())),
                Ns::Fail => Err(LookupError::Unavailable("SERVFAIL".into())),
            }
        })
    })
}

fn resolver(
    ttl: Duration,
    stale_for: Duration,
    timeout: Duration,
) -> (Resolver, Arc<AtomicUsize>, Arc<Mutex<Ns>>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let ns = Arc::new(Mutex::new(Ns::Answer));
    let r = Resolver::with_lookup(ttl, stale_for, timeout, scripted(&calls, &ns));
    (r, calls, ns)
}

#[tokio::test]
async fn answers_are_cached_and_concurrent_callers_share_one_lookup() {
    let (r, calls, _) = resolver(
        Duration::from_secs(60),
        DEFAULT_DNS_STALE_FOR,
        Duration::from_secs(5),
    );
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let r = r.clone();
            tokio::spawn(async move { r.resolve("Example.COM").await.map(|a| a.len()) })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), 1);
    }
    assert_eq!(r.resolve("example.com").await.unwrap().len(), 1);
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn silent_names_never_delay_other_hosts() {
    // A thousand distinct names whose lookups never end: each caller gets a 408 at the
    // timeout, and a good host resolves at once meanwhile (no pool to exhaust).
    let (r, _, _) = resolver(
        Duration::from_secs(60),
        DEFAULT_DNS_STALE_FOR,
        Duration::from_millis(300),
    );
    let holes: Vec<_> = (0..1000)
        .map(|i| {
            let r = r.clone();
            tokio::spawn(async move { r.resolve(&format!("hole{i}.test")).await })
        })
        .collect();
    tokio::task::yield_now().await;
    let started = Instant::now();
    assert!(r.resolve("good.test").await.is_ok());
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    for h in holes {
        let err = h.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::Timeout), "{err}");
        assert_eq!(err.http_status(), 408);
    }
    // The lookups end at the same timeout as their callers (just after them, at most).
    let deadline = Instant::now() + Duration::from_secs(2);
    while !r.state().inflight.is_empty() {
        assert!(
            Instant::now() < deadline,
            "timed-out lookups are still in flight"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn failures_are_remembered_briefly() {
    let (r, calls, ns) = resolver(
        Duration::from_millis(50),
        DEFAULT_DNS_STALE_FOR,
        Duration::from_secs(5),
    );
    *ns.lock().unwrap() = Ns::Gone;
    for _ in 0..5 {
        assert_eq!(r.resolve("gone.test").await.unwrap_err().http_status(), 400);
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "the failure is remembered"
    );
    *ns.lock().unwrap() = Ns::Answer;
    tokio::time::sleep(NEGATIVE_TTL + Duration::from_millis(50)).await;
    assert!(r.resolve("gone.test").await.is_ok());
}

/// Resolves until it fails (bounded), returning how long the answer kept serving.
async fn served_for(r: &Resolver, host: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    while started.elapsed() < limit {
        if r.resolve(host).await.is_err() {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    limit
}

#[tokio::test]
async fn a_good_answer_outlives_failed_refreshes_within_its_bound() {
    for failing in [Ns::Silent, Ns::Fail] {
        let ttl = Duration::from_millis(100);
        let stale_for = Duration::from_millis(600);
        let (r, calls, ns) = resolver(ttl, stale_for, Duration::from_millis(100));
        assert!(r.resolve("flaky.test").await.is_ok());
        let got_at = Instant::now();
        *ns.lock().unwrap() = failing;
        let served = served_for(&r, "flaky.test", Duration::from_secs(5)).await;
        let age = got_at.elapsed();
        assert!(
            served + Duration::from_millis(50) >= ttl + stale_for,
            "stale answer lost at {served:?}"
        );
        assert!(
            age < ttl + stale_for + Duration::from_millis(400),
            "served past its bound: {age:?}"
        );
        // Refreshes were tried, at most one per NEGATIVE_TTL after a failure (plus the first).
        assert!(
            (2..=3).contains(&calls.load(Ordering::Relaxed)),
            "{}",
            calls.load(Ordering::Relaxed)
        );
    }
}

#[tokio::test]
async fn a_definitive_answer_replaces_a_good_one_at_once() {
    let ttl = Duration::from_millis(100);
    let (r, _, ns) = resolver(ttl, Duration::from_secs(60), Duration::from_secs(1));
    assert!(r.resolve("moved.test").await.is_ok());
    *ns.lock().unwrap() = Ns::Gone;
    let served = served_for(&r, "moved.test", Duration::from_secs(5)).await;
    assert!(
        served < ttl + Duration::from_millis(300),
        "NXDOMAIN ignored for {served:?}"
    );
}

#[tokio::test]
async fn a_full_cache_keeps_good_answers_over_failures() {
    let (r, _, ns) = resolver(
        Duration::from_secs(60),
        DEFAULT_DNS_STALE_FOR,
        Duration::from_secs(1),
    );
    assert!(r.resolve("popular.test").await.is_ok());
    *ns.lock().unwrap() = Ns::Gone;
    for i in 0..MAX_CACHED + 10 {
        let _ = r.resolve(&format!("junk{i}.test")).await;
    }
    assert!(r.state().cache.len() <= MAX_CACHED);
    *ns.lock().unwrap() = Ns::Silent;
    assert!(
        r.resolve("popular.test").await.is_ok(),
        "flushed by junk names"
    );
}

//! Name resolution against a real name server that never answers some names, through the
//! system configuration (`/etc/resolv.conf` in a private mount namespace; see
//! `mmcache_test_support::dns`), with the default DNS settings.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mmcache_origin::{Error, Origin, OriginConfig};
use mmcache_test_support::dns::{Answer, TestDns};
use mmcache_test_support::origin::{Route, TestOrigin};

/// Hole lookups in flight while a good host is fetched (more than the old pool of 8 threads).
const HOLES: usize = 12;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Default settings, except `http` and loopback origins allowed (the test origin).
fn origin() -> Origin {
    let mut c = OriginConfig::default();
    c.allow_internal = true;
    Origin::new(c).expect("client")
}

#[test]
fn a_good_host_resolves_at_once_while_hole_lookups_hang() {
    let Some(dns) = TestDns::isolated("dns::a_good_host_resolves_at_once_while_hole_lookups_hang")
    else {
        return;
    };
    dns.set_a("good.test", Ipv4Addr::LOCALHOST);
    let server = TestOrigin::start();
    server.set("/img", Route::ok(b"image bytes".to_vec()));
    let port = server.addr().port();
    runtime().block_on(async {
        let origin = origin();
        let holes: Vec<_> = (0..HOLES)
            .map(|i| {
                let (origin, url) = (origin.clone(), format!("http://hole{i}.test:{port}/img"));
                tokio::spawn(async move {
                    let started = Instant::now();
                    (origin.fetch(&url).await, started.elapsed())
                })
            })
            .collect();
        // Hole lookups have reached the name server (at least as many as the old pool had
        // threads) before the good host asks.
        dns.wait_for_lookups(
            "hole",
            HOLES,
            8,
            Duration::from_secs(5),
            Duration::from_millis(200),
        )
        .await;

        let started = Instant::now();
        let got = origin.fetch(&format!("http://good.test:{port}/img")).await;
        let took = started.elapsed();
        println!(
            "good host while {HOLES} hole lookups hang: {took:?} ({:?})",
            got.as_ref().map(|f| f.bytes.len())
        );
        let got = got.expect("the good host loads");
        assert_eq!(&got.bytes[..], b"image bytes");
        assert!(
            took < Duration::from_secs(1),
            "the good host waited {took:?}"
        );

        // The holes fail as timeouts, each within about the connect timeout.
        for h in holes {
            let (res, took) = h.await.expect("hole task");
            let err = res.expect_err("a hole never resolves");
            assert!(matches!(err, Error::Timeout), "{err}");
            assert!(took < Duration::from_secs(15), "a hole took {took:?}");
        }
    });
}

#[test]
fn a_good_answer_outlives_a_silent_name_server_at_default_settings() {
    let Some(dns) =
        TestDns::isolated("dns::a_good_answer_outlives_a_silent_name_server_at_default_settings")
    else {
        return;
    };
    dns.set_a("flaky.test", Ipv4Addr::LOCALHOST);
    let server = TestOrigin::start();
    server.set("/img", Route::ok(b"image bytes".to_vec()));
    let url = format!("http://flaky.test:{}/img", server.addr().port());
    runtime().block_on(async {
        let origin = origin();
        origin.fetch(&url).await.expect("first load resolves");
        dns.set("flaky.test", Answer::Silent);
        // Well past the answer's reuse time (5 s), a refresh timeout (5 s) and the time a
        // failure is remembered (2 s): every load still uses the good answer.
        let started = Instant::now();
        for i in 0..20 {
            let t = Instant::now();
            let got = origin.fetch(&url).await;
            assert!(
                got.is_ok(),
                "load {i} at {:?} failed after {:?}: {}",
                started.elapsed(),
                t.elapsed(),
                got.unwrap_err()
            );
            assert!(t.elapsed() < Duration::from_secs(1), "load {i} waited");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(dns.queries("flaky.test") > 1, "refreshes were attempted");
    });
}

/// Fetches `url` every 100 ms until a fetch fails (bounded by `limit`): when that fetch
/// started, since `since`, and its error.
async fn first_failure(
    origin: &Origin,
    url: &str,
    since: Instant,
    limit: Duration,
) -> (Duration, Error) {
    while since.elapsed() < limit {
        let started = since.elapsed();
        if let Err(e) = origin.fetch(url).await {
            return (started, e);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} still loads after {limit:?}");
}

#[test]
fn a_stale_answer_ends_at_its_bound_and_nxdomain_ends_it_at_once() {
    let Some(dns) =
        TestDns::isolated("dns::a_stale_answer_ends_at_its_bound_and_nxdomain_ends_it_at_once")
    else {
        return;
    };
    dns.set_a("flaky.test", Ipv4Addr::LOCALHOST);
    dns.set_a("moved.test", Ipv4Addr::LOCALHOST);
    let server = TestOrigin::start();
    server.set("/img", Route::ok(b"image bytes".to_vec()));
    let port = server.addr().port();
    let (ttl, stale_for) = (Duration::from_millis(500), Duration::from_secs(2));
    runtime().block_on(async {
        let mut c = OriginConfig::default();
        c.allow_internal = true;
        c.dns_cache_ttl = ttl;
        c.dns_stale_for = stale_for;
        let origin = Origin::new(c).expect("client");

        // Silent name server: the good answer serves until TTL + stale bound, then the host
        // fails as a timeout (after the connect timeout, 5 s by default).
        let url = format!("http://flaky.test:{port}/img");
        origin.fetch(&url).await.expect("first load resolves");
        let got_at = Instant::now();
        dns.set("flaky.test", Answer::Silent);
        let (at, err) = first_failure(&origin, &url, got_at, Duration::from_secs(20)).await;
        println!(
            "stale answer served for {at:?} (bound {:?})",
            ttl + stale_for
        );
        assert!(
            at + Duration::from_millis(150) >= ttl + stale_for,
            "stale answer lost at {at:?}"
        );
        assert!(
            at < ttl + stale_for + Duration::from_millis(800),
            "served past its bound: {at:?}"
        );
        assert!(matches!(err, Error::Timeout), "{err}");

        // NXDOMAIN: the name is gone; the next refresh (after the TTL) ends the good answer.
        let url = format!("http://moved.test:{port}/img");
        origin.fetch(&url).await.expect("first load resolves");
        let got_at = Instant::now();
        dns.set("moved.test", Answer::NxDomain);
        let (at, err) = first_failure(&origin, &url, got_at, Duration::from_secs(10)).await;
        println!("NXDOMAIN ended the answer after {at:?}");
        assert!(
            at < ttl + Duration::from_secs(1),
            "NXDOMAIN ignored for {at:?}"
        );
        assert_eq!(err.http_status(), 400, "{err}");
    });
}

/// The harness reads the child's output while it runs: a child that writes more than a pipe
/// holds (64 KiB) finishes instead of blocking on its write until the harness's time limit.
#[test]
fn a_child_test_that_writes_a_lot_still_finishes() {
    let Some(_dns) = TestDns::isolated("dns::a_child_test_that_writes_a_lot_still_finishes") else {
        return;
    };
    let line = "x".repeat(1023);
    for _ in 0..1024 {
        println!("{line}"); // 1 MiB in all
    }
}

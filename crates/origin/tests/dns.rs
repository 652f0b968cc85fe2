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
    let Some(dns) = TestDns::isolated("a_good_host_resolves_at_once_while_hole_lookups_hang")
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
        let deadline = Instant::now() + Duration::from_secs(5);
        while (0..HOLES)
            .filter(|i| dns.queries(&format!("hole{i}.test")) > 0)
            .count()
            < 8
        {
            assert!(Instant::now() < deadline, "hole lookups never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;

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
        TestDns::isolated("a_good_answer_outlives_a_silent_name_server_at_default_settings")
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

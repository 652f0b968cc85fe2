//! The loader's DNS gate (the policy check that precedes the disk and shared tiers) against a
//! real name server that never answers `hole*` names, through the system configuration
//! (`/etc/resolv.conf` in a private mount namespace; see `mmcache_test_support::dns`).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mmcache_loader::{Loader, Source};
use mmcache_test_support::dns::TestDns;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

use crate::common::Dir;

const HOLES: usize = 12;

#[test]
fn a_disk_hit_for_a_good_host_is_served_while_hole_lookups_hang() {
    let Some(dns) =
        TestDns::isolated("dns::a_disk_hit_for_a_good_host_is_served_while_hole_lookups_hang")
    else {
        return;
    };
    dns.set_a("good.test", Ipv4Addr::LOCALHOST);
    let server = TestOrigin::start();
    server.set("/a.png", Route::ok(images::png(16, 16, 3)));
    let port = server.addr().port();
    let dir = Dir(std::env::temp_dir().join(format!("mmcache-dns-disk-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let url = format!("http://good.test:{port}/a.png");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // Defaults, except internal origins and the disk tier.
        let build = || {
            Loader::builder()
                .allow_internal(true)
                .disk_cache_dir(&dir.0)
                .build()
                .expect("loader")
        };
        let first = build().load_detailed(&url, None).await.expect("first load");
        assert_eq!(first.source, Source::Origin);

        // A new worker of the host (empty memory, nothing resolved yet) under hole traffic.
        let loader = build();
        let holes: Vec<_> = (0..HOLES)
            .map(|i| {
                let loader = loader.clone();
                let url = format!("http://hole{i}.test:{port}/a.png");
                tokio::spawn(async move { loader.load(&url, None).await })
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
        let got = loader.load_detailed(&url, None).await;
        let took = started.elapsed();
        println!(
            "disk hit of a good host while {HOLES} hole lookups hang: {took:?} ({:?})",
            got.as_ref().map(|l| l.source)
        );
        let got = got.expect("the good host loads");
        assert_eq!(got.source, Source::Disk);
        assert!(
            took < Duration::from_secs(1),
            "the disk hit waited {took:?}"
        );
        assert_eq!(server.hits("/a.png"), 1, "served from disk, not the origin");

        for h in holes {
            let err = h
                .await
                .expect("hole task")
                .expect_err("a hole never resolves");
            assert_eq!(err.http_status(), 408, "{err}");
        }
    });
}

//! Outage rows: the shared cache refused (port closed), one master hung, one master slow,
//! each against the shared cache disabled, with the default settings.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use mmcache_loader::Loader;
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

use super::outcome::loaded;
use super::{Opts, Row, drive, ops, paired, serve, worker};
use crate::common::ms;

/// Loads over a fixed URL set with the decoded cache off, so every load goes through the
/// shared-cache path (or skips it) and then the origin.
async fn outage_rows(
    o: &Opts,
    origin: &TestOrigin,
    name: &str,
    broken: Loader,
    prefix: &str,
) -> anyhow::Result<Row> {
    let urls = serve(origin, prefix, 64, &images::jpeg(192, 144, 4));
    let healthy = worker(None).decoded_cache_entries(Some(0)).build()?;
    let n = ops(o, 3000);
    // Warm-up: let the breakers see their failures and open.
    for u in urls.iter().cycle().take(200) {
        broken.load(u, None).await?;
    }
    let (b, s) = paired(
        o.rounds(),
        || {
            let (l, urls) = (healthy.clone(), urls.clone());
            drive(o.concurrency, n, move |i| {
                let (l, u) = (l.clone(), urls[i % urls.len()].clone());
                async move { loaded(&l.load(&u, None).await, &u) }
            })
        },
        || {
            let (l, urls) = (broken.clone(), urls.clone());
            drive(o.concurrency, n, move |i| {
                let (l, u) = (l.clone(), urls[i % urls.len()].clone());
                async move { loaded(&l.load(&u, None).await, &u) }
            })
        },
    )
    .await?;
    let stats = broken.shared_cache().map(|c| c.stats()).unwrap_or_default();
    Ok(Row {
        scenario: name.into(),
        subject: s,
        baseline_name: "shared cache disabled".into(),
        baseline: Some(b),
        ratio_kind: "p99",
        ratio: Some(s.p99.as_secs_f64() / b.p99.as_secs_f64().max(1e-9)),
        target: "<= 1.20".into(),
        note: format!(
            "max {} ms vs {} ms ({:.2}x); breaker opened {}x, {} ops skipped, {} SETs left to the background",
            ms(s.max),
            ms(b.max),
            s.max.as_secs_f64() / b.max.as_secs_f64().max(1e-9),
            stats.breaker_opens,
            stats.skipped,
            stats.set_backgrounded
        ),
    })
}

pub(super) async fn outage_refused(o: &Opts, origin: &TestOrigin) -> anyhow::Result<Vec<Row>> {
    let port = mmcache_test_support::closed_port();
    let broken = worker(Some(&format!("redis://127.0.0.1:{port}")))
        .decoded_cache_entries(Some(0))
        .build()?;
    Ok(vec![
        outage_rows(o, origin, "outage-refused (port closed)", broken, "refused").await?,
    ])
}

pub(super) async fn outage_hung(o: &Opts, origin: &TestOrigin) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for slow in [false, true] {
        let cluster = RedisCluster::start(ClusterOptions::default())?;
        let broken = worker(Some(&cluster.url()))
            .decoded_cache_entries(Some(0))
            .build()?;
        anyhow::ensure!(
            broken.shared_cache().context("enabled")?.connect().await,
            "cluster unreachable"
        );
        // Hung: SIGSTOPped for the whole row. Slow: stopped 300 ms of every 320 ms, so every
        // command to it waits up to 300 ms.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cycler = slow.then(|| {
            let (pid, stop) = (cluster.nodes[0].pid(), stop.clone());
            std::thread::spawn(move || {
                // Bounded: stops on the flag, and after 10 minutes whatever happens.
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(600)
                {
                    signal(pid, "-STOP");
                    std::thread::sleep(Duration::from_millis(300));
                    signal(pid, "-CONT");
                    std::thread::sleep(Duration::from_millis(20));
                }
                signal(pid, "-CONT");
            })
        });
        if !slow {
            cluster.hang(0)?;
        }
        let (name, prefix) = if slow {
            (
                "slow-node (1 of 3 masters answers after up to 300 ms)",
                "slow",
            )
        } else {
            ("outage-hung (1 of 3 masters SIGSTOPped)", "hung")
        };
        let row = outage_rows(o, origin, name, broken, prefix).await;
        stop.store(true, Ordering::Relaxed);
        if let Some(c) = cycler {
            let _ = c.join();
        }
        if !slow {
            cluster.resume(0)?;
        }
        rows.push(row?);
    }
    Ok(rows)
}

/// Sends `sig` to `pid` with `kill` (the test harness's way), ignoring failures.
fn signal(pid: Option<u32>, sig: &str) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status();
    }
}

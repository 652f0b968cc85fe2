//! The scenarios: each starts a cluster and a fleet, injects one kind of fault, and checks
//! that every load succeeded and shared-cache hits resumed.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Context;
use mmcache_test_support::redis::ClusterOptions;

use super::{
    Ctx, IMAGES, Report, Run, Setup, base_checks, check, hedged_bound, report, shared_between,
    slow_bound,
};
use crate::svg::Window;

/// 1. A master is killed; with a replica it fails over.
pub(super) fn node_kill(ctx: &Ctx) -> anyhow::Result<Report> {
    let opts = ClusterOptions {
        masters: 3,
        replicas: 1,
        ..Default::default()
    };
    let mut setup = Setup::new(opts, Ipv4Addr::LOCALHOST)?;
    let mut run = Run::start(ctx, &setup, ctx.warmup() + ctx.fault() + ctx.after() + 2.0);
    run.sleep_until(ctx.warmup());
    let killed = run.event("kill master 0 (SIGKILL)");
    setup.cluster.kill(0);
    setup
        .cluster
        .wait_failover(0, Duration::from_secs(30))
        .context("failover")?;
    let healed = run.event("replica promoted: cluster_state ok");
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    let during = shared_between(&result.records, killed, healed.max(killed + 0.5));
    check(
        &mut failed,
        during > 0,
        "no shared hits while the master was down (other slots must keep serving)",
    );
    Ok(report(
        "node-kill",
        result,
        failed,
        summary,
        healed,
        Window {
            from: killed,
            to: healed,
            label: "master killed → failover".into(),
        },
    ))
}

/// 2. Every node stops and comes back at new addresses; only the endpoint stays.
pub(super) fn new_addresses(ctx: &Ctx) -> anyhow::Result<Report> {
    let ips: Vec<Ipv4Addr> = (31..=33).map(|d| Ipv4Addr::new(127, 0, 0, d)).collect();
    let new_ips: Vec<Ipv4Addr> = (41..=43).map(|d| Ipv4Addr::new(127, 0, 0, d)).collect();
    let opts = ClusterOptions {
        ips,
        ..Default::default()
    };
    let mut setup = Setup::new(opts, Ipv4Addr::new(127, 0, 0, 30))?;
    let mut run = Run::start(ctx, &setup, ctx.warmup() + ctx.fault() + ctx.after() + 2.0);
    run.sleep_until(ctx.warmup());
    let down = run.event("kill every node");
    setup.cluster.kill_all();
    setup.endpoint.set_target(None);
    run.sleep_until(down + ctx.fault());
    run.event("restart every node at 127.0.0.41-43, CLUSTER MEET all pairs");
    setup.cluster.move_all(&new_ips)?;
    setup
        .endpoint
        .set_target(Some(setup.cluster.nodes[0].addr()));
    let healthy = run.event("cluster_state ok at new addresses; endpoint re-pointed");
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    Ok(report(
        "new-addresses",
        result,
        failed,
        summary,
        healthy,
        Window {
            from: down,
            to: healthy,
            label: "outage → new addresses".into(),
        },
    ))
}

/// 3. A master is SIGSTOPped, then resumed.
pub(super) fn hung_node(ctx: &Ctx) -> anyhow::Result<Report> {
    sick_master(
        ctx,
        "hung-node",
        "master 0 hung",
        hedged_bound(),
        2,
        |setup, run| {
            let hung = run.event("SIGSTOP master 0");
            setup.cluster.hang(0)?;
            run.sleep_until(hung + ctx.fault());
            setup.cluster.resume(0)?;
            Ok((hung, run.event("SIGCONT master 0")))
        },
    )
}

/// 3b. A master answers every command late: stopped 300 ms of every 320 ms for the fault
/// window (each command waits for the next wake-up), then at full speed again.
pub(super) fn slow_node(ctx: &Ctx) -> anyhow::Result<Report> {
    // 16 loads at a time per worker, as the bench runs: a slow master then holds enough GETs
    // that their late answers arrive in bursts, which must not lift the hedge delay.
    sick_master(
        ctx,
        "slow-node",
        "master 0 slow (300 ms)",
        slow_bound(),
        16,
        |setup, run| {
            let slow = run.event("master 0 slow: SIGSTOP 300 ms / SIGCONT 20 ms, repeated");
            let mut cycles = 0;
            // Bounded by the fault window and by a cycle count, whatever the clock does.
            while run.now() < slow + ctx.fault() && cycles < 1000 {
                setup.cluster.hang(0)?;
                std::thread::sleep(Duration::from_millis(300));
                setup.cluster.resume(0)?;
                std::thread::sleep(Duration::from_millis(20));
                cycles += 1;
            }
            Ok((slow, run.event("master 0 at full speed")))
        },
    )
}

/// A scenario where master 0 is sick (`inject` makes it so and returns when the fault began
/// and ended), with `lanes` loads at a time per worker: no load may take longer than `bound`,
/// and the healthy masters keep serving.
fn sick_master(
    ctx: &Ctx,
    name: &'static str,
    label: &str,
    bound: Duration,
    lanes: usize,
    inject: impl FnOnce(&Setup, &mut Run) -> anyhow::Result<(f64, f64)>,
) -> anyhow::Result<Report> {
    let setup = Setup::new(ClusterOptions::default(), Ipv4Addr::LOCALHOST)?;
    let planned = ctx.warmup() + ctx.fault() + ctx.after();
    let mut run = Run::start_with_lanes(ctx, &setup, planned, lanes);
    run.sleep_until(ctx.warmup());
    let (from, to) = inject(&setup, &mut run)?;
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    check(
        &mut failed,
        summary.max <= bound,
        format!("a load took {:?}, bound {bound:?}", summary.max),
    );
    check(
        &mut failed,
        shared_between(&result.records, from, to) > 0,
        "no shared hits from the healthy masters while master 0 was sick",
    );
    drop(setup);
    Ok(report(
        name,
        result,
        failed,
        summary,
        to,
        Window {
            from,
            to,
            label: label.into(),
        },
    ))
}

/// 4. Loaders start while the cluster is down; it comes up later.
pub(super) fn cold_start(ctx: &Ctx) -> anyhow::Result<Report> {
    let opts = ClusterOptions {
        ips: vec![Ipv4Addr::new(127, 0, 0, 51)],
        ..Default::default()
    };
    let mut setup = Setup::new(opts, Ipv4Addr::new(127, 0, 0, 50))?;
    setup.cluster.kill_all();
    let mut run = Run::start(ctx, &setup, ctx.warmup() + ctx.after());
    run.event("loaders start; every cache node is down");
    run.sleep_until(ctx.warmup());
    for i in 0..setup.cluster.nodes.len() {
        setup.cluster.restart(i)?;
    }
    setup.cluster.wait_ok(Duration::from_secs(30))?;
    let healthy = run.event("cluster started: cluster_state ok");
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    check(
        &mut failed,
        shared_between(&result.records, 0.0, healthy - 0.5) == 0,
        "shared hits while the cluster was down?",
    );
    Ok(report(
        "cold-start",
        result,
        failed,
        summary,
        healthy,
        Window {
            from: 0.0,
            to: healthy,
            label: "cluster down".into(),
        },
    ))
}

/// 5. Entries are overwritten out of band with truncated and garbage bytes.
pub(super) fn corrupt_entries(ctx: &Ctx) -> anyhow::Result<Report> {
    let setup = Setup::new(ClusterOptions::default(), Ipv4Addr::LOCALHOST)?;
    let mut run = Run::start(ctx, &setup, ctx.warmup() + ctx.after());
    run.sleep_until(ctx.warmup());
    let from = run.event(format!(
        "overwrite all {IMAGES} entries: half truncated, half garbage"
    ));
    let mut written = 0;
    for (i, url) in setup.urls.iter().enumerate() {
        let key = mmcache_shared_cache::entry_key(&mmcache_scope::CacheIdentity::unscoped(url));
        let value = match setup.cluster.get_raw(&key)? {
            Some(v) if i % 2 == 0 => v[..v.len() / 2].to_vec(),
            _ => b"<html>not an image</html>".to_vec(),
        };
        setup.cluster.set_raw(&key, &value, Some(3600))?;
        written += 1;
    }
    let to = run.event(format!("{written} entries corrupted"));
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    let deleted: u64 = setup
        .loaders
        .iter()
        .map(|l| l.shared_cache().map_or(0, |s| s.stats().del_ok))
        .sum();
    check(&mut failed, deleted > 0, "no corrupt entry was deleted");
    // The most requested images were refilled with bytes that decode.
    let mut bad = 0;
    for url in setup.urls.iter().take(5) {
        let key = mmcache_shared_cache::entry_key(&mmcache_scope::CacheIdentity::unscoped(url));
        let ok = setup.cluster.get_raw(&key)?.is_some_and(|v| {
            mmcache_decode::decode(&v, &mmcache_decode::DecodeLimits::default()).is_ok()
        });
        bad += usize::from(!ok);
    }
    check(
        &mut failed,
        bad == 0,
        format!("{bad} of the 5 hottest entries were not refilled"),
    );
    Ok(report(
        "corrupt-entries",
        result,
        failed,
        summary,
        to,
        Window {
            from,
            to: to.max(from + 0.2),
            label: format!("corrupt ({deleted} deleted+refilled)"),
        },
    ))
}

/// 6. A rediss:// cluster: a master is killed and restarted.
pub(super) fn tls(ctx: &Ctx) -> anyhow::Result<Report> {
    let opts = ClusterOptions {
        tls: true,
        ips: vec![Ipv4Addr::new(127, 0, 0, 21)],
        ..Default::default()
    };
    let mut setup = Setup::new(opts, Ipv4Addr::new(127, 0, 0, 20))?;
    let mut run = Run::start(ctx, &setup, ctx.warmup() + ctx.fault() + ctx.after());
    run.sleep_until(ctx.warmup());
    let killed = run.event("kill master 1 of the TLS cluster");
    setup.cluster.kill(1);
    run.sleep_until(killed + ctx.fault());
    setup.cluster.restart(1)?;
    setup.cluster.wait_ok(Duration::from_secs(30))?;
    let healthy = run.event("master 1 restarted: cluster_state ok");
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    check(
        &mut failed,
        shared_between(&result.records, 0.0, killed) > 0,
        "no TLS shared hits before the fault",
    );
    check(
        &mut failed,
        shared_between(&result.records, killed, healthy) > 0,
        "no TLS shared hits from the other masters",
    );
    Ok(report(
        "tls",
        result,
        failed,
        summary,
        healthy,
        Window {
            from: killed,
            to: healthy,
            label: "TLS master down".into(),
        },
    ))
}

/// 7. A one-node cluster (Dragonfly's emulated cluster mode) restarted.
pub(super) fn single_node(ctx: &Ctx) -> anyhow::Result<Report> {
    let opts = ClusterOptions {
        masters: 1,
        ..Default::default()
    };
    let mut setup = Setup::new(opts, Ipv4Addr::LOCALHOST)?;
    let mut run = Run::start(ctx, &setup, ctx.warmup() + ctx.fault() + ctx.after());
    run.sleep_until(ctx.warmup());
    let killed = run.event("kill the only node");
    setup.cluster.kill(0);
    run.sleep_until(killed + ctx.fault());
    setup.cluster.restart(0)?;
    setup.cluster.wait_ok(Duration::from_secs(30))?;
    let healthy = run.event("node restarted: cluster_state ok");
    let result = run.finish(ctx)?;
    let mut failed = Vec::new();
    let summary = base_checks(&result.records, &mut failed);
    Ok(report(
        "single-node",
        result,
        failed,
        summary,
        healthy,
        Window {
            from: killed,
            to: healthy,
            label: "single node down".into(),
        },
    ))
}

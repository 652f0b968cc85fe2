//! The `miss` scenario: loads that miss every tier, against the round trips and the decode a
//! miss cannot avoid, measured with a raw cluster client in the same run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmcache_decode::{DecodeLimits, decode};
use mmcache_loader::Source;
use mmcache_shared_cache::WriteBehindConfig;
use mmcache_test_support::images;
use mmcache_test_support::origin::TestOrigin;
use mmcache_test_support::redis::RedisCluster;

use super::outcome::{failed, from_sources};
use super::{Opts, Row, drive, ops, paired, serve, worker};

pub(super) async fn miss(
    o: &Opts,
    cluster: &RedisCluster,
    origin: &TestOrigin,
) -> anyhow::Result<Vec<Row>> {
    let body = images::jpeg(440, 330, 9);
    let n_busy = ops(o, 1500);
    let n_serial = ops(o, 300);
    let origin_client = {
        let mut c = mmcache_origin::OriginConfig::default();
        c.allow_internal = true;
        mmcache_origin::Origin::new(c)?
    };
    // What a miss adds at the least: a GET that misses and a SET of the body, timed one at a
    // time with the raw cluster client. The c=1 rows report the ratio these alone would give.
    let (get_rtt, set_rtt) = raw_round_trips(cluster, &body, ops(o, 300)).await?;
    let mut rows = Vec::new();
    // At the full concurrency the two cores are saturated (loader, origin and three
    // redis-servers share them): that ratio is throughput. One load at a time shows what a
    // load waits for: latency, where write-behind takes the SET off the path.
    // (concurrency, write-behind, shared cache on). The last row is the loader without a
    // shared cache: what the loader itself costs over a bare download + decode.
    for (concurrency, write_behind, shared) in [
        (o.concurrency, false, true),
        (o.concurrency, true, true),
        (1, false, true),
        (1, true, true),
        (1, false, false),
    ] {
        let n = if concurrency == 1 { n_serial } else { n_busy };
        let mut wb = WriteBehindConfig::default();
        wb.enabled = write_behind;
        // Decoded cache off: the baseline keeps no decoded images either.
        let loader = worker(shared.then(|| cluster.url()).as_deref())
            .decoded_cache_entries(Some(0))
            .shared_cache_write_behind(wb)
            .build()?;
        let round = AtomicUsize::new(0);
        let (b, s) = paired(
            o.rounds(),
            || {
                let urls = serve(
                    origin,
                    &format!(
                        "miss-b-{concurrency}-{write_behind}-{shared}-{}",
                        round.fetch_add(1, Ordering::Relaxed)
                    ),
                    n,
                    &body,
                );
                let client = origin_client.clone();
                drive(concurrency, n, move |i| {
                    let (client, url) = (client.clone(), urls[i].clone());
                    async move {
                        let f = client
                            .fetch(&url)
                            .await
                            .map_err(|e| failed(format_args!("download: {e}"), &url))?;
                        let bytes: Bytes = f.bytes;
                        let decoded = tokio::task::spawn_blocking(move || {
                            decode(&bytes, &DecodeLimits::default())
                        })
                        .await;
                        match decoded {
                            Ok(Ok(_)) => Ok(()),
                            Ok(Err(e)) => Err(failed(format_args!("decode: {e}"), &url)),
                            Err(e) => Err(failed(format_args!("the decode's task: {e}"), &url)),
                        }
                    }
                })
            },
            || {
                let urls = serve(
                    origin,
                    &format!(
                        "miss-s-{concurrency}-{write_behind}-{shared}-{}",
                        round.fetch_add(1, Ordering::Relaxed)
                    ),
                    n,
                    &body,
                );
                let (loader, drain) = (loader.clone(), loader.clone());
                let run = drive(concurrency, n, move |i| {
                    let (loader, url) = (loader.clone(), urls[i].clone());
                    async move {
                        from_sources(
                            &loader.load_detailed(&url, None).await,
                            &[Source::Origin],
                            &url,
                        )
                    }
                });
                async move {
                    let m = run.await;
                    // Drain queued writes between rounds (untimed), so no round pays for another.
                    drain.shutdown(Duration::from_secs(10)).await;
                    m
                }
            },
        )
        .await?;
        loader.shutdown(Duration::from_secs(10)).await;
        let mode = match (shared, write_behind) {
            (false, _) => "shared cache off",
            (true, false) => "SET awaited",
            (true, true) => "write-behind",
        };
        // The round trips a miss adds at the least, and the ratio they alone would give.
        let added = match (shared, write_behind) {
            (false, _) => 0.0,
            (true, false) => get_rtt + set_rtt,
            (true, true) => get_rtt,
        };
        let kib = body.len() / 1024;
        let note = if concurrency == 1 && shared {
            // At one load at a time the baseline's time per op is its latency.
            let base = 1.0 / b.rate();
            format!(
                "{kib} KiB JPEG; raw GET miss {:.3} ms{}: floor {:.2}",
                get_rtt * 1e3,
                if write_behind {
                    String::new()
                } else {
                    format!(" + raw SET {:.3} ms", set_rtt * 1e3)
                },
                (base + added) / base
            )
        } else if shared {
            format!("{kib} KiB JPEG, GET miss + SET per load")
        } else {
            format!("{kib} KiB JPEG, the loader's own cost")
        };
        rows.push(Row {
            scenario: format!("miss, concurrency {concurrency}, {mode}"),
            subject: s,
            baseline_name: "HTTP download + decode".into(),
            baseline: Some(b),
            ratio_kind: "time/op",
            ratio: Some(b.rate() / s.rate()),
            target: match (concurrency, shared, write_behind) {
                (1, true, true) => "<= 1.05",
                (1, true, false) => "<= 1.15",
                _ => "-",
            }
            .into(),
            note,
        });
    }
    Ok(rows)
}

/// Mean seconds of a GET that misses and of a `SET` of `body`, one at a time, with the raw
/// cluster client: the round trips a miss cannot avoid, measured on this machine in this run.
/// An untimed decode on the blocking pool runs before each, as in a load: round trips from a
/// runtime that just sat idle cost more (thread wake-ups) than back-to-back ones.
async fn raw_round_trips(
    cluster: &RedisCluster,
    body: &[u8],
    n: usize,
) -> anyhow::Result<(f64, f64)> {
    let client = redis::cluster::ClusterClient::builder(vec![cluster.url()])
        .retries(0)
        .build()?;
    let mut conn = client.get_async_connection().await?;
    let (mut get, mut set) = (Duration::ZERO, Duration::ZERO);
    let body_bytes = Bytes::copy_from_slice(body);
    let decode_once = || {
        let b = body_bytes.clone();
        tokio::task::spawn_blocking(move || decode(&b, &DecodeLimits::default()).is_ok())
    };
    for i in 0..n {
        let key = format!("mmcache-bench-rtt:{i}");
        decode_once().await?;
        let t = Instant::now();
        let v: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
        get += t.elapsed();
        anyhow::ensure!(v.is_none(), "round-trip key {key} should be absent");
        decode_once().await?;
        let t = Instant::now();
        redis::cmd("SET")
            .arg(&key)
            .arg(body)
            .arg("EX")
            .arg(60)
            .query_async::<()>(&mut conn)
            .await?;
        set += t.elapsed();
        redis::cmd("DEL")
            .arg(&key)
            .query_async::<()>(&mut conn)
            .await?;
    }
    let n = n as f64;
    Ok((get.as_secs_f64() / n, set.as_secs_f64() / n))
}

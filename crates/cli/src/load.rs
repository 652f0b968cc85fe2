//! `mmcache load`: each URL in order, one line each, then a summary.

use std::time::{Duration, Instant};

use clap::Args;
use mmcache_loader::Loader;

use crate::scope_arg::parse_scope;
use crate::tally::Tally;

/// How long `load` and `warm` wait, before they exit, for cache writes still on their way.
pub(crate) const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// Print one JSON object per line
    #[arg(long)]
    pub(crate) json: bool,
    /// Session scope (used when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1)
    #[arg(long, value_name = "S")]
    pub(crate) scope: Option<String>,
    /// Print the Prometheus scrape text at the end
    #[arg(long)]
    pub(crate) metrics: bool,
    /// With --json: each image's pixel digest too (blake3, hex)
    #[arg(long, requires = "json")]
    pub(crate) digest: bool,
    /// Image URLs, loaded in order
    #[arg(value_name = "URL", required = true)]
    pub(crate) urls: Vec<String>,
}

/// Loads every URL in order; exit code 0 when all succeeded, else 1.
pub(crate) async fn run(args: LoadArgs) -> anyhow::Result<u8> {
    // Before any `Loader` is built: it resolves its metric handles when built.
    let metrics = mmcache_loader::metrics::install_prometheus()?;
    let loader = Loader::from_env()?;
    let scope = parse_scope(args.scope.as_deref(), loader.config().session_scoped)?;
    let mut tally = Tally::default();
    for url in &args.urls {
        let started = Instant::now();
        let result = loader.load_detailed(url, scope.as_ref()).await;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let ms_json = (ms * 1000.0).round() / 1000.0;
        match result {
            Ok(l) => {
                tally.ok(l.source);
                let bytes = l.encoded_len;
                if args.json {
                    let mut v = serde_json::json!({
                        "url": url, "ok": true, "source": l.source.as_str(), "bytes": bytes,
                        "width": l.image.width(), "height": l.image.height(), "ms": ms_json,
                        "mapped": l.image.is_mapped(),
                    });
                    if args.digest {
                        v["pixels"] = blake3::hash(l.image.pixels()).to_hex().as_str().into();
                    }
                    println!("{v}");
                } else {
                    let bytes = bytes.map_or_else(|| "-".to_owned(), |b| b.to_string());
                    println!(
                        "{:<8} {:>10} {:>11} {:>9.3}ms  {url}",
                        l.source.as_str(),
                        bytes,
                        format!("{}x{}", l.image.width(), l.image.height()),
                        ms
                    );
                }
            }
            Err(e) => {
                tally.failed();
                if args.json {
                    // Machine readers get every record on one stream.
                    let v = serde_json::json!({
                        "url": url, "ok": false, "status": e.http_status(), "error": e.to_string(),
                        "ms": ms_json,
                    });
                    println!("{v}");
                } else {
                    eprintln!(
                        "{:<8} {:>10} {:>11} {:>9.3}ms  {url}  ({e})",
                        "error",
                        e.http_status(),
                        "-",
                        ms
                    );
                }
            }
        }
    }
    // Writes left to the background (disk-tier entries, shared-cache SETs) land before exit.
    if !loader.shutdown(SHUTDOWN_WAIT).await {
        eprintln!("mmcache: some cache writes did not finish within {SHUTDOWN_WAIT:?}");
    }
    eprintln!("{}", tally.summary());
    if args.metrics {
        println!("{}", metrics.render());
    }
    Ok(u8::from(tally.any_failed()))
}

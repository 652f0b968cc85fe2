//! `mmcache`: load image URLs from the shell through the full mmcache stack (decoded cache,
//! in-flight join, shared cache, origin), configured from the `DYN_MM_*` environment, and print
//! where each image came from.
//!
//! ```text
//! mmcache load [--json] [--scope S] [--metrics] URL...
//! ```
//!
//! Exit codes: 0 when every load succeeded, 1 when any failed, 2 for usage or configuration
//! errors.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use mmcache_loader::{Loader, scope::Scope};

const USAGE: &str = "\
usage: mmcache load [--json] [--scope S] [--metrics] URL...

Loads each URL in order through the decoded cache, the in-flight join, the shared cache
(DYN_MM_SHARED_IMAGE_CACHE_ENABLED=1) and the origin, and prints per URL where the image
came from, its encoded size, width x height and milliseconds.

  --json       one JSON object per line
  --scope S    session scope (used when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1)
  --metrics    print the Prometheus scrape text at the end
  MMCACHE_LOG  log level on stderr: error, warn (default), info, debug, trace";

#[derive(Debug, Default)]
struct Args {
    json: bool,
    metrics: bool,
    scope: Option<String>,
    urls: Vec<String>,
}

fn parse_args(mut raw: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    match raw.next().as_deref() {
        Some("load") => {}
        Some("-h" | "--help" | "help") | None => return Ok(None),
        Some("--version" | "version") => {
            println!("mmcache {}", env!("CARGO_PKG_VERSION"));
            return Ok(None);
        }
        Some(other) => bail!("unknown command `{other}`"),
    }
    let mut args = Args::default();
    while let Some(a) = raw.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--metrics" => args.metrics = true,
            "--scope" => args.scope = Some(raw.next().context("--scope needs a value")?),
            "-h" | "--help" => return Ok(None),
            flag if flag.starts_with("--") => bail!("unknown flag `{flag}`"),
            _ => args.urls.push(a),
        }
    }
    if args.urls.is_empty() {
        bail!("no URL given");
    }
    Ok(Some(args))
}

fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in mmcache_loader::metrics::histogram_buckets() {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
    }
    let handle = builder.install_recorder()?;
    mmcache_loader::metrics::describe();
    Ok(handle)
}

fn init_logs() {
    let level = match std::env::var("MMCACHE_LOG").unwrap_or_default().as_str() {
        "error" => tracing_subscriber::filter::LevelFilter::ERROR,
        "info" => tracing_subscriber::filter::LevelFilter::INFO,
        "debug" => tracing_subscriber::filter::LevelFilter::DEBUG,
        "trace" => tracing_subscriber::filter::LevelFilter::TRACE,
        _ => tracing_subscriber::filter::LevelFilter::WARN,
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logs();
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("mmcache: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("mmcache: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Loads every URL in order; returns whether all succeeded.
async fn run(args: Args) -> anyhow::Result<bool> {
    let metrics = install_metrics()?;
    let loader = Loader::from_env()?;
    let scope = match &args.scope {
        Some(s) => {
            Some(Scope::new(s).context("--scope: blank, over 256 bytes, or not printable ASCII")?)
        }
        None => None,
    };
    let mut all_ok = true;
    for url in &args.urls {
        let started = Instant::now();
        let result = loader.load_detailed(url, scope.as_ref()).await;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(l) => {
                let bytes = l.encoded_len;
                if args.json {
                    let v = serde_json::json!({
                        "url": url, "ok": true, "source": l.source.as_str(), "bytes": bytes,
                        "width": l.image.width(), "height": l.image.height(),
                        "ms": (ms * 1000.0).round() / 1000.0,
                    });
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
                all_ok = false;
                if args.json {
                    let v = serde_json::json!({
                        "url": url, "ok": false, "status": e.http_status(), "error": e.to_string(),
                        "ms": (ms * 1000.0).round() / 1000.0,
                    });
                    println!("{v}");
                } else {
                    println!(
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
    if args.metrics {
        println!("{}", metrics.render());
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(a: &[&str]) -> anyhow::Result<Option<Args>> {
        parse_args(a.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn arguments() {
        let a = parse(&["load", "--json", "--scope", "s", "u1", "u2"])
            .unwrap()
            .unwrap();
        assert!(a.json && !a.metrics);
        assert_eq!(a.scope.as_deref(), Some("s"));
        assert_eq!(a.urls, ["u1", "u2"]);
        assert!(parse(&["load"]).is_err());
        assert!(parse(&["load", "--scope"]).is_err());
        assert!(parse(&["load", "--bogus", "u"]).is_err());
        assert!(parse(&["fetch", "u"]).is_err());
        assert!(parse(&[]).unwrap().is_none());
    }
}

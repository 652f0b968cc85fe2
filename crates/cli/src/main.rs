//! `mmcache`: load image URLs from the shell through the full mmcache stack (decoded cache,
//! in-flight join, shared cache, origin), configured from the `DYN_MM_*` environment, and print
//! where each image came from.
//!
//! ```text
//! mmcache load [--json] [--scope S] [--metrics] URL...
//! ```
//!
//! Exit codes: 0 when every load succeeded, 1 when any failed, 2 for usage or configuration
//! errors (clap's own code for a usage error).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use mmcache_loader::{Loader, scope::Scope};

/// Examples, settings and exit codes, shown after every help text (a macro so that `load`
/// can `concat!` its own paragraph in front).
macro_rules! after_help {
    () => {
        "\
Examples:
  mmcache load https://example.com/a.png https://example.com/a.png
  DYN_MM_SHARED_IMAGE_CACHE_ENABLED=1 mmcache load --json --metrics https://example.com/b.jpg

Settings come from the DYN_MM_* environment. MMCACHE_LOG sets the log level on stderr:
error, warn (default), info, debug or trace.

Exit codes:
  0  every load succeeded
  1  at least one load failed (each is still reported)
  2  bad usage or configuration: nothing was loaded"
    };
}

/// Load image URLs through the mmcache stack and print where each came from.
#[derive(Debug, Parser)]
#[command(name = "mmcache", version, after_help = after_help!())]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load each URL in order and print its source, size, dimensions and time
    #[command(after_help = concat!(
        "Each URL goes through the decoded cache, in-flight join, shared cache and origin; its\n",
        "line says where the image came from, its encoded size, width x height and time.\n\n",
        after_help!()
    ))]
    Load(LoadArgs),
    /// Print the version
    Version,
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// Print one JSON object per line
    #[arg(long)]
    json: bool,
    /// Session scope (used when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1)
    #[arg(long, value_name = "S")]
    scope: Option<String>,
    /// Print the Prometheus scrape text at the end
    #[arg(long)]
    metrics: bool,
    /// Image URLs, loaded in order
    #[arg(value_name = "URL", required = true)]
    urls: Vec<String>,
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

fn main() -> ExitCode {
    // Usage errors exit 2 and --help/--version exit 0, from clap itself.
    let cli = Cli::parse();
    match cli.command {
        None => {
            // As `mmcache help` does.
            let _ = Cli::command().print_help();
            ExitCode::SUCCESS
        }
        Some(Command::Version) => {
            println!("mmcache {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(Command::Load(args)) => {
            init_logs();
            load(args)
        }
    }
}

fn load(args: LoadArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime");
    match runtime.and_then(|rt| rt.block_on(run(args))) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("mmcache: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Loads every URL in order; returns whether all succeeded.
/// How long `load` waits, before it exits, for cache writes still on their way.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn run(args: LoadArgs) -> anyhow::Result<bool> {
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
    // Writes left to the background (disk-tier entries, shared-cache SETs) land before exit.
    if !loader.shutdown(SHUTDOWN_WAIT).await {
        eprintln!("mmcache: some cache writes did not finish within {SHUTDOWN_WAIT:?}");
    }
    if args.metrics {
        println!("{}", metrics.render());
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(a: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("mmcache").chain(a.iter().copied()))
    }

    #[test]
    fn command_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn arguments() {
        let Some(Command::Load(a)) = parse(&["load", "--json", "u1", "--scope", "s", "u2"])
            .unwrap()
            .command
        else {
            panic!("not a load");
        };
        assert!(a.json && !a.metrics);
        assert_eq!(a.scope.as_deref(), Some("s"));
        assert_eq!(a.urls, ["u1", "u2"]);
        assert!(matches!(
            parse(&["version"]).unwrap().command,
            Some(Command::Version)
        ));
        assert!(parse(&[]).unwrap().command.is_none());
        for bad in [
            &["load"][..],
            &["load", "--scope"],
            &["load", "--bogus", "u"],
            &["fetch", "u"],
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
    }
}

//! `mmcache warm`: loads every URL of a list with bounded concurrency, so the disk tier and
//! the shared cache hold them, and returns once their writes have landed (or timed out).

use std::io::{BufRead, IsTerminal};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mmcache_loader::Loader;

use crate::load::SHUTDOWN_WAIT;
use crate::scope_arg::parse_scope;
use crate::tally::Tally;

/// Loads at once unless `--concurrency` says otherwise: enough to overlap downloads, few
/// enough not to crowd the origin or the decode budget.
pub(crate) const DEFAULT_CONCURRENCY: NonZeroUsize = NonZeroUsize::new(16).expect("non-zero");

/// Longest line read from the list: a URL longer than this is not one to warm.
const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Args)]
pub(crate) struct WarmArgs {
    /// Loads in flight at once (at least 1)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CONCURRENCY)]
    pub(crate) concurrency: NonZeroUsize,
    /// Session scope (used when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1)
    #[arg(long, value_name = "S")]
    pub(crate) scope: Option<String>,
    /// File of URLs, one a line; - reads stdin
    #[arg(value_name = "FILE|-")]
    pub(crate) file: PathBuf,
}

/// The URLs of the list: trimmed, blank and `#` lines skipped.
fn read_urls(file: &PathBuf) -> anyhow::Result<Vec<String>> {
    let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut urls = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("read {} line {}", file.display(), n + 1))?;
        anyhow::ensure!(
            line.len() <= MAX_LINE,
            "{} line {}: longer than {MAX_LINE} bytes",
            file.display(),
            n + 1
        );
        let url = line.trim();
        if !url.is_empty() && !url.starts_with('#') {
            urls.push(url.to_owned());
        }
    }
    Ok(urls)
}

/// Warms every URL; exit code 0 when all loaded, else 1.
pub(crate) async fn run(args: WarmArgs) -> anyhow::Result<u8> {
    let urls = read_urls(&args.file)?;
    let loader = Arc::new(Loader::from_env()?);
    let scope = parse_scope(args.scope.as_deref(), loader.config().session_scoped)?;
    if loader.config().session_scoped && scope.is_none() {
        // Every load would bypass every cache: a warm that warms nothing must not succeed.
        eprintln!(
            "mmcache warm: DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1 and no usable --scope, so no \
             load would be cached; pass --scope"
        );
        return Ok(2);
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(urls.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let permits = Arc::new(tokio::sync::Semaphore::new(args.concurrency.get()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for url in urls {
        // Bounded: at most `concurrency` tasks exist at once.
        let permit = Arc::clone(&permits).acquire_owned().await?;
        let (loader, scope) = (Arc::clone(&loader), scope.clone());
        tasks.spawn(async move {
            let result = loader.load_detailed(&url, scope.as_ref()).await;
            drop(permit);
            (url, result.map(|l| l.source))
        });
        while let Some(done) = tasks.try_join_next() {
            record(done?, &mut tally, &mut failures, &bar);
        }
    }
    while let Some(done) = tasks.join_next().await {
        record(done?, &mut tally, &mut failures, &bar);
    }
    bar.finish_and_clear();
    // The disk entries and shared SETs left to the background land (or time out) here.
    let flushed = loader.shutdown(SHUTDOWN_WAIT).await;
    for line in &failures {
        eprintln!("{line}");
    }
    if !flushed {
        eprintln!("mmcache: some cache writes did not finish within {SHUTDOWN_WAIT:?}");
    }
    println!("warm: {}", tally.summary());
    Ok(u8::from(tally.any_failed() || !flushed))
}

type Done = (
    String,
    Result<mmcache_loader::Source, mmcache_loader::Error>,
);

fn record(done: Done, tally: &mut Tally, failures: &mut Vec<String>, bar: &ProgressBar) {
    match done {
        (_, Ok(source)) => tally.ok(source),
        (url, Err(e)) => {
            tally.failed();
            failures.push(format!("error {} {url}  ({e})", e.http_status()));
        }
    }
    bar.inc(1);
}

//! `mmcache doctor`: prints the report of [`mmcache_loader::doctor`] and exits with the code
//! of the first problem it found (one code per problem, listed in the help).

use mmcache_loader::Loader;

/// Help text after `mmcache doctor --help`.
pub(crate) fn help() -> String {
    format!(
        "\
Prints the effective configuration (the cache URL without user or password), the JPEG
decoder and its version, the shared cache (reachable, slots covered, nodes, engine and
version) and its data path as a worker runs it (on keys of its own, deleted after: for image
entries and for embeddings, a write, a bounded read, a lease, its release and a delete; each
denied or failing command by name), the disk tier (directory, owner, mode, trust verdict,
free space), and the most memory the budgets allow (the sum to size a worker's memory limit).

A start-up check, not a probe: run it once where a worker starts, with the worker's
environment (also `python -m mmcache doctor` in a Python worker's image). The cache fails
open, so what it finds never stops loads; never make it a readiness or liveness probe.

Examples:
  mmcache doctor
  MMCACHE_DISK_CACHE_DIR=/tmp/mmcache-doctor mmcache doctor

{}",
        mmcache_loader::doctor::exit_codes_help()
    )
}

/// Runs every check; the exit code of the first problem, or 0.
pub(crate) async fn run() -> anyhow::Result<u8> {
    let loader = Loader::from_env()?;
    let report = mmcache_loader::doctor::run(&loader).await;
    print!("{}", report.text);
    // Nothing was loaded, so nothing is left to write.
    let _ = loader.shutdown(std::time::Duration::ZERO).await;
    Ok(report.exit_code())
}

//! `mmcache`: an operator's tool over the full mmcache stack (decoded cache, in-flight join,
//! disk tier, shared cache, origin), configured from the `DYN_MM_*`/`MMCACHE_*` environment.
//!
//! ```text
//! mmcache load [--json] [--scope S] [--metrics] URL...   load and print where each came from
//! mmcache warm [--concurrency N] [--scope S] FILE|-     fill the caches from a list of URLs
//! mmcache doctor                                         check the setup (exit code per problem)
//! mmcache key [--scope S] URL                            the entry's Redis key and disk path
//! ```
//!
//! Exit codes: 0 success and 2 usage or configuration errors (clap's own code for a usage
//! error) for every command; each command's help lists its own others (`load`: 1 a load failed;
//! `warm`: 1 a load or a cache write failed; `key`: 1 no cache key; `doctor`: one per problem).
//! `--scope` with session scoping off is ignored alike by `load`, `warm` and `key`, with a note.

mod doctor;
mod key;
mod load;
mod scope_arg;
mod tally;
mod warm;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// A data URL of a 1x1 GIF: examples that run anywhere, with no network.
#[macro_export]
macro_rules! tiny_image {
    () => {
        "'data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7'"
    };
}

/// Where the settings come from, shown after every help text.
macro_rules! settings_help {
    () => {
        "\
Settings come from the DYN_MM_* and MMCACHE_* environment (docs/configuration.md).
MMCACHE_LOG: log level on stderr: off, error, warn (default), info, debug or trace."
    };
}

/// `--scope`'s rule, the same in every command that takes it.
macro_rules! scope_help {
    () => {
        "--scope is used when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1; otherwise it is ignored, and a\n\
         note on stderr says so.\n"
    };
}

/// Load image URLs through the mmcache stack, warm its caches, check its setup.
#[derive(Debug, Parser)]
#[command(name = "mmcache", version, after_help = concat!(
    "Examples:\n",
    "  mmcache load ", tiny_image!(), "\n",
    "  mmcache warm --concurrency 8 urls.txt\n",
    "  mmcache doctor\n",
    "  mmcache key https://example.com/img.png\n\n",
    settings_help!(),
    "\n\nExit codes (each command's --help lists its own):\n",
    "  0  success\n",
    "  1  load: a load failed; warm: a load or a cache write failed; key: no cache key\n",
    "  2  bad usage or configuration: nothing was done\n",
    "  10-15  doctor found a problem (see mmcache doctor --help)"
))]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load each URL in order and print its source, size, dimensions and time
    #[command(after_help = concat!(
        "Each URL goes through the decoded cache, in-flight join, disk tier, shared cache and\n",
        "origin; its line (stdout) says where the image came from, its encoded size,\n",
        "width x height and time. Failures and a summary line go to stderr (--json: every\n",
        "record on stdout, the summary on stderr).\n", scope_help!(), "\n",
        "Examples:\n",
        "  mmcache load ", tiny_image!(), "\n\n",
        settings_help!(), "\n\n",
        "Exit codes:\n",
        "  0  every load succeeded\n",
        "  1  at least one load failed (each is still reported)\n",
        "  2  bad usage or configuration: nothing was loaded"
    ))]
    Load(load::LoadArgs),
    /// Load every URL of a file (or stdin) to fill the caches; summary by source
    #[command(after_help = concat!(
        "One URL a line; blank lines and lines starting with # are skipped. Loads run\n",
        "--concurrency at a time; a progress bar shows on a terminal. The summary goes to\n",
        "stdout, each failure to stderr. Returns once every disk and shared-cache write has\n",
        "landed or timed out.\n", scope_help!(), "\n",
        "Examples:\n",
        "  mmcache warm --concurrency 8 urls.txt\n",
        "  cat urls.txt | mmcache warm -\n\n",
        settings_help!(), "\n\n",
        "Exit codes:\n",
        "  0  every URL loaded and every cache write landed\n",
        "  1  a load failed, or a cache write did not finish in time (each is reported)\n",
        "  2  bad usage or configuration, or scoped mode without --scope: nothing was loaded"
    ))]
    Warm(warm::WarmArgs),
    /// Check the configuration, the JPEG decoder, the shared cache and the disk tier
    #[command(after_help = doctor::help())]
    Doctor,
    /// Print the Redis key and the disk-tier path of a URL's entry
    #[command(after_help = concat!(
        "The identity is the one loads use: the URL keyed as Dynamo keys it, with the scope's\n",
        "digest in front when DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1.\n", scope_help!(), "\n",
        "Examples:\n",
        "  mmcache key https://example.com/img.png\n",
        "  DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1 mmcache key --scope s1 https://example.com/a.png\n\n",
        settings_help!(), "\n\n",
        "Exit codes:\n",
        "  0  the key and path were printed\n",
        "  1  no cache key: DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1 and no usable --scope\n",
        "  2  bad usage or configuration"
    ))]
    Key(key::KeyArgs),
    /// Print the version
    Version,
}

/// Exit code of a usage or configuration error.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    // Usage errors exit 2 and --help/--version exit 0, from clap itself.
    let cli = Cli::parse();
    let command = match cli.command {
        None => {
            // As `mmcache help` does.
            let _ = Cli::command().print_help();
            return ExitCode::SUCCESS;
        }
        Some(Command::Version) => {
            println!("mmcache {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(c) => c,
    };
    if let Err(e) = init_logs() {
        eprintln!("mmcache: {e:#}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mmcache: starting the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Load(args) => load::run(args).await,
            Command::Warm(args) => warm::run(args).await,
            Command::Doctor => doctor::run().await,
            Command::Key(args) => key::run(args),
            Command::Version => unreachable!("handled above"),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mmcache: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Log lines on stderr at `MMCACHE_LOG` (default `warn`); an unknown level is an error.
fn init_logs() -> anyhow::Result<()> {
    let raw = std::env::var(mmcache_loader::env::LOG).unwrap_or_default();
    let level = mmcache_loader::env::log_level(&raw)?;
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .init();
    Ok(())
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
        let Some(Command::Warm(w)) = parse(&["warm", "-"]).unwrap().command else {
            panic!("not a warm");
        };
        assert_eq!(w.concurrency, warm::DEFAULT_CONCURRENCY);
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
            &["warm"],
            &["warm", "--concurrency", "0", "-"],
            &["key"],
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
    }
}

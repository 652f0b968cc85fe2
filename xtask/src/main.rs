//! Project automation for mmcache, run as `cargo xtask <command>` (`cargo xtask help` lists
//! the commands, `cargo xtask help COMMAND` or `cargo xtask COMMAND --help` one's options).
//!
//! - `test`: install what is missing (redis-server, libturbojpeg0, python3-venv), then fmt check,
//!   clippy `-D warnings`, every test, and the doc build. CI runs exactly this.
//! - `demo`: the main job: a local origin, a fleet of loaders with and without a shared Redis
//!   Cluster, and a short report.
//! - `chaos`: kill, hang, corrupt and move cache nodes under a live fleet; every load must
//!   succeed. Writes tables, JSON and SVG timelines to `target/chaos/`.
//! - `bench`: throughput and latency of every layer against same-run baselines, written to
//!   `target/bench/`.
//! - `fuzz`: coverage-guided fuzzing (cargo-afl, AFL++) of every input surface for a bounded
//!   time; fails on any crash or hang. Builds fuzz/, a workspace of its own, in `target/fuzz/`.
//! - `cluster`: start a local Redis Cluster and keep it up until Enter or end of input.
//! - `docs`: regenerate every generated doc (docs/configuration.md's and docs/metrics.md's
//!   tables from the declarations, docs/benchmarks.md and docs/chaos.md from the recorded runs);
//!   `--check`: fail on any difference instead (the gate runs it as a test of xtask's).
//! - `bench-docs`: record a bench run into docs/, then regenerate docs/benchmarks.md.
//! - `chaos-docs`: record a chaos run into docs/, then regenerate docs/chaos.md.
//! - `vllm-hashes`: regenerate crates/decode/tests/vllm_hashes.tsv from vLLM's own hasher
//!   (its 336 MB wheel) and fail on any difference, then test our digest on it; `test` runs
//!   the same check.
//! - `engines`: target/venv-engines, where the real vLLM 0.34.0 and SGLang 0.5.23 media code runs
//!   on CPU (for the oracle tests), built once and reused; then tests/engines/smoke.py in it.
//! - `package`: `cargo package` of the publishable crates, their doctests from the packaged
//!   sources, and the MSRV check; `test` runs it too.
//! - `wheel`: the manylinux abi3 wheel of crates/python; `--test` installs it into clean
//!   CPython 3.9 and 3.13 venvs and tests it with the host's libturbojpeg masked.
//!
//! `cargo xtask` runs a debug build without the fleet commands (their feature `fleet` off: no
//! loader, Redis or image stack), which builds in seconds, so the gate starts compiling its
//! checks at once. A fleet command (demo, chaos, bench, fuzz, cluster, docs, bench-docs,
//! chaos-docs) is handed unread to the release build of xtask with them ([`rerun_in_release`]),
//! as it always ran: latency bounds and figures of a debug build mean nothing. Every path a
//! command names or is given is relative to the workspace root, wherever it is typed.

mod background;
mod engines;
mod gate;
mod package;
mod setup;
mod shared_deps;
mod vllm_hashes;
mod wheel;
mod wheel_mask;

#[cfg(feature = "fleet")]
mod bench;
#[cfg(feature = "fleet")]
mod chaos;
#[cfg(feature = "fleet")]
mod common;
#[cfg(feature = "fleet")]
mod demo;
#[cfg(feature = "fleet")]
mod docs;
#[cfg(feature = "fleet")]
mod fuzz;
#[cfg(feature = "fleet")]
mod svg;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The fleet commands' options: their own types in a build with them, else every argument
/// kept unread for the release build that runs them.
#[cfg(feature = "fleet")]
mod fleet_args {
    pub(crate) use crate::bench::Opts as Bench;
    pub(crate) use crate::chaos::Args as Chaos;
    pub(crate) use crate::common::ClusterArgs as Cluster;
    pub(crate) use crate::demo::Args as Demo;
    pub(crate) use crate::docs::Args as Docs;
    pub(crate) use crate::docs::benchmarks::Args as BenchDocs;
    pub(crate) use crate::docs::chaos::Args as ChaosDocs;
    pub(crate) use crate::fuzz::Args as Fuzz;
}
#[cfg(not(feature = "fleet"))]
mod fleet_args {
    /// Any arguments, `--help` among them: the release build reads them.
    #[derive(Debug, clap::Args)]
    #[command(disable_help_flag = true)]
    pub(crate) struct Unread {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        _args: Vec<std::ffi::OsString>,
    }
    pub(crate) type Bench = Unread;
    pub(crate) type Chaos = Unread;
    pub(crate) type Cluster = Unread;
    pub(crate) type Demo = Unread;
    pub(crate) type Docs = Unread;
    pub(crate) type BenchDocs = Unread;
    pub(crate) type ChaosDocs = Unread;
    pub(crate) type Fuzz = Unread;
}

/// Project automation for mmcache: the gate, the demo, chaos, benchmarks, fuzzing, docs.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    after_help = "Paths, given or named, are relative to the workspace root, wherever a command is typed."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Prerequisites, fmt, clippy, tests, docs (what CI runs)
    Test,
    #[command(flatten)]
    Fleet(Fleet),
    /// The manylinux abi3 wheel into target/wheels; --test: install and test it
    Wheel(wheel::Args),
    /// cargo package (verified), packaged doctests, MSRV (before a release)
    Package,
    /// Regenerate the vLLM hash vectors from vLLM's wheel, fail on a difference
    VllmHashes,
    /// target/venv-engines: vLLM's and SGLang's own media code on CPU, smoke-tested
    Engines,
}

/// The commands that run in the release build with the feature `fleet`.
#[derive(Debug, Subcommand)]
enum Fleet {
    /// Run the fleet demo on a local origin and Redis Cluster
    Demo(fleet_args::Demo),
    /// Fault injection on a live fleet (default: every scenario, on Redis)
    Chaos(fleet_args::Chaos),
    /// Benchmarks against same-run baselines (release build)
    Bench(fleet_args::Bench),
    /// Coverage-guided fuzzing, N s a target; fails on a crash or hang
    Fuzz(fleet_args::Fuzz),
    /// Start a local Redis Cluster until Enter is pressed
    Cluster(fleet_args::Cluster),
    /// Regenerate every generated doc (--check: fail on any difference instead)
    Docs(fleet_args::Docs),
    /// Record a bench run into docs/, then regenerate docs/benchmarks.md and its chart
    BenchDocs(fleet_args::BenchDocs),
    /// Record a chaos run into docs/, then regenerate docs/chaos.md
    ChaosDocs(fleet_args::ChaosDocs),
}

fn main() -> ExitCode {
    clear_cargo_run_variables();
    if let Err(e) = enter_workspace_root() {
        return report("", Err(e));
    }
    // `help demo`: a fleet command's options are the build with the fleet's to print.
    if !cfg!(feature = "fleet") && asks_help_of_a_fleet_command(std::env::args_os().skip(1)) {
        return report("help", rerun_in_release());
    }
    // Usage errors and --help exit as clap decides (2 and 0).
    let matches = Cli::command().get_matches();
    let name = matches.subcommand_name().unwrap_or_default().to_owned();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        None => {
            // As `cargo xtask help` does.
            let _ = Cli::command().print_help();
            return ExitCode::SUCCESS;
        }
        Some(Command::Test) => gate::run(),
        Some(Command::Fleet(fleet)) => run_fleet(fleet),
        Some(Command::Wheel(args)) => wheel::run(&args),
        Some(Command::Package) => package::run(),
        Some(Command::VllmHashes) => vllm_hashes::run(),
        Some(Command::Engines) => engines::run(),
    };
    report(&name, result)
}

/// The exit status of the command `name`, its error printed.
fn report(name: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A message with its causes, never a backtrace (whatever RUST_BACKTRACE says): what
        // failed and why is in the message.
        Err(e) => {
            let command = ["cargo xtask", name].join(" ");
            eprintln!("{}: {e:#}", command.trim_end());
            ExitCode::FAILURE
        }
    }
}

/// Clears what `cargo run` sets for xtask alone (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`...), so
/// the cargo, maturin and pip it starts see what a shell gives them: a build script that watches
/// one of them (ring's watches both) would otherwise be run again, and everything above it
/// rebuilt, whenever the same build is next made from a shell.
#[allow(unsafe_code)]
fn clear_cargo_run_variables() {
    let names: Vec<std::ffi::OsString> = std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| set_by_cargo_run_for_xtask(&name.to_string_lossy()))
        .collect();
    for name in names {
        // SAFETY: called first in `main`, before this process has started any other thread.
        unsafe { std::env::remove_var(name) };
    }
}

/// Whether the variable `name` is one `cargo run` sets for the program it runs alone (not
/// `CARGO`, which the release hand-over uses, nor the user's own `CARGO_*` settings).
fn set_by_cargo_run_for_xtask(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

/// Makes the workspace's root the working directory: every path xtask names, or is given on
/// its command line, is relative to it, wherever the command is typed. xtask's tests that read
/// the tree call it too.
fn enter_workspace_root() -> anyhow::Result<()> {
    std::env::set_current_dir(WORKSPACE_ROOT)
        .map_err(|e| anyhow::anyhow!("enter {WORKSPACE_ROOT}: {e}"))
}

/// The workspace's root, from where this build's source was.
pub(crate) const WORKSPACE_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Whether `args` (the command line after the program) is `help` and a fleet command's name.
fn asks_help_of_a_fleet_command(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let args: Vec<_> = args.collect();
    matches!(&args[..], [help, command]
        if help == "help" && command.to_str().is_some_and(Fleet::has_subcommand))
}

/// Runs a fleet command here in the release build with the fleet, else hands it to that build:
/// latency bounds and figures of a debug build mean nothing, and a build without the fleet has
/// none of its code.
fn run_fleet(command: Fleet) -> anyhow::Result<()> {
    #[cfg(feature = "fleet")]
    if !cfg!(debug_assertions) {
        return match command {
            Fleet::Demo(args) => demo::run(&args),
            Fleet::Chaos(args) => chaos::run(args),
            Fleet::Bench(opts) => bench::run(opts),
            Fleet::Fuzz(args) => fuzz::run(&args),
            Fleet::Cluster(args) => common::run_cluster(&args),
            Fleet::Docs(args) => docs::run(&args),
            Fleet::BenchDocs(args) => docs::benchmarks::run(&args),
            Fleet::ChaosDocs(args) => docs::chaos::run(&args),
        };
    }
    let _ = command;
    rerun_in_release()
}

/// Set in the environment of the release build [`rerun_in_release`] starts, so a build that is
/// still not one to run the command (`[profile.release]` with debug assertions) fails instead
/// of starting itself again.
const RERUN: &str = "MMCACHE_XTASK_RERUN";

/// Replaces this process with `cargo run --release --package xtask` and the same arguments: the
/// build with the fleet commands. Returns only when that cannot start.
fn rerun_in_release() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    anyhow::ensure!(
        std::env::var_os(RERUN).is_none(),
        "`cargo run --release --package xtask` gave a build without the feature `fleet` or with \
         debug assertions, which cannot run this command"
    );
    // The cargo that started this build (it sets CARGO), with the workspace named, so the
    // release build is of this checkout wherever the command was typed.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // A cold release build takes minutes, and `--quiet` shows none of it.
    eprintln!("==> the release build of xtask with the fleet commands runs this one");
    let error = std::process::Command::new(&cargo)
        .args(["run", "--quiet", "--release", "--package", "xtask"])
        .arg("--manifest-path")
        .arg(std::path::Path::new(WORKSPACE_ROOT).join("Cargo.toml"))
        .arg("--")
        .args(std::env::args_os().skip(1))
        .env(RERUN, "1")
        .exec();
    Err(anyhow::Error::new(error).context(format!(
        "start {} run --release --package xtask",
        cargo.to_string_lossy()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cargo xtask").chain(args.split_whitespace()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_documented_command_lines_parse_and_bad_ones_do_not() {
        // As README.md, docs/ and .ci/run give them.
        for good in [
            "",
            "test",
            "demo --metrics",
            "chaos --quick --scenario new-addresses",
            "chaos --quick --engine valkey --out target/x",
            "bench --scenario vllm --scenario sglang --concurrency 4 --loaders 2 --quick",
            "fuzz --secs 20 --target decode --target data_url --target url_policy",
            "fuzz --build-only",
            "cluster --masters 1 --replicas 1 --tls",
            "wheel --target aarch64-unknown-linux-gnu",
            "wheel --test",
            "docs",
            "docs --check",
            "bench-docs --merge target/bench/vllm.json --note DATE",
            "bench-docs --python target/bench --note DATE",
            "chaos-docs --results target/chaos --note DATE",
            "package",
            "vllm-hashes",
            "engines",
        ] {
            assert!(parse(good).is_ok(), "{good}: {:?}", parse(good).err());
        }
        let mut bad = vec!["nothing", "test --quick", "wheel --nothing", "package x"];
        if cfg!(feature = "fleet") {
            bad.extend([
                "chaos --scenario nothing",
                "chaos --engine dragonfly",
                "bench --concurrency many",
                "fuzz --secs 0",
                "fuzz --target nothing",
                "fuzz --build-only --secs 20",
                "bench-docs --results a.json --merge b.json",
                "bench-docs --check",
            ]);
        }
        for bad in bad {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
    }

    /// Without the fleet, a fleet command keeps every argument, `--help` too, for the release
    /// build it hands them to.
    #[cfg(not(feature = "fleet"))]
    #[test]
    fn a_fleet_commands_arguments_are_kept_unread() {
        for (line, name) in [
            ("demo --help", "Demo"),
            ("chaos --quick --scenario x -v", "Chaos"),
            ("docs --check", "Docs"),
            ("chaos-docs --results r", "ChaosDocs"),
            ("fuzz", "Fuzz"),
        ] {
            let cli = parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let Some(Command::Fleet(fleet)) = cli.command else {
                panic!("{line}: {cli:?}");
            };
            let text = format!("{fleet:?}");
            assert!(text.starts_with(&format!("{name}(")), "{line}: {text}");
            for word in line.split_whitespace().skip(1) {
                assert!(text.contains(&format!("{word:?}")), "{line}: {text}");
            }
        }
    }

    #[test]
    fn only_what_cargo_run_sets_for_xtask_is_cleared() {
        for cleared in [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            assert!(set_by_cargo_run_for_xtask(cleared), "{cleared}");
        }
        for kept in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_BUILD_JOBS",
            "RUSTFLAGS",
            "PATH",
        ] {
            assert!(!set_by_cargo_run_for_xtask(kept), "{kept}");
        }
    }

    #[test]
    fn help_of_a_fleet_command_is_told_from_other_help() {
        let asks = |line: &str| {
            asks_help_of_a_fleet_command(line.split_whitespace().map(std::ffi::OsString::from))
        };
        for fleet in ["help demo", "help bench-docs", "help fuzz"] {
            assert!(asks(fleet), "{fleet}");
        }
        for other in [
            "help",
            "help test",
            "help wheel",
            "help nothing",
            "demo",
            "help demo x",
        ] {
            assert!(!asks(other), "{other}");
        }
    }
}

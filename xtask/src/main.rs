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
//!   `--check`: fail on any difference instead (the gate runs it).
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

mod background;
mod bench;
mod chaos;
mod common;
mod demo;
mod docs;
mod engines;
mod fuzz;
mod gate;
mod package;
mod setup;
mod shared_deps;
mod svg;
mod vllm_hashes;
mod wheel;
mod wheel_mask;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Project automation for mmcache: the gate, the demo, chaos, benchmarks, fuzzing, docs.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Prerequisites, fmt, clippy, tests, docs (what CI runs)
    Test,
    /// Run the fleet demo on a local origin and Redis Cluster
    Demo(demo::Args),
    /// Fault injection on a live fleet (default: every scenario, on Redis)
    Chaos(chaos::Args),
    /// Benchmarks against same-run baselines (release build)
    Bench(bench::Opts),
    /// Coverage-guided fuzzing, N s a target; fails on a crash or hang
    Fuzz(fuzz::Args),
    /// Start a local Redis Cluster until Enter is pressed
    Cluster(common::ClusterArgs),
    /// The manylinux abi3 wheel into target/wheels; --test: install and test it
    Wheel(wheel::Args),
    /// Regenerate every generated doc (--check: fail on any difference instead)
    Docs(docs::Args),
    /// Record a bench run into docs/, then regenerate docs/benchmarks.md and its chart
    BenchDocs(docs::benchmarks::Args),
    /// Record a chaos run into docs/, then regenerate docs/chaos.md
    ChaosDocs(docs::chaos::Args),
    /// cargo package (verified), packaged doctests, MSRV (before a release)
    Package,
    /// Regenerate the vLLM hash vectors from vLLM's wheel, fail on a difference
    VllmHashes,
    /// target/venv-engines: vLLM's and SGLang's own media code on CPU, smoke-tested
    Engines,
}

fn main() -> ExitCode {
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
        Some(Command::Demo(args)) => demo::run(&args),
        Some(Command::Chaos(args)) => chaos::run(args),
        Some(Command::Bench(opts)) => bench::run(opts),
        Some(Command::Fuzz(args)) => fuzz::run(&args),
        Some(Command::Cluster(args)) => common::run_cluster(&args),
        Some(Command::Wheel(args)) => wheel::run(&args),
        Some(Command::Docs(args)) => docs::run(&args),
        Some(Command::BenchDocs(args)) => docs::benchmarks::run(&args),
        Some(Command::ChaosDocs(args)) => docs::chaos::run(&args),
        Some(Command::Package) => package::run(),
        Some(Command::VllmHashes) => vllm_hashes::run(),
        Some(Command::Engines) => engines::run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A message with its causes, never a backtrace (whatever RUST_BACKTRACE says): what
        // failed and why is in the message.
        Err(e) => {
            eprintln!("cargo xtask {name}: {e:#}");
            ExitCode::FAILURE
        }
    }
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
        for bad in [
            "nothing",
            "test --quick",
            "chaos --scenario nothing",
            "chaos --engine dragonfly",
            "bench --concurrency many",
            "fuzz --secs 0",
            "fuzz --target nothing",
            "fuzz --build-only --secs 20",
            "bench-docs --results a.json --merge b.json",
            "bench-docs --check",
        ] {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
    }
}

//! Project automation for mmcache, run as `cargo xtask <command>`.
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
//! - `help [COMMAND]`, or `--help` after any command: the usage.
//! - `bench-docs`: regenerate docs/benchmarks.md's tables and docs/bench-ratios.svg from the
//!   recorded runs in docs/ (`--check`: fail when they differ; the gate runs it).
//! - `chaos-docs`: regenerate docs/chaos.md's table and charts from docs/chaos-results.json.
//! - `vllm-hashes`: regenerate crates/decode/tests/vllm_hashes.tsv from vLLM's own hasher
//!   (its 336 MB wheel) and fail on any difference, then test our digest on it; `test` runs
//!   the same check.
//! - `engines`: target/venv-engines, where the real vLLM 0.34.0 and SGLang 0.5.23 media code runs
//!   on CPU (for the oracle tests), built once and reused; then tests/engines/smoke.py in it.
//! - `package`: `cargo package` of the publishable crates, their doctests from the packaged
//!   sources, and the MSRV check; `test` runs it too.
//! - `wheel`: the manylinux abi3 wheel of crates/python; `--test` installs it into clean
//!   CPython 3.9 and 3.13 venvs and tests it with the host's libturbojpeg masked.

mod bench;
mod bench_docs;
mod chaos;
mod chaos_docs;
mod common;
mod demo;
mod engines;
mod fuzz;
mod gate;
mod package;
mod setup;
mod svg;
mod vllm_hashes;
mod wheel;
mod wheel_mask;

use std::process::ExitCode;

/// Every command: its name, its arguments, and what it does. The usage text, each command's
/// `--help` and the check that every flag a command reads is listed come from it.
const COMMANDS: [(&str, &str, &str); 13] = [
    (
        "test",
        "",
        "prerequisites, fmt, clippy, tests, docs (what CI runs)",
    ),
    (
        "demo",
        "[--metrics]",
        "run the fleet demo on a local origin and Redis Cluster",
    ),
    (
        "chaos",
        "[--scenario NAME]... [--quick] [--out DIR] [--engine redis|valkey]",
        "fault injection on a live fleet (default: every scenario, on Redis)",
    ),
    (
        "bench",
        "[--scenario NAME]... [--concurrency N] [--loaders K] [--quick] [--out DIR]",
        "benchmarks against same-run baselines (release build)",
    ),
    (
        "fuzz",
        "[--target T]... [--secs N]",
        "coverage-guided fuzzing, N s a target (default 20); fails on a crash or hang",
    ),
    (
        "cluster",
        "[--masters N] [--replicas N] [--tls]",
        "start a local Redis Cluster until Enter is pressed",
    ),
    (
        "wheel",
        "[--target TRIPLE] [--test]",
        "the manylinux abi3 wheel into target/wheels; --test: install and test it",
    ),
    (
        "bench-docs",
        "[--results FILE | --merge FILE] [--note TEXT] [--python DIR] [--check]",
        "docs/benchmarks.md's tables and chart from the recorded runs in docs/",
    ),
    (
        "chaos-docs",
        "[--results DIR] [--note TEXT] [--check]",
        "docs/chaos.md's table and charts from the recorded run in docs/",
    ),
    (
        "package",
        "",
        "cargo package (verified), packaged doctests, MSRV (before a release)",
    ),
    (
        "vllm-hashes",
        "",
        "regenerate the vLLM hash vectors from vLLM's wheel, fail on a difference",
    ),
    (
        "engines",
        "",
        "target/venv-engines: vLLM's and SGLang's own media code on CPU, smoke-tested",
    ),
    (
        "help",
        "[COMMAND]",
        "this text, or one command's (also: cargo xtask COMMAND --help)",
    ),
];

/// One command's lines of the usage.
fn command_usage(name: &str, args: &str, what: &str) -> String {
    let head = if args.is_empty() {
        name.to_owned()
    } else {
        format!("{name} {args}")
    };
    if head.len() <= 20 {
        format!("  {head:<20} {what}")
    } else {
        format!("  {head}\n  {:<20} {what}", "")
    }
}

/// The usage of every command, or of `only`.
fn usage(only: Option<&str>) -> String {
    let mut out = String::from("usage: cargo xtask <command> [--help]\n");
    for (name, args, what) in COMMANDS {
        if only.is_none_or(|o| o == name) {
            out.push('\n');
            out.push_str(&command_usage(name, args, what));
        }
    }
    out
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    // `--help` anywhere is a request for the command's usage, never an unknown flag.
    let known = COMMANDS.iter().any(|(name, ..)| *name == cmd);
    if known && rest.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", usage(Some(&cmd)));
        return ExitCode::SUCCESS;
    }
    let result = match cmd.as_str() {
        "test" => gate::run(&rest),
        "demo" => demo::run(&rest),
        "chaos" => chaos::run(&rest),
        "bench" => bench::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "cluster" => common::run_cluster(&rest),
        "wheel" => wheel::run(&rest),
        "package" => package::run(&rest),
        "vllm-hashes" => vllm_hashes::run(&rest),
        "engines" => engines::run(&rest),
        "bench-docs" => bench_docs::run(&rest),
        "chaos-docs" => chaos_docs::run(&rest),
        "" | "-h" | "--help" | "help" => {
            let only = rest.first().map(String::as_str);
            if only.is_some_and(|o| !COMMANDS.iter().any(|(name, ..)| *name == o)) {
                Err(anyhow::anyhow!(
                    "unknown command `{}`\n\n{}",
                    rest[0],
                    usage(None)
                ))
            } else {
                println!("{}", usage(only));
                Ok(())
            }
        }
        other => Err(anyhow::anyhow!(
            "unknown command `{other}`\n\n{}",
            usage(None)
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A message with its causes, never a backtrace (whatever RUST_BACKTRACE says): what
        // failed and why is in the message.
        Err(e) => {
            eprintln!("cargo xtask {cmd}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags a command's source reads (`"--x" =>` arms, `a == "--x"` tests).
    fn flags_read(source: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, _) in source.match_indices("\"--") {
            let rest = &source[i + 1..];
            let Some(end) = rest.find('"') else { continue };
            let flag = &rest[..end];
            let after = rest[end + 1..].trim_start();
            let before = source[..i].trim_end();
            if (after.starts_with("=>") || before.ends_with("==") || after.starts_with('|'))
                && flag[2..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-')
            {
                out.push(flag.to_owned());
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn the_usage_lists_every_command_and_flag() {
        let sources = [
            ("demo", include_str!("demo.rs")),
            ("chaos", include_str!("chaos.rs")),
            ("bench", include_str!("bench.rs")),
            ("fuzz", include_str!("fuzz.rs")),
            ("cluster", include_str!("common.rs")),
            ("wheel", include_str!("wheel.rs")),
            ("bench-docs", include_str!("bench_docs.rs")),
            ("chaos-docs", include_str!("chaos_docs.rs")),
        ];
        for (command, source) in sources {
            let (_, args, _) = COMMANDS
                .iter()
                .find(|(name, ..)| *name == command)
                .unwrap_or_else(|| panic!("{command} is not in the usage"));
            let flags = flags_read(source);
            assert!(!flags.is_empty(), "{command}: no flags found in its source");
            for flag in flags {
                assert!(
                    args.contains(&flag),
                    "{command} reads {flag}, its usage lacks it: {args}"
                );
            }
        }
        // Every command main dispatches is in the usage.
        let main = include_str!("main.rs");
        let dispatch = &main[main.find("let result = match cmd.as_str()").unwrap()..];
        let dispatch = &dispatch[..dispatch.find("other =>").unwrap()];
        let arms = dispatch
            .lines()
            .filter(|l| l.trim_start().starts_with('"') && l.contains("=>"));
        let mut checked = 0;
        for arm in arms.map(|l| l.split("=>").next().unwrap()) {
            for name in arm.split('|').map(|n| n.trim().trim_matches('"')) {
                if !name.is_empty() && !name.starts_with('-') {
                    let listed = usage(None).contains(&format!("\n  {name}"));
                    assert!(listed, "{name} is not in the usage");
                    checked += 1;
                }
            }
        }
        assert!(
            checked >= 12,
            "only {checked} commands found in main's dispatch"
        );
        let one = usage(Some("bench"));
        assert!(
            one.contains("--concurrency N") && !one.contains("chaos"),
            "{one}"
        );
        assert!(usage(None).lines().all(|l| l.len() <= 100));
    }
}

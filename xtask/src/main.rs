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
//! - `bench-docs`: regenerate docs/benchmarks.md's table from docs/bench-results.json.
//! - `vllm-hashes`: regenerate crates/decode/tests/vllm_hashes.tsv from vLLM's own hasher
//!   (its 336 MB wheel) and fail on any difference, then test our digest on it; `test` runs
//!   the same check.
//! - `package`: `cargo package` of the publishable crates, their doctests from the packaged
//!   sources, and the MSRV check; `test` runs it too.
//! - `wheel`: the manylinux abi3 wheel of crates/python; `--test` installs it into clean
//!   CPython 3.9 and 3.13 venvs and tests it with the host's libturbojpeg masked.

mod bench;
mod bench_docs;
mod chaos;
mod common;
mod demo;
mod fuzz;
mod gate;
mod package;
mod setup;
mod svg;
mod vllm_hashes;
mod wheel;
mod wheel_mask;

use anyhow::bail;

const USAGE: &str = "\
usage: cargo xtask <command>

  test                 prerequisites, fmt, clippy, tests, docs (what CI runs)
  demo [--metrics]     run the fleet demo on a local origin and Redis Cluster
  chaos [--scenario NAME]... [--quick] [--out DIR]
                       fault injection on a live fleet (default: every scenario)
  bench [--scenario NAME]... [--concurrency N] [--loaders K] [--quick] [--out DIR]
                       benchmarks against same-run baselines (release build)
  fuzz [--target T]... [--secs N]
                       coverage-guided fuzzing, N s per target (default 20); fails on a crash or hang
  cluster [--masters N] [--tls]
                       start a local Redis Cluster until Enter is pressed
  wheel [--target TRIPLE] [--test]
                       the manylinux abi3 wheel into target/wheels; --test: install and test it
  bench-docs [--results FILE | --merge FILE] [--check]
                       regenerate docs/benchmarks.md's table from docs/bench-results.json
  package              cargo package (verified), packaged doctests, MSRV check (run before a release)
  vllm-hashes          regenerate the vLLM hash vectors from vLLM's wheel, fail on a difference";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match cmd.as_str() {
        "test" => gate::run(&rest),
        "demo" => demo::run(&rest),
        "chaos" => chaos::run(&rest),
        "bench" => bench::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "cluster" => common::run_cluster(&rest),
        "wheel" => wheel::run(&rest),
        "package" => package::run(&rest),
        "vllm-hashes" => vllm_hashes::run(&rest),
        "bench-docs" => bench_docs::run(&rest),
        "" | "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command `{other}`\n\n{USAGE}"),
    }
}

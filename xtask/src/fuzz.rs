//! `cargo xtask fuzz [--target T]... [--secs N | --build-only]`: coverage-guided fuzzing of the
//! input surfaces (fuzz/src/bin/*.rs) with cargo-afl and AFL++, each target for a bounded time.
//! Fails when any target found a crash or a hang; prints, per target, the edges covered, the
//! corpus size and the executions per second. See docs/fuzzing.md.

mod seeds;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::setup::step;

/// The cargo-afl release the fuzz crate's `afl` dependency matches (fuzz/Cargo.toml).
const CARGO_AFL_VERSION: &str = "0.18.2";

/// Every target: a binary of fuzz/ and the folder of committed regression inputs the crate's
/// tests replay (also used as seeds).
const TARGETS: [(&str, &str); 5] = [
    ("decode", "crates/decode/tests/fuzz"),
    ("data_url", "crates/loader/tests/fuzz"),
    ("url_policy", "crates/origin/tests/fuzz"),
    ("scope", "crates/scope/tests/fuzz"),
    ("disk_entry", "crates/disk-cache/tests/fuzz"),
];

/// Seconds per target when `--secs` is not given.
const DEFAULT_SECS: u64 = 20;

/// One execution longer than this is a hang. Generous for a loaded 2-core machine: the slowest
/// seed takes a few milliseconds.
const HANG_MS: u64 = 2000;

/// Address-space limit of a target, in MiB: an input that makes a decoder allocate without
/// bound aborts on it and is saved as a crash.
const MEMORY_MB: u64 = 4096;

const BUILD_DIR: &str = "target/fuzz/build";
const WORK_DIR: &str = "target/fuzz";

/// `cargo xtask fuzz`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Fuzz this target (repeat for more; default: every one)
    #[arg(
        long = "target",
        value_name = "T",
        value_parser = TARGETS.map(|(t, _)| t),
    )]
    targets: Vec<String>,
    /// Seconds per target
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_SECS,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    secs: u64,
    /// Install cargo-afl and build the targets, fuzz nothing (CI builds them beside the gate)
    #[arg(long, conflicts_with = "secs")]
    build_only: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let secs = args.secs;
    let names = TARGETS.map(|(t, _)| t);
    // In the order given (clap checked each is a target).
    let targets: Vec<&'static str> = if args.targets.is_empty() {
        names.to_vec()
    } else {
        let known = |a: &String| names.into_iter().find(|t| t == a);
        args.targets.iter().filter_map(known).collect()
    };
    ensure_prerequisites()?;
    let started = Instant::now();
    let mut build = Command::new("cargo");
    build.args(["afl", "build", "--release", "--locked", "--manifest-path"]);
    build.args(["fuzz/Cargo.toml", "--target-dir", BUILD_DIR]);
    for t in &targets {
        build.args(["--bin", t]);
    }
    step("cargo afl build (fuzz/)", &mut build)?;
    println!("built in {:.0} s", started.elapsed().as_secs_f64());
    if args.build_only {
        println!(
            "xtask fuzz: {} target(s) built in {BUILD_DIR}",
            targets.len()
        );
        return Ok(());
    }

    // One afl-fuzz per core at a time (each is single-threaded): the same seconds per target
    // in a fraction of the wall time.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut reports = Vec::new();
    for batch in targets.chunks(cores) {
        let results: Vec<anyhow::Result<Report>> = std::thread::scope(|s| {
            let runs: Vec<_> = batch
                .iter()
                .map(|target| s.spawn(move || fuzz_one(target, secs)))
                .collect();
            runs.into_iter()
                .map(|r| r.join().unwrap_or_else(|_| bail!("a fuzz run panicked")))
                .collect()
        });
        for r in results {
            reports.push(r?);
        }
    }
    print_table(&reports);
    let failed: Vec<&Report> = reports.iter().filter(|r| !r.findings.is_empty()).collect();
    if failed.is_empty() {
        println!(
            "xtask fuzz: no crash or hang in {} target(s)",
            reports.len()
        );
        return Ok(());
    }
    for r in &failed {
        println!(
            "{}: {} finding(s); replay one with",
            r.target,
            r.findings.len()
        );
        println!("  {BUILD_DIR}/release/{} < FILE", r.target);
        for f in &r.findings {
            println!("  {}", f.display());
        }
    }
    bail!(
        "fuzzing found crashes or hangs in {}",
        failed
            .iter()
            .map(|r| r.target)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// What one target's run showed, from AFL++'s `fuzzer_stats`.
#[derive(Debug)]
struct Report {
    target: &'static str,
    seeds: usize,
    edges_found: u64,
    total_edges: u64,
    corpus: u64,
    execs: u64,
    execs_per_sec: f64,
    findings: Vec<PathBuf>,
}

fn fuzz_one(target: &'static str, secs: u64) -> anyhow::Result<Report> {
    let work = Path::new(WORK_DIR).join(target);
    let (seed_dir, out_dir, scratch) = (work.join("seeds"), work.join("out"), work.join("tmp"));
    for d in [&seed_dir, &out_dir, &scratch] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("clear {}", d.display()))?;
        }
    }
    std::fs::create_dir_all(&seed_dir)?;
    std::fs::create_dir_all(&scratch)?;
    let mut seeds = seeds::write(target, &seed_dir)?;
    let regressions = TARGETS.iter().find(|(t, _)| *t == target).map(|(_, d)| d);
    if let Some(dir) = regressions.map(Path::new).filter(|d| d.is_dir()) {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_file() {
                let name = format!(
                    "regression-{}",
                    path.file_name().unwrap_or_default().display()
                );
                std::fs::copy(&path, seed_dir.join(name))?;
                seeds += 1;
            }
        }
    }

    let binary = Path::new(BUILD_DIR).join("release").join(target);
    // AFL++ skips a seed that crashes with a warning only: replay each one first, so a
    // committed regression input that fails again fails the run.
    let mut findings = replay_seeds(&binary, &seed_dir, &scratch)?;
    let log_path = work.join("afl.log");
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new("cargo");
    cmd.args(["afl", "fuzz", "-i"])
        .arg(&seed_dir)
        .arg("-o")
        .arg(&out_dir)
        .args(["-V", &secs.to_string(), "-t", &HANG_MS.to_string()])
        .args(["-m", &MEMORY_MB.to_string()]);
    let dict = Path::new("fuzz/dict").join(format!("{target}.dict"));
    if dict.exists() {
        cmd.arg("-x").arg(&dict);
    }
    cmd.arg("--")
        .arg(&binary)
        // A CI machine: no UI, no CPU governor or core-dump handler checks, no CPU pinning on
        // a machine whose cores other jobs use.
        .env("AFL_NO_UI", "1")
        .env("AFL_SKIP_CPUFREQ", "1")
        .env("AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES", "1")
        .env("AFL_NO_AFFINITY", "1")
        .env("AFL_FAST_CAL", "1")
        .env("MMCACHE_FUZZ_DIR", std::env::current_dir()?.join(&scratch))
        .stdout(log.try_clone()?)
        .stderr(log);
    println!("==> fuzz {target} for {secs} s ({seeds} seeds)");
    let status = cmd.status().context("run cargo afl fuzz")?;
    let stats_path = out_dir.join("default/fuzzer_stats");
    if !status.success() || !stats_path.exists() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for line in tail.into_iter().rev() {
            println!("  | {line}");
        }
        bail!(
            "afl-fuzz failed on {target} ({status}); log: {}",
            log_path.display()
        );
    }
    let stats = parse_stats(&std::fs::read_to_string(&stats_path)?);
    let num = |k: &str| {
        stats
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for kind in ["crashes", "hangs"] {
        let dir = out_dir.join("default").join(kind);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("id:") {
                    findings.push(e.path());
                }
            }
        }
    }
    findings.sort();
    let _ = std::fs::remove_dir_all(&scratch);
    let execs = num("execs_done");
    let run_time = num("run_time").max(1);
    Ok(Report {
        target,
        seeds,
        edges_found: num("edges_found"),
        total_edges: num("total_edges"),
        corpus: num("corpus_count"),
        execs,
        execs_per_sec: execs as f64 / run_time as f64,
        findings,
    })
}

/// Runs `binary` once on each seed (outside AFL++ it reads one input from standard input);
/// returns the seeds it crashed on or that took longer than [`HANG_MS`].
fn replay_seeds(binary: &Path, seeds: &Path, scratch: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut failed = Vec::new();
    for entry in std::fs::read_dir(seeds)? {
        let path = entry?.path();
        let mut child = Command::new(binary)
            .stdin(std::fs::File::open(&path)?)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .env("MMCACHE_FUZZ_DIR", std::env::current_dir()?.join(scratch))
            .spawn()
            .with_context(|| format!("run {}", binary.display()))?;
        let started = Instant::now();
        let ok = loop {
            if let Some(status) = child.try_wait()? {
                break status.success();
            }
            if started.elapsed().as_millis() > u128::from(HANG_MS) {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        if !ok {
            failed.push(path);
        }
    }
    Ok(failed)
}

/// `key : value` lines.
fn parse_stats(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

fn print_table(reports: &[Report]) {
    println!(
        "\n{:<12} {:>18} {:>7} {:>6} {:>7} {:>10} {:>8} {:>9}",
        "target", "edges found/total", "cover", "seeds", "corpus", "execs", "execs/s", "findings"
    );
    for r in reports {
        let cover = 100.0 * r.edges_found as f64 / r.total_edges.max(1) as f64;
        println!(
            "{:<12} {:>18} {:>6.1}% {:>6} {:>7} {:>10} {:>8.0} {:>9}",
            r.target,
            format!("{}/{}", r.edges_found, r.total_edges),
            cover,
            r.seeds,
            r.corpus,
            r.execs,
            r.execs_per_sec,
            r.findings.len()
        );
    }
}

/// cargo-afl at the pinned version, with the AFL++ it builds (afl-fuzz and the runtime the
/// targets link), and what building AFL++ needs: `make` and a C compiler. Installed when
/// missing and running as root (as `cargo xtask test` installs its packages); otherwise the
/// error says the exact commands.
fn ensure_prerequisites() -> anyhow::Result<()> {
    crate::setup::ensure_debian_packages(&[
        (crate::setup::have("command -v make"), "make"),
        (crate::setup::have("command -v cc"), "gcc"),
        // Optional for the targets (pure-Rust JPEG without it), but then the libjpeg-turbo
        // path goes unfuzzed.
        (libjpeg_turbo_loads(), "libturbojpeg0"),
    ])?;
    let version = cargo_afl_version();
    let wanted = format!("cargo-afl {CARGO_AFL_VERSION}");
    if !version.starts_with(&wanted) {
        let install = format!("cargo install cargo-afl --locked --version {CARGO_AFL_VERSION}");
        if !crate::setup::is_root() {
            let found = if version.is_empty() {
                "none"
            } else {
                version.as_str()
            };
            bail!("cargo-afl {CARGO_AFL_VERSION} is needed (found: {found}): run `{install}`");
        }
        // Its build script builds AFL++ 4.40c from the source in the crate (about 2 minutes).
        step(
            &install,
            Command::new("cargo")
                .args(["install", "cargo-afl", "--locked", "--force"])
                .args(["--version", CARGO_AFL_VERSION]),
        )?;
    }
    if !cargo_afl_version().contains("AFL++ version") {
        // Installed, but AFL++ was not built for this toolchain (e.g. after a rustup update).
        step(
            "cargo afl config --build --force",
            Command::new("cargo").args(["afl", "config", "--build", "--force"]),
        )?;
    }
    Ok(())
}

/// `cargo afl --version`, e.g. `cargo-afl 0.18.2 (AFL++ version 4.40c)`, or empty.
fn cargo_afl_version() -> String {
    Command::new("cargo")
        .args(["afl", "--version"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn libjpeg_turbo_loads() -> bool {
    use mmcache_decode::{JpegDecoderChoice, select_jpeg_decoder};
    select_jpeg_decoder(JpegDecoderChoice::LibjpegTurbo, None).is_ok()
}

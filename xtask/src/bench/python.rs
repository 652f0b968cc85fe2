//! `cargo xtask bench --scenario python`: what a Dynamo worker gets from mmcache's drop-in
//! (`mmcache.dynamo.ImageLoader`, PIL images) and its numpy API (`mmcache.Loader`), release
//! builds, against Dynamo's own `ImageLoader` from the ai-dynamo wheel, each in a process of its
//! own, by crates/python/bench/dynamo_compare.py. Its table goes to `python.md`; its figures to
//! `python.json`, whose `rows` have the form of docs/bench-results.json (a full run adds them to
//! `results.json`; `cargo xtask bench-docs --python target/bench` records a run of
//! this scenario alone). It runs in target/venv-bench, built on first use.

use std::process::Command;

use anyhow::Context;

use super::{Opts, Row};
use crate::setup;

/// The wheel whose `ImageLoader` is the baseline, and the packages its image path imports.
/// `--no-deps`: the wheel's own dependencies (its compiled runtime, torch) are not needed.
const DYNAMO: &str = "ai-dynamo==1.6.1";
const DYNAMO_IMPORTS: [&str; 2] = ["httpx==0.28.1", "aiohttp==3.14.5"];
/// A venv of its own: with Dynamo installed, `mmcache.dynamo` would raise Dynamo's exception
/// classes, and the tests in target/venv must keep testing its own.
const BENCH_VENV: &str = "target/venv-bench";

/// Runs crates/python/bench/`script` (`dynamo_compare.py`, or `host_compare.py` for the host
/// pixel tier's processes against Dynamo's and the disk tier's hits) in target/venv-bench;
/// its figures go to `<name>.json`, its table to `<name>.md`.
pub(super) fn bench_venv_script(o: &Opts, script: &str, name: &str) -> anyhow::Result<Vec<Row>> {
    let python = setup::python_venv(BENCH_VENV)?;
    let pip = |args: &[&str]| {
        let mut cmd = Command::new(&python);
        cmd.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(args);
        cmd
    };
    setup::step(
        &format!("pip install --no-deps {DYNAMO}"),
        &mut pip(&["--no-deps", DYNAMO]),
    )?;
    setup::step("pip install httpx aiohttp", &mut pip(&DYNAMO_IMPORTS))?;
    setup::maturin_develop(BENCH_VENV, true)?;
    let json = o.out.join(format!("{name}.json"));
    let mut cmd = Command::new(&python);
    cmd.arg(format!("crates/python/bench/{script}"))
        .arg("--out")
        .arg(&json);
    if o.quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("run crates/python/bench/{script}"))?;
    anyhow::ensure!(out.status.success(), "{script} failed ({})", out.status);
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    std::fs::write(o.out.join(format!("{name}.md")), table.as_bytes())?;
    Ok(Vec::new())
}

/// The rows of the last run's `<name>.json` (`python`, `vllm`, `sglang`), in the form of
/// docs/bench-results.json.
pub(super) fn rows(o: &Opts, name: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let path = o.out.join(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    Ok(json["rows"].as_array().cloned().unwrap_or_default())
}

/// `cargo xtask bench --scenario vllm` (or `sglang`): mmcache's vLLM connector (or SGLang
/// plugin), a release build, against the engine's own image loading (and, for vLLM, Dynamo's
/// connector), by crates/python/bench/engines_compare.py in target/venv-engines. Its figures go
/// to `<engine>.json` (rows of docs/bench-results.json's form: `cargo xtask bench-docs --merge
/// target/bench/<engine>.json` records them), its table to `<engine>.md`.
pub(super) fn engines_compare(o: &Opts, engine: &str) -> anyhow::Result<Vec<Row>> {
    let python = crate::engines::engines_venv()?;
    setup::maturin_develop(crate::engines::ENGINES_VENV, true)?;
    let json = o.out.join(format!("{engine}.json"));
    let mut cmd = Command::new(&python);
    cmd.arg("crates/python/bench/engines_compare.py")
        .args(["--engine", engine])
        .arg("--out")
        .arg(&json);
    if engine == "vllm" {
        // Dynamo's vLLM connector is one of vLLM's baselines.
        let wheel = setup::dynamo_wheel(&setup::python_venv(setup::VENV)?)?;
        cmd.env("MMCACHE_DYNAMO_WHEEL", &wheel);
    }
    if o.quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("run crates/python/bench/engines_compare.py")?;
    anyhow::ensure!(
        out.status.success(),
        "engines_compare.py failed ({})",
        out.status
    );
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    std::fs::write(o.out.join(format!("{engine}.md")), table.as_bytes())?;
    Ok(Vec::new())
}

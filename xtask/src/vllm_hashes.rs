//! vLLM's hasher against our vectors: downloads vLLM's wheel into target/vllm, regenerates
//! crates/decode/tests/vllm_hashes.tsv from its own `MultiModalHasher` into a file there and
//! fails on any difference from the committed file.
//!
//! A gate step ([`download`], in the background while the gate compiles, then [`check`]): the
//! wheel is 336 MB; its download took 64 s and 33 s here (`pip download --no-cache-dir`,
//! 2026-12-01), 17 s from pip's cache, about 2 % of the gate. The gate's
//! `cargo test --workspace` runs the Rust test on the committed vectors
//! (crates/decode/tests/it/vllm_hash.rs), so the two together prove our digest is vLLM's.
//! `cargo xtask vllm-hashes` ([`run`]) does the same alone, then that Rust test.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::setup::{VENV, pip_download, python_venv, step};

/// The vLLM release whose hasher the vectors come from (as the TSV's header says).
const VLLM: &str = "vllm==0.33.0";
/// Where the wheel and its unpacked `hasher.py` go.
const DIR: &str = "target/vllm";
/// The committed vectors.
const COMMITTED: &str = "crates/decode/tests/vllm_hashes.tsv";
/// The one member of the wheel the generator imports.
const HASHER: &str = "vllm/multimodal/hasher.py";

/// `cargo xtask vllm-hashes`: [`download`], [`check`], then the Rust test on the committed
/// vectors.
pub(crate) fn run() -> anyhow::Result<()> {
    let python = python_venv(VENV)?;
    download(&python)?;
    check(&python)?;
    // `--workspace`: with `-p` cargo resolves features for that package alone and rebuilds
    // its dependencies. The test is the module `vllm_hash` of mmcache-decode's `it` binary.
    step(
        "cargo test --workspace --test it -- vllm_hash::",
        Command::new("cargo").args(["test", "--workspace", "--test", "it", "--", "vllm_hash::"]),
    )?;
    println!("xtask vllm-hashes: {COMMITTED} is vLLM's, and our digest matches it");
    Ok(())
}

/// Downloads the wheel into target/vllm with `python`'s pip (which skips it when present).
pub(crate) fn download(python: &str) -> anyhow::Result<()> {
    pip_download(python, VLLM, DIR)
}

/// Regenerates the vectors from the downloaded wheel with `python` and fails on any difference
/// from the committed file.
pub(crate) fn check(python: &str) -> anyhow::Result<()> {
    let wheel = wheel_in(Path::new(DIR))?;
    step(
        &format!("unzip {HASHER}"),
        Command::new(python).args([
            "-c",
            "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])",
            &wheel,
            HASHER,
            DIR,
        ]),
    )?;
    let fresh = format!("{DIR}/vllm_hashes.tsv");
    step(
        "tests/vllm/make_vllm_hashes.py",
        Command::new(python)
            .args(["tests/vllm/make_vllm_hashes.py", &fresh])
            .env("VLLM_SRC", DIR),
    )?;
    compare(&fresh, COMMITTED)
}

/// The one `vllm-<version>-*.whl` of `dir` (pip names it by platform tag).
fn wheel_in(dir: &Path) -> anyhow::Result<String> {
    let version = VLLM.trim_start_matches("vllm==");
    let prefix = format!("vllm-{version}-");
    for entry in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(path.display().to_string());
        }
    }
    bail!("no {prefix}*.whl in {}", dir.display())
}

/// Fails, naming the first differing line, unless `fresh` and `committed` are the same bytes.
fn compare(fresh: &str, committed: &str) -> anyhow::Result<()> {
    let (a, b) = (
        std::fs::read_to_string(fresh).with_context(|| format!("read {fresh}"))?,
        std::fs::read_to_string(committed).with_context(|| format!("read {committed}"))?,
    );
    if a == b {
        println!("==> {committed} equals the regenerated {fresh}");
        return Ok(());
    }
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let line = (0..la.len().max(lb.len()))
        .find(|&i| la.get(i) != lb.get(i))
        .unwrap_or(0);
    let short = |l: Option<&&str>| {
        l.map_or_else(
            || "(none)".to_owned(),
            |l| {
                let tail: String = l.chars().rev().take(72).collect();
                format!("…{}", tail.chars().rev().collect::<String>())
            },
        )
    };
    bail!(
        "{committed} differs from vLLM's hasher at line {}:\n  committed:   {}\n  regenerated: {}\n\
         (regenerate it with tests/vllm/make_vllm_hashes.py, or find what changed)",
        line + 1,
        short(lb.get(line)),
        short(la.get(line)),
    )
}

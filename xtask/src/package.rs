//! `cargo xtask package`: proves the publishable crates work as crates.io would ship them.
//!
//! 1. `cargo package` of every publishable crate, in dependency order, with full verification:
//!    each `.crate` is unpacked and built against the packaged (not the workspace) sources of the
//!    crates it depends on.
//! 2. The doctests of every packaged library, run from the unpacked `.crate`: what docs.rs shows
//!    must compile with published crates only (the packaged manifests have no path to
//!    `mmcache-test-support`, which is not published).
//! 3. The root README's Rust examples are the loader README's (compiled there as doctests).
//! 4. `cargo +<rust-version> check` of the publishable crates: the declared MSRV holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::setup::step;

/// The crates published to crates.io, in dependency order.
pub(crate) const PUBLISHED: [&str; 8] = [
    "mmcache-metrics",
    "mmcache-scope",
    "mmcache-origin",
    "mmcache-decode",
    "mmcache-disk-cache",
    "mmcache-shared-cache",
    "mmcache-loader",
    "mmcache-cli",
];

/// Workspace members that are never published (`publish = false` in their manifests).
const UNPUBLISHED: [&str; 3] = ["mmcache-test-support", "mmcache-python", "xtask"];

pub(crate) fn run() -> anyhow::Result<()> {
    check()
}

/// `cargo package` of every publishable crate, in dependency order, with `extra` arguments.
fn cargo_package(what: &str, extra: &[&str]) -> anyhow::Result<()> {
    let mut package = Command::new("cargo");
    // --allow-dirty: what is checked is the packaged content, not whether it was committed.
    package.args(["package", "--workspace", "--locked", "--allow-dirty"]);
    package.args(extra);
    for name in UNPUBLISHED {
        package.args(["--exclude", name]);
    }
    step(what, &mut package)
}

/// What the gate runs (about 20 s): every publishable crate packages (manifest, metadata,
/// versions of its workspace dependencies, the files it ships), without building the packages.
pub(crate) fn check_contents() -> anyhow::Result<()> {
    cargo_package("cargo package --no-verify", &["--no-verify"])
}

/// Every check of this module, as `cargo xtask package` runs it.
pub(crate) fn check() -> anyhow::Result<()> {
    cargo_package("cargo package (verified)", &[])?;
    packaged_doctests()?;
    readme_examples_are_tested()?;
    msrv_check()
}

/// Unpacks each `.crate` outside the workspace and runs its doctests there, with the other
/// packaged crates patched in for the ones crates.io does not have yet.
fn packaged_doctests() -> anyhow::Result<()> {
    let root = std::env::current_dir()?;
    let version = workspace_field("version")?;
    let scratch = std::env::temp_dir().join(format!("mmcache-packaged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let dirs: Vec<(&str, PathBuf)> = PUBLISHED
        .iter()
        .map(|name| (*name, scratch.join(format!("{name}-{version}"))))
        .collect();
    for (name, _) in &dirs {
        let file = root.join(format!("target/package/{name}-{version}.crate"));
        step(
            &format!("unpack {name}"),
            Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&scratch),
        )?;
    }
    let result = (|| {
        for (name, dir) in &dirs {
            if !dir.join("src/lib.rs").exists() {
                continue; // a binary crate: no doctests
            }
            // The workspace's lock file: the same dependency versions as every other step.
            std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))?;
            let mut cmd = Command::new("cargo");
            cmd.args(["test", "--doc", "--quiet"])
                .current_dir(dir)
                // The target directory `cargo package` verifies in: the same dependency builds.
                .env("CARGO_TARGET_DIR", root.join("target"));
            for (other, other_dir) in &dirs {
                cmd.arg("--config").arg(format!(
                    "patch.crates-io.{other}.path={:?}",
                    other_dir.display().to_string()
                ));
            }
            step(&format!("doctests of the packaged {name}"), &mut cmd)?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// `cargo +<rust-version> check` of the published crates; rustup installs that toolchain
/// (minimal profile) when it is missing.
fn msrv_check() -> anyhow::Result<()> {
    let msrv = workspace_field("rust-version")?;
    let toolchain = format!("+{msrv}");
    if !crate::setup::have(&format!("cargo {toolchain} --version >/dev/null 2>&1")) {
        step(
            &format!("rustup toolchain install {msrv}"),
            Command::new("rustup").args(["toolchain", "install", &msrv, "--profile", "minimal"]),
        )?;
    }
    let mut cmd = Command::new("cargo");
    cmd.args([toolchain.as_str(), "check", "--locked", "--quiet"]);
    for name in PUBLISHED {
        cmd.args(["-p", name]);
    }
    step(&format!("check with Rust {msrv} (rust-version)"), &mut cmd)
}

/// A field of `[workspace.package]` in the root Cargo.toml (`version`, `rust-version`).
fn workspace_field(field: &str) -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string("Cargo.toml").context("read Cargo.toml")?;
    let section = manifest
        .split("[workspace.package]")
        .nth(1)
        .context("Cargo.toml has no [workspace.package]")?;
    section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == field).then(|| value.trim().trim_matches('"').to_owned())
        })
        .with_context(|| format!("[workspace.package] has no {field}"))
}

/// The root README's ```rust blocks must appear verbatim in crates/loader/README.md, which the
/// loader includes as doctests (the root README is outside every package, so it cannot be).
fn readme_examples_are_tested() -> anyhow::Result<()> {
    println!("==> README examples are the loader README's");
    let root = std::fs::read_to_string("README.md")?;
    let loader = std::fs::read_to_string(Path::new("crates/loader/README.md"))?;
    let blocks = rust_blocks(&root);
    ensure!(!blocks.is_empty(), "README.md has no ```rust example");
    for block in blocks {
        ensure!(
            loader.contains(&block),
            "this README.md example is not in crates/loader/README.md, so no doctest checks it:\n{block}"
        );
    }
    Ok(())
}

/// The bodies of the fenced blocks whose info string starts with `rust`.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) if info.starts_with("rust") => current = Some(String::new()),
            (Some(body), Some(_)) => {
                blocks.push(std::mem::take(body));
                current = None;
            }
            (Some(body), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

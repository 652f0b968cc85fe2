//! `cargo xtask test`: the full gate, identical locally and in CI.

use std::process::Command;

use anyhow::{Context, bail};

/// Debian packages the tests need, with the command that proves each is there.
const PREREQUISITES: [(&str, &str); 3] = [
    ("redis-server", "redis-server"),
    ("redis-cli", "redis-tools"),
    ("openssl", "openssl"),
];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    if let Some(a) = args.first() {
        bail!("`cargo xtask test` takes no arguments (got `{a}`)");
    }
    ensure_prerequisites()?;
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
    step("test", Command::new("cargo").args(["test", "--workspace"]))?;
    step(
        "doc",
        Command::new("cargo")
            .args(["doc", "--no-deps", "--workspace"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    println!("xtask test: all gates passed");
    Ok(())
}

fn step(name: &str, cmd: &mut Command) -> anyhow::Result<()> {
    println!("==> {name}");
    let status = cmd.status().with_context(|| format!("run {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

fn have(binary: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {binary}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs missing Debian packages when running as root; otherwise says the exact command.
pub(crate) fn ensure_prerequisites() -> anyhow::Result<()> {
    let missing: Vec<&str> = PREREQUISITES
        .iter()
        .filter(|(bin, _)| !have(bin))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get install -y {}", missing.join(" "));
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !is_root || !have("apt-get") {
        bail!(
            "missing {}: install them with `sudo apt-get update && sudo {install}`",
            missing.join(", ")
        );
    }
    println!("==> installing {}", missing.join(" "));
    step(
        "apt-get update",
        Command::new("apt-get").args(["update", "-qq"]),
    )?;
    step(
        "apt-get install",
        Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(())
}

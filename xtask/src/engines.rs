//! `cargo xtask engines`: the virtual environment `target/venv-engines`, in which the real
//! vLLM 0.34.0 and SGLang 0.5.23 media code runs on CPU (vLLM's MediaConnector, hasher, video
//! and audio loaders and OpenAI server app; SGLang's `load_image` and plugin hooks), so the
//! oracle tests can run theirs beside ours; then tests/engines/smoke.py in it.
//!
//! vLLM and SGLang go in with `--no-deps`: their own dependency lists are GPU builds, and vLLM's
//! `flashinfer-python` pin is not on the registry. tests/engines/requirements.txt then pins what
//! the modules we run import: torch with its CUDA packages (it loads them at import, even on
//! CPU; about 6 GB), and the pure-Python rest. torch's and CUDA's large wheels go in first, one
//! pip each, to bound the disk a download holds. The venv is kept under target/ and reused: pip
//! skips what is installed, so a warm run costs a few seconds of pip and the smoke.

use std::process::Command;

use anyhow::{Context, bail};

use crate::setup::{step, venv_python};

/// Where the venv lives (kept, like target/venv).
pub(crate) const ENGINES_VENV: &str = "target/venv-engines";
/// The engines, installed without their dependencies.
const ENGINES: [&str; 2] = ["vllm==0.34.0", "sglang==0.5.23"];
/// What their media code imports, torch included, every version pinned.
const REQUIREMENTS: &str = "tests/engines/requirements.txt";
/// Imports and exercises each engine module the oracle tests use; fails on any error.
const SMOKE: &str = "tests/engines/smoke.py";

/// `cargo xtask engines`: [`engines_venv`], then [`check_engines`].
pub(crate) fn run() -> anyhow::Result<()> {
    let python = engines_venv()?;
    check_engines(&python)?;
    println!("xtask engines: vLLM's and SGLang's media code runs in {ENGINES_VENV}");
    Ok(())
}

/// Makes target/venv-engines when missing and installs the engines and their requirements into
/// it (pip skips what is already there). Returns the venv's interpreter, an absolute path.
pub(crate) fn engines_venv() -> anyhow::Result<String> {
    // Read first: a bad pin fails before any download.
    let requirements =
        std::fs::read_to_string(REQUIREMENTS).with_context(|| format!("read {REQUIREMENTS}"))?;
    let large = large_pins(&requirements)?;
    let python = venv_python(ENGINES_VENV)?;
    step(
        &format!("pip install --no-deps {}", ENGINES.join(" ")),
        pip(&python).arg("--no-deps").args(ENGINES),
    )?;
    // The large wheels first, each by a pip of its own: one pip keeps every wheel it downloads
    // until it ends, which would hold about 3.2 GB of them beside the venv at once.
    let installed = installed_pins(&python)?;
    for pin in large {
        if !installed.contains(&normalized(pin)) {
            step(
                &format!("pip install --no-deps {pin}"),
                pip(&python).arg("--no-deps").arg(pin),
            )?;
        }
    }
    step(
        &format!("pip install -r {REQUIREMENTS}"),
        pip(&python).args(["-r", REQUIREMENTS]),
    )?;
    Ok(python)
}

/// The pins of `requirements` for torch, triton and CUDA's libraries (`nvidia-*`), most of whose
/// wheels are hundreds of megabytes. Each must be a plain `name==version`: it goes to a pip of its
/// own and is compared with `pip freeze`'s lines.
fn large_pins(requirements: &str) -> anyhow::Result<Vec<&str>> {
    let mut large = Vec::new();
    for line in requirements.lines() {
        let pin = line.split('#').next().unwrap_or_default().trim();
        let name_len = pin
            .find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
            .unwrap_or(pin.len());
        let name = normalized(&pin[..name_len]);
        if !(name == "torch" || name == "triton" || name.starts_with("nvidia-")) {
            continue;
        }
        let plain = pin[name_len..].strip_prefix("==").is_some_and(|version| {
            !version.is_empty()
                && version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.+!".contains(c))
        });
        if !plain {
            bail!("{REQUIREMENTS}: {pin:?} is not a plain name==version pin");
        }
        large.push(pin);
    }
    Ok(large)
}

/// What the venv of `python` holds, as normalized `name==version` pins.
fn installed_pins(python: &str) -> anyhow::Result<std::collections::HashSet<String>> {
    let out = Command::new(python)
        .args(["-m", "pip", "freeze", "--disable-pip-version-check"])
        .output()
        .context("run pip freeze")?;
    if !out.status.success() {
        bail!(
            "pip freeze failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(normalized)
        .collect())
}

/// A name, or the name of a `name==version` pin, normalized as pip compares names (PEP 503: case
/// and runs of `-_.` don't matter).
fn normalized(pin: &str) -> String {
    let (name, version) = match pin.split_once("==") {
        Some((name, version)) => (name, Some(version.trim())),
        None => (pin, None),
    };
    let name = name
        .split(['-', '_', '.'])
        .filter(|part| !part.is_empty())
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join("-");
    match version {
        Some(version) => format!("{name}=={version}"),
        None => name,
    }
}

/// Runs tests/engines/smoke.py with the venv's `python`: every engine module the oracle tests
/// use imports and works on CPU.
pub(crate) fn check_engines(python: &str) -> anyhow::Result<()> {
    step(SMOKE, Command::new(python).arg(SMOKE))
}

/// `pip install` into the venv of `python`. `--no-warn-conflicts`: vLLM's and SGLang's declared
/// dependencies are left out on purpose, and pip would list every one of them as a conflict.
/// No pip cache (`PIP_NO_CACHE_DIR`, which reaches any pip it starts): a cache would keep about
/// 3.2 GB of wheels beside the 6.9 GB venv, and CI ran out of disk with one; it would also be
/// shared with the other venvs' pips, which the gate runs beside this one, and two pips writing
/// one cache can corrupt it. The venv itself is kept, so a later run downloads nothing anyway.
fn pip(python: &str) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-warn-conflicts",
    ]);
    cmd.env("PIP_NO_CACHE_DIR", "1");
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_large_wheels_are_torchs_group_and_nothing_else() {
        let path = std::path::Path::new(crate::WORKSPACE_ROOT).join(REQUIREMENTS);
        let requirements = std::fs::read_to_string(path).unwrap();
        let large = large_pins(&requirements).unwrap();
        for name in [
            "torch==",
            "triton==",
            "nvidia-cudnn-cu13==",
            "nvidia-cublas==",
        ] {
            assert!(large.iter().any(|pin| pin.starts_with(name)), "{large:?}");
        }
        assert!(!large.iter().any(|pin| pin.starts_with("torchvision")));
        let pins = "# torch==1.0 in a comment\ntorch==2.0  # inline\nnvidia-nccl-cu13==2.3\n\
                    pillow==1\nNvidia_Cufft==1\ntorchvision>=1\ntriton-extra[x]>=2";
        assert_eq!(
            large_pins(pins).unwrap(),
            ["torch==2.0", "nvidia-nccl-cu13==2.3", "Nvidia_Cufft==1"]
        );
        // A large pin that pip would read otherwise than as a plain pin is refused, not half-done.
        for pin in [
            "torch>=2",
            "torch[opt]==2",
            "triton==3; sys_platform=='linux'",
            "torch==",
        ] {
            let err = large_pins(pin).unwrap_err().to_string();
            assert!(
                err.contains("not a plain name==version pin"),
                "{pin}: {err}"
            );
        }
    }

    #[test]
    fn pins_compare_as_pip_compares_names() {
        assert_eq!(normalized("Jinja2==3.1.6"), normalized("jinja2==3.1.6"));
        assert_eq!(normalized("typing_extensions==4"), "typing-extensions==4");
        assert_eq!(
            normalized("zope.interface==1"),
            normalized("Zope__Interface==1")
        );
        assert_eq!(normalized("Nvidia_Cufft"), "nvidia-cufft");
        assert_ne!(normalized("torch==2.14.0"), normalized("torch==2.14.1"));
    }
}

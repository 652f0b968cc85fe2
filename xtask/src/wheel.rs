//! `cargo xtask wheel`: the manylinux abi3 wheel of crates/python, and a test of it as a user
//! gets it.
//!
//! - `cargo xtask wheel [--target TRIPLE]` builds it with maturin and zig (PyPI `ziglang`, so
//!   the glibc it links against is the manylinux baseline, not this machine's) into
//!   target/wheels, then checks it with `auditwheel show`: a manylinux tag and no external
//!   libturbojpeg (the extension links libjpeg-turbo built from source).
//! - `--test` then installs that wheel into a clean venv per CPython in [`PYTHONS`] (binary
//!   packages only; no Rust toolchain on PATH) and runs tests/wheel and tests/python there in a
//!   private mount namespace where every system `libturbojpeg.so*` is masked, with
//!   `MMCACHE_JPEG_DECODER=libjpeg-turbo`.
//!
//! First it installs what is missing (cmake, nasm; for `--test` also redis-server and cjpeg)
//! as the gate does, and target/venv (maturin; ziglang and auditwheel from
//! tests/wheel/requirements-build.txt). `--test` checks before
//! building that this user can mask a file at all (wheel_mask.rs): where it cannot, it fails
//! in CI and, elsewhere, builds the wheel and says it skips the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::setup::{
    VENV, dynamo_wheel, ensure_debian_packages, have, pip_install, python_venv, step,
};

/// The libjpeg-turbo the wheel links: the source turbojpeg-sys =1.2.0 ships (root Cargo.toml).
pub(crate) const LIBJPEG_TURBO: &str = "3.1.0";

/// The manylinux baseline the wheel is built for (glibc 2.17).
const COMPATIBILITY: &str = "manylinux2014";

/// The CPythons the wheel is tested on, oldest (`requires-python`) and newest, each with the
/// requirements file that pins its test packages (the oldest has the oldest numpy we declare).
const PYTHONS: [(&str, &str); 2] = [
    ("3.9", "tests/wheel/requirements-py3.9.txt"),
    ("3.13", "tests/wheel/requirements-py3.13.txt"),
];

/// `cargo xtask wheel`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Build for this target triple (default: this machine's, reusing target/release)
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// Then test it in clean CPython 3.9 and 3.13 venvs, the host's libturbojpeg masked
    #[arg(long)]
    test: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let target = args.target.as_deref();
    let requested = args.test;
    let mut test = requested;
    if test {
        ensure!(
            target.is_none_or(|t| t.starts_with(std::env::consts::ARCH)),
            "--test runs the wheel on this machine, which is {}",
            std::env::consts::ARCH
        );
        // Before the build's minutes: can this user mask the system library at all?
        test = crate::wheel_mask::can_mask()?;
    }
    let skipped = requested && !test;
    // libjpeg-turbo is built from source: cmake drives it, nasm assembles its x86 SIMD code.
    let x86 = target
        .map_or(std::env::consts::ARCH, |t| t.split('-').next().unwrap_or(t))
        .starts_with("x86");
    let mut tools = vec![(have("command -v cmake"), "cmake")];
    if x86 {
        tools.push((have("command -v nasm"), "nasm"));
    }
    if test {
        // The pytest suite's Redis Cluster, and cjpeg for the parity cases Pillow cannot write.
        tools.push((have("command -v redis-server"), "redis-server"));
        tools.push((have("command -v cjpeg"), "libjpeg-turbo-progs"));
    }
    ensure_debian_packages(&tools)?;
    // maturin comes from tests/requirements.txt, ziglang and auditwheel from the wheel's own.
    let python = python_venv(VENV)?;
    pip_install(&python, "tests/wheel/requirements-build.txt")?;
    let wheel = build(target)?;
    if test {
        let dynamo = dynamo_wheel(&python)?;
        for (version, requirements) in PYTHONS {
            test_wheel(&wheel, version, requirements, &dynamo)?;
        }
        println!(
            "xtask wheel: {} passed on CPython 3.9 and 3.13",
            wheel.display()
        );
    } else if skipped {
        println!(
            "xtask wheel: built {}; its test was SKIPPED (see above: no mount namespace)",
            wheel.display()
        );
    }
    Ok(())
}

/// Builds the wheel for `target` (else this machine) into target/wheels and checks it;
/// returns its path.
pub(crate) fn build(target: Option<&str>) -> anyhow::Result<PathBuf> {
    let root = std::env::current_dir()?;
    let venv = root.join(VENV);
    let out = root.join("target/wheels");
    let arch = target.map_or(std::env::consts::ARCH, |t| t.split('-').next().unwrap_or(t));
    // One wheel per architecture in target/wheels: the one just built.
    for old in wheels(&out, arch)? {
        std::fs::remove_file(&old).with_context(|| format!("remove {}", old.display()))?;
    }
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut maturin = Command::new(venv.join("bin/maturin"));
    maturin
        .args(["build", "--quiet", "--release", "--zig", "--compatibility"])
        .args([COMPATIBILITY, "-m", "crates/python/Cargo.toml"])
        .arg("--out")
        .arg(&out)
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", &path);
    if let Some(target) = target {
        maturin.args(["--target", target]);
    }
    step(
        &format!("maturin build --release --zig ({arch})"),
        &mut maturin,
    )?;
    let wheel = match wheels(&out, arch)?.as_slice() {
        [one] => one.clone(),
        other => bail!(
            "expected one {arch} wheel in {}, found {other:?}",
            out.display()
        ),
    };
    let show = Command::new(venv.join("bin/auditwheel"))
        .arg("show")
        .arg(&wheel)
        .output()
        .context("run auditwheel show")?;
    let text = String::from_utf8_lossy(&show.stdout).replace('\n', " ");
    println!("==> auditwheel show: {text}");
    ensure!(show.status.success(), "auditwheel show failed: {text}");
    ensure!(
        text.contains(&format!("manylinux_2_17_{arch}")),
        "the wheel is not manylinux_2_17_{arch}: {text}"
    );
    ensure!(
        !text.contains("libturbojpeg"),
        "the wheel needs an external libturbojpeg: {text}"
    );
    Ok(wheel)
}

fn wheels(dir: &Path, arch: &str) -> anyhow::Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("mmcache-") && name.ends_with(&format!("_{arch}.whl")) {
            found.push(path);
        }
    }
    Ok(found)
}

/// The pyenv interpreter of `version` (3.9 → the newest ~/.pyenv/versions/3.9.*).
fn pyenv_python(version: &str) -> anyhow::Result<PathBuf> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")))
        .context("neither PYENV_ROOT nor HOME is set")?;
    let versions = root.join("versions");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(&versions)
        .with_context(|| format!("no pyenv at {}", versions.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let patch = name.strip_prefix(&format!("{version}."))?.parse().ok()?;
            Some((patch, e.path().join("bin/python3")))
        })
        .filter(|(_, p)| p.exists())
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .with_context(|| format!("no CPython {version} in {}", versions.display()))
}

fn test_wheel(
    wheel: &Path,
    version: &str,
    requirements: &str,
    dynamo: &Path,
) -> anyhow::Result<()> {
    let root = std::env::current_dir()?;
    let base = pyenv_python(version)?;
    let venv = root.join(format!("target/wheel-test/py{version}"));
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("remove {}", venv.display()))?;
    }
    step(
        &format!("venv for CPython {version}"),
        Command::new(&base).arg("-m").arg("venv").arg(&venv),
    )?;
    let python = venv.join("bin/python");
    // A user's install: binary packages only, and no cargo or rustc to be found.
    step(
        &format!("pip install the wheel on CPython {version}"),
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--only-binary", ":all:", "-r", requirements])
            .arg(wheel)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env_remove("CARGO_HOME")
            .env_remove("RUSTUP_HOME"),
    )?;
    let masked = crate::wheel_mask::system_libturbojpeg();
    let script = crate::wheel_mask::masked_pytest(
        &masked,
        &[Path::new("tests/wheel"), Path::new("tests/python")],
        &root.join(format!("target/wheel-test/py{version}-tmp")),
    );
    let mut cmd = crate::wheel_mask::unshare(&script);
    cmd.arg(&python)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("MMCACHE_JPEG_DECODER", "libjpeg-turbo")
        .env("MMCACHE_EXPECT_LIBJPEG_TURBO", LIBJPEG_TURBO)
        .env("MMCACHE_DYNAMO_WHEEL", dynamo)
        .env_remove("MMCACHE_LIBTURBOJPEG")
        .env_remove("PYTHONPATH");
    step(
        &format!(
            "pytest tests/wheel tests/python on CPython {version}, {} masked",
            masked
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &mut cmd,
    )
}

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

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::gate::{VENV, step};

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

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    // No --target for this machine's own: cargo then reuses target/release.
    let mut target: Option<String> = None;
    let mut test = false;
    let mut args = args.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--target" => target = Some(args.next().context("--target needs a triple")?.clone()),
            "--test" => test = true,
            other => bail!("`cargo xtask wheel` takes --target TRIPLE and --test (got `{other}`)"),
        }
    }
    let wheel = build(target.as_deref())?;
    if test {
        ensure!(
            target
                .as_deref()
                .is_none_or(|t| t.starts_with(std::env::consts::ARCH)),
            "--test runs the wheel on this machine, which is {}",
            std::env::consts::ARCH
        );
        for (version, requirements) in PYTHONS {
            test_wheel(&wheel, version, requirements)?;
        }
        println!(
            "xtask wheel: {} passed on CPython 3.9 and 3.13",
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

/// Every system libturbojpeg file (symlinks resolved, each once), to mask.
fn system_libturbojpeg() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in ["/lib", "/usr/lib", "/usr/local/lib", "/lib64", "/usr/lib64"] {
        let dirs = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .chain([PathBuf::from(dir)]);
        for d in dirs {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("libturbojpeg.so")
                    && let Ok(real) = std::fs::canonicalize(e.path())
                    && !found.contains(&real)
                {
                    found.push(real);
                }
            }
        }
    }
    found
}

fn test_wheel(wheel: &Path, version: &str, requirements: &str) -> anyhow::Result<()> {
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
    let masked = system_libturbojpeg();
    let mut script = String::from("set -e\n");
    for lib in &masked {
        script.push_str(&format!("mount --bind /dev/null '{}'\n", lib.display()));
    }
    script.push_str(
        "exec \"$0\" -m pytest -q -p no:cacheprovider --timeout 120 --timeout-method thread \
         tests/wheel tests/python\n",
    );
    // A private mount namespace needs CAP_SYS_ADMIN: root gets one directly, a normal user
    // only inside a user namespace of its own (where the kernel allows unprivileged ones).
    let mut cmd = Command::new("unshare");
    if !crate::gate::is_root() {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(&python)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("MMCACHE_JPEG_DECODER", "libjpeg-turbo")
        .env("MMCACHE_EXPECT_LIBJPEG_TURBO", LIBJPEG_TURBO)
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

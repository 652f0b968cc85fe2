//! Masking the host's libturbojpeg for `cargo xtask wheel --test`: a bind mount of /dev/null
//! over every `libturbojpeg.so*`, in a private mount namespace, so that only a library inside
//! the wheel can decode JPEG and nothing outside the test's processes sees the change.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// A command running `script` with `sh -c` in a private mount namespace. That needs
/// CAP_SYS_ADMIN: root has it; a normal user gets it only inside a user namespace of its own
/// (`--map-root-user`), where the kernel allows unprivileged ones.
pub(crate) fn unshare(script: &str) -> Command {
    let mut cmd = Command::new("unshare");
    if !crate::setup::is_root() {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script]);
    cmd
}

/// Whether this user can mask a file as the test does (tried on a file of its own). If not:
/// an error in CI (`CI=true`), else `false` after saying why the test is skipped.
pub(crate) fn can_mask() -> anyhow::Result<bool> {
    let dir = std::env::current_dir()?.join("target/wheel-test");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let probe = dir.join("mask-probe");
    std::fs::write(&probe, b"probe").with_context(|| format!("write {}", probe.display()))?;
    let out = unshare(&format!(
        "mount --bind /dev/null '{}' && test ! -s '{}'",
        probe.display(),
        probe.display()
    ))
    .output()
    .context("run unshare (util-linux)")?;
    if out.status.success() {
        return Ok(true);
    }
    let who = if crate::setup::is_root() {
        "root, but this process may not create a mount namespace (a container without \
         CAP_SYS_ADMIN?)"
    } else {
        "not root, and this kernel refuses an unprivileged user namespace \
         (kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor/seccomp \
         policy); run it as root"
    };
    let why = format!(
        "`cargo xtask wheel --test` hides the system libturbojpeg with a bind mount in a \
         private mount namespace (`unshare --mount`), which needs CAP_SYS_ADMIN there; this \
         user is {who}. unshare said: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        bail!("{why}");
    }
    eprintln!("xtask wheel: SKIPPING the wheel test (outside CI only; in CI this fails): {why}");
    Ok(false)
}

/// Every system libturbojpeg file (symlinks resolved, each once), to mask.
pub(crate) fn system_libturbojpeg() -> Vec<PathBuf> {
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

/// The shell script that masks `libs`, then runs `"$0" -m pytest ...` on `tests` with its
/// temporary files under `basetemp`: in a user namespace the user is uid 0, so pytest's
/// default, /tmp/pytest-of-root, may be the real root's, which pytest refuses.
pub(crate) fn masked_pytest(libs: &[PathBuf], tests: &[&Path], basetemp: &Path) -> String {
    let mut script = String::from("set -e\n");
    for lib in libs {
        script.push_str(&format!("mount --bind /dev/null '{}'\n", lib.display()));
    }
    script.push_str(
        "exec \"$0\" -m pytest -q -p no:cacheprovider --timeout 120 --timeout-method thread",
    );
    script.push_str(&format!(" --basetemp '{}'", basetemp.display()));
    for t in tests {
        script.push_str(&format!(" '{}'", t.display()));
    }
    script.push('\n');
    script
}

//! Helpers shared by the CLI's integration tests.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `mmcache` binary with a clean `DYN_MM_*`/`MMCACHE_*` environment and internal
/// origins allowed (test origins live on 127.0.0.1).
pub(crate) fn mmcache() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mmcache"));
    for var in mmcache_loader::env::ALL {
        cmd.env_remove(var);
    }
    cmd.env_remove("MMCACHE_LOG");
    cmd.env("DYN_MM_ALLOW_INTERNAL", "1");
    cmd
}

/// The stdout of `child` once it exited successfully (fails the test with its output
/// otherwise).
pub(crate) fn stdout_of(child: std::process::Child) -> String {
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}: {text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Exit code, stdout and stderr.
pub(crate) fn text(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A scratch directory, removed on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh, empty scratch directory path (not created).
pub(crate) fn scratch(name: &str) -> Dir {
    let p = std::env::temp_dir().join(format!("mmcache-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    Dir(p)
}

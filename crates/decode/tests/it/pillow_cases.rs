//! What the Pillow parity tests share: running a case generator of tests/pillow with the
//! interpreter `cargo xtask test` set up, and skipping (outside CI only) when it cannot run.

use std::path::{Path, PathBuf};
use std::process::Command;

use mmcache_test_support::in_ci;

/// Fails in CI, and says it skips elsewhere: `test` cannot run without `what`.
pub(crate) fn unavailable(test: &str, what: &str) {
    assert!(
        !in_ci(),
        "{test}: {what} (CI must have it: run `cargo xtask test`)"
    );
    eprintln!("SKIPPED {test} outside CI: {what}");
}

/// Runs tests/pillow/`script` with `$MMCACHE_PYTHON` (or `python3`) into a fresh folder of the
/// temp dir named after `test`, and returns that folder; `None` when it could not run.
pub(crate) fn generate(test: &str, script: &str) -> Option<PathBuf> {
    let python = std::env::var("MMCACHE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/pillow")
        .join(script);
    let out = std::env::temp_dir().join(format!(
        "mmcache-{}-{}",
        test.replace(' ', "-"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    match Command::new(&python).arg(&script).arg(&out).output() {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => {
            unavailable(
                test,
                &format!(
                    "{python} {} failed: {}",
                    script.display(),
                    String::from_utf8_lossy(&o.stderr)
                ),
            );
            None
        }
        Err(e) => {
            unavailable(test, &format!("cannot run {python}: {e}"));
            None
        }
    }
}

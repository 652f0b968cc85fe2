//! `mmcache key`, the `load` summary, `MMCACHE_LOG=off`, and the `--help` examples, run as
//! printed.

use crate::common::{mmcache, scratch, text};
use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
use mmcache_scope::{CacheIdentity, Scope};
use mmcache_shared_cache::entry_key;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

#[test]
fn key_prints_the_redis_key_and_the_disk_path() {
    let dir = scratch("key");
    let disk = dir.0.display().to_string();
    let url = "https://Example.com/img.png#frag";
    let (code, stdout, stderr) = text(
        &mmcache()
            .env("MMCACHE_DISK_CACHE_DIR", &disk)
            .args(["key", url])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !dir.0.exists(),
        "`mmcache key` created the disk directory (with its own user's owner and mode)"
    );
    let id = CacheIdentity::unscoped(url);
    let path = DiskCache::new(DiskCacheConfig::new(&dir.0)).path_of(&id);
    assert!(stdout.contains(&entry_key(&id)), "{stdout}");
    assert!(stdout.contains(&path.display().to_string()), "{stdout}");
    // The design's test vector.
    assert!(
        stdout.contains(
            "dynamo:mm:image:{48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0}:bytes"
        ),
        "{stdout}"
    );

    // Scoped mode with a scope: the scoped identity.
    let (code, stdout, stderr) = text(
        &mmcache()
            .env("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
            .args(["key", "--scope", "session-a", "https://example.com/img.png"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let scoped = CacheIdentity::scoped(
        &Scope::new("session-a").unwrap(),
        "https://example.com/img.png",
    );
    assert!(stdout.contains(&entry_key(&scoped)), "{stdout}");
    assert!(
        stdout.contains("0895b8e0928cf6a3a67afb3c3b31407b6ff56e8130ad550729782f8465e15fc0"),
        "{stdout}"
    );
    assert!(stdout.contains("disk tier: off"), "{stdout}");

    // Scoped mode without a scope: no cache key at all (every tier is bypassed).
    let (code, stdout, stderr) = text(
        &mmcache()
            .env("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
            .args(["key", "https://example.com/img.png"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stderr.contains("bypass"), "{stderr}");
}

#[test]
fn load_prints_a_summary_and_sends_errors_to_stderr() {
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(4, 4, 1)));
    let (ok, missing) = (origin.url("/a.png"), origin.url("/missing"));
    let (code, stdout, stderr) = text(
        &mmcache()
            .args(["load", &ok, &ok, &missing])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(1));
    assert_eq!(stdout.lines().count(), 2, "successes on stdout: {stdout}");
    assert!(!stdout.contains(&missing), "{stdout}");
    assert!(
        stderr.contains(&missing) && stderr.contains("404"),
        "{stderr}"
    );
    assert!(
        stderr.contains("3 URLs, 2 ok, 1 failed")
            && stderr.contains("origin=1")
            && stderr.contains("memory=1"),
        "summary line: {stderr}"
    );
}

#[test]
fn log_level_off_silences_the_warnings() {
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(4, 4, 1)));
    let image = origin.url("/a.png");
    // Nothing listens there: the shared cache fails open and warns once.
    let url = format!("redis://127.0.0.1:{}", mmcache_test_support::closed_port());
    let run = |level: Option<&str>| {
        let mut cmd = mmcache();
        cmd.env("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1")
            .env("DYN_MM_SHARED_IMAGE_CACHE_URL", &url)
            .args(["load", &image]);
        if let Some(l) = level {
            cmd.env("MMCACHE_LOG", l);
        }
        text(&cmd.output().unwrap())
    };
    let (code, _, stderr) = run(None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("WARN"), "the default level warns: {stderr}");
    let (code, _, stderr) = run(Some("off"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
    let (code, _, stderr) = run(Some("loud"));
    assert_eq!(code, Some(2), "an unknown level is refused: {stderr}");
    assert!(
        stderr.contains("MMCACHE_LOG") && stderr.contains("loud"),
        "{stderr}"
    );
}

/// Every line under `Examples:` in every help text, run by `sh` as printed (from a scratch
/// directory holding the `urls.txt` the warm example names), with `mmcache` on `PATH`.
#[test]
fn help_examples_run_as_printed() {
    let dir = scratch("examples");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::write(
        dir.0.join("urls.txt"),
        "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7\n",
    )
    .unwrap();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_mmcache"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut examples = Vec::new();
    for args in [
        &["--help"][..],
        &["load", "--help"],
        &["warm", "--help"],
        &["doctor", "--help"],
        &["key", "--help"],
    ] {
        let (code, stdout, stderr) = text(&mmcache().args(args).output().unwrap());
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        let section = stdout
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}: no examples: {stdout}"));
        let lines: Vec<String> = section
            .lines()
            .take_while(|l| l.starts_with("  "))
            .map(|l| l.trim().to_owned())
            .collect();
        assert!(!lines.is_empty(), "{args:?}: {stdout}");
        examples.extend(lines);
    }
    examples.sort();
    examples.dedup();
    for example in &examples {
        let mut cmd = std::process::Command::new("sh");
        for var in mmcache_loader::env::ALL {
            cmd.env_remove(var);
        }
        let out = cmd
            .env_remove("MMCACHE_LOG")
            .env("PATH", &path)
            .current_dir(&dir.0)
            .args(["-c", example])
            .output()
            .unwrap();
        let (code, stdout, stderr) = text(&out);
        assert_eq!(code, Some(0), "{example}\n{stdout}{stderr}");
    }
    assert!(examples.len() >= 4, "{examples:?}");
}

#[test]
fn warm_refuses_scoped_mode_without_a_scope() {
    // It would load every URL past every cache and report success having cached nothing.
    let mut cmd = mmcache();
    cmd.env("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
        .args(["warm", "-"])
        .stdin(std::process::Stdio::piped());
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"data:image/png;base64,AAAA\n")
        .unwrap();
    let (code, _, stderr) = text(&child.wait_with_output().unwrap());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--scope"), "{stderr}");
}

//! The `mmcache` binary against a real local origin.

use std::process::Command;

use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

fn mmcache() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mmcache"));
    for var in mmcache_loader::env::ALL {
        cmd.env_remove(var);
    }
    cmd.env("DYN_MM_ALLOW_INTERNAL", "1");
    cmd
}

#[test]
fn loads_and_reports_sources() {
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(40, 30, 1)));
    let url = origin.url("/a.png");
    let out = mmcache().args(["load", &url, &url]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("origin") && lines[0].contains("40x30"),
        "{text}"
    );
    assert!(lines[1].starts_with("memory"), "{text}");
    assert_eq!(origin.hits("/a.png"), 1);
}

#[test]
fn json_output_and_failure_exit_code() {
    let origin = TestOrigin::start();
    origin.set("/a.png", Route::ok(images::png(4, 4, 1)));
    let out = mmcache()
        .args([
            "load",
            "--json",
            "--metrics",
            &origin.url("/a.png"),
            &origin.url("/missing"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let ok: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(ok["source"], "origin");
    assert_eq!(ok["width"], 4);
    let err: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(err["ok"], false);
    assert_eq!(err["status"], 404);
    assert!(
        text.contains("mmcache_loads_total"),
        "scrape text printed: {text}"
    );
}

#[test]
fn bad_environment_names_the_variable() {
    let out = mmcache()
        .env("DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS", "-5")
        .args(["load", "https://example.com/a.png"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS") && err.contains("-5"),
        "{err}"
    );
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = mmcache().args(args).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    (out.status.code(), stdout, stderr)
}

#[test]
fn version_prints_only_the_version() {
    for args in [&["--version"][..], &["-V"], &["version"]] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert_eq!(
            stdout,
            format!("mmcache {}\n", env!("CARGO_PKG_VERSION")),
            "{args:?}"
        );
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn help_fits_a_screen_and_documents_the_exit_codes() {
    for args in [&["--help"][..], &["-h"], &["help"], &[]] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        for line in [
            "Exit codes (each command's --help lists its own):",
            "  0  success",
            "  1  load: a load failed; warm: a load or a cache write failed; key: no cache key",
            "  2  bad usage",
            "  10-15  doctor",
        ] {
            assert!(stdout.contains(line), "{args:?} lacks {line:?}: {stdout}");
        }
        assert!(stdout.contains("Examples:"), "{args:?}: {stdout}");
        assert!(stdout.lines().count() <= 30, "{args:?}: {stdout}");
        assert!(stdout.lines().all(|l| l.len() <= 100), "{args:?}: {stdout}");
    }
    // Each command's help lists its own codes, not another command's.
    let own: [(&str, &[&str]); 3] = [
        (
            "load",
            &[
                "  1  at least one load failed",
                "  2  bad usage or configuration",
            ],
        ),
        (
            "warm",
            &[
                "  1  a load failed, or a cache write did not finish in time",
                "  2  bad usage or configuration, or scoped mode without --scope",
            ],
        ),
        (
            "key",
            &["  1  no cache key: DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1 and no usable --scope"],
        ),
    ];
    for (command, lines) in own {
        let (code, stdout, stderr) = run(&[command, "--help"]);
        assert_eq!(code, Some(0), "{command}: {stderr}");
        let codes = stdout
            .split("Exit codes:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{command} --help has no exit codes: {stdout}"));
        assert!(codes.contains("  0  "), "{command}: {codes}");
        for line in lines {
            assert!(
                codes.contains(line),
                "{command} --help lacks {line:?}: {codes}"
            );
        }
        assert!(
            !codes.contains("10-13"),
            "{command} lists doctor's codes: {codes}"
        );
        if command != "load" {
            assert!(
                !codes.contains("at least one load failed"),
                "{command}: {codes}"
            );
        }
        assert!(
            stdout.contains("--scope is used when"),
            "{command}: {stdout}"
        );
        assert!(stdout.lines().count() <= 40, "{command}: {stdout}");
        assert!(
            stdout.lines().all(|l| l.len() <= 100),
            "{command}: {stdout}"
        );
    }
    let (_, stdout, _) = run(&["load", "--help"]);
    for flag in ["--json", "--scope <S>", "--metrics", "<URL>..."] {
        assert!(stdout.contains(flag), "{flag}: {stdout}");
    }
}

/// `--scope` with session scoping off: every command that takes it ignores it alike, says so,
/// and succeeds.
#[test]
fn scope_with_scoping_off_is_ignored_alike() {
    let image = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";
    let dir = std::env::temp_dir().join(format!("mmcache-cli-scope-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("urls.txt");
    std::fs::write(&list, format!("{image}\n")).unwrap();
    let list = list.to_string_lossy().into_owned();
    for args in [
        &["load", "--scope", "s1", image][..],
        &["warm", "--scope", "s1", &list],
        &["key", "--scope", "s1", "https://example.com/a.png"],
    ] {
        let (code, _, stderr) = run(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(
            stderr.contains("note: --scope is ignored: DYN_MM_IMAGE_CACHE_SESSION_SCOPED is off"),
            "{args:?}: {stderr}"
        );
        // With scoping on, the same arguments take the scope, with no note.
        let out = mmcache()
            .env("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("--scope is ignored"), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["load", "--bogus", "https://example.com/a.png"][..],
        &["load"],
        &["load", "--scope"],
        &["fetch", "https://example.com/a.png"],
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    let (_, _, stderr) = run(&["load", "--bogus", "https://example.com/a.png"]);
    assert!(stderr.contains("--bogus"), "{stderr}");
}

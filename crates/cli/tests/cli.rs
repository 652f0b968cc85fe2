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

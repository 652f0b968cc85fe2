//! `mmcache doctor` against real processes: each problem that makes loads slower or pixels
//! different has its own exit code (documented in `mmcache doctor --help`).

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::{mmcache, scratch, text};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

const UNREACHABLE: i32 = 10;
const SLOTS_UNCOVERED: i32 = 11;
const PURE_RUST_JPEG: i32 = 12;
const DISK_REFUSED: i32 = 13;

fn doctor(envs: &[(&str, &str)]) -> (Option<i32>, String, String) {
    text(
        &mmcache()
            .envs(envs.iter().copied())
            .arg("doctor")
            .output()
            .unwrap(),
    )
}

#[test]
fn a_healthy_setup_exits_0_and_redacts_the_url() {
    if !require_redis("a_healthy_setup_exits_0_and_redacts_the_url") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions {
        password: Some("pw-do-not-print".into()),
        ..ClusterOptions::default()
    })
    .unwrap();
    let dir = scratch("doctor-ok");
    let url = cluster.url();
    let disk = dir.0.display().to_string();
    let (code, stdout, stderr) = doctor(&[
        ("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1"),
        ("DYN_MM_SHARED_IMAGE_CACHE_URL", &url),
        ("MMCACHE_DISK_CACHE_DIR", &disk),
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(!all.contains("pw-do-not-print"), "password printed: {all}");
    let host = url.rsplit_once('@').unwrap().1;
    assert!(stdout.contains(&format!("redis://***@{host}")), "{stdout}");
    for needle in [
        "libjpeg-turbo version 2.",
        "reachable: yes",
        "slots: 16384/16384",
        "nodes: 3",
        "engine: redis 7.",
        "trusted",
        "free:",
        &disk,
    ] {
        assert!(stdout.contains(needle), "lacks {needle:?}: {stdout}");
    }
}

#[test]
fn a_stopped_cluster_is_unreachable() {
    if !require_redis("a_stopped_cluster_is_unreachable") {
        return;
    }
    let mut cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let url = cluster.url();
    cluster.kill_all();
    let started = Instant::now();
    let (code, stdout, stderr) = doctor(&[
        ("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1"),
        ("DYN_MM_SHARED_IMAGE_CACHE_URL", &url),
    ]);
    assert_eq!(code, Some(UNREACHABLE), "{stdout}{stderr}");
    assert!(stdout.contains("reachable: no"), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "bounded by the timeouts"
    );
}

#[test]
fn an_unassigned_slot_range_is_reported() {
    if !require_redis("an_unassigned_slot_range_is_reported") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    // A node does not drop another's slots when it stops claiming them: unassign on each.
    for i in 0..cluster.nodes.len() {
        cluster
            .cli(i, &["CLUSTER", "DELSLOTSRANGE", "0", "99"])
            .unwrap();
    }
    let until = Instant::now() + Duration::from_secs(20);
    for i in 0..cluster.nodes.len() {
        loop {
            let info = cluster.cli(i, &["CLUSTER", "INFO"]).unwrap();
            if info.contains("cluster_slots_assigned:16284") {
                break;
            }
            assert!(
                Instant::now() < until,
                "node {i} never saw the change: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let url = cluster.url();
    let (code, stdout, stderr) = doctor(&[
        ("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1"),
        ("DYN_MM_SHARED_IMAGE_CACHE_URL", &url),
    ]);
    assert_eq!(code, Some(SLOTS_UNCOVERED), "{stdout}{stderr}");
    assert!(stdout.contains("slots: 16284/16384"), "{stdout}");
}

#[test]
fn the_pure_rust_jpeg_decoder_is_a_problem() {
    let (code, stdout, stderr) = doctor(&[("MMCACHE_JPEG_DECODER", "pure-rust")]);
    assert_eq!(code, Some(PURE_RUST_JPEG), "{stdout}{stderr}");
    assert!(stdout.contains("pure-rust"), "{stdout}");
    // Without tiers and with libjpeg-turbo installed, nothing is wrong.
    let (code, stdout, stderr) = doctor(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("shared cache: off"), "{stdout}");
    assert!(stdout.contains("disk tier: off"), "{stdout}");
}

#[test]
fn a_world_writable_disk_directory_is_refused() {
    let dir = scratch("doctor-0777");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let disk = dir.0.display().to_string();
    let (code, stdout, stderr) = doctor(&[("MMCACHE_DISK_CACHE_DIR", &disk)]);
    assert_eq!(code, Some(DISK_REFUSED), "{stdout}{stderr}");
    assert!(
        stdout.contains("refused") && stdout.contains("0777"),
        "{stdout}"
    );
}

#[test]
fn a_bad_setting_exits_2() {
    let (code, _, stderr) = doctor(&[("DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS", "-5")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS"),
        "{stderr}"
    );
}

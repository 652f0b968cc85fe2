//! `mmcache warm` against a real Redis Cluster, a real disk directory and a real origin: when
//! it exits, every entry it loaded is in both tiers (it waited for the writes).

use std::io::Write;
use std::process::Stdio;

use crate::common::{mmcache, scratch, text};
use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
use mmcache_scope::CacheIdentity;
use mmcache_shared_cache::entry_key;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster, require_redis};

const IMAGES: u32 = 40;

#[test]
fn warm_returns_after_every_cache_write_landed() {
    if !require_redis("warm_returns_after_every_cache_write_landed") {
        return;
    }
    let cluster = RedisCluster::start(ClusterOptions::default()).expect("cluster");
    let dir = scratch("warm");
    let origin = TestOrigin::start();
    let mut bodies = Vec::new();
    let mut list = String::from("# a comment, then a blank line\n\n");
    for i in 0..IMAGES {
        let path = format!("/w-{i}.png");
        // Large enough that writes take a moment (noise does not compress).
        let body = images::noise_png(256, 256, u64::from(i));
        origin.set(&path, Route::ok(body.clone()));
        list.push_str(&origin.url(&path));
        list.push('\n');
        bodies.push((origin.url(&path), body));
    }
    let missing = origin.url("/missing.png");
    list.push_str(&missing);
    list.push('\n');
    let file = dir.0.with_extension("txt");
    std::fs::write(&file, &list).unwrap();
    let envs = [
        ("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1".to_owned()),
        ("DYN_MM_SHARED_IMAGE_CACHE_URL", cluster.url()),
        ("MMCACHE_DISK_CACHE_DIR", dir.0.display().to_string()),
    ];

    // Defaults: no concurrency flag.
    let out = mmcache()
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .arg("warm")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, Some(1), "one URL fails: {stdout}{stderr}");
    assert!(
        stdout.contains(&format!("{} ok", IMAGES)) && stdout.contains(&format!("origin={IMAGES}")),
        "summary by source: {stdout}"
    );
    assert!(stdout.contains("1 failed"), "{stdout}");
    assert!(
        stderr.contains(&missing) && stderr.contains("404"),
        "failures on stderr: {stderr}"
    );
    assert!(
        !stdout.contains(&missing),
        "failures stay off stdout: {stdout}"
    );

    // Right after exit: every entry is in the cluster and on disk, byte for byte.
    let disk = DiskCache::new(DiskCacheConfig::new(&dir.0));
    for (url, body) in &bodies {
        let id = CacheIdentity::unscoped(url);
        let shared = cluster.get_raw(&entry_key(&id)).expect("GET");
        assert_eq!(shared.as_deref(), Some(&body[..]), "shared entry of {url}");
        let on_disk = std::fs::read(disk.path_of(&id)).ok();
        assert_eq!(on_disk.as_deref(), Some(&body[..]), "disk entry of {url}");
    }

    // Again from stdin, with a concurrency flag: every image now comes from the disk tier.
    let mut child = mmcache()
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["warm", "--concurrency", "3", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let urls: String = bodies.iter().map(|(u, _)| format!("{u}\n")).collect();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(urls.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("disk={IMAGES}")) && stdout.contains("0 failed"),
        "{stdout}"
    );
    for (url, _) in &bodies {
        let path = url.rsplit_once('/').unwrap().1;
        assert_eq!(origin.hits(&format!("/{path}")), 1, "{url} downloaded once");
    }
}

#[test]
fn warm_refuses_a_zero_concurrency_and_a_missing_file() {
    let (code, _, stderr) = text(
        &mmcache()
            .args(["warm", "--concurrency", "0", "-"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) = text(
        &mmcache()
            .args(["warm", "/nonexistent/urls.txt"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/urls.txt"), "{stderr}");
}

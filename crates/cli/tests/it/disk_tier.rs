//! The disk tier with real OS processes: several `mmcache` processes on one host share one
//! directory, so each image is downloaded once per host, and a restarted process starts warm.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
use mmcache_scope::CacheIdentity;
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

use crate::common::{scratch, stdout_of};

/// `mmcache load --json` over `urls` with the disk tier in `dir`.
fn worker(dir: &Path, urls: &[String], extra: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mmcache"));
    for var in mmcache_loader::env::ALL {
        cmd.env_remove(var);
    }
    cmd.env("DYN_MM_ALLOW_INTERNAL", "1")
        .env("MMCACHE_DISK_CACHE_DIR", dir)
        .envs(extra.iter().copied())
        .arg("load")
        .arg("--json")
        .args(urls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn mmcache")
}

/// Waits for a worker; returns the `source` of each load, in order.
fn sources(child: Child) -> Vec<String> {
    stdout_of(child)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            assert_eq!(v["ok"], true, "{l}");
            v["source"].as_str().expect("source").to_owned()
        })
        .collect()
}

#[test]
fn a_hosts_processes_download_each_image_once_and_restart_warm() {
    let dir = scratch("disk-share");
    let origin = TestOrigin::start();
    // Slow downloads, so the processes really overlap on every image.
    let urls: Vec<String> = (0..6)
        .map(|i| {
            let path = format!("/img-{i}.png");
            let body = images::png(64, 48, i);
            origin.set(
                &path,
                Route::Delay(Duration::from_millis(200), Box::new(Route::ok(body))),
            );
            origin.url(&path)
        })
        .collect();
    // Four processes, each loading every image, in different orders.
    let workers: Vec<Child> = (0..4)
        .map(|w| {
            let mut mine = urls.clone();
            mine.rotate_left(w);
            worker(&dir.0, &mine, &[])
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        all.extend(sources(w));
    }
    assert_eq!(all.len(), 24);
    for (i, url) in urls.iter().enumerate() {
        let path = url.rsplit_once('/').map(|(_, p)| format!("/{p}")).unwrap();
        assert_eq!(origin.hits(&path), 1, "image {i} downloaded once per host");
    }
    assert_eq!(all.iter().filter(|s| *s == "origin").count(), 6, "{all:?}");
    assert_eq!(all.iter().filter(|s| *s == "disk").count(), 18, "{all:?}");
    // A restarted worker: every image from the warm directory, no download.
    let warm = sources(worker(&dir.0, &urls, &[]));
    assert!(warm.iter().all(|s| s == "disk"), "{warm:?}");
    assert_eq!(origin.total_hits(), 6);
}

#[test]
fn the_budget_holds_across_processes_and_bad_files_are_refilled() {
    let dir = scratch("disk-budget");
    let origin = TestOrigin::start();
    let body = images::noise_png(64, 64, 3); // ~12 KiB, does not compress
    let urls: Vec<String> = (0..40)
        .map(|i| {
            let path = format!("/n-{i}.png");
            origin.set(&path, Route::ok(images::noise_png(64, 64, i)));
            origin.url(&path)
        })
        .collect();
    let budget = 16 * body.len() as u64;
    let budget_s = budget.to_string();
    let env = [("MMCACHE_DISK_CACHE_MAX_BYTES", budget_s.as_str())];
    let workers: Vec<Child> = urls
        .chunks(10)
        .map(|chunk| worker(&dir.0, chunk, &env))
        .collect();
    for w in workers {
        sources(w);
    }
    // Each process sweeps after writing an eighth of the budget: the directory ends within
    // the budget plus what the four processes wrote since their last sweeps.
    let size = dir_bytes(&dir.0);
    assert!(
        size <= budget + 4 * budget / 8 + 4 * body.len() as u64,
        "{size} > {budget}"
    );
    // A file that is not an image (a foreign write, a disk error) is removed and refilled.
    let first = &urls[0];
    sources(worker(&dir.0, std::slice::from_ref(first), &env));
    let disk = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let entry = disk.path_of(&CacheIdentity::unscoped(first));
    assert!(entry.exists(), "the entry of {first}");
    std::fs::write(&entry, b"garbage").unwrap();
    let again = sources(worker(&dir.0, std::slice::from_ref(first), &env));
    assert_eq!(again, ["origin"], "a corrupt entry is a miss");
    assert_eq!(
        std::fs::read(&entry).unwrap(),
        images::noise_png(64, 64, 0),
        "and is refilled with the origin's bytes"
    );
}

fn entries(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(root.join("v1"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if shard.file_name().len() == 2 {
            out.extend(
                std::fs::read_dir(shard.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        }
    }
    out
}

fn dir_bytes(root: &Path) -> u64 {
    entries(root)
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

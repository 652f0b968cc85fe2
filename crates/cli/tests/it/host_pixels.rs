//! The host pixel tier with real OS processes (`mmcache load`) on a real memory file system
//! (`/dev/shm` when there is one): each image is decoded once per host, the others map it; and
//! the faults of a shared directory leave every load right: a writer killed half-way, a full
//! file system, a directory removed under running processes, entries damaged or rewritten by
//! another user of the directory, a process that maps an entry while another evicts it.
//! Default settings but for the tiers' directories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};
use serde_json::Value;

use crate::common::{Dir, mmcache, stdout_of};

/// A scratch directory on a memory file system (`/dev/shm`), removed on drop.
fn scratch(name: &str) -> Dir {
    Dir(mmcache_test_support::memory_dir(&format!(
        "cli-host-{name}"
    )))
}

/// `mmcache load --json --digest --metrics` over `urls` with the host pixel tier in `dir`.
fn worker(dir: &Path, urls: &[String], extra: &[(&str, &str)]) -> Child {
    let mut cmd = mmcache();
    cmd.env("MMCACHE_HOST_PIXELS_DIR", dir)
        .envs(extra.iter().copied())
        .args(["load", "--json", "--digest", "--metrics"])
        .args(urls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn mmcache")
}

/// What one process did: each load's JSON line, and how many images it decoded.
struct Run {
    loads: Vec<Value>,
    decodes: u64,
}

impl Run {
    fn sources(&self) -> Vec<&str> {
        self.loads
            .iter()
            .map(|l| l["source"].as_str().unwrap_or("?"))
            .collect()
    }

    /// Every one of `n` loads answered, each with the pixels `want` has for its URL.
    fn assert_every_load_right(&self, n: usize, urls: &[String], want: &[String]) {
        assert_eq!(self.loads.len(), n, "every load answered");
        for load in &self.loads {
            let url = load["url"].as_str().expect("url");
            let i = urls.iter().position(|u| u == url).expect("known");
            assert_eq!(load["pixels"], want[i].as_str(), "{url}");
        }
    }

    /// The pixel digest of `url`'s load.
    fn digest(&self, url: &str) -> &str {
        let load = self.loads.iter().find(|l| l["url"] == url).expect("loaded");
        load["pixels"].as_str().expect("a digest")
    }
}

fn finish(child: Child) -> Run {
    let text = stdout_of(child);
    let mut run = Run {
        loads: Vec::new(),
        decodes: 0,
    };
    for line in text.lines() {
        if line.starts_with('{') {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(v["ok"], true, "{line}");
            run.loads.push(v);
        } else if let Some(n) = line
            .strip_prefix("mmcache_decode_duration_seconds_count")
            .and_then(|rest| rest.rsplit(' ').next())
        {
            run.decodes += n.parse::<u64>().expect("a count");
        }
    }
    run
}

/// The pixel digests every process must agree on: `urls` loaded by one process with no cache
/// tier at all.
fn reference(urls: &[String]) -> Vec<String> {
    let child = mmcache()
        .args(["load", "--json", "--digest"])
        .args(urls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mmcache");
    let run = finish(child);
    urls.iter().map(|u| run.digest(u).to_owned()).collect()
}

/// Every entry file of the tier (not temporary files or locks).
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(shards) = std::fs::read_dir(dir.join("v1")) else {
        return out;
    };
    for shard in shards.flatten() {
        let name = shard.file_name();
        if name.len() != 2 {
            continue; // tmp, locks, sweep.lock
        }
        for e in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// `n` PNG images served after `delay` each, and their URLs.
fn images_at(origin: &TestOrigin, n: u32, delay: Duration) -> Vec<String> {
    (0..n)
        .map(|i| {
            let path = format!("/img-{i}.png");
            // Over 64 KiB of pixels: smaller entries are read, not mapped.
            let body = images::png(200, 150, i);
            origin.set(&path, Route::Delay(delay, Box::new(Route::ok(body))));
            origin.url(&path)
        })
        .collect()
}

#[test]
fn a_hosts_processes_decode_each_image_once_and_map_the_same_pixels() {
    let dir = scratch("once");
    let origin = TestOrigin::start();
    // Slow downloads, so the processes really overlap on every image.
    let urls = images_at(&origin, 6, Duration::from_millis(200));
    let want = reference(&urls);
    let before = origin.total_hits();
    // Four processes, each loading every image, in different orders.
    let workers: Vec<Child> = (0..4)
        .map(|w| {
            let mut order = urls.clone();
            order.rotate_left(w);
            worker(&dir.0, &order, &[])
        })
        .collect();
    let runs: Vec<Run> = workers.into_iter().map(finish).collect();
    let decodes: u64 = runs.iter().map(|r| r.decodes).sum();
    assert_eq!(decodes, 6, "one decode per image for the host");
    assert_eq!(origin.total_hits() - before, 6, "one download per image");
    for run in &runs {
        for (url, want) in urls.iter().zip(&want) {
            assert_eq!(
                run.digest(url),
                want,
                "{url}: the same pixels in every process"
            );
        }
    }
    let hosts: usize = runs
        .iter()
        .map(|r| r.sources().iter().filter(|s| **s == "host").count())
        .sum();
    assert_eq!(hosts, 18, "the other three processes map every image");
    // A host hit maps the entry (an origin load may get the mapping too: its entry can land,
    // and replace its pixels in the decoded cache, before the load hands its image out).
    for run in &runs {
        for load in run.loads.iter().filter(|l| l["source"] == "host") {
            assert_eq!(load["mapped"], true, "{load}");
        }
    }
    assert_eq!(entries(&dir.0).len(), 6);
}

/// Runs one process over `urls` and returns it.
fn once(dir: &Path, urls: &[String]) -> Run {
    finish(worker(dir, urls, &[]))
}

#[test]
fn damaged_foreign_or_rewritten_entries_are_misses_and_are_replaced() {
    let dir = scratch("damage");
    let origin = TestOrigin::start();
    let urls = images_at(&origin, 1, Duration::ZERO);
    let want = reference(&urls);
    let url = &urls[0];
    let run = once(&dir.0, &urls);
    assert_eq!(run.sources(), ["origin"]);
    let entry = entries(&dir.0).pop().expect("the entry");
    let good = std::fs::read(&entry).expect("read the entry");
    let len = good.len();
    // What another user of the directory may leave at the entry's name (each written as a new
    // file renamed over it, as a writer would, or in place).
    let mut flipped_pixel = good.clone();
    flipped_pixel[len - 7] ^= 0x10;
    let mut flipped_header = good.clone();
    flipped_header[60] ^= 1; // the height
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a pixel changed", flipped_pixel),
        ("a header field changed", flipped_header),
        ("truncated", good[..len - 4096].to_vec()),
        ("extended", [good.clone(), vec![0; 10]].concat()),
        (
            "not an entry",
            b"\x89PNG\r\n\x1a\nnot a pixel entry".repeat(300),
        ),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in cases {
        let tmp = entry.with_extension("planted");
        std::fs::write(&tmp, &bytes).expect("plant");
        set_mode(&tmp, 0o400);
        std::fs::rename(&tmp, &entry).expect("rename over the entry");
        let run = once(&dir.0, &urls);
        assert_eq!(run.digest(url), want[0], "{what}: the right pixels");
        assert_ne!(
            run.sources(),
            ["host"],
            "{what}: not served from the planted file"
        );
        // Replaced by the load that missed: the next process maps it again.
        let run = once(&dir.0, &urls);
        assert_eq!(run.sources(), ["host"], "{what}: replaced");
        assert_eq!(run.digest(url), want[0], "{what}");
    }
    // A valid entry of another key at this key's name (an entry renamed by another user).
    let other = images_at(&origin, 2, Duration::ZERO);
    let second = &other[1];
    once(&dir.0, std::slice::from_ref(second));
    let planted = entries(&dir.0)
        .into_iter()
        .find(|p| *p != entry)
        .expect("the other entry");
    std::fs::copy(&planted, entry.with_extension("planted")).expect("copy");
    std::fs::rename(entry.with_extension("planted"), &entry).expect("rename");
    let run = once(&dir.0, &urls);
    assert_eq!(
        run.digest(url),
        want[0],
        "another key's entry is not this image"
    );
    assert_eq!(run.sources(), ["origin"]);
    // A writable entry is not mapped; a link is not followed.
    set_mode(&entry, 0o600);
    let run = once(&dir.0, &urls);
    assert_eq!(run.sources(), ["origin"], "a writable entry is a miss");
    assert_eq!(run.digest(url), want[0]);
    let target = dir.0.join("elsewhere");
    std::fs::copy(&entry, &target).expect("copy");
    std::fs::remove_file(&entry).expect("remove");
    std::os::unix::fs::symlink(&target, &entry).expect("link");
    let run = once(&dir.0, &urls);
    assert_eq!(run.sources(), ["origin"], "a link is not followed");
    assert_eq!(run.digest(url), want[0]);
    assert_eq!(once(&dir.0, &urls).sources(), ["host"], "the link replaced");
    // An entry another user owns (as root: another uid's file at the name) is not ours to map.
    if rustix::process::geteuid().is_root() {
        let status = Command::new("chown")
            .arg("65534")
            .arg(&entry)
            .status()
            .expect("chown");
        assert!(status.success());
        let run = once(&dir.0, &urls);
        assert_eq!(run.sources(), ["origin"], "another user's entry is a miss");
        assert_eq!(run.digest(url), want[0]);
        assert_eq!(once(&dir.0, &urls).sources(), ["host"], "and is replaced");
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("skipped outside CI: another uid's entry needs root to make");
    }
}

#[test]
fn processes_map_entries_while_others_evict_them() {
    let dir = scratch("evict");
    let origin = TestOrigin::start();
    let urls = images_at(&origin, 16, Duration::ZERO);
    let want = reference(&urls);
    let mut all = Vec::new();
    for _ in 0..4 {
        all.extend(urls.iter().cloned());
    }
    // A budget of about three entries: each write's sweep evicts what the others map. A
    // decoded cache of one image: most loads go to the tier.
    let settings = [
        ("MMCACHE_HOST_PIXELS_MAX_BYTES", "300000"),
        ("DYN_MM_IMAGE_CACHE_SIZE", "1"),
    ];
    let workers: Vec<Child> = (0..3)
        .map(|w| {
            let mut order = all.clone();
            order.rotate_left(w * 5);
            worker(&dir.0, &order, &settings)
        })
        .collect();
    let mut hosts = 0;
    for run in workers.into_iter().map(finish) {
        run.assert_every_load_right(all.len(), &urls, &want);
        hosts += run.sources().iter().filter(|s| **s == "host").count();
    }
    assert!(
        hosts > 0,
        "some loads mapped an entry before it was evicted"
    );
    // Two entries fit under 90 % of the budget; each process's last write may not have been
    // swept yet when it exited.
    let left = entries(&dir.0).len();
    assert!(left <= 2 + 3, "the sweeps held the budget: {left} entries");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn a_writer_killed_half_way_leaves_no_entry_and_no_wrong_pixels() {
    let dir = scratch("killed");
    let origin = TestOrigin::start();
    // Large enough that its entry (48 MB of pixels) takes a while to write.
    let body = images::zero_png(4000, 4000, 8, 2, &[]);
    origin.set("/big.png", Route::ok(body));
    let url = origin.url("/big.png");
    let urls = vec![url.clone()];
    let tmp = dir.0.join("v1").join("tmp");
    let mut killed = false;
    for _attempt in 0..5 {
        let mut child = worker(&dir.0, &urls, &[]);
        // Kill it as soon as its temporary file appears (bounded).
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let writing = std::fs::read_dir(&tmp)
                .map(|d| d.flatten().next().is_some())
                .unwrap_or(false);
            if writing || child.try_wait().expect("poll").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill();
        let _ = child.wait();
        if entries(&dir.0).is_empty() {
            killed = true;
            break;
        }
        // It finished before the kill: start again from nothing.
        let _ = std::fs::remove_dir_all(&dir.0);
    }
    assert!(killed, "no writer was caught half-way in 5 attempts");
    // The next process loads the right pixels (its own decode), writes the entry, and the one
    // after maps it.
    let run = once(&dir.0, &urls);
    assert_eq!(run.sources(), ["origin"]);
    let digest = run.digest(&url).to_owned();
    let run = once(&dir.0, &urls);
    assert_eq!(run.sources(), ["host"]);
    assert_eq!(run.digest(&url), digest);
}

#[test]
fn loads_go_on_while_the_directory_is_removed_under_running_processes() {
    let dir = scratch("removed");
    let origin = TestOrigin::start();
    let urls = images_at(&origin, 24, Duration::from_millis(5));
    let want = reference(&urls);
    let mut all = Vec::new();
    for _ in 0..6 {
        all.extend(urls.iter().cloned());
    }
    let workers: Vec<Child> = (0..3)
        .map(|w| {
            let mut order = all.clone();
            order.rotate_left(w * 7);
            // A decoded cache of one image: most loads go below memory.
            worker(&dir.0, &order, &[("DYN_MM_IMAGE_CACHE_SIZE", "1")])
        })
        .collect();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(40));
        let _ = std::fs::remove_dir_all(&dir.0);
    }
    for run in workers.into_iter().map(finish) {
        run.assert_every_load_right(all.len(), &urls, &want);
    }
    // The tier works again once the directory is left alone.
    once(&dir.0, &urls[..1]);
    assert_eq!(once(&dir.0, &urls[..1]).sources(), ["host"]);
}

#[test]
fn a_full_memory_file_system_fails_no_load() {
    let dir = scratch("full");
    std::fs::create_dir_all(&dir.0).expect("dir");
    // A 256 KiB tmpfs: the first entry (96 x 64 RGB is 18 KiB + 4 KiB) fits, a large one
    // does not.
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"])
        .arg(&dir.0)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and can mount a tmpfs"
        );
        eprintln!("skipped outside CI: mounting a tmpfs needs root");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _mounted = Unmount(&dir.0);
    let origin = TestOrigin::start();
    let small = images_at(&origin, 1, Duration::ZERO);
    origin.set("/big.png", Route::ok(images::png(400, 300, 7)));
    let big = origin.url("/big.png");
    let want = reference(&[small[0].clone(), big.clone()]);
    let tier = dir.0.join("tier");
    for _ in 0..2 {
        let run = once(&tier, &[big.clone(), small[0].clone()]);
        assert_eq!(run.digest(&big), want[1]);
        assert_eq!(run.digest(&small[0]), want[0]);
    }
    // The large image never fitted (its loads decoded it); the small one is mapped.
    let run = once(&tier, &[big.clone(), small[0].clone()]);
    assert_eq!(run.sources(), ["origin", "host"]);
    let leftovers = std::fs::read_dir(tier.join("v1").join("tmp"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0, "a failed write leaves no temporary file");
}

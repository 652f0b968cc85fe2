//! The disk tier against a hostile co-tenant of its directory: planted links, FIFOs, foreign
//! files, loose modes, future mtimes; and the edge cases of its arithmetic and locks.
//! Everything here is real: real links, real FIFOs (`mkfifo`), real owners (`chown`).

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use mmcache_disk_cache::{DiskCache, DiskCacheConfig, Fill};
use mmcache_scope::CacheIdentity;

use crate::common::{Dir, id};

/// A uid and gid that are not ours (the tests may run as root, which can chown to them).
const OTHER: u32 = 65534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether a test that must chown to another user can run. Under CI it must: CI runs
/// the tests as root, and a silent skip there would leave these checks unrun, so not being
/// root fails the test (any `CI` value but empty, 0 or false, as test-support's `in_ci` reads it). Elsewhere it says it skips.
fn can_chown(why: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        !std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false"),
        "{why}, and CI is set: run the tests as root (CI must not skip them)"
    );
    eprintln!("{why}; not root, so skipped (outside CI)");
    false
}

fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

/// Opens a FIFO for reading and writing (never blocks on Linux) and closes it: a process
/// blocked opening it (either end) is released, so a failing test cannot hang the runtime.
fn release_fifo(path: &Path) {
    let _ = File::options().read(true).write(true).open(path);
}

fn age(path: &Path, by: Duration) {
    // `touch -h` sets a FIFO's or a link's times without opening it.
    let when = format!(
        "@{}",
        (SystemTime::now() - by)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    let status = Command::new("touch")
        .args(["-h", "-d", &when])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A victim outside the cache: a folder of old files a planted link points to.
fn victim(root: &Path, name: &str) -> (PathBuf, PathBuf) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("model.bin");
    std::fs::write(&file, b"weights").unwrap();
    age(&file, Duration::from_secs(3 * 3600));
    (dir, file)
}

#[tokio::test]
async fn the_sweep_never_follows_a_planted_link() {
    let dir = Dir::new("hostile-links");
    let outside = Dir::new("hostile-links-outside");
    let mut config = DiskCacheConfig::new(&dir.0);
    config.ttl = Duration::from_secs(60);
    let cache = DiskCache::new(config);
    cache.put(&id(1), Bytes::from_static(b"entry")).await;
    let _ = cache.lock(&id(2), Duration::from_millis(10)).await; // makes v1/locks
    let v1 = dir.0.join("v1");
    // A shard, the temporary folder and a lock shard, each replaced by a link to a victim.
    let (shard_target, shard_victim) = victim(&outside.0, "blobs");
    symlink(&shard_target, v1.join("zz")).unwrap();
    let (tmp_target, tmp_victim) = victim(&outside.0, "tmp");
    std::fs::remove_dir_all(v1.join("tmp")).unwrap();
    symlink(&tmp_target, v1.join("tmp")).unwrap();
    let (lock_target, lock_victim) = victim(&outside.0, "locks");
    symlink(&lock_target, v1.join("locks/zz")).unwrap();
    cache.sweep_now();
    for f in [&shard_victim, &tmp_victim, &lock_victim] {
        assert!(
            f.exists(),
            "the sweep deleted {} through a link",
            f.display()
        );
    }
}

#[tokio::test]
async fn a_fifo_at_an_entry_is_a_miss_at_once() {
    let dir = Dir::new("hostile-fifo-entry");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache
        .put(&id(9), Bytes::from_static(b"makes the folders"))
        .await;
    let fifo = cache.path_of(&id(1));
    mkfifo(&fifo);
    let got = tokio::time::timeout(Duration::from_secs(5), cache.get(&id(1))).await;
    release_fifo(&fifo);
    assert!(
        matches!(got, Ok(None)),
        "a FIFO entry blocked the read (timed out: {})",
        got.is_err()
    );
    // Nor does it count as filled: the caller may fill it (and replace the FIFO).
    let locked = tokio::time::timeout(
        Duration::from_secs(5),
        cache.lock(&id(1), Duration::from_millis(50)),
    )
    .await;
    release_fifo(&fifo);
    assert!(matches!(locked, Ok(Fill::Locked(_))), "{locked:?}");
}

fn lock_path(dir: &Path, ident: &CacheIdentity) -> PathBuf {
    let digest = ident.sha256_hex();
    dir.join("v1/locks")
        .join(&digest[..2])
        .join(format!("{digest}.lock"))
}

#[tokio::test]
async fn a_fifo_lock_file_never_blocks_a_locker_or_the_sweep() {
    let dir = Dir::new("hostile-fifo-lock");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let fifo = lock_path(&dir.0, &id(1));
    mkfifo(&fifo);
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        cache.lock(&id(1), Duration::from_millis(50)),
    )
    .await;
    release_fifo(&fifo);
    assert!(matches!(got, Ok(Fill::GaveUp)), "{got:?}");
    // An idle (old) FIFO lock file: the sweeper, which holds sweep.lock, must not hang on it.
    age(&fifo, Duration::from_secs(3600));
    let sweeper = {
        let cache = cache.clone();
        tokio::task::spawn_blocking(move || cache.sweep_now())
    };
    let swept = tokio::time::timeout(Duration::from_secs(5), sweeper).await;
    release_fifo(&fifo);
    assert!(swept.is_ok(), "the sweep hung on a FIFO lock file");
    assert!(
        std::fs::symlink_metadata(&fifo).is_ok(),
        "left alone: not ours to remove"
    );
}

#[tokio::test]
async fn entries_and_folders_are_private_by_default() {
    let dir = Dir::new("hostile-modes");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache
        .put(&id(1), Bytes::from_static(b"session image"))
        .await;
    let _ = cache.lock(&id(2), Duration::from_millis(10)).await;
    let entry = cache.path_of(&id(1));
    assert_eq!(mode(&entry), 0o600, "entry");
    for d in [
        dir.0.clone(),
        dir.0.join("v1"),
        entry.parent().unwrap().to_owned(),
        dir.0.join("v1/tmp"),
        dir.0.join("v1/locks"),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    assert_eq!(mode(&lock_path(&dir.0, &id(2))), 0o600, "lock file");
}

#[tokio::test]
async fn a_world_writable_directory_is_refused() {
    let dir = Dir::new("hostile-world");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"x")).await;
    assert!(cache.get(&id(1)).await.is_none());
    assert!(
        !dir.0.join("v1").exists(),
        "nothing is written in a directory anyone may write"
    );
}

#[tokio::test]
async fn a_directory_another_user_owns_is_refused() {
    if !can_chown("needs root to chown a directory to another user") {
        return;
    }
    let dir = Dir::new("hostile-foreign-dir");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::os::unix::fs::chown(&dir.0, Some(OTHER), Some(OTHER)).unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"x")).await;
    assert!(
        !dir.0.join("v1").exists(),
        "nothing is written in another user's directory"
    );
}

#[tokio::test]
async fn an_entry_another_user_owns_is_not_read() {
    if !can_chown("needs root to chown a file to another user") {
        return;
    }
    let dir = Dir::new("hostile-foreign-entry");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"planted")).await;
    std::os::unix::fs::chown(cache.path_of(&id(1)), Some(OTHER), Some(OTHER)).unwrap();
    assert!(
        cache.get(&id(1)).await.is_none(),
        "a foreign entry was served"
    );
}

#[tokio::test]
async fn a_future_mtime_is_expired_not_immortal() {
    let dir = Dir::new("hostile-future");
    let mut config = DiskCacheConfig::new(&dir.0);
    config.ttl = Duration::from_secs(2);
    let cache = DiskCache::new(config);
    for n in [1, 2] {
        cache.put(&id(n), Bytes::from_static(b"x")).await;
        let f = File::options()
            .write(true)
            .open(cache.path_of(&id(n)))
            .unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(365 * 24 * 3600))
            .unwrap();
    }
    assert!(
        cache.get(&id(1)).await.is_none(),
        "served with an mtime a year ahead"
    );
    cache.sweep_now();
    assert!(
        !cache.path_of(&id(2)).exists(),
        "the sweep kept an entry dated a year ahead"
    );
}

#[tokio::test]
async fn an_entry_cap_of_u64_max_does_not_overflow() {
    let dir = Dir::new("hostile-cap-max");
    let mut config = DiskCacheConfig::new(&dir.0);
    config.max_entry_bytes = u64::MAX;
    let cache = DiskCache::new(config);
    cache.put(&id(1), Bytes::from_static(b"bytes")).await;
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"bytes"[..]));
}

#[tokio::test]
async fn only_a_valid_entry_counts_as_filled() {
    let dir = Dir::new("hostile-filled");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache
        .put(&id(9), Bytes::from_static(b"makes the folders"))
        .await;
    // Empty, a directory: no process could ever read them, so one must refill them.
    std::fs::create_dir_all(cache.path_of(&id(1)).parent().unwrap()).unwrap();
    std::fs::write(cache.path_of(&id(1)), b"").unwrap();
    std::fs::create_dir_all(cache.path_of(&id(2))).unwrap();
    for n in [1, 2] {
        let got = cache.lock(&id(n), Duration::from_millis(50)).await;
        assert!(matches!(got, Fill::Locked(_)), "entry {n}: {got:?}");
    }
    assert!(matches!(
        cache.lock(&id(9), Duration::from_millis(50)).await,
        Fill::Filled
    ));
}

#[tokio::test]
async fn a_hot_lock_file_is_kept_young() {
    let dir = Dir::new("hostile-hot-lock");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    let first = cache.lock(&id(1), Duration::from_millis(50)).await;
    assert!(matches!(first, Fill::Locked(_)));
    drop(first);
    let path = lock_path(&dir.0, &id(1));
    age(&path, Duration::from_secs(2 * 3600));
    // Taken again now: it is in use, so a sweep must not judge it idle by an old mtime.
    let again = cache.lock(&id(1), Duration::from_millis(50)).await;
    assert!(matches!(again, Fill::Locked(_)));
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let old = SystemTime::now().duration_since(mtime).unwrap_or_default();
    assert!(
        old < Duration::from_secs(60),
        "lock file mtime {old:?} old while in use"
    );
}

#[tokio::test]
async fn refused_directories_say_why_and_sticky_ones_are_used() {
    use mmcache_disk_cache::{DiskStatus, Refusal};
    let world = Dir::new("hostile-status-world");
    std::fs::create_dir_all(&world.0).unwrap();
    std::fs::set_permissions(&world.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&world.0));
    assert!(
        matches!(
            cache.status(),
            DiskStatus::Refused(Refusal::WorldWritable { .. })
        ),
        "{:?}",
        cache.status()
    );
    assert!(matches!(
        cache.lock(&id(1), Duration::from_millis(10)).await,
        Fill::GaveUp
    ));
    // World-writable with the sticky bit (as /tmp): others cannot remove or rename our files.
    let sticky = Dir::new("hostile-status-sticky");
    std::fs::create_dir_all(&sticky.0).unwrap();
    std::fs::set_permissions(&sticky.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&sticky.0));
    assert_eq!(cache.status(), &DiskStatus::Enabled);
    cache.put(&id(1), Bytes::from_static(b"x")).await;
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"x"[..]));
    // A directory that does not exist yet is made, ours, 0700.
    let fresh = Dir::new("hostile-status-fresh");
    let cache = DiskCache::new(DiskCacheConfig::new(fresh.0.join("a/b")));
    assert_eq!(cache.status(), &DiskStatus::Enabled);
    assert_eq!(mode(&fresh.0.join("a/b")), 0o700);
    if can_chown("the foreign-owner refusal needs root to chown a directory") {
        let foreign = Dir::new("hostile-status-foreign");
        std::fs::create_dir_all(&foreign.0).unwrap();
        std::os::unix::fs::chown(&foreign.0, Some(OTHER), Some(OTHER)).unwrap();
        let cache = DiskCache::new(DiskCacheConfig::new(&foreign.0));
        match cache.status() {
            DiskStatus::Refused(r @ Refusal::ForeignOwner { owner, .. }) => {
                assert_eq!(*owner, OTHER);
                assert!(r.to_string().contains("MMCACHE_DISK_CACHE_GROUP"), "{r}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn shared_group_mode_trusts_the_group_and_makes_files_for_it() {
    if !can_chown("needs root to chown to another uid and gid") {
        return;
    }
    const GROUP: u32 = 54321;
    // A volume as Kubernetes mounts one with an fsGroup: another uid's, our group, 2775.
    let dir = Dir::new("hostile-group");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::os::unix::fs::chown(&dir.0, Some(OTHER), Some(GROUP)).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o2775)).unwrap();
    assert!(
        !DiskCache::new(DiskCacheConfig::new(&dir.0))
            .status()
            .is_enabled(),
        "another uid's directory, without the group setting"
    );
    let mut config = DiskCacheConfig::new(&dir.0);
    config.group = Some(GROUP);
    let cache = DiskCache::new(config);
    assert!(cache.status().is_enabled(), "{:?}", cache.status());
    cache.put(&id(1), Bytes::from_static(b"ours")).await;
    let _ = cache.lock(&id(2), Duration::from_millis(10)).await;
    let entry = cache.path_of(&id(1));
    assert_eq!(mode(&entry), 0o640);
    assert_eq!(std::fs::metadata(&entry).unwrap().gid(), GROUP);
    assert_eq!(mode(entry.parent().unwrap()), 0o2770);
    assert_eq!(mode(&dir.0.join("v1")), 0o2770);
    assert_eq!(mode(&lock_path(&dir.0, &id(2))), 0o660);
    // Another pod's entry (another uid, the group): read. Outside the group: not read.
    std::os::unix::fs::chown(&entry, Some(OTHER), Some(GROUP)).unwrap();
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"ours"[..]));
    std::os::unix::fs::chown(&entry, Some(OTHER), Some(OTHER)).unwrap();
    assert!(cache.get(&id(1)).await.is_none());
    assert!(cache.stats().skipped >= 1);
}

#[tokio::test]
async fn a_planted_v1_link_and_a_fifo_sweep_lock_are_not_used() {
    let dir = Dir::new("hostile-v1-link");
    let outside = Dir::new("hostile-v1-link-outside");
    std::fs::create_dir_all(&outside.0).unwrap();
    std::fs::create_dir_all(&dir.0).unwrap();
    symlink(&outside.0, dir.0.join("v1")).unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"x")).await;
    assert!(cache.get(&id(1)).await.is_none());
    assert_eq!(
        std::fs::read_dir(&outside.0).unwrap().count(),
        0,
        "wrote through a planted v1 link"
    );
    assert!(cache.stats().skipped >= 1);
    // A FIFO as sweep.lock: the sweep does not run, and does not hang.
    std::fs::remove_file(dir.0.join("v1")).unwrap();
    cache.put(&id(1), Bytes::from_static(b"x")).await;
    let fifo = dir.0.join("v1/sweep.lock");
    let _ = std::fs::remove_file(&fifo);
    mkfifo(&fifo);
    let sweeper = {
        let cache = cache.clone();
        tokio::task::spawn_blocking(move || cache.sweep_now())
    };
    let swept = tokio::time::timeout(Duration::from_secs(5), sweeper).await;
    release_fifo(&fifo);
    assert!(swept.is_ok(), "the sweep hung on a FIFO sweep.lock");
}

#[tokio::test]
async fn a_shard_swapped_for_a_link_after_its_handle_is_kept_is_never_followed() {
    let dir = Dir::new("hostile-shard-swap");
    let outside = Dir::new("hostile-shard-swap-outside");
    std::fs::create_dir_all(&outside.0).unwrap();
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"ours")).await;
    // A hit: the shard folder's handle is kept from now on.
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"ours"[..]));
    // Another identity in the same shard (bounded search: 1 in 256 share one).
    let shard_of = |n: usize| cache.path_of(&id(n)).parent().unwrap().to_owned();
    let twin = (2..100_000)
        .find(|&n| shard_of(n) == shard_of(1))
        .expect("an identity in the same shard");
    // The shard is moved away and a link to a planted folder put in its place, holding
    // entries for both identities.
    let shard = shard_of(1);
    std::fs::rename(&shard, outside.0.join("moved")).unwrap();
    let planted = outside.0.join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    for n in [1, twin] {
        let name = cache.path_of(&id(n)).file_name().unwrap().to_owned();
        std::fs::write(planted.join(name), b"planted").unwrap();
    }
    symlink(&planted, &shard).unwrap();
    // Through the kept handle: our own entry at most, never the planted one.
    let got = cache.get(&id(1)).await;
    assert_ne!(
        got.as_deref(),
        Some(&b"planted"[..]),
        "read through a planted link"
    );
    // A miss through the kept handle looks again from the path: the link is skipped.
    let skipped = cache.stats().skipped;
    assert!(
        cache.get(&id(twin)).await.is_none(),
        "read through a planted link"
    );
    assert!(cache.stats().skipped > skipped, "the link was not counted");
    // Writes never go through it, and the handle of the moved folder is forgotten.
    cache.put(&id(twin), Bytes::from_static(b"new")).await;
    assert!(
        cache.get(&id(1)).await.is_none(),
        "read through a planted link"
    );
    assert_eq!(
        std::fs::read_dir(&planted).unwrap().count(),
        2,
        "wrote through a link"
    );
    for n in [1, twin] {
        let name = cache.path_of(&id(n)).file_name().unwrap().to_owned();
        assert_eq!(std::fs::read(planted.join(name)).unwrap(), b"planted");
    }
}

#[tokio::test]
async fn a_directory_emptied_and_refilled_is_read_from_its_new_folders() {
    // An operator empties the directory under a running worker; another process fills it
    // again. The kept handles name the removed folders: reads must find the new entries.
    let dir = Dir::new("hostile-refilled");
    let cache = DiskCache::new(DiskCacheConfig::new(&dir.0));
    cache.put(&id(1), Bytes::from_static(b"before")).await;
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"before"[..]));
    std::fs::remove_dir_all(&dir.0).unwrap();
    let other = DiskCache::new(DiskCacheConfig::new(&dir.0));
    other.put(&id(1), Bytes::from_static(b"after")).await;
    assert_eq!(cache.get(&id(1)).await.as_deref(), Some(&b"after"[..]));
}

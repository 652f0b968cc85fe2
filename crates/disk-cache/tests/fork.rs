// Not in tests/it: its forked child holds a copy of every fd of the process (other tests' too).
//! A forked child (fork without exec, as Python's multiprocessing does) inherits the open file
//! description of a held fill lock: it must not keep the parent's lock once the parent drops it.
#![allow(unsafe_code)] // fork(2), kill(2), waitpid(2): the only way to make such a child.

use std::time::Duration;

use mmcache_disk_cache::{DiskCache, DiskCacheConfig, Fill};
use mmcache_scope::CacheIdentity;

#[tokio::test(flavor = "current_thread")]
async fn a_forked_child_does_not_keep_the_parents_fill_lock() {
    let dir = std::env::temp_dir().join(format!("mmcache-fork-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = DiskCache::new(DiskCacheConfig::new(&dir));
    let ident = CacheIdentity::unscoped("https://example.com/forked.png");
    let held = cache.lock(&ident, Duration::from_millis(100)).await;
    assert!(matches!(held, Fill::Locked(_)));
    // SAFETY: the child calls only async-signal-safe functions (sleep, _exit).
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        unsafe {
            libc::sleep(30); // bounded: killed by the parent, or gone after 30 s
            libc::_exit(0);
        }
    }
    drop(held); // the parent's fill ends; its child lives on
    let again = cache.lock(&ident, Duration::from_millis(200)).await;
    let retaken = matches!(again, Fill::Locked(_));
    // SAFETY: plain syscalls on the pid this test made.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(retaken, "the forked child still held the lock: {again:?}");
}

//! Fuzz target: reading a disk-tier entry file of arbitrary bytes and length, through the
//! public API only (`DiskCache::path_of` to place the file, `get` to read it back).
//!
//! Input: the first byte picks the entry cap (`max_entry_bytes`, 0..=255 bytes, so both sides
//! of it are reachable), the rest is the file. For every input: no panic, and `get` returns the
//! file's exact bytes when it is non-empty and within the cap, else a miss.
//!
//! The directory is `$MMCACHE_FUZZ_DIR` (set by `cargo xtask fuzz`) or the temp dir, with a
//! folder per process.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::OnceLock;

use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
use mmcache_scope::CacheIdentity;

struct Env {
    runtime: tokio::runtime::Runtime,
    dir: PathBuf,
}

/// Made in the forked child, on its first input: threads do not survive AFL++'s fork.
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let base = std::env::var_os("MMCACHE_FUZZ_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        Env {
            // Timers on: every disk operation runs under a deadline (`tokio::time::timeout`);
            // without them each one panicked, which is why every seed crashed.
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a tokio runtime"),
            dir: base.join(format!("disk-entry-{}", std::process::id())),
        }
    })
}

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Some((&cap, body)) = data.split_first() else {
            return;
        };
        check(u64::from(cap), body);
    });
}

fn check(cap: u64, body: &[u8]) {
    let env = env();
    let mut config = DiskCacheConfig::new(&env.dir);
    config.max_entry_bytes = cap;
    let cache = DiskCache::new(config);
    let id = CacheIdentity::unscoped("https://example.com/fuzz.png");
    let path = cache.path_of(&id);
    // Folders 0700 and the file 0600 whatever the umask, as the tier makes them: a folder
    // anyone may write would be skipped, and the check below would fail for the wrong reason.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path.parent().expect("an entry has a folder"))
        .expect("mkdir");
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(body))
        .expect("write the entry");
    let got = env.runtime.block_on(cache.get(&id));
    let fits = !body.is_empty() && body.len() as u64 <= cap;
    match got {
        Some(bytes) => {
            assert!(fits, "{} bytes read with a {cap}-byte cap", body.len());
            assert_eq!(&bytes[..], body);
        }
        None => assert!(
            !fits,
            "a {}-byte entry under a {cap}-byte cap missed",
            body.len()
        ),
    }
    let _ = std::fs::remove_file(&path);
}

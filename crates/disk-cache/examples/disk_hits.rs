//! Reads one entry N times (default 1000), to count what a disk hit costs:
//!
//! ```text
//! cargo build --release -p mmcache-disk-cache --example disk_hits
//! strace -f -c -o /tmp/hits-1000.txt target/release/examples/disk_hits 1000
//! strace -f -c -o /tmp/hits-2000.txt target/release/examples/disk_hits 2000
//! ```
//!
//! The difference of the two counts, divided by 1000, is what a hit costs (the start cancels
//! out): `openat`, `fstat`, two `read`s and `close`, besides the blocking pool's `futex`es. A
//! debug build adds an `fcntl` per `close` (std checks that the descriptor was open).

use std::time::Duration;

use bytes::Bytes;
use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
use mmcache_scope::CacheIdentity;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let dir = std::env::temp_dir().join(format!("mmcache-disk-hits-{}", std::process::id()));
    let cache = DiskCache::new(DiskCacheConfig::new(&dir));
    let id = CacheIdentity::unscoped("https://example.com/cat.png");
    cache.put(&id, Bytes::from(vec![7u8; 64 << 10])).await;
    // A first hit outside the count: whatever a first read opens once is opened.
    assert!(cache.get(&id).await.is_some(), "the entry was not written");
    tokio::time::sleep(Duration::from_millis(10)).await;
    let hits = {
        let mut hits = 0;
        for _ in 0..n {
            hits += usize::from(cache.get(&id).await.is_some());
        }
        hits
    };
    println!("{hits} hits of {n}");
    std::fs::remove_dir_all(&dir).ok();
}

//! Reads one entry N times (default 1000), to count what a disk hit costs:
//!
//! ```text
//! cargo build -p mmcache-disk-cache --example disk_hits
//! strace -f -c -o /tmp/hits.txt target/debug/examples/disk_hits 1000
//! ```
//!
//! Run it with two counts and divide the difference by the difference of the counts: what the
//! start costs cancels out.

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

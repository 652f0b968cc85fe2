//! The host-local tier of encoded image bytes: files on a local disk that every worker process
//! of one host shares, so the host downloads each image once and a restarted worker starts warm.
//!
//! - An entry is the exact origin bytes in `<dir>/v1/<aa>/<digest>`, where `<digest>` is the
//!   same SHA-256 of the cache identity as in the Redis key (so scoping partitions it the same
//!   way) and `<aa>` its first two hex digits.
//! - Writes go to a temporary file that is renamed into place: a reader sees a whole entry or
//!   none, whatever the number of processes writing the same entry at once, and a process killed
//!   mid-write leaves only a temporary file, which a sweep removes.
//! - Reads are bounded by the same cap as a download; an entry older than the TTL (by its
//!   modification time) is a miss and is removed.
//! - A byte budget holds across processes: each process sweeps the directory (under a lock file,
//!   one sweeper at a time) once it has written an eighth of the budget since its last sweep, or
//!   every [`SWEEP_INTERVAL`]; the sweep removes expired entries and then the least recently
//!   written ones until the directory is under 90 % of the budget. No write scans the directory.
//! - [`DiskCache::lock`] is a cross-process single-flight: the first process to miss takes a
//!   per-entry lock file (`flock`, released by the kernel if the process dies) and fills the
//!   entry; the others wait for it and read the entry instead of downloading it again.
//! - Fail-open like the shared cache: a full disk, a read-only or deleted directory, a corrupt
//!   or truncated file never fails a load; reads give `Option<Bytes>`, writes give nothing.
//! - The directory is shared with other processes, some possibly hostile: no link is ever
//!   followed below it, files are opened non-blocking and used only when `fstat` says they are
//!   regular files we (or the configured group) own, entries are 0600 in 0700 folders (0640 /
//!   2770 with a group), and a directory anyone may write (without the sticky bit) or another
//!   user owns is refused at start ([`DiskCache::status`]). A modification time more than
//!   [`CLOCK_SKEW`] ahead counts as expired. Reads keep the folders' handles open (a hit costs
//!   the entry's `openat`, `fstat`, reads and `close`), and look again from the path when they
//!   find nothing through them.
//! - Every operation is bounded: a deadline, a cap on blocking operations at once, and a
//!   breaker that skips a disk that keeps timing out (see [`PERMIT_WAIT`], [`BREAKER_FAILURES`]).
//!
//! This crate knows nothing of HTTP, Redis or pixels.
//!
//! # Examples
//!
//! ```
//! use mmcache_disk_cache::{DiskCache, DiskCacheConfig};
//! use mmcache_scope::CacheIdentity;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = std::env::temp_dir().join(format!("mmcache-doc-{}", std::process::id()));
//! let cache = DiskCache::new(DiskCacheConfig::new(&dir));
//! let id = CacheIdentity::unscoped("https://example.com/cat.png");
//! assert!(cache.get(&id).await.is_none());
//! cache.put(&id, bytes::Bytes::from_static(b"\x89PNG...")).await;
//! assert_eq!(cache.get(&id).await.as_deref(), Some(&b"\x89PNG..."[..]));
//! # std::fs::remove_dir_all(&dir).ok();
//! # }
//! ```

mod cache;
mod config;
mod dirs;
mod fsops;
mod guard;
mod lock;
mod mapped;
mod mmap;
mod named;
mod read;
mod sweep;
mod trust;
mod write;

pub mod metrics;

#[cfg(feature = "test-seams")]
pub use cache::Stall;
pub use cache::{CLOCK_SKEW, DiskCache, ReadHold, ReadMemory, TryReadMemory, entry_path};
pub use config::{
    DEFAULT_HOST_MAX_BYTES, DEFAULT_MAX_BLOCKING_OPS, DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRY_BYTES,
    DEFAULT_TIMEOUT, DEFAULT_TTL, DiskCacheConfig, DiskCacheStats, Field, Invalid, MAX_TIMEOUT,
    MAX_TTL, Tier, group_id,
};
pub use guard::{BREAKER_COOLDOWN, BREAKER_FAILURES, PERMIT_WAIT};
pub use lock::{Fill, FillLock};
pub use mapped::MappedEntry;
pub use mmap::{MAP_MIN_BYTES, MAX_MAPPINGS};
pub use named::EntryName;
pub use read::EntryStamp;
pub use sweep::SWEEP_INTERVAL;
pub use trust::{DiskStatus, Refusal};

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

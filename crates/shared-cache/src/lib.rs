//! A fail-open shared cache of encoded image bytes on Redis Cluster or Dragonfly.
//!
//! Every worker of a fleet reads and writes the exact origin bytes of an image under a key
//! compatible with the Python implementation in NVIDIA Dynamo
//! (`dynamo:mm:image:{<sha256hex(identity)>}:bytes`), so each image is downloaded once per
//! fleet. Operations never return an error: a read gives `Option<Bytes>`, writes and deletes
//! say how they ended ([`WriteOutcome`], never an error); failures are counted, logged at
//! debug, and warned about at most once a minute.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use mmcache_scope::CacheIdentity;
//! use mmcache_shared_cache::{SharedCache, SharedCacheConfig, entry_key};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let id = CacheIdentity::unscoped("https://example.com/img.png");
//! assert_eq!(
//!     entry_key(&id),
//!     "dynamo:mm:image:{48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0}:bytes"
//! );
//!
//! // Nothing listens on this port: the cache fails open.
//! let mut config = SharedCacheConfig::new("redis://127.0.0.1:1");
//! config.connect_timeout = Duration::from_millis(100);
//! let cache = SharedCache::new(config).unwrap(); // no I/O here
//! assert_eq!(cache.get(&id).await, None);
//! cache.set(&id, bytes::Bytes::from_static(b"\x89PNG...")).await; // no error either
//! assert_eq!(cache.stats().get_errors, 1);
//! # }
//! ```
//!
//! # Connection
//!
//! The configured URL is the discovery endpoint. The client connects on first use, in a
//! background task, and a load waits for that attempt no longer than its own deadline. After
//! a failed attempt the next one waits [`RECONNECT_BACKOFF`]. When every operation has failed
//! for [`REDISCOVER_AFTER`], the connection is dropped and rebuilt through the URL, so a fleet
//! recovers without restarts even after every node came back at a new address.
//!
//! One attempt per operation (no client retries); the connect timeout and the response
//! timeout are separate, and each operation also runs under an overall deadline of both.
//!
//! # Permission denials
//!
//! `NOPERM`, `NOAUTH` and `WRONGPASS` are not ordinary error replies: no retry heals them. Each
//! is logged at error level (the command and its key space, never a key or the URL), counted
//! under `kind="denied"`, and the denied command is not sent on that key space again for
//! [`DENIED_COOLDOWN`]; then the next operation probes, so a fixed ACL is noticed without a
//! restart. [`SharedCache::denials`] lists the denials in force.

mod breaker;
mod client;
pub mod commands;
mod config;
mod conn;
mod denied;
mod entry;
mod error;
mod inspect;
mod keyed;
mod lease;
mod memory;
pub mod metrics;
mod read;
mod samples;
mod slots;
mod stats;
mod warn;
mod write_behind;

pub use crate::breaker::{BreakerConfig, BreakerState};
pub use crate::client::SharedCache;
pub use crate::config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_MAX_READ_BYTES, DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_TTL, Field, Invalid, LeaseConfig, MAX_TIMEOUT, MAX_TTL, SharedCacheConfig,
    WriteBehindConfig,
};
pub use crate::conn::{RECONNECT_BACKOFF, REDISCOVER_AFTER};
pub use crate::denied::{DENIED_COOLDOWN, Denial, Refused};
pub use crate::entry::{entry_key, lease_key};
pub use crate::error::{Error, FailureKind, Result};
pub use crate::inspect::{CLUSTER_SLOTS, ClusterReport};
pub use crate::lease::{LEASE_NOT_STORED, LeaseHolder, LeaseOutcome};
pub use crate::memory::{BoxFuture, ReadHold, ReadMemory};
pub use crate::metrics::{GetOutcome, WriteOutcome};
pub use crate::read::READ_STEP;
pub use crate::samples::{DrainedSamples, MAX_PENDING_SAMPLES, SampleOp, SampleSeries};
pub use crate::stats::SharedCacheStats;
#[cfg(any(test, feature = "test-seams"))]
pub use crate::warn::ManualClock;
pub use crate::warn::{Clock, SystemClock, WARN_INTERVAL};
pub use crate::write_behind::WriteRoom;

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

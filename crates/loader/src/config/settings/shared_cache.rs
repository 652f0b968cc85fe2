//! The settings of the shared cache's breakers, lease, write-behind queue and hedge.
//!
//! Each variable's name is declared in this file with its [`Setting`]; [`crate::env`] re-exports
//! it.

use mmcache_shared_cache::Field as shared;

use super::shape::{CheckedBy, Read, Section, Setting};
use crate::config::parse::{parse_flag, parse_millis, parse_positive_int, saturating_usize};

/// `0` or `1`: per-node circuit breakers on the shared cache.
pub const SHARED_BREAKER: &str = "MMCACHE_SHARED_IMAGE_CACHE_BREAKER";
/// Consecutive failures that open a node's breaker.
pub const SHARED_BREAKER_FAILURES: &str = "MMCACHE_SHARED_IMAGE_CACHE_BREAKER_FAILURES";
/// Breaker cool-down before a probe, milliseconds.
pub const SHARED_BREAKER_COOLDOWN_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_BREAKER_COOLDOWN_MS";
/// `0` or `1`: stampede lease on a miss.
pub const SHARED_LEASE: &str = "MMCACHE_SHARED_IMAGE_CACHE_LEASE";
/// Lease lifetime, milliseconds.
pub const SHARED_LEASE_TTL_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_LEASE_TTL_MS";
/// Longest wait for another worker's fill, milliseconds.
pub const SHARED_LEASE_WAIT_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_LEASE_WAIT_MS";
/// `0` or `1`: write-behind of SETs.
pub const SHARED_WRITE_BEHIND: &str = "MMCACHE_SHARED_IMAGE_CACHE_WRITE_BEHIND";
/// Write-behind queue bound, entries.
pub const SHARED_WRITE_BEHIND_QUEUE: &str = "MMCACHE_SHARED_IMAGE_CACHE_WRITE_BEHIND_QUEUE";
/// `0` or `1`: hedge slow GETs with the origin, and bound the SET wait.
pub const SHARED_HEDGE: &str = "MMCACHE_SHARED_IMAGE_CACHE_HEDGE";
/// Shortest hedge delay in ms.
pub const SHARED_HEDGE_MIN_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_HEDGE_MIN_MS";
/// Longest hedge delay (and SET wait) in ms.
pub const SHARED_HEDGE_MAX_MS: &str = "MMCACHE_SHARED_IMAGE_CACHE_HEDGE_MAX_MS";

/// The shared cache's breakers, stampede lease and write-behind queue.
pub(super) const SHARED_CACHE: [Setting; 8] = [
    Setting {
        name: SHARED_BREAKER,
        section: Section::SharedCache,
        checked_by: CheckedBy::Loader,
        default: "`1`",
        rule: "`0` or `1`",
        doc: ": per-node circuit breakers",
        python: "shared_cache_breaker",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.shared.breaker.enabled = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_BREAKER_FAILURES,
        section: Section::SharedCache,
        checked_by: CheckedBy::SharedCache(shared::BreakerFailures),
        default: "`5`",
        rule: "integer > 0",
        doc: ": consecutive failures on a node that open its breaker",
        python: "shared_cache_breaker_failures",
        python_value: "int",
        read: Read::Same(|c, v| {
            let n = parse_positive_int(v)?;
            c.shared.breaker.failures = u32::try_from(n).unwrap_or(u32::MAX);
            Ok(())
        }),
    },
    Setting {
        name: SHARED_BREAKER_COOLDOWN_MS,
        section: Section::SharedCache,
        checked_by: CheckedBy::SharedCache(shared::BreakerCooldown),
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        doc: ": how long an open breaker skips that node before one probe",
        python: "shared_cache_breaker_cooldown_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.shared.breaker.cooldown = parse_millis(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_LEASE,
        section: Section::SharedCache,
        checked_by: CheckedBy::Loader,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": on a miss, one worker of the fleet fetches from the origin, the others wait for \
            its SET",
        python: "shared_cache_lease",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.shared.lease.enabled = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_LEASE_TTL_MS,
        section: Section::SharedCache,
        checked_by: CheckedBy::SharedCache(shared::LeaseTtl),
        default: "`5000`",
        rule: "integer > 0, <= 3600000",
        doc: ": lease lifetime (frees the image if its holder dies)",
        python: "shared_cache_lease_ttl_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.shared.lease.ttl = parse_millis(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_LEASE_WAIT_MS,
        section: Section::SharedCache,
        checked_by: CheckedBy::SharedCache(shared::LeaseWait),
        default: "`3000`",
        rule: "integer > 0, <= 3600000",
        doc: ": longest wait for another worker's fill before fetching from the origin",
        python: "shared_cache_lease_wait_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.shared.lease.wait = parse_millis(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_WRITE_BEHIND,
        section: Section::SharedCache,
        checked_by: CheckedBy::Loader,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": a miss returns once decoded; its SET goes to a bounded background queue",
        python: "shared_cache_write_behind",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.shared.write_behind.enabled = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_WRITE_BEHIND_QUEUE,
        section: Section::SharedCache,
        checked_by: CheckedBy::SharedCache(shared::WriteBehindQueue),
        default: "`256`",
        rule: "integer > 0",
        doc: ": queued writes at most (also at most 256 MiB), image and embedding writes \
            together (writes left to the background count with write-behind off too); a full \
            queue drops the write, never blocks a load",
        python: "shared_cache_write_behind_queue",
        python_value: "int",
        read: Read::Same(|c, v| {
            let n = parse_positive_int(v)?;
            c.shared.write_behind.max_queued = saturating_usize(n);
            Ok(())
        }),
    },
];

/// Hedged reads and bounded writes of the shared cache.
pub(super) const HEDGE: [Setting; 3] = [
    Setting {
        name: SHARED_HEDGE,
        section: Section::Hedge,
        checked_by: CheckedBy::Loader,
        default: "`1`",
        rule: "`0` or `1`",
        doc: ": when a GET has not answered within the hedge delay, the origin fetch starts beside \
            it and the first usable image wins; a load waits for its SET at most the same delay, \
            then the SET goes on in the background (bounded by the I/O timeout and the \
            write-behind queue's limits)",
        python: "shared_cache_hedge",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.hedge.enabled = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_HEDGE_MIN_MS,
        section: Section::Hedge,
        checked_by: CheckedBy::Loader,
        default: "`20`",
        rule: "integer > 0, <= the maximum",
        doc: ": shortest hedge delay",
        python: "shared_cache_hedge_min_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.hedge.min_delay = parse_millis(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_HEDGE_MAX_MS,
        section: Section::Hedge,
        checked_by: CheckedBy::Loader,
        default: "`250`",
        rule: "integer >= the minimum, <= 60000",
        doc: ": longest hedge delay. Set both equal for a fixed delay",
        python: "shared_cache_hedge_max_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.hedge.max_delay = parse_millis(v)?;
            Ok(())
        }),
    },
];

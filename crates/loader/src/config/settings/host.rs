//! The settings of the host pixel tier: decoded images on a memory file system, mapped by
//! every worker process of the host.
//!
//! Each variable's name is declared in this file with its [`Setting`]; [`crate::env`] re-exports
//! it.

use std::path::PathBuf;

use mmcache_disk_cache::Field as host;

use super::shape::{CheckedBy, Read, Section, Setting};
use crate::config::error::Refusal;
use crate::config::parse::{
    optional, parse_millis, parse_positive_int, parse_secs, parse_whole_secs,
};

/// Directory of the host pixel tier, on a memory file system; setting it turns the tier on.
pub const HOST_PIXELS_DIR: &str = "MMCACHE_HOST_PIXELS_DIR";
/// Byte budget of the host pixel tier across the host's processes.
pub const HOST_PIXELS_MAX_BYTES: &str = "MMCACHE_HOST_PIXELS_MAX_BYTES";
/// Host pixel entry TTL in whole seconds.
pub const HOST_PIXELS_TTL_SECS: &str = "MMCACHE_HOST_PIXELS_TTL_SECS";
/// Shared-group mode of the host pixel tier: a gid or a group name (from `/etc/group`).
pub const HOST_PIXELS_GROUP: &str = "MMCACHE_HOST_PIXELS_GROUP";
/// Deadline of one host pixel tier operation in ms.
pub const HOST_PIXELS_TIMEOUT_MS: &str = "MMCACHE_HOST_PIXELS_TIMEOUT_MS";

/// The host pixel tier.
pub(super) const SETTINGS: [Setting; 5] = [
    Setting {
        name: HOST_PIXELS_DIR,
        section: Section::Host,
        checked_by: CheckedBy::Loader,
        default: "unset (off)",
        rule: "a directory",
        doc: " on a memory file system (`/dev/shm/mmcache`, or a `medium: Memory` volume), \
            shared by every worker process of the host; setting it turns the tier on. Each \
            image is decoded once per host: the first process to need it decodes it and \
            writes its pixels there, the others map them read-only, without a copy. Tiers in \
            order: memory, in flight, host pixels, disk, shared cache, origin",
        python: "host_pixels_dir",
        python_value: "a path (`str` or `os.PathLike`)",
        read: Read::Same(|c, v| {
            c.host.dir = PathBuf::from(v.trim());
            Ok(())
        }),
    },
    Setting {
        name: HOST_PIXELS_MAX_BYTES,
        section: Section::Host,
        checked_by: CheckedBy::Host(host::MaxBytes),
        default: "`4294967296` (4 GiB)",
        rule: "integer > 0",
        doc: ": byte budget of the directory across the host's processes (it holds decoded \
            pixels: a 2048 x 2048 image is 16 MiB in the Python package's layout); keep it \
            under the memory file system's size. Entries a process still maps stay in memory \
            after they are evicted, until the process drops them",
        python: "host_pixels_max_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            c.host.max_bytes = parse_positive_int(v)?;
            Ok(())
        }),
    },
    Setting {
        name: HOST_PIXELS_TTL_SECS,
        section: Section::Host,
        checked_by: CheckedBy::Host(host::Ttl),
        default: "`3600`",
        rule: "integer > 0, <= 31536000",
        doc: ": an entry older than this (by modification time) is a miss and is removed",
        python: "host_pixels_ttl_secs",
        python_value: "float seconds",
        read: Read::Apart {
            variable: |c, v| {
                c.host.ttl = parse_whole_secs(v)?;
                Ok(())
            },
            keyword: |c, v| {
                c.host.ttl = parse_secs(v)?;
                Ok(())
            },
        },
    },
    Setting {
        name: HOST_PIXELS_GROUP,
        section: Section::Host,
        checked_by: CheckedBy::Loader,
        default: "unset",
        rule: "a gid or a group name",
        doc: " (looked up in `/etc/group`): shared-group mode, as `MMCACHE_DISK_CACHE_GROUP`: \
            entries that group owns are trusted besides this uid's, and every member of the \
            group can then change what the others see. Ours are made 0440 in 2770 folders. \
            Unset: only this uid's entries are mapped; entries 0400, folders 0700",
        python: "host_pixels_group",
        python_value: "a gid (int) or a group name",
        read: Read::Same(|c, v| {
            c.host.group = optional(v, |v| {
                mmcache_disk_cache::group_id(v).ok_or(Refusal::Expected(
                    "a gid or the name of a group in /etc/group",
                ))
            })?;
            Ok(())
        }),
    },
    Setting {
        name: HOST_PIXELS_TIMEOUT_MS,
        section: Section::Host,
        checked_by: CheckedBy::Host(host::Timeout),
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        doc: ": deadline of one operation (a map and its checks' file calls, a write, one lock \
            attempt). A slower map is a miss (the load goes on to the next tier); a slower write \
            finishes in the background",
        python: "host_pixels_timeout_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.host.timeout = parse_millis(v)?;
            Ok(())
        }),
    },
];

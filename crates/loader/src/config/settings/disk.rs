//! The settings of the host disk tier.
//!
//! Each variable's name is declared in this file with its [`Setting`]; [`crate::env`] re-exports
//! it.

use std::path::PathBuf;

use mmcache_disk_cache::Field as disk;

use super::shape::{CheckedBy, Read, Section, Setting};
use crate::config::error::Refusal;
use crate::config::parse::{
    optional, parse_millis, parse_positive_int, parse_secs, parse_whole_secs,
};

/// Directory of the host's disk tier; setting it turns the tier on.
pub const DISK_CACHE_DIR: &str = "MMCACHE_DISK_CACHE_DIR";
/// Byte budget of the disk tier across the host's processes.
pub const DISK_CACHE_MAX_BYTES: &str = "MMCACHE_DISK_CACHE_MAX_BYTES";
/// Disk-tier entry TTL in whole seconds.
pub const DISK_CACHE_TTL_SECS: &str = "MMCACHE_DISK_CACHE_TTL_SECS";
/// Shared-group mode of the disk tier: a gid or a group name (from `/etc/group`). Files and
/// folders that group owns are trusted too; ours are made 0640 (lock files 0660) in 2770
/// folders. For Kubernetes `fsGroup` volumes and pods of different uids.
pub const DISK_CACHE_GROUP: &str = "MMCACHE_DISK_CACHE_GROUP";
/// Deadline of one disk-tier operation in ms.
pub const DISK_CACHE_TIMEOUT_MS: &str = "MMCACHE_DISK_CACHE_TIMEOUT_MS";

/// The host disk tier.
pub(super) const SETTINGS: [Setting; 5] = [
    Setting {
        name: DISK_CACHE_DIR,
        section: Section::Disk,
        checked_by: CheckedBy::Loader,
        default: "unset (off)",
        rule: "a directory",
        doc: " on a local disk, shared by every worker process of the host; setting it turns the \
            tier on. Tiers in order: memory, in flight, host pixels, disk, shared cache, origin",
        python: "disk_cache_dir",
        python_value: "a path (`str` or `os.PathLike`)",
        read: Read::Same(|c, v| {
            c.disk.dir = PathBuf::from(v.trim());
            Ok(())
        }),
    },
    Setting {
        name: DISK_CACHE_MAX_BYTES,
        section: Section::Disk,
        checked_by: CheckedBy::Disk(disk::MaxBytes),
        default: "`10737418240` (10 GiB)",
        rule: "integer > 0",
        doc: ": byte budget of the directory across the host's processes",
        python: "disk_cache_max_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            c.disk.max_bytes = parse_positive_int(v)?;
            Ok(())
        }),
    },
    Setting {
        name: DISK_CACHE_TTL_SECS,
        section: Section::Disk,
        checked_by: CheckedBy::Disk(disk::Ttl),
        default: "`3600`",
        rule: "integer > 0, <= 31536000",
        doc: ": an entry older than this (by modification time) is a miss and is removed",
        python: "disk_cache_ttl_secs",
        python_value: "float seconds",
        read: Read::Apart {
            variable: |c, v| {
                c.disk.ttl = parse_whole_secs(v)?;
                Ok(())
            },
            keyword: |c, v| {
                c.disk.ttl = parse_secs(v)?;
                Ok(())
            },
        },
    },
    Setting {
        name: DISK_CACHE_GROUP,
        section: Section::Disk,
        checked_by: CheckedBy::Loader,
        default: "unset",
        rule: "a gid or a group name",
        doc: " (looked up in `/etc/group`): shared-group mode. Files and folders owned by that \
            group are trusted besides this uid's; ours are made 0640 (lock files 0660) in 2770 \
            folders. For Kubernetes `fsGroup` volumes and pods of different uids on one node. \
            Unset: only this uid's files are read; entries 0600, folders 0700",
        python: "disk_cache_group",
        python_value: "a gid (int) or a group name",
        read: Read::Same(|c, v| {
            c.disk.group = optional(v, |v| {
                mmcache_disk_cache::group_id(v).ok_or(Refusal::Expected(
                    "a gid or the name of a group in /etc/group",
                ))
            })?;
            Ok(())
        }),
    },
    Setting {
        name: DISK_CACHE_TIMEOUT_MS,
        section: Section::Disk,
        checked_by: CheckedBy::Disk(disk::Timeout),
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        doc: ": deadline of one disk operation (a read, a write, one lock attempt). A slower read \
            is a miss (the load goes on to the next tier); a slower write finishes in the \
            background",
        python: "disk_cache_timeout_ms",
        python_value: "int milliseconds",
        read: Read::Same(|c, v| {
            c.disk.timeout = parse_millis(v)?;
            Ok(())
        }),
    },
];

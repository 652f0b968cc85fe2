//! The settings of docs/configuration.md's first table: variables ai-dynamo reads too.
//!
//! Each variable's name is declared in this file with its [`Setting`]; [`crate::env`] re-exports
//! it.

use mmcache_shared_cache::Field as shared;

use super::shape::{CheckedBy, Read, Section, Setting};
use crate::config::error::Refusal;
use crate::config::parse::{
    optional, parse_flag, parse_int, parse_positive_int, parse_secs, parse_whole_secs,
    saturating_usize,
};

/// `0` or `1`: use the shared cache.
pub const SHARED_ENABLED: &str = "DYN_MM_SHARED_IMAGE_CACHE_ENABLED";
/// `redis://` or `rediss://` discovery endpoint; required when enabled; never logged.
pub const SHARED_URL: &str = "DYN_MM_SHARED_IMAGE_CACHE_URL";
/// Entry TTL in whole seconds.
pub const SHARED_TTL_SECS: &str = "DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS";
/// Connect timeout in seconds.
pub const SHARED_CONNECT_TIMEOUT_SECS: &str = "DYN_MM_SHARED_IMAGE_CACHE_CONNECT_TIMEOUT_SECS";
/// Response timeout in seconds.
pub const SHARED_IO_TIMEOUT_SECS: &str = "DYN_MM_SHARED_IMAGE_CACHE_IO_TIMEOUT_SECS";
/// Body cap in MiB.
pub const MAX_FILE_SIZE_MB: &str = "DYN_MM_MAX_FILE_SIZE_MB";
/// `0` or `1`: partition every cache by session scope.
pub const SESSION_SCOPED: &str = "DYN_MM_IMAGE_CACHE_SESSION_SCOPED";
/// `0` or `1`: allow `http://` and internal addresses.
pub const ALLOW_INTERNAL: &str = "DYN_MM_ALLOW_INTERNAL";
/// Entry cap of the decoded-image cache.
pub const IMAGE_CACHE_SIZE: &str = "DYN_MM_IMAGE_CACHE_SIZE";

/// The variables the Python implementation (ai-dynamo) reads too, with the same meaning.
pub(super) const SETTINGS: [Setting; 9] = [
    Setting {
        name: SHARED_ENABLED,
        section: Section::Dynamo,
        checked_by: CheckedBy::Loader,
        default: "`0`",
        rule: "`0` or `1`",
        doc: "",
        python: "shared_cache",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.shared_enabled = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_URL,
        section: Section::Dynamo,
        checked_by: CheckedBy::Loader,
        default: "—",
        rule: "required when enabled; `redis://` or `rediss://`",
        doc: ", user and password may be in it; never logged",
        python: "shared_cache_url",
        python_value: "str; also turns the shared cache on",
        read: Read::Apart {
            variable: |c, v| {
                c.shared.url = v.trim().to_owned();
                Ok(())
            },
            keyword: |c, v| {
                c.shared.url = v.trim().to_owned();
                c.shared_enabled = true;
                Ok(())
            },
        },
    },
    Setting {
        name: SHARED_TTL_SECS,
        section: Section::Dynamo,
        checked_by: CheckedBy::SharedCache(shared::Ttl),
        default: "`3600`",
        rule: "integer > 0, <= 31536000 (365 days)",
        doc: "",
        python: "shared_cache_ttl_secs",
        python_value: "float seconds",
        read: Read::Apart {
            variable: |c, v| {
                c.shared.ttl = parse_whole_secs(v)?;
                Ok(())
            },
            keyword: |c, v| {
                c.shared.ttl = parse_secs(v)?;
                Ok(())
            },
        },
    },
    Setting {
        name: SHARED_CONNECT_TIMEOUT_SECS,
        section: Section::Dynamo,
        checked_by: CheckedBy::SharedCache(shared::ConnectTimeout),
        default: "`0.1`",
        rule: "finite number > 0, <= 3600",
        doc: "",
        python: "shared_cache_connect_timeout_secs",
        python_value: "float seconds",
        read: Read::Same(|c, v| {
            c.shared.connect_timeout = parse_secs(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_IO_TIMEOUT_SECS,
        section: Section::Dynamo,
        checked_by: CheckedBy::SharedCache(shared::IoTimeout),
        default: "`2.0`",
        rule: "finite number > 0, <= 3600",
        doc: "",
        python: "shared_cache_io_timeout_secs",
        python_value: "float seconds",
        read: Read::Same(|c, v| {
            c.shared.io_timeout = parse_secs(v)?;
            Ok(())
        }),
    },
    Setting {
        name: MAX_FILE_SIZE_MB,
        section: Section::Dynamo,
        checked_by: CheckedBy::Loader,
        default: "`64`",
        rule: "integer > 0, MiB",
        doc: "; applies to every download and data URL, cache on or off",
        python: "max_file_size_bytes",
        python_value: "int, bytes (the variable is in MiB)",
        read: Read::Apart {
            variable: |c, v| {
                let mib = parse_positive_int(v)?;
                c.max_file_size_bytes = mib
                    .checked_mul(1024 * 1024)
                    .ok_or(Refusal::Expected("an integer number of MiB > 0"))?;
                Ok(())
            },
            keyword: |c, v| {
                c.max_file_size_bytes = parse_positive_int(v)?;
                Ok(())
            },
        },
    },
    Setting {
        name: SESSION_SCOPED,
        section: Section::Dynamo,
        checked_by: CheckedBy::Loader,
        default: "`0`",
        rule: "`0` or `1`",
        doc: "",
        python: "session_scoped",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.session_scoped = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: ALLOW_INTERNAL,
        section: Section::Dynamo,
        checked_by: CheckedBy::Loader,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": `1` allows `http://` and private, loopback, link-local and metadata addresses",
        python: "allow_internal",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.allow_internal = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: IMAGE_CACHE_SIZE,
        section: Section::Dynamo,
        checked_by: CheckedBy::Loader,
        default: "unset",
        rule: "integer >= 0",
        doc: ": entry cap of the decoded-image cache; `0` turns it off",
        python: "decoded_cache_entries",
        python_value: "int, or `None` (no cap)",
        read: Read::Same(|c, v| {
            let n = optional(v, |v| parse_int(v, "an integer >= 0"))?;
            c.decoded_cache_entries = n.map(saturating_usize);
            Ok(())
        }),
    },
];

//! The one declaration of every setting: its variable, its default and rule as
//! docs/configuration.md states them (a test holds the doc to them), its `mmcache.Loader`
//! keyword (a Python test holds the bindings to them) and how its text is read. Bounds and
//! rules spanning settings are checked once, for every source, in `validate.rs`.

use std::path::PathBuf;
use std::time::Duration;

use super::parse::{parse_flag, parse_int, parse_millis, parse_positive_int, parse_secs};
use super::{Config, env};
use crate::error::ConfigError;

/// One setting of [`Config`].
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its environment variable (one of [`env`](mod@env)).
    pub name: &'static str,
    /// Its default, as docs/configuration.md states it: a value in backticks, or words.
    pub default: &'static str,
    /// The start of its rule in docs/configuration.md, bounds included.
    pub rule: &'static str,
    /// The keyword argument of `mmcache.Loader(...)` that sets the same thing.
    pub python: &'static str,
    /// Reads the variable's (non-blank) text into the configuration; bounds come later.
    pub(super) read: fn(&mut Config, &str) -> Result<(), ConfigError>,
}

/// How many settings there are.
pub(super) const COUNT: usize = 45;

/// The variable names of [`SETTINGS`], in order (what [`env::ALL`] is).
pub(super) const fn names() -> [&'static str; COUNT] {
    let mut out = [""; COUNT];
    let mut i = 0;
    while i < COUNT {
        out[i] = SETTINGS[i].name;
        i += 1;
    }
    out
}

fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Every setting, in the order [`Config::from_lookup`] reads them.
pub const SETTINGS: [Setting; COUNT] = [
    Setting {
        name: env::SHARED_ENABLED,
        default: "`0`",
        rule: "`0` or `1`",
        python: "shared_cache",
        read: |c, v| {
            c.shared.enabled = parse_flag(env::SHARED_ENABLED, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_URL,
        default: "—",
        rule: "required when enabled; `redis://` or `rediss://`",
        python: "shared_cache_url",
        read: |c, v| {
            c.shared.url = Some(v.trim().to_owned());
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_TTL_SECS,
        default: "`3600`",
        rule: "integer > 0, <= 31536000 (365 days)",
        python: "shared_cache_ttl_secs",
        read: |c, v| {
            let secs = parse_positive_int(env::SHARED_TTL_SECS, v)?;
            c.shared.ttl = Duration::from_secs(secs);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_CONNECT_TIMEOUT_SECS,
        default: "`0.1`",
        rule: "finite number > 0, <= 3600",
        python: "shared_cache_connect_timeout_secs",
        read: |c, v| {
            c.shared.connect_timeout = parse_secs(env::SHARED_CONNECT_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_IO_TIMEOUT_SECS,
        default: "`2.0`",
        rule: "finite number > 0, <= 3600",
        python: "shared_cache_io_timeout_secs",
        read: |c, v| {
            c.shared.io_timeout = parse_secs(env::SHARED_IO_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::MAX_FILE_SIZE_MB,
        default: "`64`",
        rule: "integer > 0, MiB",
        python: "max_file_size_bytes",
        read: |c, v| {
            let mib = parse_positive_int(env::MAX_FILE_SIZE_MB, v)?;
            c.max_file_size_bytes = mib.checked_mul(1024 * 1024).ok_or_else(|| {
                ConfigError::invalid(env::MAX_FILE_SIZE_MB, v, "an integer number of MiB > 0")
            })?;
            Ok(())
        },
    },
    Setting {
        name: env::SESSION_SCOPED,
        default: "`0`",
        rule: "`0` or `1`",
        python: "session_scoped",
        read: |c, v| {
            c.session_scoped = parse_flag(env::SESSION_SCOPED, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ALLOW_INTERNAL,
        default: "`0`",
        rule: "`0` or `1`",
        python: "allow_internal",
        read: |c, v| {
            c.allow_internal = parse_flag(env::ALLOW_INTERNAL, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::IMAGE_CACHE_SIZE,
        default: "unset",
        rule: "integer >= 0",
        python: "decoded_cache_entries",
        read: |c, v| {
            let n = parse_int(env::IMAGE_CACHE_SIZE, v, "an integer >= 0")?;
            c.decoded_cache_entries = Some(saturating_usize(n));
            Ok(())
        },
    },
    Setting {
        name: env::DECODED_CACHE_BYTES,
        default: "`1073741824` (1 GiB)",
        rule: "integer >= 0",
        python: "decoded_cache_bytes",
        read: |c, v| {
            c.decoded_cache_bytes = parse_int(env::DECODED_CACHE_BYTES, v, "an integer >= 0")?;
            Ok(())
        },
    },
    Setting {
        name: env::MAX_PIXELS,
        default: "`100000000`",
        rule: "integer > 0",
        python: "max_pixels",
        read: |c, v| {
            c.max_pixels = parse_positive_int(env::MAX_PIXELS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ORIGIN_CONNECT_TIMEOUT_SECS,
        default: "`5`",
        rule: "finite number > 0, <= 3600",
        python: "origin_connect_timeout_secs",
        read: |c, v| {
            c.origin_connect_timeout = parse_secs(env::ORIGIN_CONNECT_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ORIGIN_TIMEOUT_SECS,
        default: "`30`",
        rule: "finite number > 0, <= 3600",
        python: "origin_timeout_secs",
        read: |c, v| {
            c.origin_timeout = parse_secs(env::ORIGIN_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_TLS_CA_FILE,
        default: "unset",
        rule: "PEM file",
        // The keyword takes the PEM bytes themselves.
        python: "shared_cache_tls_root_ca",
        read: |c, v| {
            let pem = std::fs::read(v.trim()).map_err(|e| ConfigError::File {
                name: env::SHARED_TLS_CA_FILE,
                path: v.to_owned(),
                reason: e.to_string(),
            })?;
            c.shared.tls_root_ca_pem = Some(pem);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_MAX_VALUE_BYTES,
        default: "`16777216` (16 MiB)",
        rule: "integer > 0",
        python: "shared_cache_max_value_bytes",
        read: |c, v| {
            let n = parse_positive_int(env::SHARED_MAX_VALUE_BYTES, v)?;
            c.shared.max_value_bytes = saturating_usize(n);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_BREAKER,
        default: "`1`",
        rule: "`0` or `1`",
        python: "shared_cache_breaker",
        read: |c, v| {
            c.shared.breaker.enabled = parse_flag(env::SHARED_BREAKER, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_BREAKER_FAILURES,
        default: "`5`",
        rule: "integer > 0",
        python: "shared_cache_breaker_failures",
        read: |c, v| {
            let n = parse_positive_int(env::SHARED_BREAKER_FAILURES, v)?;
            c.shared.breaker.failures = u32::try_from(n).unwrap_or(u32::MAX);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_BREAKER_COOLDOWN_MS,
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        python: "shared_cache_breaker_cooldown_ms",
        read: |c, v| {
            c.shared.breaker.cooldown = parse_millis(env::SHARED_BREAKER_COOLDOWN_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_LEASE,
        default: "`0`",
        rule: "`0` or `1`",
        python: "shared_cache_lease",
        read: |c, v| {
            c.shared.lease.enabled = parse_flag(env::SHARED_LEASE, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_LEASE_TTL_MS,
        default: "`5000`",
        rule: "integer > 0, <= 3600000",
        python: "shared_cache_lease_ttl_ms",
        read: |c, v| {
            c.shared.lease.ttl = parse_millis(env::SHARED_LEASE_TTL_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_LEASE_WAIT_MS,
        default: "`3000`",
        rule: "integer > 0, <= 3600000",
        python: "shared_cache_lease_wait_ms",
        read: |c, v| {
            c.shared.lease.wait = parse_millis(env::SHARED_LEASE_WAIT_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_WRITE_BEHIND,
        default: "`0`",
        rule: "`0` or `1`",
        python: "shared_cache_write_behind",
        read: |c, v| {
            c.shared.write_behind.enabled = parse_flag(env::SHARED_WRITE_BEHIND, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_WRITE_BEHIND_QUEUE,
        default: "`256`",
        rule: "integer > 0",
        python: "shared_cache_write_behind_queue",
        read: |c, v| {
            let n = parse_positive_int(env::SHARED_WRITE_BEHIND_QUEUE, v)?;
            c.shared.write_behind.max_queued = saturating_usize(n);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_HEDGE,
        default: "`1`",
        rule: "`0` or `1`",
        python: "shared_cache_hedge",
        read: |c, v| {
            c.shared.hedge.enabled = parse_flag(env::SHARED_HEDGE, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_HEDGE_MIN_MS,
        default: "`20`",
        rule: "integer > 0, <= the maximum",
        python: "shared_cache_hedge_min_ms",
        read: |c, v| {
            c.shared.hedge.min_delay = parse_millis(env::SHARED_HEDGE_MIN_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_HEDGE_MAX_MS,
        default: "`250`",
        rule: "integer >= the minimum, <= 60000",
        python: "shared_cache_hedge_max_ms",
        read: |c, v| {
            c.shared.hedge.max_delay = parse_millis(env::SHARED_HEDGE_MAX_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::JPEG_DECODER,
        default: "`auto`",
        rule: "`auto`, `libjpeg-turbo` or `pure-rust`",
        python: "jpeg_decoder",
        read: |c, v| {
            c.jpeg_decoder = v.parse().map_err(|()| {
                ConfigError::invalid(env::JPEG_DECODER, v, "auto, libjpeg-turbo or pure-rust")
            })?;
            Ok(())
        },
    },
    Setting {
        name: env::IMAGE_FORMATS,
        default: "`jpeg,png,webp,gif`",
        rule: "comma-separated, from `jpeg`, `png`, `webp`, `gif`",
        python: "image_formats",
        read: |c, v| {
            c.image_formats = v.parse().map_err(|_| {
                ConfigError::invalid(
                    env::IMAGE_FORMATS,
                    v,
                    "a comma-separated list of jpeg, png, webp, gif",
                )
            })?;
            Ok(())
        },
    },
    Setting {
        name: env::LIBTURBOJPEG,
        default: "unset",
        rule: "path",
        python: "libturbojpeg",
        read: |c, v| {
            c.libturbojpeg = Some(PathBuf::from(v.trim()));
            Ok(())
        },
    },
    Setting {
        name: env::DECODE_MEMORY_BYTES,
        default: "`2147483648` (2 GiB)",
        rule: "integer > 0",
        python: "decode_memory_bytes",
        read: |c, v| {
            c.decode_memory_bytes = parse_positive_int(env::DECODE_MEMORY_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::DECODE_CONCURRENCY,
        default: "twice the number of CPUs",
        rule: "integer > 0, <= 4096",
        python: "decode_concurrency",
        read: |c, v| {
            let n = parse_positive_int(env::DECODE_CONCURRENCY, v)?;
            c.decode_concurrency = saturating_usize(n);
            Ok(())
        },
    },
    Setting {
        name: env::DECODE_WAIT_SECS,
        default: "`30`",
        rule: "number > 0 and <= 3600",
        python: "decode_wait_secs",
        read: |c, v| {
            c.decode_wait = parse_secs(env::DECODE_WAIT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ALLOWED_MEDIA_DOMAINS,
        default: "unset (every host)",
        rule: "comma-separated hosts",
        python: "allowed_media_domains",
        read: |c, v| {
            c.allowed_media_domains = v
                .split(',')
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty())
                .collect();
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_DIR,
        default: "unset (off)",
        rule: "a directory",
        python: "disk_cache_dir",
        read: |c, v| {
            c.disk.dir = Some(PathBuf::from(v.trim()));
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_MAX_BYTES,
        default: "`10737418240` (10 GiB)",
        rule: "integer > 0",
        python: "disk_cache_max_bytes",
        read: |c, v| {
            c.disk.max_bytes = parse_positive_int(env::DISK_CACHE_MAX_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_TTL_SECS,
        default: "`3600`",
        rule: "integer > 0, <= 31536000",
        python: "disk_cache_ttl_secs",
        read: |c, v| {
            let secs = parse_positive_int(env::DISK_CACHE_TTL_SECS, v)?;
            c.disk.ttl = Duration::from_secs(secs);
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_GROUP,
        default: "unset",
        rule: "a gid or a group name",
        python: "disk_cache_group",
        read: |c, v| {
            let gid = mmcache_disk_cache::group_id(v).ok_or_else(|| {
                ConfigError::invalid(
                    env::DISK_CACHE_GROUP,
                    v,
                    "a gid or the name of a group in /etc/group",
                )
            })?;
            c.disk.group = Some(gid);
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_TIMEOUT_MS,
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        python: "disk_cache_timeout_ms",
        read: |c, v| {
            c.disk.timeout = parse_millis(env::DISK_CACHE_TIMEOUT_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::LOAD_TIMEOUT_SECS,
        default: concat!(
            "derived: origin timeout + decode wait + lease wait (when the lease is on) + 30 s; ",
            "`90` with the other defaults"
        ),
        rule: "number > 0 and <= 3600",
        python: "load_timeout_secs",
        read: |c, v| {
            c.load_timeout = Some(parse_secs(env::LOAD_TIMEOUT_SECS, v)?);
            Ok(())
        },
    },
    Setting {
        name: env::DOWNLOAD_MEMORY_BYTES,
        default: "`536870912` (512 MiB)",
        rule: "integer > 0",
        python: "download_memory_bytes",
        read: |c, v| {
            c.download_memory_bytes = parse_positive_int(env::DOWNLOAD_MEMORY_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_CACHE_BYTES,
        default: "`1073741824` (1 GiB)",
        rule: "integer >= 0",
        python: "embedding_cache_bytes",
        read: |c, v| {
            let n = parse_int(env::EMBEDDING_CACHE_BYTES, v, "an integer >= 0")?;
            c.embedding_cache_bytes = n;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_FLEET,
        default: "`1`",
        rule: "`0` or `1`",
        python: "embedding_fleet",
        read: |c, v| {
            c.embedding_fleet = parse_flag(env::EMBEDDING_FLEET, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_MAX_VALUE_BYTES,
        default: "`67108864` (64 MiB)",
        rule: "integer > 0",
        python: "embedding_max_value_bytes",
        read: |c, v| {
            let n = parse_positive_int(env::EMBEDDING_MAX_VALUE_BYTES, v)?;
            c.embedding_max_value_bytes = n;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_CHUNK_BYTES,
        default: "`2097152` (2 MiB)",
        rule: "integer > 0, <= 4294967295, at most the value cap and at least 1/1024 of it",
        python: "embedding_chunk_bytes",
        read: |c, v| {
            c.embedding_chunk_bytes = parse_positive_int(env::EMBEDDING_CHUNK_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_COMPUTE_TIMEOUT_SECS,
        default: "derived: the lease TTL; `5` with the other defaults",
        rule: "number > 0 and <= 3600",
        python: "embedding_compute_timeout_secs",
        read: |c, v| {
            c.embedding_compute_timeout = Some(parse_secs(env::EMBEDDING_COMPUTE_TIMEOUT_SECS, v)?);
            Ok(())
        },
    },
];

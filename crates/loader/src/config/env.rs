//! Environment variable names, each with what it sets. Its default, rule and bounds, Python
//! keyword and reader are declared once, in [`crate::SETTINGS`] (which [`ALL`] is derived
//! from, and docs/configuration.md's tables are generated from).

use crate::error::ConfigError;

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
/// Byte budget of the decoded-image cache.
pub const DECODED_CACHE_BYTES: &str = "MMCACHE_DECODED_CACHE_BYTES";
/// Comma-separated hosts images may come from: `example.com` (exactly that host),
/// `*.example.com` (its subdomains), IP addresses.
pub const ALLOWED_MEDIA_DOMAINS: &str = "MMCACHE_ALLOWED_MEDIA_DOMAINS";
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
/// `auto` (libjpeg-turbo when it loads, else pure Rust), `libjpeg-turbo` (or a start-up error)
/// or `pure-rust`.
pub const JPEG_DECODER: &str = "MMCACHE_JPEG_DECODER";
/// Image formats accepted, comma-separated from `jpeg`, `png`, `webp`, `gif`.
pub const IMAGE_FORMATS: &str = "MMCACHE_IMAGE_FORMATS";
/// Path of libturbojpeg to load.
pub const LIBTURBOJPEG: &str = "MMCACHE_LIBTURBOJPEG";
/// Bytes all running decodes may hold together.
pub const DECODE_MEMORY_BYTES: &str = "MMCACHE_DECODE_MEMORY_BYTES";
/// Decodes running at once.
pub const DECODE_CONCURRENCY: &str = "MMCACHE_DECODE_CONCURRENCY";
/// Longest wait for the decode budget, in seconds.
pub const DECODE_WAIT_SECS: &str = "MMCACHE_DECODE_WAIT_SECS";
/// Pixel limit of one image.
pub const MAX_PIXELS: &str = "MMCACHE_MAX_PIXELS";
/// Origin connect timeout in seconds.
pub const ORIGIN_CONNECT_TIMEOUT_SECS: &str = "MMCACHE_ORIGIN_CONNECT_TIMEOUT_SECS";
/// Overall origin fetch deadline in seconds.
pub const ORIGIN_TIMEOUT_SECS: &str = "MMCACHE_ORIGIN_TIMEOUT_SECS";
/// Path of a PEM file with the root CA to trust for `rediss://`.
pub const SHARED_TLS_CA_FILE: &str = "MMCACHE_SHARED_IMAGE_CACHE_TLS_CA_FILE";
/// Largest value written to the shared cache, bytes.
pub const SHARED_MAX_VALUE_BYTES: &str = "MMCACHE_SHARED_IMAGE_CACHE_MAX_VALUE_BYTES";

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
/// Byte budget of the in-memory embedding cache.
pub const EMBEDDING_CACHE_BYTES: &str = "MMCACHE_EMBEDDING_CACHE_BYTES";
/// `0` or `1`: embeddings use the image tiers (disk, shared cache, lease) that are on.
pub const EMBEDDING_FLEET: &str = "MMCACHE_EMBEDDING_FLEET";
/// Largest encoded embedding value stored in or read from a fleet tier, bytes.
pub const EMBEDDING_MAX_VALUE_BYTES: &str = "MMCACHE_EMBEDDING_MAX_VALUE_BYTES";
/// Values over this many bytes go to the shared cache in chunks of this size.
pub const EMBEDDING_CHUNK_BYTES: &str = "MMCACHE_EMBEDDING_CHUNK_BYTES";
/// Deadline of one embedding compute in seconds, finite, > 0 and <= 3600. Default: the lease
/// TTL (5 s with the defaults).
pub const EMBEDDING_COMPUTE_TIMEOUT_SECS: &str = "MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS";

/// Overall deadline of a load in seconds.
pub const LOAD_TIMEOUT_SECS: &str = "MMCACHE_LOAD_TIMEOUT_SECS";
/// Bytes all downloads in flight may hold together.
pub const DOWNLOAD_MEMORY_BYTES: &str = "MMCACHE_DOWNLOAD_MEMORY_BYTES";

/// Every variable read by [`crate::Config::from_env`], in the order of [`crate::SETTINGS`].
pub const ALL: [&str; super::settings::COUNT] = super::settings::names();

/// Level of the log lines that the `mmcache` command and the Python package write on stderr;
/// read by them through [`log_level`], not by a `Config`.
pub const LOG: &str = "MMCACHE_LOG";

/// Reads [`LOG`]'s text: blank is `warn`; otherwise `off`, `error`, `warn`, `info`, `debug` or
/// `trace`, and anything else is an error naming the variable.
pub fn log_level(value: &str) -> Result<tracing::level_filters::LevelFilter, ConfigError> {
    use tracing::level_filters::LevelFilter;
    Ok(match value.trim() {
        "" | "warn" => LevelFilter::WARN,
        "off" => LevelFilter::OFF,
        "error" => LevelFilter::ERROR,
        "info" => LevelFilter::INFO,
        "debug" => LevelFilter::DEBUG,
        "trace" => LevelFilter::TRACE,
        other => {
            return Err(ConfigError::invalid(
                LOG,
                other,
                "off, error, warn, info, debug or trace",
            ));
        }
    })
}

//! The one declaration of every setting: its variable, its table, default, rule and
//! documentation (docs/configuration.md's tables are generated from them, `doc_tables.rs`),
//! its `mmcache.Loader` keyword (a Python test holds the bindings to them) and how its text is
//! read. Bounds and
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
    /// Which table of docs/configuration.md lists it.
    pub section: Section,
    /// The start of its rule in docs/configuration.md: its bounds, which a test holds to the
    /// checked ones.
    pub rule: &'static str,
    /// What follows the rule in docs/configuration.md (the setting's documentation).
    pub doc: &'static str,
    /// The keyword argument of `mmcache.Loader(...)` that sets the same thing.
    pub python: &'static str,
    /// What that keyword takes, as docs/configuration.md states it.
    pub python_value: &'static str,
    /// Reads the variable's (non-blank) text into the configuration; bounds come later.
    pub(super) read: fn(&mut Config, &str) -> Result<(), ConfigError>,
}

/// The tables of docs/configuration.md, each generated from the settings declared in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Variables the Python implementation (ai-dynamo) reads too, with the same meaning.
    Dynamo,
    /// mmcache's own variables.
    Own,
    /// The shared cache's breakers, stampede lease and write-behind queue.
    SharedCache,
    /// The host disk tier.
    Disk,
    /// Hedged reads and bounded writes of the shared cache.
    Hedge,
}

impl Section {
    /// Every section, in the order of docs/configuration.md.
    pub const ALL: [Section; 5] = [
        Section::Dynamo,
        Section::Own,
        Section::SharedCache,
        Section::Disk,
        Section::Hedge,
    ];

    /// The name of its table's marker in docs/configuration.md.
    pub fn marker(self) -> &'static str {
        match self {
            Section::Dynamo => "dynamo",
            Section::Own => "own",
            Section::SharedCache => "shared-cache",
            Section::Disk => "disk",
            Section::Hedge => "hedge",
        }
    }
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
        section: Section::Dynamo,
        default: "`0`",
        rule: "`0` or `1`",
        doc: "",
        python: "shared_cache",
        python_value: "bool",
        read: |c, v| {
            c.shared.enabled = parse_flag(env::SHARED_ENABLED, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_URL,
        section: Section::Dynamo,
        default: "—",
        rule: "required when enabled; `redis://` or `rediss://`",
        doc: ", user and password may be in it; never logged",
        python: "shared_cache_url",
        python_value: "str; also turns the shared cache on",
        read: |c, v| {
            c.shared.url = Some(v.trim().to_owned());
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_TTL_SECS,
        section: Section::Dynamo,
        default: "`3600`",
        rule: "integer > 0, <= 31536000 (365 days)",
        doc: "",
        python: "shared_cache_ttl_secs",
        python_value: "float seconds",
        read: |c, v| {
            let secs = parse_positive_int(env::SHARED_TTL_SECS, v)?;
            c.shared.ttl = Duration::from_secs(secs);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_CONNECT_TIMEOUT_SECS,
        section: Section::Dynamo,
        default: "`0.1`",
        rule: "finite number > 0, <= 3600",
        doc: "",
        python: "shared_cache_connect_timeout_secs",
        python_value: "float seconds",
        read: |c, v| {
            c.shared.connect_timeout = parse_secs(env::SHARED_CONNECT_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_IO_TIMEOUT_SECS,
        section: Section::Dynamo,
        default: "`2.0`",
        rule: "finite number > 0, <= 3600",
        doc: "",
        python: "shared_cache_io_timeout_secs",
        python_value: "float seconds",
        read: |c, v| {
            c.shared.io_timeout = parse_secs(env::SHARED_IO_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::MAX_FILE_SIZE_MB,
        section: Section::Dynamo,
        default: "`64`",
        rule: "integer > 0, MiB",
        doc: "; applies to every download and data URL, cache on or off",
        python: "max_file_size_bytes",
        python_value: "int, bytes (the variable is in MiB)",
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
        section: Section::Dynamo,
        default: "`0`",
        rule: "`0` or `1`",
        doc: "",
        python: "session_scoped",
        python_value: "bool",
        read: |c, v| {
            c.session_scoped = parse_flag(env::SESSION_SCOPED, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ALLOW_INTERNAL,
        section: Section::Dynamo,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": `1` allows `http://` and private, loopback, link-local and metadata addresses",
        python: "allow_internal",
        python_value: "bool",
        read: |c, v| {
            c.allow_internal = parse_flag(env::ALLOW_INTERNAL, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::IMAGE_CACHE_SIZE,
        section: Section::Dynamo,
        default: "unset",
        rule: "integer >= 0",
        doc: ": entry cap of the decoded-image cache; `0` turns it off",
        python: "decoded_cache_entries",
        python_value: "int, or `None` (no cap)",
        read: |c, v| {
            let n = parse_int(env::IMAGE_CACHE_SIZE, v, "an integer >= 0")?;
            c.decoded_cache_entries = Some(saturating_usize(n));
            Ok(())
        },
    },
    Setting {
        name: env::DECODED_CACHE_BYTES,
        section: Section::Own,
        default: "`1073741824` (1 GiB)",
        rule: "integer >= 0",
        doc: ": byte budget of the decoded-image cache (pixels + 128 bytes per entry)",
        python: "decoded_cache_bytes",
        python_value: "int",
        read: |c, v| {
            c.decoded_cache_bytes = parse_int(env::DECODED_CACHE_BYTES, v, "an integer >= 0")?;
            Ok(())
        },
    },
    Setting {
        name: env::MAX_PIXELS,
        section: Section::Own,
        default: "`100000000`",
        rule: "integer > 0",
        doc: ": largest `width * height`, checked from the header before decoding",
        python: "max_pixels",
        python_value: "int",
        read: |c, v| {
            c.max_pixels = parse_positive_int(env::MAX_PIXELS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ORIGIN_CONNECT_TIMEOUT_SECS,
        section: Section::Own,
        default: "`5`",
        rule: "finite number > 0, <= 3600",
        doc: "; also the longest a load waits for a DNS answer (then 408). Good answers are reused \
            for 5 s and, while refreshes get no answer (timeout, SERVFAIL), served for 300 s \
            more; see ARCHITECTURE.md",
        python: "origin_connect_timeout_secs",
        python_value: "float seconds",
        read: |c, v| {
            c.origin_connect_timeout = parse_secs(env::ORIGIN_CONNECT_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ORIGIN_TIMEOUT_SECS,
        section: Section::Own,
        default: "`30`",
        rule: "finite number > 0, <= 3600",
        doc: ": one deadline over every redirect hop and the whole body",
        python: "origin_timeout_secs",
        python_value: "float seconds",
        read: |c, v| {
            c.origin_timeout = parse_secs(env::ORIGIN_TIMEOUT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_TLS_CA_FILE,
        section: Section::Own,
        default: "unset",
        rule: "PEM file",
        doc: " of the CA to trust for `rediss://` (default: the system store)",
        // The keyword takes the PEM bytes themselves.
        python: "shared_cache_tls_root_ca",
        python_value: "bytes: the PEM itself (the variable names a file)",
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
        section: Section::Own,
        default: "`16777216` (16 MiB)",
        rule: "integer > 0",
        doc: ": larger values are not written, so one huge value does not hold a node connection \
            for everyone. Reads are bounded separately, by `DYN_MM_MAX_FILE_SIZE_MB`: a cached \
            value longer than a download may be is never read into memory (the load goes to the \
            origin; the value is left for workers with a larger cap)",
        python: "shared_cache_max_value_bytes",
        python_value: "int",
        read: |c, v| {
            let n = parse_positive_int(env::SHARED_MAX_VALUE_BYTES, v)?;
            c.shared.max_value_bytes = saturating_usize(n);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_BREAKER,
        section: Section::SharedCache,
        default: "`1`",
        rule: "`0` or `1`",
        doc: ": per-node circuit breakers",
        python: "shared_cache_breaker",
        python_value: "bool",
        read: |c, v| {
            c.shared.breaker.enabled = parse_flag(env::SHARED_BREAKER, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_BREAKER_FAILURES,
        section: Section::SharedCache,
        default: "`5`",
        rule: "integer > 0",
        doc: ": consecutive failures on a node that open its breaker",
        python: "shared_cache_breaker_failures",
        python_value: "int",
        read: |c, v| {
            let n = parse_positive_int(env::SHARED_BREAKER_FAILURES, v)?;
            c.shared.breaker.failures = u32::try_from(n).unwrap_or(u32::MAX);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_BREAKER_COOLDOWN_MS,
        section: Section::SharedCache,
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        doc: ": how long an open breaker skips that node before one probe",
        python: "shared_cache_breaker_cooldown_ms",
        python_value: "int milliseconds",
        read: |c, v| {
            c.shared.breaker.cooldown = parse_millis(env::SHARED_BREAKER_COOLDOWN_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_LEASE,
        section: Section::SharedCache,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": on a miss, one worker of the fleet fetches from the origin, the others wait for \
            its SET",
        python: "shared_cache_lease",
        python_value: "bool",
        read: |c, v| {
            c.shared.lease.enabled = parse_flag(env::SHARED_LEASE, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_LEASE_TTL_MS,
        section: Section::SharedCache,
        default: "`5000`",
        rule: "integer > 0, <= 3600000",
        doc: ": lease lifetime (frees the image if its holder dies)",
        python: "shared_cache_lease_ttl_ms",
        python_value: "int milliseconds",
        read: |c, v| {
            c.shared.lease.ttl = parse_millis(env::SHARED_LEASE_TTL_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_LEASE_WAIT_MS,
        section: Section::SharedCache,
        default: "`3000`",
        rule: "integer > 0, <= 3600000",
        doc: ": longest wait for another worker's fill before fetching from the origin",
        python: "shared_cache_lease_wait_ms",
        python_value: "int milliseconds",
        read: |c, v| {
            c.shared.lease.wait = parse_millis(env::SHARED_LEASE_WAIT_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_WRITE_BEHIND,
        section: Section::SharedCache,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": a miss returns once decoded; its SET goes to a bounded background queue",
        python: "shared_cache_write_behind",
        python_value: "bool",
        read: |c, v| {
            c.shared.write_behind.enabled = parse_flag(env::SHARED_WRITE_BEHIND, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_WRITE_BEHIND_QUEUE,
        section: Section::SharedCache,
        default: "`256`",
        rule: "integer > 0",
        doc: ": queued writes at most (also at most 256 MiB); a full queue drops the write, never \
            blocks a load",
        python: "shared_cache_write_behind_queue",
        python_value: "int",
        read: |c, v| {
            let n = parse_positive_int(env::SHARED_WRITE_BEHIND_QUEUE, v)?;
            c.shared.write_behind.max_queued = saturating_usize(n);
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_HEDGE,
        section: Section::Hedge,
        default: "`1`",
        rule: "`0` or `1`",
        doc: ": when a GET has not answered within the hedge delay, the origin fetch starts beside \
            it and the first usable image wins; a load waits for its SET at most the same delay, \
            then the SET goes on in the background (bounded by the I/O timeout and the \
            write-behind queue's limits)",
        python: "shared_cache_hedge",
        python_value: "bool",
        read: |c, v| {
            c.shared.hedge.enabled = parse_flag(env::SHARED_HEDGE, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_HEDGE_MIN_MS,
        section: Section::Hedge,
        default: "`20`",
        rule: "integer > 0, <= the maximum",
        doc: ": shortest hedge delay",
        python: "shared_cache_hedge_min_ms",
        python_value: "int milliseconds",
        read: |c, v| {
            c.shared.hedge.min_delay = parse_millis(env::SHARED_HEDGE_MIN_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::SHARED_HEDGE_MAX_MS,
        section: Section::Hedge,
        default: "`250`",
        rule: "integer >= the minimum, <= 60000",
        doc: ": longest hedge delay. Set both equal for a fixed delay",
        python: "shared_cache_hedge_max_ms",
        python_value: "int milliseconds",
        read: |c, v| {
            c.shared.hedge.max_delay = parse_millis(env::SHARED_HEDGE_MAX_MS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::JPEG_DECODER,
        section: Section::Own,
        default: "`auto`",
        rule: "`auto`, `libjpeg-turbo` or `pure-rust`",
        doc: ". `auto`: libjpeg-turbo when `libturbojpeg` loads (Pillow's pixels), else the \
            pure-Rust decoder with a start-up warning; `libjpeg-turbo`: required, a start-up \
            error when it does not load (recommended in production); `pure-rust`: never load it. \
            See [decoding.md](decoding.md)",
        python: "jpeg_decoder",
        python_value: "`\"auto\"`, `\"libjpeg-turbo\"` or `\"pure-rust\"`",
        read: |c, v| {
            c.jpeg_decoder = v.parse().map_err(|()| {
                ConfigError::invalid(env::JPEG_DECODER, v, "auto, libjpeg-turbo or pure-rust")
            })?;
            Ok(())
        },
    },
    Setting {
        name: env::IMAGE_FORMATS,
        section: Section::Own,
        default: "`jpeg,png,webp,gif`",
        rule: "comma-separated, from `jpeg`, `png`, `webp`, `gif`",
        doc: " (`jpg` is `jpeg`; any case; at least one): the image formats accepted. Bytes of \
            another format fail with 415 and are not deleted from the shared cache or the disk \
            tier (other workers may accept them). Dynamo's Python `ImageLoader` opens \
            `jpeg,png,webp`, which `mmcache.dynamo.ImageLoader` sets unless this variable is set",
        python: "image_formats",
        python_value: "`\"jpeg,png\"` or a list of names",
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
        section: Section::Own,
        default: "unset",
        rule: "path",
        doc: " of the TurboJPEG library to load (default: `libturbojpeg.so.0`, then \
            `libturbojpeg.so`, then the macOS names; a build with the vendored libjpeg-turbo, \
            such as the wheel, uses the linked-in one when this is unset). A process uses one \
            library: a path other than the one in use is refused (with `auto`, the pure-Rust \
            decoder is used instead, with a warning)",
        python: "libturbojpeg",
        python_value: "a path (`str` or `os.PathLike`)",
        read: |c, v| {
            c.libturbojpeg = Some(PathBuf::from(v.trim()));
            Ok(())
        },
    },
    Setting {
        name: env::DECODE_MEMORY_BYTES,
        section: Section::Own,
        default: "`2147483648` (2 GiB)",
        rule: "integer > 0",
        doc: ": bytes all running decodes may hold together, each reserved from the image's \
            headers before anything is allocated; an image that needs more than the whole budget \
            is refused (413)",
        python: "decode_memory_bytes",
        python_value: "int",
        read: |c, v| {
            c.decode_memory_bytes = parse_positive_int(env::DECODE_MEMORY_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::DECODE_CONCURRENCY,
        section: Section::Own,
        default: "twice the number of CPUs",
        rule: "integer > 0, <= 4096",
        doc: ": decodes running at once (one per CPU leaves cores idle at every hand-off)",
        python: "decode_concurrency",
        python_value: "int",
        read: |c, v| {
            let n = parse_positive_int(env::DECODE_CONCURRENCY, v)?;
            c.decode_concurrency = saturating_usize(n);
            Ok(())
        },
    },
    Setting {
        name: env::DECODE_WAIT_SECS,
        section: Section::Own,
        default: "`30`",
        rule: "number > 0 and <= 3600",
        doc: ": longest wait for the decode budget; then the load fails with 503",
        python: "decode_wait_secs",
        python_value: "float seconds",
        read: |c, v| {
            c.decode_wait = parse_secs(env::DECODE_WAIT_SECS, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::ALLOWED_MEDIA_DOMAINS,
        section: Section::Own,
        default: "unset (every host)",
        rule: "comma-separated hosts",
        doc: " images may come from, like vLLM's `--allowed-media-domains`: `example.com` allows \
            exactly that host; `*.example.com` allows its subdomains at any depth but not \
            `example.com` itself; an IP address allows that address; case, one trailing dot and \
            IDN spelling do not matter (entries are read by the URL parser, so `a.example..` \
            matches the host `a.example..` only). Checked on every redirect hop and before the \
            shared cache answers; refusals are 403. Internal addresses stay refused unless \
            `DYN_MM_ALLOW_INTERNAL=1`",
        python: "allowed_media_domains",
        python_value: "a list of hosts",
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
        section: Section::Disk,
        default: "unset (off)",
        rule: "a directory",
        doc: " on a local disk, shared by every worker process of the host; setting it turns the \
            tier on. Tiers in order: memory, in flight, disk, shared cache, origin",
        python: "disk_cache_dir",
        python_value: "a path (`str` or `os.PathLike`)",
        read: |c, v| {
            c.disk.dir = Some(PathBuf::from(v.trim()));
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_MAX_BYTES,
        section: Section::Disk,
        default: "`10737418240` (10 GiB)",
        rule: "integer > 0",
        doc: ": byte budget of the directory across the host's processes",
        python: "disk_cache_max_bytes",
        python_value: "int",
        read: |c, v| {
            c.disk.max_bytes = parse_positive_int(env::DISK_CACHE_MAX_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_TTL_SECS,
        section: Section::Disk,
        default: "`3600`",
        rule: "integer > 0, <= 31536000",
        doc: ": an entry older than this (by modification time) is a miss and is removed",
        python: "disk_cache_ttl_secs",
        python_value: "float seconds",
        read: |c, v| {
            let secs = parse_positive_int(env::DISK_CACHE_TTL_SECS, v)?;
            c.disk.ttl = Duration::from_secs(secs);
            Ok(())
        },
    },
    Setting {
        name: env::DISK_CACHE_GROUP,
        section: Section::Disk,
        default: "unset",
        rule: "a gid or a group name",
        doc: " (looked up in `/etc/group`): shared-group mode. Files and folders owned by that \
            group are trusted besides this uid's; ours are made 0640 (lock files 0660) in 2770 \
            folders. For Kubernetes `fsGroup` volumes and pods of different uids on one node. \
            Unset: only this uid's files are read; entries 0600, folders 0700",
        python: "disk_cache_group",
        python_value: "a gid (int) or a group name",
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
        section: Section::Disk,
        default: "`1000`",
        rule: "integer > 0, <= 3600000",
        doc: ": deadline of one disk operation (a read, a write, one lock attempt). A slower read \
            is a miss (the load goes on to the next tier); a slower write finishes in the \
            background",
        python: "disk_cache_timeout_ms",
        python_value: "int milliseconds",
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
        doc: ": overall deadline of one load, from the moment it starts its fill. At the deadline \
            every caller waiting for that load (the one that started it and every one that joined \
            it) gets a 408, the load leaves the in-flight map so the next load starts afresh, and \
            its work is dropped: the download is cut, a decode already running finishes and frees \
            its budget, the disk-tier lock is released, a stampede lease is left to expire. The \
            default is derived so that it never fires before the deadlines it covers on a healthy \
            path (the origin's, then the decode budget's wait, then the lease wait); the 30 s of \
            slack covers DNS (bounded by the connect timeout), shared-cache round trips (bounded \
            by their I/O timeout) and disk-tier I/O. A value set by hand is a hard cap, even \
            below that sum",
        section: Section::Own,
        python: "load_timeout_secs",
        python_value: "float seconds, or `None` (derived)",
        read: |c, v| {
            c.load_timeout = Some(parse_secs(env::LOAD_TIMEOUT_SECS, v)?);
            Ok(())
        },
    },
    Setting {
        name: env::DOWNLOAD_MEMORY_BYTES,
        section: Section::Own,
        default: "`536870912` (512 MiB)",
        rule: "integer > 0",
        doc: ": bytes all origin downloads may hold together, process-wide, from the first byte \
            read until the last copy of the body is dropped (after its decode and its cache \
            writes). A body with a `Content-Length` reserves it before reading (and its buffer \
            is allocated once, at that size); a body without one reserves 1 MiB, then, past it, \
            what it may still grow to (the cap, or what the budget allows) at once. Half the \
            budget serves bodies with a length and first steps, the other half the growth of \
            bodies without one, so a growing body never waits on another that waits for it; a \
            body larger than its half is refused at once (413). A reservation waits at most \
            `MMCACHE_DECODE_WAIT_SECS` (and never past the origin deadline, which covers the \
            body): 503, or 408 at the deadline. The default keeps 64 concurrent downloads of 60 \
            MB under 1 GB of resident memory: measured with `cargo run --release -p \
            mmcache-loader --example hostile_rss -- downloads` (2 cores), peak RSS 247 MiB with \
            `Content-Length` and 387 MiB chunked, every load answered (415: not an image), where \
            the same run before the budget peaked at 2583 MiB and 2440 MiB. Values read from the \
            disk tier and the shared cache count in the same budget, reserved before their bytes \
            are read and held with them: a disk entry reserves its length (from `fstat`); a \
            shared read reserves 2 MiB, reads `STRLEN` and the first 2 MiB in one round trip (a \
            value that fits is whole, and the reservation is trimmed to it), and a longer value \
            (never above the cap) is read again under a reservation of its exact length. The 2 \
            MiB first steps come from a pool of their own, an eighth of this budget, taken \
            without waiting (when it is full, a read asks for `STRLEN` alone first: two round \
            trips), so GETs in flight to a hung node (held until their deadline) never hold what \
            other reads or origin downloads wait for. A read that finds no room within the wait \
            is not made (`mmcache_shared_cache_skipped_total{reason=\"no_memory\"}`, \
            `mmcache_disk_cache_reads_total{outcome=\"no_memory\"}`): the load goes on to the \
            next tier and the origin, whose download waits for the same budget and fails as any \
            download does. Cache writes (disk and shared, write-behind included) never hold a \
            load's reservation: they hold a copy of its bytes under a separate allowance of a \
            quarter of this budget (so all three together bound the process at 1.375 × this \
            value), and a write that does not fit at once is skipped \
            (`mmcache_cache_writes_skipped_total`), so a hung disk or master never makes a later \
            load wait or fail for memory. 64 concurrent shared hits of 60 MB values with the \
            defaults (`cargo run --release -p mmcache-loader --example hostile_rss -- shared`, 2 \
            cores): peak RSS 497 MiB, all 64 values read and every load answered (415: not an \
            image); before these reads were budgeted the same run peaked at 439 MiB with no \
            value read (all 64 GETs, pipelined at once, failed at the I/O deadline) and 33 loads \
            failed with 408. A value larger than the write allowance is never written to a \
            cache tier (a warning at start says so when `DYN_MM_MAX_FILE_SIZE_MB` allows such \
            values). A budget that stays full makes a load wait for it at each tier in turn \
            (disk, shared cache, origin), so such a load can reach the load deadline and fail \
            with 408 rather than 503",
        python: "download_memory_bytes",
        python_value: "int",
        read: |c, v| {
            c.download_memory_bytes = parse_positive_int(env::DOWNLOAD_MEMORY_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_CACHE_BYTES,
        section: Section::Own,
        default: "`1073741824` (1 GiB)",
        rule: "integer >= 0",
        doc: ": byte budget of the in-memory embedding cache (tensor + metadata + 320 bytes per \
            entry); an entry heavier than the budget is returned but not stored; `0` stores \
            nothing (concurrent computes of one key still join). See \
            [embeddings.md](embeddings.md)",
        python: "embedding_cache_bytes",
        python_value: "int",
        read: |c, v| {
            let n = parse_int(env::EMBEDDING_CACHE_BYTES, v, "an integer >= 0")?;
            c.embedding_cache_bytes = n;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_FLEET,
        section: Section::Own,
        default: "`1`",
        rule: "`0` or `1`",
        doc: ": embeddings use the fleet tiers that are on (the disk tier, the shared cache, the \
            lease); `0` keeps them in memory. See [embeddings.md](embeddings.md#fleet-tiers)",
        python: "embedding_fleet",
        python_value: "bool",
        read: |c, v| {
            c.embedding_fleet = parse_flag(env::EMBEDDING_FLEET, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_MAX_VALUE_BYTES,
        section: Section::Own,
        default: "`67108864` (64 MiB)",
        rule: "integer > 0",
        doc: ": cap on an encoded embedding value written to or read from a fleet tier; a larger \
            value is not written, and one read is deleted",
        python: "embedding_max_value_bytes",
        python_value: "int",
        read: |c, v| {
            let n = parse_positive_int(env::EMBEDDING_MAX_VALUE_BYTES, v)?;
            c.embedding_max_value_bytes = n;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_CHUNK_BYTES,
        section: Section::Own,
        default: "`2097152` (2 MiB)",
        rule: "integer > 0, <= 4294967295, at most the value cap and at least 1/1024 of it",
        doc: " (a reader refuses a value of more than 1024 chunks): values over this go to the \
            shared cache in chunks of this size, spread over slots",
        python: "embedding_chunk_bytes",
        python_value: "int",
        read: |c, v| {
            c.embedding_chunk_bytes = parse_positive_int(env::EMBEDDING_CHUNK_BYTES, v)?;
            Ok(())
        },
    },
    Setting {
        name: env::EMBEDDING_COMPUTE_TIMEOUT_SECS,
        section: Section::Own,
        default: "`60`",
        rule: "number > 0 and <= 3600",
        doc: ": deadline of one embedding compute (`get_or_compute`'s closure or Python \
            coroutine), from the moment it starts. At the deadline every caller waiting for that \
            key gets a 408 (`EmbeddingError::Timeout`, Python `EmbeddingTimeoutError`), the \
            compute is dropped (Rust) or its task cancelled (Python), the key leaves the \
            in-flight map so the next call computes again, a held lease is released, and \
            nothing is cached. It only frees the waiters of a compute that hangs: a vision \
            encoder takes tens of milliseconds to a few seconds even queued on a loaded GPU, so \
            a healthy compute never meets the default. Waiters in other processes are bounded \
            by the lease wait; a compute that outlives the lease TTL may run a second time in \
            another process",
        python: "embedding_compute_timeout_secs",
        python_value: "float seconds, or `None` (the default)",
        read: |c, v| {
            c.embedding_compute_timeout = Some(parse_secs(env::EMBEDDING_COMPUTE_TIMEOUT_SECS, v)?);
            Ok(())
        },
    },
];

//! The settings of docs/configuration.md's table of mmcache's own variables.
//!
//! Each variable's name is declared in this file with its [`Setting`]; [`crate::env`] re-exports
//! it.

use std::path::PathBuf;

use mmcache_shared_cache::Field as shared;

use super::shape::{CheckedBy, Read, Section, Setting};
use crate::config::error::Refusal;
use crate::config::parse::{
    optional, parse_flag, parse_int, parse_positive_int, parse_secs, saturating_usize,
};

/// Byte budget of the decoded-image cache.
pub const DECODED_CACHE_BYTES: &str = "MMCACHE_DECODED_CACHE_BYTES";
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
/// `auto` (libjpeg-turbo when it loads, else pure Rust), `libjpeg-turbo` (or a start-up error)
/// or `pure-rust`.
pub const JPEG_DECODER: &str = "MMCACHE_JPEG_DECODER";
/// Image formats accepted, comma-separated from `jpeg`, `png`, `webp`, `gif`.
pub const IMAGE_FORMATS: &str = "MMCACHE_IMAGE_FORMATS";
/// `rgb` (3 bytes a pixel) or `rgbx` (4, as Pillow holds RGB): how decoded images are kept.
pub const PIXEL_LAYOUT: &str = "MMCACHE_PIXEL_LAYOUT";
/// Path of libturbojpeg to load.
pub const LIBTURBOJPEG: &str = "MMCACHE_LIBTURBOJPEG";
/// Bytes all running decodes may hold together.
pub const DECODE_MEMORY_BYTES: &str = "MMCACHE_DECODE_MEMORY_BYTES";
/// Decodes running at once.
pub const DECODE_CONCURRENCY: &str = "MMCACHE_DECODE_CONCURRENCY";
/// Longest wait for the decode budget, in seconds.
pub const DECODE_WAIT_SECS: &str = "MMCACHE_DECODE_WAIT_SECS";
/// Comma-separated hosts images may come from: `example.com` (exactly that host),
/// `*.example.com` (its subdomains), IP addresses.
pub const ALLOWED_MEDIA_DOMAINS: &str = "MMCACHE_ALLOWED_MEDIA_DOMAINS";
/// `0` or `1`: fetch `http://` URLs of public addresses.
pub const ALLOW_HTTP: &str = "MMCACHE_ALLOW_HTTP";
/// Overall deadline of a load in seconds.
pub const LOAD_TIMEOUT_SECS: &str = "MMCACHE_LOAD_TIMEOUT_SECS";
/// Bytes all downloads in flight may hold together.
pub const DOWNLOAD_MEMORY_BYTES: &str = "MMCACHE_DOWNLOAD_MEMORY_BYTES";
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

/// The decoded cache, the pixel limit, the origin's timeouts and two shared-cache settings.
pub(super) const CACHES_AND_ORIGIN: [Setting; 6] = [
    Setting {
        name: DECODED_CACHE_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`1073741824` (1 GiB)",
        rule: "integer >= 0",
        doc: ": byte budget of the decoded-image cache (pixels + {ENTRY_OVERHEAD_BYTES} bytes per \
            entry)",
        python: "decoded_cache_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            c.decoded_cache_bytes = parse_int(v, "an integer >= 0")?;
            Ok(())
        }),
    },
    Setting {
        name: MAX_PIXELS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`100000000`",
        rule: "integer > 0",
        doc: ": largest `width * height`, checked from the header before decoding",
        python: "max_pixels",
        python_value: "int",
        read: Read::Same(|c, v| {
            c.max_pixels = parse_positive_int(v)?;
            Ok(())
        }),
    },
    Setting {
        name: ORIGIN_CONNECT_TIMEOUT_SECS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`5`",
        rule: "finite number > 0, <= 3600",
        doc: "; also the longest a load waits for a DNS answer (then 408). Good answers are reused \
            for 5 s and, while refreshes get no answer (timeout, SERVFAIL), served for 300 s \
            more; see ARCHITECTURE.md",
        python: "origin_connect_timeout_secs",
        python_value: "float seconds",
        read: Read::Same(|c, v| {
            c.origin_connect_timeout = parse_secs(v)?;
            Ok(())
        }),
    },
    Setting {
        name: ORIGIN_TIMEOUT_SECS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`30`",
        rule: "finite number > 0, <= 3600",
        doc: ": one deadline over every redirect hop and the whole body",
        python: "origin_timeout_secs",
        python_value: "float seconds",
        read: Read::Same(|c, v| {
            c.origin_timeout = parse_secs(v)?;
            Ok(())
        }),
    },
    Setting {
        name: SHARED_TLS_CA_FILE,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "unset",
        rule: "PEM file",
        doc: " of the CA to trust for `rediss://` (default: the system store)",
        // The keyword takes the PEM bytes themselves.
        python: "shared_cache_tls_root_ca",
        python_value: "bytes: the PEM itself (the variable names a file)",
        // Blank (`None` from Python): unset, the system store.
        read: Read::Apart {
            variable: |c, v| {
                c.shared.tls_root_ca_pem = optional(v, |v| {
                    std::fs::read(v.trim()).map_err(|e| Refusal::Unreadable(e.to_string()))
                })?;
                Ok(())
            },
            keyword: |c, v| {
                c.shared.tls_root_ca_pem = optional(v, |v| Ok(v.as_bytes().to_vec()))?;
                Ok(())
            },
        },
    },
    Setting {
        name: SHARED_MAX_VALUE_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::SharedCache(shared::MaxValueBytes),
        default: "`16777216` (16 MiB)",
        rule: "integer > 0",
        doc: ": larger values are not written, so one huge value does not hold a node connection \
            for everyone. Reads are bounded separately, by `DYN_MM_MAX_FILE_SIZE_MB`: a cached \
            value longer than a download may be is never read into memory (the load goes to the \
            origin; the value is left for workers with a larger cap)",
        python: "shared_cache_max_value_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            let n = parse_positive_int(v)?;
            c.shared.max_value_bytes = saturating_usize(n);
            Ok(())
        }),
    },
];

/// The JPEG decoder, the formats, the pixel layout, the decode budget and the media-domain
/// allowlist.
pub(super) const DECODE_AND_POLICY: [Setting; 9] = [
    Setting {
        name: JPEG_DECODER,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`auto`",
        rule: "`auto`, `libjpeg-turbo` or `pure-rust`",
        doc: ". `auto`: libjpeg-turbo when `libturbojpeg` loads (Pillow's pixels), else the \
            pure-Rust decoder with a start-up warning; `libjpeg-turbo`: required, a start-up \
            error when it does not load (recommended in production); `pure-rust`: never load it. \
            See [decoding.md](decoding.md)",
        python: "jpeg_decoder",
        python_value: "`\"auto\"`, `\"libjpeg-turbo\"` or `\"pure-rust\"`",
        read: Read::Same(|c, v| {
            c.jpeg_decoder = v
                .parse()
                .map_err(|()| Refusal::Expected("auto, libjpeg-turbo or pure-rust"))?;
            Ok(())
        }),
    },
    Setting {
        name: IMAGE_FORMATS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`jpeg,png,webp,gif`",
        rule: "comma-separated, from `jpeg`, `png`, `webp`, `gif`",
        doc: " (`jpg` is `jpeg`; any case; at least one): the image formats accepted. Bytes of \
            another format fail with 415 and are not deleted from the shared cache or the disk \
            tier (other workers may accept them). Dynamo's Python `ImageLoader` opens \
            `jpeg,png,webp`, which `mmcache.dynamo.ImageLoader` sets unless this variable is set",
        python: "image_formats",
        python_value: "`\"jpeg,png\"` or a list of names",
        read: Read::Same(|c, v| {
            c.image_formats = v
                .parse()
                .map_err(|_| Refusal::Expected("a comma-separated list of jpeg, png, webp, gif"))?;
            Ok(())
        }),
    },
    Setting {
        name: PIXEL_LAYOUT,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`rgb` (Rust); `rgbx` in the Python package's loaders",
        rule: "`rgb` or `rgbx`",
        doc: ": how decoded images are kept in memory. `rgb`: 3 bytes a pixel (`Image::pixels` \
            is RGB8); `rgbx`: 4 bytes a pixel, the fourth as Pillow holds it, which is how Pillow stores a mode \
            `RGB` image, so `mmcache.dynamo.ImageLoader` maps its PIL images onto the cached \
            pixels without a copy (the decoded cache then holds 4/3 the bytes, and counts \
            them). Same pixel values either way. The Python package's loaders use `rgbx` unless \
            this or the keyword is set. See [decoding.md](decoding.md#pixel-layout)",
        python: "pixel_layout",
        python_value: "`\"rgb\"` or `\"rgbx\"`",
        read: Read::Same(|c, v| {
            c.pixel_layout = v.parse().map_err(|()| Refusal::Expected("rgb or rgbx"))?;
            Ok(())
        }),
    },
    Setting {
        name: LIBTURBOJPEG,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "unset",
        rule: "path",
        doc: " of the TurboJPEG library to load (default: `libturbojpeg.so.0`, then \
            `libturbojpeg.so`, then the macOS names; a build with the vendored libjpeg-turbo, \
            such as the wheel, uses the linked-in one when this is unset). A process uses one \
            library: a path other than the one in use is refused (with `auto`, the pure-Rust \
            decoder is used instead, with a warning)",
        python: "libturbojpeg",
        python_value: "a path (`str` or `os.PathLike`)",
        read: Read::Same(|c, v| {
            c.libturbojpeg = optional(v, |v| Ok(PathBuf::from(v.trim())))?;
            Ok(())
        }),
    },
    Setting {
        name: DECODE_MEMORY_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`2147483648` (2 GiB)",
        rule: "integer > 0",
        doc: ": bytes all running decodes may hold together, each reserved from the image's \
            headers before anything is allocated; an image that needs more than the whole budget \
            is refused (413)",
        python: "decode_memory_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            c.decode_memory_bytes = parse_positive_int(v)?;
            Ok(())
        }),
    },
    Setting {
        name: DECODE_CONCURRENCY,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "twice the number of CPUs",
        rule: "integer > 0, <= 4096",
        doc: ": decodes running at once (one per CPU leaves cores idle at every hand-off)",
        python: "decode_concurrency",
        python_value: "int",
        read: Read::Same(|c, v| {
            let n = parse_positive_int(v)?;
            c.decode_concurrency = saturating_usize(n);
            Ok(())
        }),
    },
    Setting {
        name: DECODE_WAIT_SECS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`30`",
        rule: "number > 0 and <= 3600",
        doc: ": longest wait for the decode budget; then the load fails with 503",
        python: "decode_wait_secs",
        python_value: "float seconds",
        read: Read::Same(|c, v| {
            c.decode_wait = parse_secs(v)?;
            Ok(())
        }),
    },
    Setting {
        name: ALLOW_HTTP,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`0`",
        rule: "`0` or `1`",
        doc: ": `1` fetches `http://` URLs too (vLLM's connector does); internal addresses stay \
            refused unless `DYN_MM_ALLOW_INTERNAL=1`. `mmcache.vllm` turns it on unless it is set",
        python: "allow_http",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.allow_http = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: ALLOWED_MEDIA_DOMAINS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
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
        read: Read::Same(|c, v| {
            c.allowed_media_domains = v
                .split(',')
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty())
                .collect();
            Ok(())
        }),
    },
];

/// The load deadline, the download budget and the embeddings.
pub(super) const BUDGETS_AND_EMBEDDINGS: [Setting; 7] = [
    Setting {
        name: LOAD_TIMEOUT_SECS,
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
        checked_by: CheckedBy::Loader,
        python: "load_timeout_secs",
        python_value: "float seconds, or `None` (derived)",
        read: Read::Same(|c, v| {
            c.load_timeout = optional(v, parse_secs)?;
            Ok(())
        }),
    },
    Setting {
        name: DOWNLOAD_MEMORY_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
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
            download does. Cache writes (disk and shared, write-behind and embeddings \
            included) never hold a load's reservation: they hold a copy of its bytes under a \
            separate allowance of a quarter of this budget (so all three together bound the process at 1.375 × this \
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
        read: Read::Same(|c, v| {
            c.download_memory_bytes = parse_positive_int(v)?;
            Ok(())
        }),
    },
    Setting {
        name: EMBEDDING_CACHE_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`1073741824` (1 GiB)",
        rule: "integer >= 0",
        doc: ": byte budget of the in-memory embedding cache (tensor + metadata + 320 bytes per \
            entry); an entry heavier than the budget is returned but not stored; `0` stores \
            nothing (concurrent computes of one key still join). See \
            [embeddings.md](embeddings.md)",
        python: "embedding_cache_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            let n = parse_int(v, "an integer >= 0")?;
            c.embedding_cache_bytes = n;
            Ok(())
        }),
    },
    Setting {
        name: EMBEDDING_FLEET,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`1`",
        rule: "`0` or `1`",
        doc: ": embeddings use the fleet tiers that are on (the disk tier, the shared cache, the \
            lease); `0` keeps them in memory. See [embeddings.md](embeddings.md#fleet-tiers)",
        python: "embedding_fleet",
        python_value: "bool",
        read: Read::Same(|c, v| {
            c.embedding_fleet = parse_flag(v)?;
            Ok(())
        }),
    },
    Setting {
        name: EMBEDDING_MAX_VALUE_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`67108864` (64 MiB)",
        rule: "integer > 0",
        doc: ": cap on an encoded embedding value written to or read from a fleet tier; a larger \
            value is not written, and one read is a miss that deletes nothing (workers with a \
            larger cap use it)",
        python: "embedding_max_value_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            let n = parse_positive_int(v)?;
            c.embedding_max_value_bytes = n;
            Ok(())
        }),
    },
    Setting {
        name: EMBEDDING_CHUNK_BYTES,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`262144` (256 KiB)",
        rule: "integer > 0, <= 4294967295, at most the value cap and at least 1/1024 of it",
        doc: " (a reader refuses a value of more than 1024 chunks): values over this go to the \
            shared cache in chunks of this size, spread over slots",
        python: "embedding_chunk_bytes",
        python_value: "int",
        read: Read::Same(|c, v| {
            c.embedding_chunk_bytes = parse_positive_int(v)?;
            Ok(())
        }),
    },
    Setting {
        name: EMBEDDING_COMPUTE_TIMEOUT_SECS,
        section: Section::Own,
        checked_by: CheckedBy::Loader,
        default: "`60`",
        rule: "number > 0 and <= 3600",
        doc: ": deadline of one embedding compute (`get_or_compute`'s closure or Python \
            coroutine), from the moment it starts. At the deadline every caller waiting for that \
            key gets a 408 (`EmbeddingError::Timeout`, Python `EmbeddingTimeoutError`), the \
            compute is dropped (Rust) or its task cancelled (Python), the key leaves the \
            in-flight map so the next call computes again, a held lease is released, and \
            nothing is cached. It only frees the waiters of a compute that hangs: a vision \
            encoder takes tens of milliseconds to a few seconds even queued on a loaded GPU, so \
            a healthy compute never meets the default. With the lease on, the holder renews its \
            lease while it computes and writes, so a compute runs once in the fleet however long \
            it takes; waiters in other processes wait at most this deadline, a write's deadline \
            and one lease TTL",
        python: "embedding_compute_timeout_secs",
        python_value: "float seconds, or `None` (the default)",
        read: Read::Same(|c, v| {
            c.embedding_compute_timeout = optional(v, parse_secs)?;
            Ok(())
        }),
    },
];

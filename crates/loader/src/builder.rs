//! The builder: configuration from the environment or by hand, validated, then one
//! [`Loader`] with its origin client, shared cache, decoded cache, decode budget and hedge.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use mmcache_decode::{DecodeLimits, DecodedCache};
use mmcache_origin::Origin;
use mmcache_shared_cache::SharedCache;

use crate::budget::DecodeBudget;
use crate::config::{Config, ConfigError, HedgeSettings, LeaseConfig, Setting};
use crate::handle::Loader;
use crate::hedge::Hedge;
use crate::metrics;
use crate::tiers::{DecodeStep, DiskStep, HostStep, MemoryStep, OriginStep, SharedStep, Tiers};

/// Builds a [`Loader`]. Start from defaults ([`Loader::builder`]) or from the environment
/// ([`LoaderBuilder::from_env`]); every setter overrides what the environment said.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct LoaderBuilder {
    config: Config,
}

impl LoaderBuilder {
    /// A builder holding the configuration read from the environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad variable and its value.
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            config: Config::from_env()?,
        })
    }

    /// A builder holding `config`.
    pub fn from_config(config: Config) -> Self {
        Self { config }
    }

    /// The configuration so far.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Sets the setting named `name`, by its variable or by its Python keyword (see
    /// [`crate::SETTINGS`]), from `text` read as the environment's text is read (a keyword
    /// whose value differs, such as `max_file_size_bytes` in bytes where the variable counts
    /// MiB, reads its own). A blank text unsets a setting that may be unset
    /// (`MMCACHE_LOAD_TIMEOUT_SECS`, say) and empties a path; bounds and the rules spanning
    /// settings are checked by [`LoaderBuilder::build`], as for the other setters.
    ///
    /// ```
    /// let builder = mmcache_loader::Loader::builder()
    ///     .with_setting("MMCACHE_DISK_CACHE_DIR", "/var/cache/mmcache")?
    ///     .with_setting("decoded_cache_bytes", "1048576")?;
    /// assert_eq!(builder.config().decoded_cache_bytes, 1 << 20);
    /// # Ok::<(), mmcache_loader::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting as given, and the text, when no setting has that
    /// name or its reader refuses the text.
    pub fn with_setting(mut self, name: &str, text: &str) -> Result<Self, ConfigError> {
        let setting = Setting::named(name).ok_or_else(|| ConfigError::unknown(name))?;
        setting.read_as(name, &mut self.config, text)?;
        Ok(self)
    }

    /// Turns the shared cache on or off.
    pub fn shared_cache(mut self, enabled: bool) -> Self {
        self.config.shared_enabled = enabled;
        self
    }

    /// Sets the shared-cache discovery URL and turns the shared cache on. An empty URL is no
    /// URL (as a blank variable is): [`LoaderBuilder::build`] then refuses the enabled cache
    /// with [`ConfigError::MissingCacheUrl`].
    pub fn shared_cache_url(mut self, url: impl Into<String>) -> Self {
        self.config.shared.url = url.into();
        self.config.shared_enabled = true;
        self
    }

    /// Shared-cache entry TTL.
    pub fn shared_cache_ttl(mut self, ttl: Duration) -> Self {
        self.config.shared.ttl = ttl;
        self
    }

    /// Shared-cache connect timeout.
    pub fn shared_cache_connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.shared.connect_timeout = timeout;
        self
    }

    /// Shared-cache response timeout.
    pub fn shared_cache_io_timeout(mut self, timeout: Duration) -> Self {
        self.config.shared.io_timeout = timeout;
        self
    }

    /// Largest value written to the shared cache.
    pub fn shared_cache_max_value_bytes(mut self, bytes: usize) -> Self {
        self.config.shared.max_value_bytes = bytes;
        self
    }

    /// Root CA (PEM) to trust for `rediss://`.
    pub fn shared_cache_tls_root_ca(mut self, pem: Vec<u8>) -> Self {
        self.config.shared.tls_root_ca_pem = Some(pem);
        self
    }

    /// Per-node circuit breakers of the shared cache.
    pub fn shared_cache_breaker(mut self, breaker: mmcache_shared_cache::BreakerConfig) -> Self {
        self.config.shared.breaker = breaker;
        self
    }

    /// Stampede lease on shared-cache misses.
    pub fn shared_cache_lease(mut self, lease: LeaseConfig) -> Self {
        self.config.shared.lease = lease;
        self
    }

    /// Write-behind of shared-cache SETs.
    pub fn shared_cache_write_behind(
        mut self,
        write_behind: mmcache_shared_cache::WriteBehindConfig,
    ) -> Self {
        self.config.shared.write_behind = write_behind;
        self
    }

    /// Hedged shared-cache GETs and bounded SET waits.
    pub fn shared_cache_hedge(mut self, hedge: HedgeSettings) -> Self {
        self.config.hedge = hedge;
        self
    }

    /// The clock of the shared cache's warnings and breakers. A test seam: only with the
    /// feature `test-seams`.
    #[cfg(feature = "test-seams")]
    pub fn shared_cache_clock(mut self, clock: Arc<dyn mmcache_shared_cache::Clock>) -> Self {
        self.config.shared.set_clock(clock);
        self
    }

    /// Body cap in bytes.
    pub fn max_file_size_bytes(mut self, bytes: u64) -> Self {
        self.config.max_file_size_bytes = bytes;
        self
    }

    /// Partition caches by session scope.
    pub fn session_scoped(mut self, on: bool) -> Self {
        self.config.session_scoped = on;
        self
    }

    /// Allow `http://` and internal addresses.
    pub fn allow_internal(mut self, on: bool) -> Self {
        self.config.allow_internal = on;
        self
    }

    /// Fetch `http://` URLs of public addresses (`MMCACHE_ALLOW_HTTP`); internal addresses
    /// stay refused unless [`LoaderBuilder::allow_internal`].
    pub fn allow_http(mut self, on: bool) -> Self {
        self.config.allow_http = on;
        self
    }

    /// Hosts images may come from (`MMCACHE_ALLOWED_MEDIA_DOMAINS`): `example.com` exactly,
    /// `*.example.com` for its subdomains, IP addresses. Empty: every host.
    pub fn allowed_media_domains<S: Into<String>>(
        mut self,
        domains: impl IntoIterator<Item = S>,
    ) -> Self {
        self.config.allowed_media_domains = domains.into_iter().map(Into::into).collect();
        self
    }

    /// Turns the host's disk tier on, in `dir` (`MMCACHE_DISK_CACHE_DIR`). An empty path is
    /// no directory (as a blank variable is): the tier stays off.
    pub fn disk_cache_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.config.disk.dir = dir.into();
        self
    }

    /// The disk tier's byte budget across the host's processes (`MMCACHE_DISK_CACHE_MAX_BYTES`).
    pub fn disk_cache_max_bytes(mut self, bytes: u64) -> Self {
        self.config.disk.max_bytes = bytes;
        self
    }

    /// The disk tier's entry TTL (`MMCACHE_DISK_CACHE_TTL_SECS`).
    pub fn disk_cache_ttl(mut self, ttl: Duration) -> Self {
        self.config.disk.ttl = ttl;
        self
    }

    /// Shared-group mode of the disk tier (`MMCACHE_DISK_CACHE_GROUP`): files and folders
    /// owned by `gid` are trusted too, and ours are made for it (0640 entries, 2770 folders).
    /// For Kubernetes `fsGroup` volumes and pods of different uids on one host.
    pub fn disk_cache_group(mut self, gid: u32) -> Self {
        self.config.disk.group = Some(gid);
        self
    }

    /// Turns the host pixel tier on, in `dir` on a memory file system
    /// (`MMCACHE_HOST_PIXELS_DIR`). An empty path turns it off.
    pub fn host_pixels_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.config.host.dir = dir.into();
        self
    }

    /// The host pixel tier's byte budget across the host's processes
    /// (`MMCACHE_HOST_PIXELS_MAX_BYTES`).
    pub fn host_pixels_max_bytes(mut self, bytes: u64) -> Self {
        self.config.host.max_bytes = bytes;
        self
    }

    /// Shared-group mode of the host pixel tier (`MMCACHE_HOST_PIXELS_GROUP`): entries that
    /// group owns are mapped too, and ours are made for it (0440 in 2770 folders).
    pub fn host_pixels_group(mut self, gid: u32) -> Self {
        self.config.host.group = Some(gid);
        self
    }

    /// Deadline of one disk-tier operation (`MMCACHE_DISK_CACHE_TIMEOUT_MS`): a slower read is
    /// a miss, a slower write is finished in the background.
    pub fn disk_cache_timeout(mut self, timeout: Duration) -> Self {
        self.config.disk.timeout = timeout;
        self
    }

    /// Decoded-cache byte budget.
    pub fn decoded_cache_bytes(mut self, bytes: u64) -> Self {
        self.config.decoded_cache_bytes = bytes;
        self
    }

    /// Embedding-cache byte budget (`MMCACHE_EMBEDDING_CACHE_BYTES`; 0 stores nothing, and
    /// concurrent computes of one key still join).
    pub fn embedding_cache_bytes(mut self, bytes: u64) -> Self {
        self.config.embedding_cache_bytes = bytes;
        self
    }

    /// Whether embeddings use the fleet tiers that are on (`MMCACHE_EMBEDDING_FLEET`).
    pub fn embedding_fleet(mut self, on: bool) -> Self {
        self.config.embedding_fleet = on;
        self
    }

    /// Cap on an encoded embedding value in a fleet tier (`MMCACHE_EMBEDDING_MAX_VALUE_BYTES`).
    pub fn embedding_max_value_bytes(mut self, bytes: u64) -> Self {
        self.config.embedding_max_value_bytes = bytes;
        self
    }

    /// Chunk threshold and size of embedding values in the shared cache
    /// (`MMCACHE_EMBEDDING_CHUNK_BYTES`).
    pub fn embedding_chunk_bytes(mut self, bytes: u64) -> Self {
        self.config.embedding_chunk_bytes = bytes;
        self
    }

    /// Deadline of one embedding compute (`MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`); `None`
    /// is 60 s (see [`Config::embedding_compute_timeout`]).
    pub fn embedding_compute_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.embedding_compute_timeout = timeout;
        self
    }

    /// Decoded-cache entry cap (`Some(0)` turns the cache off).
    pub fn decoded_cache_entries(mut self, entries: Option<usize>) -> Self {
        self.config.decoded_cache_entries = entries;
        self
    }

    /// Pixel limit of one image.
    pub fn max_pixels(mut self, pixels: u64) -> Self {
        self.config.max_pixels = pixels;
        self
    }

    /// How the JPEG decoder is chosen (`MMCACHE_JPEG_DECODER`).
    pub fn jpeg_decoder(mut self, choice: mmcache_decode::JpegDecoderChoice) -> Self {
        self.config.jpeg_decoder = choice;
        self
    }

    /// Image formats accepted (`MMCACHE_IMAGE_FORMATS`); others are refused with 415 and
    /// left in the shared caches. [`mmcache_decode::ImageFormats::DYNAMO`] accepts what
    /// Dynamo's Python `ImageLoader` accepts.
    pub fn image_formats(mut self, formats: mmcache_decode::ImageFormats) -> Self {
        self.config.image_formats = formats;
        self
    }

    /// How decoded images are laid out in memory (`MMCACHE_PIXEL_LAYOUT`): RGB8 by default;
    /// [`mmcache_decode::PixelLayout::Rgbx`] keeps 4 bytes a pixel, as Pillow does, for
    /// callers that hand the pixels to PIL (the Python package's loaders choose it).
    pub fn pixel_layout(mut self, layout: mmcache_decode::PixelLayout) -> Self {
        self.config.pixel_layout = layout;
        self
    }

    /// Path of libturbojpeg to load (`MMCACHE_LIBTURBOJPEG`).
    pub fn libturbojpeg(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config.libturbojpeg = Some(path.into());
        self
    }

    /// Bytes all running decodes may hold together (`MMCACHE_DECODE_MEMORY_BYTES`).
    pub fn decode_memory_bytes(mut self, bytes: u64) -> Self {
        self.config.decode_memory_bytes = bytes;
        self
    }

    /// Decodes running at once (`MMCACHE_DECODE_CONCURRENCY`).
    pub fn decode_concurrency(mut self, decodes: usize) -> Self {
        self.config.decode_concurrency = decodes;
        self
    }

    /// Longest wait for the decode budget (`MMCACHE_DECODE_WAIT_SECS`).
    pub fn decode_wait(mut self, wait: Duration) -> Self {
        self.config.decode_wait = wait;
        self
    }

    /// Origin connect timeout.
    pub fn origin_connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.origin_connect_timeout = timeout;
        self
    }

    /// Origin overall deadline per fetch.
    pub fn origin_timeout(mut self, timeout: Duration) -> Self {
        self.config.origin_timeout = timeout;
        self
    }

    /// Overall deadline of a load (`MMCACHE_LOAD_TIMEOUT_SECS`); `None` derives it from the
    /// origin timeout, the decode wait and the lease wait (see [`Config::load_timeout`]).
    pub fn load_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.load_timeout = timeout;
        self
    }

    /// Bytes all downloads in flight may hold together (`MMCACHE_DOWNLOAD_MEMORY_BYTES`).
    pub fn download_memory_bytes(mut self, bytes: u64) -> Self {
        self.config.download_memory_bytes = bytes;
        self
    }

    /// Validates and builds. Does no network I/O: the shared cache connects on first use.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for an invalid setting, a refused cache URL or a client that cannot be
    /// built.
    pub fn build(self) -> Result<Loader, ConfigError> {
        let mut config = self.config;
        // The one check `Config::from_lookup` ran too, for the setters' values.
        let checked = config.check(&Default::default())?;
        let download_budget = config.download_budget();
        config.complete(&download_budget);
        let write_memory = crate::write_memory::WriteMemory::new(config.write_allowance_bytes());
        let cached = config.shared_enabled || config.disk_enabled();
        if cached && config.max_file_size_bytes > write_memory.capacity() {
            tracing::warn!(
                largest_written = write_memory.capacity(),
                "images larger than a quarter of MMCACHE_DOWNLOAD_MEMORY_BYTES are downloaded \
                 but never written to the disk tier or the shared cache; raise the budget to \
                 four times DYN_MM_MAX_FILE_SIZE_MB to cache every image"
            );
        }
        let origin = Origin::new(config.origin_config(checked.allowlist, &download_budget))
            .map_err(|e| ConfigError::Origin(e.to_string()))?;
        let shared = match config.shared_cache_config() {
            Some(c) => Some(SharedCache::new(c)?),
            None => None,
        };
        let jpeg = mmcache_decode::select_jpeg_decoder(
            config.jpeg_decoder,
            config.libturbojpeg.as_deref(),
        )
        .map_err(|e| ConfigError::JpegDecoder(e.to_string()))?;
        match (&jpeg.library, &jpeg.fallback_reason) {
            (Some(library), _) => {
                tracing::info!(decoder = jpeg.decoder.as_str(), library = %library.display(), "JPEG decoder");
            }
            (None, Some(reason)) => tracing::warn!(
                decoder = jpeg.decoder.as_str(),
                %reason,
                "libjpeg-turbo did not load; JPEG pixels may differ from Pillow's by a few levels \
                 (install libturbojpeg0, or set MMCACHE_JPEG_DECODER=libjpeg-turbo to require it)"
            ),
            (None, None) => tracing::info!(decoder = jpeg.decoder.as_str(), "JPEG decoder"),
        }
        ::metrics::gauge!(metrics::JPEG_DECODER_INFO.name, "decoder" => jpeg.decoder.as_str())
            .set(1.0);
        if jpeg.decoder == mmcache_decode::JpegDecoder::LibjpegTurbo {
            // Linked in (the wheel) or loaded from a file; only the linked-in one knows its version.
            let linkage = if jpeg.library.is_some() {
                metrics::Linkage::RunTime
            } else {
                metrics::Linkage::Vendored
            }
            .as_str();
            let version = jpeg.libjpeg_turbo_version.unwrap_or("unknown");
            tracing::info!(linkage, version, "libjpeg-turbo");
            ::metrics::gauge!(metrics::LIBJPEG_TURBO_INFO.name, "linkage" => linkage, "version" => version)
                .set(1.0);
        }
        let limits = DecodeLimits::with_max_pixels(config.max_pixels)
            .with_jpeg_decoder(jpeg.decoder)
            .with_formats(config.image_formats)
            .with_layout(config.pixel_layout);
        let budget = DecodeBudget::new(
            config.decode_concurrency,
            config.decode_memory_bytes,
            config.decode_wait,
        );
        let disk = config.disk_cache_config().map(|c| {
            let disk = mmcache_disk_cache::DiskCache::new(c);
            let (wait, now) = crate::config::disk_read_memory(&download_budget);
            disk.set_read_memory(wait, now);
            disk
        });
        let host = config.host_pixels_config().map(|c| {
            let host = mmcache_disk_cache::DiskCache::new(c);
            if host.status().is_enabled() && !crate::config::in_memory(&host.config().dir) {
                tracing::warn!(
                    "MMCACHE_HOST_PIXELS_DIR is not on a memory file system: the host's decoded \
                     pixels are written to a disk (use /dev/shm or a tmpfs)"
                );
            }
            host
        });
        let mut decoded = DecodedCache::with_max_pixels(
            config.decoded_cache_bytes,
            config.decoded_cache_entries,
            config.max_pixels,
        );
        if host.is_some() {
            decoded = decoded.with_host_budget(config.host.max_bytes);
        }
        let decoded = Arc::new(decoded);
        let background: Arc<crate::background::Background> = Default::default();
        let embeddings = crate::embeddings::Embeddings::new(
            &config,
            crate::embeddings::Fleet::new(
                &config,
                &disk,
                &shared,
                (&download_budget, &write_memory),
                &background,
            ),
        );
        let hedge = Arc::new(Hedge::new(config.hedge));
        Ok(Loader {
            tiers: Arc::new(Tiers {
                memory: MemoryStep::new(decoded.clone()),
                inflight: DashMap::new(),
                host: host.map(|host| {
                    HostStep::new(host, limits, &config, &decoded, &background, &write_memory)
                }),
                disk: disk.map(|disk| DiskStep::new(disk, &config, &background, &write_memory)),
                shared: shared.map(|shared| SharedStep::new(shared, &hedge, &config.shared)),
                origin: OriginStep::new(origin, &config),
                decode: DecodeStep::new(limits, budget, decoded),
                write_memory,
                hedge,
                background,
                default_profile: mmcache_decode::DecodeProfile::rgb(config.pixel_layout),
                config,
                metrics: metrics::Handles::new(),
            }),
            embeddings,
        })
    }
}

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;

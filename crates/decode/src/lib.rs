//! Image decoding with hard limits, and the byte-weighted caches that keep decoded results.
//!
//! - [`decode`] sniffs JPEG, PNG, WebP or GIF from the bytes (never from a URL) and returns
//!   the RGB8 pixels of Pillow's `Image.open(b).convert("RGB")`, byte for byte (3 bytes a
//!   pixel, or 4 as Pillow itself stores RGB: [`PixelLayout`]): JPEG through
//!   libjpeg-turbo (loaded at run time, see [`select_jpeg_decoder`]; a pure-Rust decoder
//!   otherwise), PNG row by row, GIF's first frame composed as Pillow composes it, WebP
//!   through `image`.
//! - [`probe`] reads the headers first and refuses, before any allocation, an image over
//!   [`DecodeLimits::max_pixels`] or one whose coded data cannot back its declared size, and
//!   estimates the memory its decode will hold ([`Probe::memory_bytes`]).
//! - [`DecodedCache`] keeps `Arc<DecodedImage>` values in a cache weighed in bytes, keyed by a
//!   blake3 digest of the [`CacheIdentity`](mmcache_scope::CacheIdentity) (so it is
//!   partitioned by scope exactly as the identity is).
//! - [`decode_profiled`] decodes in a [`DecodeProfile`]: an engine's pixels (vLLM's composite
//!   over a background with the EXIF orientation, or the [`Mode`] Pillow opens, as SGLang
//!   keeps it), and hands back, undecoded, what it cannot decode exactly as the engine would.
//! - [`EmbeddingStore`] keeps [`Embedding`] tensors (dtype, shape, aligned bytes, metadata)
//!   keyed by an [`EmbeddingKey`](mmcache_scope::EmbeddingKey); the loader's
//!   `get_or_compute` fills it.
//!
//! This crate knows nothing of HTTP or Redis. Single-flight of concurrent misses lives in the
//! loader, which joins loads of one identity before they reach this cache.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use mmcache_decode::{decode, DecodeLimits, DecodedCache};
//! use mmcache_scope::{CacheIdentity, ContentKey};
//!
//! // A 4×3 RGB PNG, encoded with the `png` crate.
//! let mut png = Vec::new();
//! let mut encoder = png::Encoder::new(&mut png, 4, 3);
//! encoder.set_color(png::ColorType::Rgb);
//! encoder.write_header().unwrap().write_image_data(&[7; 36]).unwrap();
//!
//! let image = Arc::new(decode(&png, &DecodeLimits::default()).unwrap());
//! assert_eq!((image.width(), image.height(), image.pixels().len()), (4, 3, 36));
//!
//! let cache = DecodedCache::new(1 << 20, None);
//! let id = CacheIdentity::unscoped("https://example.com/a.png");
//! cache.insert(&id, image.clone());
//! assert!(Arc::ptr_eq(&cache.get(&id).unwrap(), &image)); // a hit is the same Arc, no copy
//!
//! // Anything that is not a supported raster image is a typed 415.
//! let err = decode(b"<svg/>", &DecodeLimits::default()).unwrap_err();
//! assert_eq!(err.http_status(), 415);
//!
//! // SGLang's pixels: the mode Pillow opens (here RGB, 4 bytes a pixel as Pillow stores it).
//! use mmcache_decode::{decode_profiled, DecodeProfile, Mode};
//! let png = bytes::Bytes::from(png);
//! let original = decode_profiled(&png, &DecodeLimits::default(), &DecodeProfile::sglang()).unwrap();
//! assert_eq!((original.mode(), original.pixels().len()), (Mode::Rgb, 48));
//! ```
//!
//! # Memory accounting
//!
//! Both caches are [`quick_cache`] sync caches: sharded, each shard behind its own read-write
//! lock (a hit takes only a read lock and bumps a counter), with O(1) eviction by a
//! CLOCK-PRO-like policy. That policy is not strict LRU: once the cache is full a new entry
//! starts "cold" and is the first to go unless it is hit again, so a scan of one-off loads
//! cannot flush the entries in use.
//!
//! - An entry weighs its payload (pixel bytes, or an embedding's bytes) plus
//!   [`ENTRY_OVERHEAD_BYTES`]; [`CacheStats::bytes`] and the `*_bytes` gauges report that sum.
//! - The budget bounds the sum of weights. It is split evenly between the shards, each of which
//!   keeps its share, so a value heavier than the whole budget is never stored; nor is one
//!   heavier than 97% of a shard's share, which is why the decoded cache uses no more shards
//!   than keep an image at the default [`DEFAULT_MAX_PIXELS`] admissible in either
//!   [`PixelLayout`] (a 1 GiB budget has two shards of 512 MiB; a budget under about 825 MB
//!   has one).
//! - The entry cap (`max_entries`) is held exactly by charging every entry at least
//!   `budget / (max_entries + 1) + 1` bytes against the budget: `max_entries + 1` entries would
//!   then weigh more than the budget. Only the budget check sees that charge; the stats and
//!   gauges count real weights. With a cap, a mix of many small and a few large entries may
//!   therefore hold fewer of both than either limit alone would allow.

mod cache;
mod convert;
mod decoded_cache;
mod embedding;
mod embedding_assembly;
mod embedding_wire;
mod error;
mod exif;
mod format;
mod gif;
mod image;
mod jpeg;
mod jpeg_choice;
mod layout;
mod limits;
mod meta;
pub mod metrics;
mod mode;
mod native;
mod pixel_entry;
mod png;
mod png_native;
mod profile;
mod profiled;
mod turbo;
mod vllm;
mod webp;

pub use crate::cache::{CacheStats, ENTRY_OVERHEAD_BYTES};
pub use crate::decoded_cache::{DEFAULT_DECODED_CACHE_BYTES, DecodedCache};
pub use crate::embedding::{
    DEFAULT_EMBEDDING_CACHE_BYTES, DType, Embedding, EmbeddingStore, Inserted,
    MAX_EMBEDDING_METADATA_BYTES, TensorError,
};
pub use crate::embedding_assembly::{Assembly, decode_copied};
pub use crate::embedding_wire::{
    DEFAULT_EMBEDDING_CHUNK_BYTES, DEFAULT_EMBEDDING_MAX_VALUE_BYTES, EMBEDDING_FORMAT_VERSION,
    MANIFEST_BYTES, MAX_DIMS, MAX_EMBEDDING_CHUNKS, Manifest, ValueBuf, WireError, WireErrorKind,
    decode_value, encode_value, encoded_len,
};
pub use crate::error::{Error, Result};
pub use crate::format::{ImageFormat, ImageFormats, sniff};
pub use crate::image::{DecodedImage, Probe, Undecoded, decode, decode_probed, probe};
pub use crate::jpeg_choice::{JpegDecoder, JpegDecoderChoice, JpegSelection, select_jpeg_decoder};
pub use crate::layout::PixelLayout;
pub use crate::limits::{DEFAULT_MAX_PIXELS, DecodeLimits};
pub use crate::mode::{Mode, Opened, Transparency};
pub use crate::pixel_entry::{
    ENTRY_ALIGN, EntryError, EntryRead, Verify, from_entry, host_entry_key, to_entry,
};
pub use crate::profile::{ColorPolicy, DecodeProfile, Fallback, Orientation, Variant};
pub use crate::profiled::{decode_as, decode_profiled, encoded, hand_back, memory_for};

/// The modules' layering: the codecs and the shared types below never import the entry
/// points (`image.rs`) or the caches, so `image.rs` only calls down.
#[cfg(test)]
mod layering {
    /// The sources below `image.rs`: none may name it, the caches, or the entry points.
    const BELOW: [(&str, &str); 17] = [
        ("format.rs", include_str!("format.rs")),
        ("layout.rs", include_str!("layout.rs")),
        ("limits.rs", include_str!("limits.rs")),
        ("jpeg_choice.rs", include_str!("jpeg_choice.rs")),
        ("error.rs", include_str!("error.rs")),
        ("gif.rs", include_str!("gif.rs")),
        ("png.rs", include_str!("png.rs")),
        ("jpeg.rs", include_str!("jpeg.rs")),
        ("webp.rs", include_str!("webp.rs")),
        ("turbo.rs", include_str!("turbo.rs")),
        ("vllm.rs", include_str!("vllm.rs")),
        ("mode.rs", include_str!("mode.rs")),
        ("exif.rs", include_str!("exif.rs")),
        ("meta.rs", include_str!("meta.rs")),
        ("png_native.rs", include_str!("png_native.rs")),
        ("convert.rs", include_str!("convert.rs")),
        ("profile.rs", include_str!("profile.rs")),
    ];

    #[test]
    fn codecs_and_shared_types_do_not_import_the_entry_points() {
        for (file, source) in BELOW {
            for line in source.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for upward in [
                    "crate::image",
                    "crate::cache",
                    "crate::decoded_cache",
                    "crate::embedding",
                    "crate::Decode",
                    "crate::Probe",
                    "crate::decode",
                    "crate::probe",
                ] {
                    assert!(!line.contains(upward), "{file} imports upward: {line:?}");
                }
            }
        }
    }
}

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

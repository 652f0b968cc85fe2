//! What a load returns: the image and the tier it came from.

use std::sync::Arc;

use mmcache_decode::DecodedImage;

use crate::error::Result;

mmcache_metrics::label_values! {
    /// Where a load's image came from.
    #[non_exhaustive]
    pub enum Source: "source" {
        /// The decoded-image cache.
        Memory = "memory",
        /// A load of the same identity already in flight in this process.
        Inflight = "inflight",
        /// The host's tier of decoded pixels, mapped from a memory file system.
        Host = "host",
        /// The host's disk tier of encoded bytes.
        Disk = "disk",
        /// The shared cache of encoded bytes.
        Shared = "shared",
        /// The origin over HTTP(S).
        Origin = "origin",
        /// A `data:` URL.
        Data = "data",
    }
}

/// A loaded image and how it was obtained.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Loaded {
    /// The decoded image, shared (a cache hit is the cached `Arc`, no copy).
    pub image: Arc<DecodedImage>,
    /// Where it came from.
    pub source: Source,
    /// Size of the encoded bytes, when this load had them (not for memory hits or joins).
    pub encoded_len: Option<usize>,
}

impl Loaded {
    /// An image decoded from the `encoded_len` bytes a tier (or a `data:` URL) gave.
    pub(crate) fn decoded(image: Arc<DecodedImage>, source: Source, encoded_len: usize) -> Self {
        Self {
            image,
            source,
            encoded_len: Some(encoded_len),
        }
    }
}

/// A load's result, as every tier and every waiter of a load in flight gets it.
pub(crate) type Outcome = Result<Loaded>;

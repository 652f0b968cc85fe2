//! Typed errors of the decode layer.

/// A result with the decode [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why bytes did not become an image.
///
/// Exhaustive on purpose (not `#[non_exhaustive]`), as `mmcache_loader::Error`: a new variant
/// is a breaking change that must come with its mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No bytes at all.
    #[error("empty image data")]
    Empty,
    /// The bytes are not JPEG, PNG, WebP or GIF (SVG, HTML, garbage...).
    #[error("unsupported image format")]
    Unsupported,
    /// A supported format whose data is corrupt or truncated.
    #[error("invalid {format} image: {reason}")]
    Invalid {
        /// The sniffed format.
        format: &'static str,
        /// What the decoder said.
        reason: String,
    },
    /// A valid image that this decoder cannot decode (12-bit or lossless JPEG on
    /// libjpeg-turbo 2, arithmetic coding in the pure-Rust decoder, an unusual layout), or a
    /// failure of the decoder itself. Another worker may decode it: a cache keeps it.
    #[error("unsupported {format} image: {reason}")]
    UnsupportedFeature {
        /// The sniffed format.
        format: &'static str,
        /// What is not supported.
        reason: String,
    },
    /// A supported format this worker does not accept ([`crate::DecodeLimits::formats`]).
    /// Other workers may: a cache keeps the bytes.
    #[error("{format} images are not accepted here")]
    FormatNotAccepted {
        /// The sniffed format.
        format: &'static str,
    },
    /// The header announces more pixels than allowed; nothing was decoded.
    #[error("image of {width}x{height} exceeds the {limit}-pixel limit")]
    TooManyPixels {
        /// Announced width.
        width: u32,
        /// Announced height.
        height: u32,
        /// The limit.
        limit: u64,
    },
    /// The decoder needed more memory than its limit.
    #[error("image needs more memory than the decoder limit")]
    LimitExceeded,
    /// libjpeg-turbo was required (`MMCACHE_JPEG_DECODER=libjpeg-turbo`) and did not load.
    #[error("libjpeg-turbo is not available: {0}")]
    JpegDecoderUnavailable(String),
}

impl Error {
    /// 413 for size limits, 415 for anything that is not a valid supported image.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::TooManyPixels { .. } | Self::LimitExceeded => 413,
            Self::Empty
            | Self::Unsupported
            | Self::Invalid { .. }
            | Self::UnsupportedFeature { .. }
            | Self::FormatNotAccepted { .. } => 415,
            Self::JpegDecoderUnavailable(_) => 500,
        }
    }

    /// True when the bytes are not a valid image of a supported format (empty, unsupported,
    /// corrupt or truncated): what a cache may delete. Limits are not: other workers may have
    /// other limits.
    pub fn is_not_an_image(&self) -> bool {
        // UnsupportedFeature and FormatNotAccepted are deliberately absent: another decoder,
        // or a worker accepting that format, may read those bytes.
        matches!(self, Self::Empty | Self::Unsupported | Self::Invalid { .. })
    }

    /// True for the pixel and memory limits.
    pub fn is_too_large(&self) -> bool {
        matches!(self, Self::TooManyPixels { .. } | Self::LimitExceeded)
    }
}

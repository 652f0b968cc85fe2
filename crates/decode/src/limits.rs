//! The limits and choices every decode is given: the pixel cap, the JPEG decoder, the formats
//! accepted and the pixel layout.

use crate::format::ImageFormats;
use crate::jpeg_choice::JpegDecoder;
use crate::layout::PixelLayout;
use crate::turbo;

/// Default pixel limit: 100 megapixels.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;
/// Limits and choices applied to every decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeLimits {
    /// Largest `width * height` accepted, checked from the header before decoding.
    /// Default [`DEFAULT_MAX_PIXELS`].
    pub max_pixels: u64,
    /// The JPEG decoder. Default: libjpeg-turbo when it loads, else the pure-Rust one.
    pub jpeg: JpegDecoder,
    /// The formats accepted. Default [`ImageFormats::ALL`].
    pub formats: ImageFormats,
    /// How the decoded pixels are laid out. Default [`PixelLayout::Rgb`].
    pub layout: PixelLayout,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_pixels: DEFAULT_MAX_PIXELS,
            jpeg: if turbo::active().is_some() {
                JpegDecoder::LibjpegTurbo
            } else {
                JpegDecoder::PureRust
            },
            formats: ImageFormats::ALL,
            layout: PixelLayout::Rgb,
        }
    }
}

impl DecodeLimits {
    /// Default limits with the given pixel cap.
    pub fn with_max_pixels(max_pixels: u64) -> Self {
        Self {
            max_pixels,
            ..Self::default()
        }
    }

    /// These limits with another JPEG decoder.
    pub fn with_jpeg_decoder(self, jpeg: JpegDecoder) -> Self {
        Self { jpeg, ..self }
    }

    /// These limits accepting only `formats`.
    pub fn with_formats(self, formats: ImageFormats) -> Self {
        Self { formats, ..self }
    }

    /// These limits decoding to `layout`.
    pub fn with_layout(self, layout: PixelLayout) -> Self {
        Self { layout, ..self }
    }
}

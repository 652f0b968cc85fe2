//! Sniffing and bounded decoding to RGB8.

use std::io::Cursor;

use image::{DynamicImage, ImageReader};

use crate::error::{Error, Result};

/// Default pixel limit: 100 megapixels.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// A raster format mmcache decodes, sniffed from the bytes (never from the URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ImageFormat {
    /// JPEG (baseline and progressive, CMYK included).
    Jpeg,
    /// PNG (any bit depth and colour type).
    Png,
    /// WebP (lossy and lossless).
    WebP,
    /// GIF (first frame).
    Gif,
}

impl ImageFormat {
    /// Lowercase name, for metric labels and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jpeg => "jpeg",
            Self::Png => "png",
            Self::WebP => "webp",
            Self::Gif => "gif",
        }
    }

    fn to_image(self) -> image::ImageFormat {
        match self {
            Self::Jpeg => image::ImageFormat::Jpeg,
            Self::Png => image::ImageFormat::Png,
            Self::WebP => image::ImageFormat::WebP,
            Self::Gif => image::ImageFormat::Gif,
        }
    }
}

/// Identifies the format from the magic bytes.
pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    match bytes {
        [0xff, 0xd8, 0xff, ..] => Some(ImageFormat::Jpeg),
        [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => Some(ImageFormat::Png),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some(ImageFormat::WebP),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some(ImageFormat::Gif),
        _ => None,
    }
}

/// Limits applied to every decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeLimits {
    /// Largest `width * height` accepted, checked from the header before decoding.
    /// Default [`DEFAULT_MAX_PIXELS`].
    pub max_pixels: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

impl DecodeLimits {
    /// Limits with the given pixel cap.
    pub fn with_max_pixels(max_pixels: u64) -> Self {
        Self { max_pixels }
    }
}

/// A decoded RGB8 image: `width * height * 3` bytes, row-major, no padding.
#[derive(Clone, PartialEq, Eq)]
pub struct DecodedImage {
    width: u32,
    height: u32,
    format: ImageFormat,
    pixels: Vec<u8>,
}

impl std::fmt::Debug for DecodedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedImage")
            .field("width", &self.width)
            .field("height", &self.height)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl DecodedImage {
    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The format the bytes were in.
    pub fn format(&self) -> ImageFormat {
        self.format
    }

    /// The RGB8 pixels, borrowed (no copy).
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// Size of the pixel buffer in bytes.
    pub fn byte_len(&self) -> usize {
        self.pixels.len()
    }

    /// Takes the pixel buffer.
    pub fn into_pixels(self) -> Vec<u8> {
        self.pixels
    }
}

/// Sniffs, checks the announced size against `limits`, then decodes to RGB8.
///
/// # Errors
///
/// [`Error::Empty`], [`Error::Unsupported`] (not a supported raster format),
/// [`Error::Invalid`] (corrupt or truncated), [`Error::TooManyPixels`] (refused from the
/// header, before any pixel is decoded), [`Error::LimitExceeded`].
pub fn decode(bytes: &[u8], limits: &DecodeLimits) -> Result<DecodedImage> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    let format = sniff(bytes).ok_or(Error::Unsupported)?;
    let invalid = |e: image::ImageError| match e {
        image::ImageError::Limits(_) => Error::LimitExceeded,
        other => Error::Invalid {
            format: format.as_str(),
            reason: other.to_string(),
        },
    };

    let (width, height) = ImageReader::with_format(Cursor::new(bytes), format.to_image())
        .into_dimensions()
        .map_err(invalid)?;
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_pixels {
        return Err(Error::TooManyPixels {
            width,
            height,
            limit: limits.max_pixels,
        });
    }
    if pixels == 0 {
        return Err(Error::Invalid {
            format: format.as_str(),
            reason: "zero-sized image".into(),
        });
    }
    if format == ImageFormat::Jpeg && !jpeg_has_end(bytes) {
        // zune-jpeg pads a truncated scan with grey instead of failing; refuse it here.
        return Err(Error::Invalid {
            format: "jpeg",
            reason: "truncated (no end of image)".into(),
        });
    }

    let mut reader = ImageReader::with_format(Cursor::new(bytes), format.to_image());
    let mut decoder_limits = image::Limits::default();
    decoder_limits.max_image_width = Some(width);
    decoder_limits.max_image_height = Some(height);
    // Widest intermediate: 16-bit RGBA (8 bytes a pixel), plus slack for decoder tables.
    decoder_limits.max_alloc = Some(pixels.saturating_mul(8).saturating_add(64 << 20));
    reader.limits(decoder_limits);
    let decoded: DynamicImage = reader.decode().map_err(invalid)?;
    let rgb = decoded.into_rgb8(); // no copy when already RGB8
    Ok(DecodedImage {
        width,
        height,
        format,
        pixels: rgb.into_raw(),
    })
}

/// True when an end-of-image marker follows the last start-of-scan marker. Inside
/// entropy-coded data every 0xFF is stuffed, so neither marker can appear by accident.
fn jpeg_has_end(bytes: &[u8]) -> bool {
    let last_sos = bytes.windows(2).rposition(|w| w == [0xff, 0xda]);
    match last_sos {
        Some(i) => bytes[i..].windows(2).any(|w| w == [0xff, 0xd9]),
        None => false,
    }
}

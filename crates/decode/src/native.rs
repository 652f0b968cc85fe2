//! Every format in the mode Pillow opens it in ([`Raster`]), and what Pillow opened, told
//! from the headers before decoding where it can be.

use crate::error::{Error, Result};
use crate::format::{ImageFormat, refusal};
use crate::image::{Headers, Probe, decode_dynamic};
use crate::jpeg_choice::JpegDecoder;
use crate::layout::{PixelLayout, rgb_into};
use crate::limits::DecodeLimits;
use crate::mode::{Mode, Opened, Raster};
use crate::{gif, png_native, turbo};

/// The image as Pillow opens it, RGB in `layout`.
pub(crate) fn raster(
    bytes: &[u8],
    probe: &Probe,
    limits: &DecodeLimits,
    layout: PixelLayout,
) -> Result<Raster> {
    let plain = |mode, pixels| Raster {
        mode,
        pixels,
        palette: None,
        transparency: None,
        unlike_pillow: None,
    };
    match probe.headers {
        Headers::Jpeg(h) if limits.jpeg == JpegDecoder::LibjpegTurbo => {
            let turbo = turbo::active().ok_or_else(|| {
                Error::JpegDecoderUnavailable("libjpeg-turbo is not loaded".into())
            })?;
            let mode = jpeg_mode(h.components);
            let pixels = turbo
                .decode_native(
                    bytes,
                    probe.width,
                    probe.height,
                    h.components,
                    layout.bytes_per_pixel(),
                )
                .map_err(|e| crate::image::turbo_error(probe.format, e))?;
            Ok(plain(mode, pixels))
        }
        Headers::Jpeg(h) if h.components == 3 => {
            let rgb = decode_dynamic(bytes, probe)?.into_rgb8().into_raw();
            Ok(plain(Mode::Rgb, rgb_into(rgb, layout)))
        }
        Headers::Jpeg(_) => Err(refusal(
            ImageFormat::Jpeg,
            "unsupported: grey and CMYK JPEG in their own mode need libjpeg-turbo".into(),
        )),
        Headers::Png(h) => png_native::decode_native(bytes, &h, probe.memory_bytes, layout),
        Headers::Gif(h) => gif::decode_native(bytes, &h),
        Headers::Other => {
            let decoded = decode_dynamic(bytes, probe)?;
            if webp_has_alpha(bytes) {
                Ok(plain(Mode::Rgba, decoded.into_rgba8().into_raw()))
            } else {
                let rgb = decoded.into_rgb8().into_raw();
                Ok(plain(Mode::Rgb, rgb_into(rgb, layout)))
            }
        }
    }
}

/// The mode Pillow opens a JPEG of `components` components in.
fn jpeg_mode(components: u8) -> Mode {
    match components {
        1 => Mode::L,
        4 => Mode::Cmyk,
        _ => Mode::Rgb,
    }
}

/// What Pillow opens, from the headers alone; `None` when only the decode can tell.
pub(crate) fn opened(bytes: &[u8], probe: &Probe) -> Option<Opened> {
    let (mode, transparent) = match probe.headers {
        Headers::Jpeg(h) => (jpeg_mode(h.components), false),
        Headers::Png(_) => png_native::opened(bytes)?,
        Headers::Gif(_) => gif::opened(bytes)?,
        Headers::Other if webp_has_alpha(bytes) => (Mode::Rgba, true),
        Headers::Other => (Mode::Rgb, false),
    };
    Some(Opened { mode, transparent })
}

/// Whether Pillow opens a WebP as RGBA: libwebp's demuxer reports alpha from the VP8X flags
/// of an extended file, from the header bit of a simple lossless one, and never for a simple
/// lossy one.
pub(crate) fn webp_has_alpha(bytes: &[u8]) -> bool {
    match bytes.get(12..16) {
        Some(b"VP8X") => bytes.get(20).is_some_and(|flags| flags & 0x10 != 0),
        // The VP8L header: signature 0x2f, then 14 + 14 bits of size and the alpha bit.
        Some(b"VP8L") => bytes.get(24).is_some_and(|b| b & 0x10 != 0),
        _ => false,
    }
}

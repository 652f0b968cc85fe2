//! The decode a [`DecodeProfile`] asks for: one decision, made here, between the RGB decode,
//! the original mode, vLLM's composite, the orientation, and handing the bytes back.

use std::sync::Arc;

use bytes::Bytes;

use crate::convert::{composite, to_rgba};
use crate::error::{Error, Result};
use crate::exif::{self, oriented_size, transpose};
use crate::format::sniff;
use crate::image::{DecodedImage, Details, Probe, Undecoded, decode_probed, probe};
use crate::layout::PixelLayout;
use crate::limits::DecodeLimits;
use crate::meta::{self, Meta};
use crate::mode::{Mode, Opened};
use crate::native;
use crate::profile::{ColorPolicy, DecodeProfile, Fallback, Orientation};

/// Probes and decodes `bytes` as `profile` asks, and hands refusals back as the profile
/// says ([`hand_back`]): [`probe`], [`decode_as`] and [`hand_back`] in one call, for a caller
/// that reserves no memory between the probe and the decode.
///
/// # Errors
///
/// As [`decode_as`] and [`hand_back`].
pub fn decode_profiled(
    bytes: &Bytes,
    limits: &DecodeLimits,
    profile: &DecodeProfile,
) -> Result<DecodedImage> {
    if profile.color == ColorPolicy::Encoded {
        return Ok(encoded(bytes));
    }
    let limits = limits.with_layout(profile.layout);
    probe(bytes, &limits)
        .and_then(|p| decode_as(bytes, &p, &limits, profile))
        .or_else(|e| hand_back(bytes.clone(), e, profile))
}

/// Decodes `bytes`, which [`probe`](crate::probe) accepted with `limits`, as `profile` asks.
/// `limits.layout` is ignored: the profile's layout is used.
///
/// With [`Fallback::Caller`], what this crate cannot decode exactly as the profile's engine
/// would comes back undecoded ([`Mode::Undecoded`], [`Undecoded::NotHere`]); decoder
/// refusals are still errors here (see [`hand_back`], which the caller applies to them).
///
/// # Errors
///
/// As [`decode`](crate::decode); with [`Fallback::Error`], also
/// [`Error::UnsupportedFeature`] for what the profile cannot be followed through.
pub fn decode_as(
    bytes: &Bytes,
    probe: &Probe,
    limits: &DecodeLimits,
    profile: &DecodeProfile,
) -> Result<DecodedImage> {
    let rgb_limits = limits.with_layout(profile.layout);
    if profile.color == ColorPolicy::Encoded {
        return Ok(encoded(bytes));
    }
    if *profile == DecodeProfile::rgb(profile.layout) {
        return decode_probed(bytes, probe, &rgb_limits);
    }
    let format = probe.format;
    let not_here = |why: &str| match profile.fallback {
        Fallback::Caller => Ok(DecodedImage::undecoded_from(
            bytes.clone(),
            Undecoded::NotHere(why.to_owned()),
        )),
        Fallback::Error => Err(Error::UnsupportedFeature {
            format: format.as_str(),
            reason: why.to_owned(),
        }),
    };
    let original = profile.color == ColorPolicy::Original;
    let meta = if original || profile.orientation == Orientation::Exif {
        meta::read(format, bytes)
    } else {
        Meta::default()
    };
    let orientation = match (profile.orientation, meta.orientation()) {
        (Orientation::AsStored, _) => 1,
        (Orientation::Exif, exif::Orientation::Value(v)) => v,
        (Orientation::Exif, exif::Orientation::Unsure(why)) => return not_here(why),
    };
    if let (true, Some(why)) = (original, meta.unsure) {
        return not_here(why);
    }
    let (pixels, details) = match profile.color {
        ColorPolicy::Rgb => {
            let image = decode_probed(bytes, probe, &rgb_limits)?;
            (image.into_pixels(), details(Mode::Rgb, None))
        }
        ColorPolicy::RgbOver { background } => {
            match native::opened(bytes, probe) {
                // Nothing to composite: Pillow's `convert("RGB")` (or no conversion at all).
                Some(opened) if !opened.transparent => {
                    let image = decode_probed(bytes, probe, &rgb_limits)?;
                    (image.into_pixels(), details(Mode::Rgb, Some(opened)))
                }
                _ => {
                    let raster = native::raster(bytes, probe, limits, PixelLayout::Rgbx)?;
                    let opened = native::opened(bytes, probe).unwrap_or(Opened {
                        mode: raster.mode,
                        transparent: raster.mode.has_alpha() || raster.transparency.is_some(),
                    });
                    if !opened.transparent {
                        // Only the decode could tell (a GIF whose blocks do not walk).
                        let image = decode_probed(bytes, probe, &rgb_limits)?;
                        (image.into_pixels(), details(Mode::Rgb, Some(opened)))
                    } else {
                        let mode = raster.mode;
                        let Some(rgba) = to_rgba(raster) else {
                            return not_here(&format!("the RGBA conversion of a {mode} image"));
                        };
                        let rgb = composite(&rgba, background, profile.layout);
                        (rgb, details(Mode::Rgb, Some(opened)))
                    }
                }
            }
        }
        ColorPolicy::Encoded => return Ok(encoded(bytes)),
        ColorPolicy::Original => {
            let raster = native::raster(bytes, probe, limits, profile.layout)?;
            if let Some(why) = raster.unlike_pillow {
                return not_here(why);
            }
            let opened = Opened {
                mode: raster.mode,
                transparent: raster.mode.has_alpha() || raster.transparency.is_some(),
            };
            let mut d = details(raster.mode, Some(opened));
            d.palette = raster.palette;
            d.transparency = raster.transparency;
            // What Pillow's info holds; after a transpose, Pillow rewrites the EXIF without
            // its orientation, which is not reproduced: none is given then.
            if !(2..=8).contains(&orientation) {
                d.exif = meta.exif.map(Arc::from);
                d.xmp = meta.xmp.map(Arc::from);
            }
            (raster.pixels, d)
        }
    };
    let bpp = details.mode.bytes_per_pixel(profile.layout);
    let pixels = transpose(pixels, probe.width, probe.height, bpp, orientation);
    let (width, height) = oriented_size(orientation, probe.width, probe.height);
    let mut image = DecodedImage::new(
        width,
        height,
        format,
        profile.layout,
        probe.content_key,
        pixels,
    )
    .with_details(Details {
        orientation: if (2..=8).contains(&orientation) {
            orientation
        } else {
            1
        },
        ..details
    });
    image.set_encoded_len(bytes.len());
    Ok(if profile.keep_source {
        image.with_source(bytes.clone())
    } else {
        image
    })
}

/// Bytes a decode of `probe`'s image in `profile` may hold at its peak: the probe's estimate
/// for the default profile; for another, room for two more 4-byte copies of the pixels (the
/// original mode's raster beside its RGBA conversion and vLLM's composite, or an image beside
/// its transposed copy). What a caller reserves in its decode budget.
pub fn memory_for(probe: &Probe, profile: &DecodeProfile) -> u64 {
    if *profile == DecodeProfile::rgb(profile.layout) || profile.color == ColorPolicy::Encoded {
        return probe.memory_bytes;
    }
    let pixels = u64::from(probe.width) * u64::from(probe.height);
    probe.memory_bytes.saturating_add(pixels.saturating_mul(8))
}

/// `bytes`, undecoded as [`ColorPolicy::Encoded`] asks.
pub fn encoded(bytes: &Bytes) -> DecodedImage {
    DecodedImage::undecoded_from(
        bytes.clone(),
        Undecoded::NotHere("not decoded: the profile asks for the encoded bytes".into()),
    )
}

fn details(mode: Mode, opened: Option<Opened>) -> Details {
    Details {
        mode,
        opened: opened.unwrap_or(Opened {
            mode,
            transparent: false,
        }),
        orientation: 1,
        palette: None,
        transparency: None,
        exif: None,
        xmp: None,
    }
}

/// What becomes of `error`, a refusal of `bytes` by [`probe`](crate::probe) or a decode,
/// under `profile`: with [`Fallback::Caller`], the bytes come back undecoded, unless the
/// refusal is a limit of this worker's (pixels, memory), a format the worker does not accept,
/// or a missing decoder. Otherwise the error stands.
///
/// Bytes of an image format this crate does not decode (TIFF, BMP, ...) come back as
/// [`Undecoded::NotHere`] (a cache may keep them); every other refusal as
/// [`Undecoded::Refused`].
///
/// # Errors
///
/// `error`, when it stands.
pub fn hand_back(bytes: Bytes, error: Error, profile: &DecodeProfile) -> Result<DecodedImage> {
    if profile.fallback != Fallback::Caller {
        return Err(error);
    }
    let why = match &error {
        Error::TooManyPixels { .. }
        | Error::LimitExceeded
        | Error::FormatNotAccepted { .. }
        | Error::JpegDecoderUnavailable(_) => return Err(error),
        Error::Unsupported if sniff(&bytes).is_none() => match other_image_format(&bytes) {
            Some(name) => Undecoded::NotHere(format!("{name} is not decoded here")),
            None => Undecoded::Refused(error),
        },
        _ => Undecoded::Refused(error),
    };
    Ok(DecodedImage::undecoded_from(bytes, why))
}

/// The raster formats Pillow opens that this crate does not decode, by their signature.
fn other_image_format(bytes: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, magic: &[u8]| bytes.get(offset..offset + magic.len()) == Some(magic);
    Some(match bytes {
        [b'I', b'I', 0x2a, 0, ..] | [b'M', b'M', 0, 0x2a, ..] => "TIFF",
        [b'B', b'M', ..] if bytes.len() > 26 => "BMP",
        [0, 0, 1 | 2, 0, ..] if bytes.len() > 6 => "ICO",
        [b'q', b'o', b'i', b'f', ..] => "QOI",
        [b'8', b'B', b'P', b'S', ..] => "PSD",
        [0xff, 0x4f, 0xff, 0x51, ..] => "JPEG 2000",
        [b'D', b'D', b'S', b' ', ..] => "DDS",
        [b'i', b'c', b'n', b's', ..] => "ICNS",
        [b'P', b'1'..=b'6', ..] => "PPM",
        _ if at(4, b"jP  \r\n\x87\n") => "JPEG 2000",
        _ if at(4, b"ftypavif") || at(4, b"ftypavis") => "AVIF",
        _ => return None,
    })
}

//! PNG in the mode Pillow opens it in (`PngImagePlugin._MODES`), stored as Pillow stores it,
//! with the palette and the `transparency` Pillow reads from PLTE and tRNS.
//!
//! | colour type, depth | mode | stored |
//! |---|---|---|
//! | grey 1 | `1` | 0 or 255 |
//! | grey 2, 4, 8 | `L` | scaled to 8 bits (×85, ×17) |
//! | grey 16 | `I;16` | little-endian |
//! | RGB 8, 16 | `RGB` | the high byte of 16-bit samples |
//! | palette 1, 2, 4, 8 | `P` | the index |
//! | grey+alpha 8 | `LA` | L, L, L, A |
//! | grey+alpha 16 | `RGBA` | L, L, L, A (high bytes) |
//! | RGBA 8, 16 | `RGBA` | high bytes |
//!
//! tRNS is read as Pillow reads it, from the chunk itself: a palette's alphas (one fully
//! transparent entry among opaque ones is an index), a grey or RGB value as the 16-bit numbers
//! of the chunk (Pillow compares them with the 8-bit stored values). Pillow ignores tRNS on
//! an image with alpha.

use std::io::Cursor;
use std::sync::Arc;

use png::{BitDepth, ColorType, Transformations};

use crate::error::Error;
use crate::format::{ImageFormat, refusal};
use crate::layout::PixelLayout;
use crate::mode::{Mode, Raster, Transparency};
use crate::png::PngHeader;

/// PLTE and the last tRNS, from the chunks themselves.
fn palette_and_trns(bytes: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let (mut plte, mut trns) = (None, None);
    let mut at = 8;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(data) = bytes.get(at + 8..(at + 8).saturating_add(len)) else {
            break;
        };
        match &head[4..8] {
            b"PLTE" if plte.is_none() => plte = Some(data),
            b"tRNS" => trns = Some(data),
            b"IEND" => break,
            _ => {}
        }
        at += 8 + len + 4;
    }
    (plte, trns)
}

/// Pillow's `_simple_palette` (`^\xff*\x00\xff*$`): one 0 among 255s, where `$` also matches
/// before a final newline.
fn simple_palette(alphas: &[u8]) -> Option<u8> {
    let body = match alphas.strip_suffix(b"\n") {
        Some(body) if !is_simple(alphas) => body,
        _ => alphas,
    };
    if !is_simple(body) {
        return None;
    }
    alphas.iter().position(|&a| a == 0).map(|i| i as u8)
}

fn is_simple(alphas: &[u8]) -> bool {
    alphas.iter().filter(|&&a| a == 0).count() == 1 && alphas.iter().all(|&a| a == 0 || a == 255)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Pillow's `transparency` for the image's tRNS, `Err` for a tRNS Pillow refuses (too short).
fn transparency(
    mode: Mode,
    color: ColorType,
    trns: Option<&[u8]>,
) -> Result<Option<Transparency>, Error> {
    let Some(t) = trns else { return Ok(None) };
    let short = || refusal(ImageFormat::Png, "truncated tRNS chunk".into());
    Ok(match color {
        ColorType::Indexed => Some(match simple_palette(t) {
            Some(i) => Transparency::Index(i),
            // Pillow finds no 0 in an all-opaque simple match: no transparency at all.
            None if is_simple(t) => return Ok(None),
            None => Transparency::Alphas(Arc::from(t)),
        }),
        ColorType::Grayscale if t.len() < 2 => return Err(short()),
        ColorType::Grayscale if mode == Mode::One => {
            Some(Transparency::Grey(if be16(t, 0) != 0 { 255 } else { 0 }))
        }
        ColorType::Grayscale => Some(Transparency::Grey(be16(t, 0))),
        ColorType::Rgb if t.len() < 6 => return Err(short()),
        ColorType::Rgb => Some(Transparency::Rgb([be16(t, 0), be16(t, 2), be16(t, 4)])),
        _ => None,
    })
}

/// The mode Pillow opens a PNG of `color` and `depth` in.
fn mode_of(color: ColorType, depth: BitDepth) -> Mode {
    match (color, depth) {
        (ColorType::Grayscale, BitDepth::One) => Mode::One,
        (ColorType::Grayscale, BitDepth::Sixteen) => Mode::I16,
        (ColorType::Grayscale, _) => Mode::L,
        (ColorType::Rgb, _) => Mode::Rgb,
        (ColorType::Indexed, _) => Mode::P,
        (ColorType::GrayscaleAlpha, BitDepth::Eight) => Mode::La,
        (ColorType::GrayscaleAlpha, _) | (ColorType::Rgba, _) => Mode::Rgba,
    }
}

/// The mode and transparency Pillow opens `bytes` with, without decoding (for a profile that
/// needs to know whether the image is transparent before it decodes).
pub(crate) fn opened(bytes: &[u8]) -> Option<(Mode, bool)> {
    let ihdr = bytes.get(16..29)?;
    let depth = BitDepth::from_u8(ihdr[8])?;
    let color = ColorType::from_u8(ihdr[9])?;
    let mode = mode_of(color, depth);
    let has_trns = matches!(
        color,
        ColorType::Grayscale | ColorType::Rgb | ColorType::Indexed
    ) && palette_and_trns(bytes).1.is_some();
    Some((mode, mode.has_alpha() || has_trns))
}

/// Decodes to Pillow's mode and storage (`layout` for RGB), within `memory` bytes.
pub(crate) fn decode_native(
    bytes: &[u8],
    header: &PngHeader,
    memory: u64,
    layout: PixelLayout,
) -> Result<Raster, Error> {
    let failed = |e: png::DecodingError| match e {
        png::DecodingError::LimitsExceeded => Error::LimitExceeded,
        other => refusal(ImageFormat::Png, other.to_string()),
    };
    let limits = png::Limits {
        bytes: usize::try_from(memory).unwrap_or(usize::MAX),
    };
    let mut decoder = png::Decoder::new_with_limits(Cursor::new(bytes), limits);
    decoder.set_ignore_text_chunk(true);
    decoder.set_ignore_iccp_chunk(true);
    decoder.set_transformations(Transformations::IDENTITY);
    let mut reader = decoder.read_info().map_err(failed)?;
    let info = reader.info();
    let (color, depth, interlaced) = (info.color_type, info.bit_depth, info.interlaced);
    let mode = mode_of(color, depth);
    let (plte, trns) = palette_and_trns(bytes);
    let transparency = transparency(mode, color, trns)?;
    let palette = (color == ColorType::Indexed)
        .then(|| plte.map(Arc::from))
        .flatten();
    let bpp = mode.bytes_per_pixel(layout);
    let (width, height) = (header.width as usize, header.height as usize);
    let line_len = width * bpp;
    let fill = if bpp == 4 && mode == Mode::Rgb {
        255
    } else {
        0
    };
    let mut out = vec![fill; line_len * height];
    let unpack = |row: &[u8], out: &mut [u8]| unpack(row, out, color, depth, bpp);
    if !interlaced {
        let mut row = vec![0u8; reader.output_line_size(header.width).unwrap_or(0)];
        for line in out.chunks_exact_mut(line_len) {
            reader
                .read_row(&mut row)
                .map_err(failed)?
                .ok_or_else(|| refusal(ImageFormat::Png, "truncated: fewer rows".into()))?;
            unpack(&row, line);
        }
    } else {
        let mut pass = Vec::new();
        while let Some(row) = reader.next_interlaced_row().map_err(failed)? {
            let png::InterlaceInfo::Adam7(info) = row.interlace() else {
                return Err(refusal(ImageFormat::Png, "interlacing changed".into()));
            };
            // The pass's pixels (of a sub-byte depth: also the padding bits, which the
            // expansion leaves unread).
            let n = row.data().len() * 8 / (color.samples() * depth as usize);
            pass.clear();
            pass.resize(n * bpp, fill);
            unpack(row.data(), &mut pass);
            png::expand_interlaced_row(&mut out, line_len, &pass, info, bpp as u8 * 8);
        }
    }
    Ok(Raster {
        mode,
        pixels: out,
        palette,
        transparency,
        unlike_pillow: None,
    })
}

/// One row of raw samples into Pillow's storage, `bpp` bytes a pixel.
fn unpack(row: &[u8], out: &mut [u8], color: ColorType, depth: BitDepth, bpp: usize) {
    let bits = depth as usize;
    let n = out.len() / bpp;
    match (color, depth) {
        (
            ColorType::Grayscale | ColorType::Indexed,
            BitDepth::One | BitDepth::Two | BitDepth::Four,
        ) => {
            let mask = (1u8 << bits) - 1;
            let scale = match (color, depth) {
                (ColorType::Indexed, _) => 1,
                (_, BitDepth::One) => 255,
                (_, BitDepth::Two) => 0x55,
                _ => 0x11,
            };
            for (i, o) in out.iter_mut().enumerate().take(n) {
                let bit = i * bits;
                let v = (row[bit / 8] >> (8 - bits - bit % 8)) & mask;
                *o = v * scale;
            }
        }
        (ColorType::Grayscale | ColorType::Indexed, BitDepth::Eight) => {
            out.copy_from_slice(&row[..n])
        }
        (ColorType::Grayscale, _) => {
            for (px, o) in row.chunks_exact(2).zip(out.chunks_exact_mut(2)) {
                o.copy_from_slice(&[px[1], px[0]]); // big-endian file, little-endian I;16
            }
        }
        (ColorType::Rgb, _) => {
            let step = 3 * bits / 8;
            for (px, o) in row.chunks_exact(step).zip(out.chunks_exact_mut(bpp)) {
                let s = bits / 8; // the high byte of each sample
                o[..3].copy_from_slice(&[px[0], px[s], px[2 * s]]);
            }
        }
        (ColorType::GrayscaleAlpha, _) => {
            let s = bits / 8;
            for (px, o) in row.chunks_exact(2 * s).zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&[px[0], px[0], px[0], px[s]]);
            }
        }
        (ColorType::Rgba, _) => {
            let s = bits / 8;
            for (px, o) in row.chunks_exact(4 * s).zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&[px[0], px[s], px[2 * s], px[3 * s]]);
            }
        }
        (ColorType::Indexed, BitDepth::Sixteen) => {} // not a valid PNG: the decoder refuses it
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_palettes_are_pillows() {
        assert_eq!(simple_palette(b"\xff\x00\xff"), Some(1));
        assert_eq!(simple_palette(b"\x00"), Some(0));
        assert_eq!(simple_palette(b"\xff\x00\x0b"), None);
        assert_eq!(simple_palette(b"\x00\n\n"), None);
        // `$` before a final newline: the newline is not an alpha Pillow sees.
        assert_eq!(simple_palette(b"\xff\x00\n"), Some(1));
        assert_eq!(simple_palette(b"\x00\x00"), None);
        assert_eq!(simple_palette(b"\x80"), None);
        assert!(is_simple(b"\xff\x00") && !is_simple(b"\xff\xff"));
    }
}

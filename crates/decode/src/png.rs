//! PNG: a chunk walk that refuses what cannot be an image before any allocation, then a
//! row-by-row decode straight into the RGB8 output, with Pillow's conversions.
//!
//! Rows go through one row buffer, so a 16-bit RGBA image costs its RGB8 output and no 8-byte
//! per pixel intermediate. Text and ICC chunks are skipped unread: a few hundred kilobytes of
//! zTXt or iCCP can otherwise inflate to hundreds of megabytes.

use std::io::Cursor;

use png::{BitDepth, ColorType, Transformations};

use crate::error::Error;
use crate::format::{ImageFormat, refusal};
use crate::layout::put_rgb;

/// What the chunks of a PNG say, before decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PngHeader {
    pub(crate) width: u32,
    pub(crate) height: u32,
}

impl PngHeader {
    /// Peak bytes of the decode: the output (`bpp` bytes a pixel) plus row buffers and the
    /// inflater's window.
    pub(crate) fn decode_bytes(&self, bpp: u64) -> u64 {
        let pixels = u64::from(self.width) * u64::from(self.height);
        pixels * bpp + u64::from(self.width) * 8 * 4 + (1 << 20)
    }
}

/// Deflate cannot expand data by more than 1032:1 (a 258-byte match per 2 bits, at best).
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Walks the chunks: IHDR first, every length inside the file, IDAT present and large enough
/// to inflate to the rows IHDR declares. Checksums are left to the decoder.
/// Like the JPEG walk, data that cannot back the header is reported beside it.
pub(crate) fn inspect(bytes: &[u8]) -> Result<(PngHeader, Option<String>), String> {
    let mut at = 8; // signature, already sniffed
    let mut ihdr: Option<(u32, u32, u8, u8, u8)> = None;
    let mut idat_bytes: u64 = 0;
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data_end = at + 8 + len;
        if len > (1 << 31) || data_end + 4 > bytes.len() {
            return Err(format!(
                "truncated: chunk {} runs past the end",
                String::from_utf8_lossy(kind)
            ));
        }
        let data = &bytes[at + 8..data_end];
        match kind {
            b"IHDR" => {
                if ihdr.is_some() || at != 8 || len != 13 {
                    return Err("bad IHDR".into());
                }
                let w = u32::from_be_bytes(data[0..4].try_into().expect("4 bytes"));
                let h = u32::from_be_bytes(data[4..8].try_into().expect("4 bytes"));
                ihdr = Some((w, h, data[8], data[9], data[12]));
            }
            b"IDAT" => idat_bytes += len as u64,
            b"IEND" => break,
            _ => {}
        }
        at = data_end + 4;
    }
    let (width, height, depth, color, interlace) = ihdr.ok_or("no IHDR")?;
    if width == 0 || height == 0 {
        return Err("zero-sized image".into());
    }
    let channels: u64 = match color {
        0 | 3 => 1,
        2 => 3,
        4 => 2,
        6 => 4,
        _ => return Err(format!("bad colour type {color}")),
    };
    if !matches!(depth, 1 | 2 | 4 | 8 | 16) {
        return Err(format!("bad bit depth {depth}"));
    }
    // Bytes the rows inflate to, counting one filter byte a row (a non-interlaced lower bound
    // for interlaced files too, whose passes add filter bytes).
    let bits_per_pixel = channels * u64::from(depth);
    // Saturating: a header's dimensions go up to 2^32 - 1 each, whose rows overflow a u64.
    let raw = u64::from(height).saturating_mul(1 + (u64::from(width) * bits_per_pixel).div_ceil(8));
    if interlace > 1 {
        return Err(format!("bad interlace method {interlace}"));
    }
    let unbacked = (idat_bytes.saturating_mul(MAX_DEFLATE_RATIO) < raw).then(|| {
        format!(
            "truncated: {width}x{height} needs {raw} bytes of rows, {idat_bytes} compressed bytes cannot hold them"
        )
    });
    Ok((PngHeader { width, height }, unbacked))
}

/// Decodes to RGB8 as Pillow's `Image.open(b).convert("RGB")` does: palettes and low bit
/// depths expanded, alpha dropped (never composited), 16-bit samples reduced as Pillow reads
/// them (the high byte for RGB, RGBA and grey+alpha; grey is clipped at 255, Pillow's `I;16`).
/// `bpp` bytes a pixel: 3, or 4 with a fourth byte of 255.
pub(crate) fn decode_rgb(
    bytes: &[u8],
    header: &PngHeader,
    memory: u64,
    bpp: usize,
) -> Result<Vec<u8>, Error> {
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
    decoder.set_transformations(Transformations::EXPAND);
    let mut reader = decoder.read_info().map_err(failed)?;
    let (width, height) = (header.width as usize, header.height as usize);
    let source_color = reader.info().color_type;
    let (color, depth) = reader.output_color_type();
    let sample = match depth {
        BitDepth::Sixteen => 2,
        _ => 1,
    };
    let channels = color.samples();
    // Pillow opens 16-bit grey as I;16 and converts it to RGB by clipping; tRNS may have
    // added an alpha channel to it, which is dropped like any other.
    let grey16_clip = source_color == ColorType::Grayscale && sample == 2;
    // Pillow opens 8-bit grey+alpha as `LA`, whose conversion to `RGB` keeps the alpha in the
    // fourth byte it holds (`la2rgb`); every other conversion (16-bit grey+alpha is opened
    // as `RGBA`) writes 255 there.
    let keeps_alpha = bpp == 4 && source_color == ColorType::GrayscaleAlpha && sample == 1;
    // One loop per source layout, chosen once: the common 8-bit RGB row is a plain copy. Each
    // writes the first 3 bytes of each `bpp`-byte output pixel; a fourth is already 255.
    let convert = |row: &[u8], out: &mut [u8]| match (channels, sample) {
        (3, 1) => put_rgb(row, out, bpp),
        (4, 1) => {
            for (px, rgb) in row.chunks_exact(4).zip(out.chunks_exact_mut(bpp)) {
                rgb[..3].copy_from_slice(&px[..3]);
            }
        }
        (1 | 2, 1) => {
            for (px, rgb) in row.chunks_exact(channels).zip(out.chunks_exact_mut(bpp)) {
                rgb[..3].fill(px[0]);
            }
            if keeps_alpha {
                for (px, rgb) in row.chunks_exact(2).zip(out.chunks_exact_mut(4)) {
                    rgb[3] = px[1];
                }
            }
        }
        (1 | 2, _) if grey16_clip => {
            for (px, rgb) in row
                .chunks_exact(channels * 2)
                .zip(out.chunks_exact_mut(bpp))
            {
                rgb[..3].fill(if px[0] == 0 { px[1] } else { 255 });
            }
        }
        (1 | 2, _) => {
            for (px, rgb) in row
                .chunks_exact(channels * 2)
                .zip(out.chunks_exact_mut(bpp))
            {
                rgb[..3].fill(px[0]); // the high byte
            }
        }
        _ => {
            for (px, rgb) in row
                .chunks_exact(channels * 2)
                .zip(out.chunks_exact_mut(bpp))
            {
                rgb[..3].copy_from_slice(&[px[0], px[2], px[4]]);
            }
        }
    };
    let line_len = width * bpp;
    let mut out = vec![if bpp == 4 { 255 } else { 0 }; line_len * height];
    if (channels, sample) == (3, 1) && !reader.info().interlaced {
        // 8-bit RGB, the common case: rows land in the output as they are (through one row
        // buffer when the output has a fourth byte).
        let mut row = vec![0u8; if bpp == 3 { 0 } else { width * 3 }];
        for line in out.chunks_exact_mut(line_len) {
            let into = if bpp == 3 { &mut *line } else { &mut row[..] };
            reader
                .read_row(into)
                .map_err(failed)?
                .ok_or_else(|| refusal(ImageFormat::Png, "truncated: fewer rows".into()))?;
            if bpp != 3 {
                put_rgb(&row, line, bpp);
            }
        }
        return Ok(out);
    }
    let mut pass_rgb = Vec::new();
    let mut y = 0;
    while let Some(row) = reader.next_interlaced_row().map_err(failed)? {
        match row.interlace() {
            png::InterlaceInfo::Null(_) => {
                let line = out
                    .get_mut(y * line_len..(y + 1) * line_len)
                    .ok_or_else(|| refusal(ImageFormat::Png, "more rows than declared".into()))?;
                convert(row.data(), line);
                y += 1;
            }
            png::InterlaceInfo::Adam7(info) => {
                let n = row.data().len() / (channels * sample);
                pass_rgb.resize(n * bpp, 255);
                convert(row.data(), &mut pass_rgb);
                png::expand_interlaced_row(&mut out, line_len, &pass_rgb, info, bpp as u8 * 8);
            }
        }
    }
    Ok(out)
}

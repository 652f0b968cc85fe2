//! GIF: the first frame, composed the way Pillow composes it, so a GIF yields the pixels of
//! `Image.open(b).convert("RGB")`.
//!
//! Pillow's rules for frame 0 (GifImagePlugin), which differ from a browser's:
//! - the image is the logical screen, grown to hold the frame when the frame reaches past it;
//! - outside the frame, every pixel is index `transparent` when the frame has one, else 0;
//! - inside, every index is written, the transparent one included (RGB has no alpha);
//! - a palette that is the grey ramp `(i, i, i)` counts as no palette. An index maps through
//!   the frame's local palette; failing that (none, or a ramp), the global one; past the
//!   palette's end it is black. With neither, the image is greyscale: the value is the index.
//! - the transparent index is the last one named by a graphic control extension before the
//!   frame: a later extension without one does not clear it (the decoder's rule would).
//!
//! Known difference: Pillow skips stray bytes between blocks; the decoder refuses the file.

use std::io::Read;
use std::num::NonZeroU64;

use gif::{ColorOutput, DecodeOptions, Decoder, MemoryLimit};

use std::sync::Arc;

use crate::error::Error;
use crate::format::{ImageFormat, refusal};
use crate::mode::{Mode, Raster, Transparency};

/// What the decoder may hold for metadata extensions (XMP, ICC), in the probe and the decode
/// alike; counted in the decode's estimate.
const METADATA_LIMIT: u64 = 4 << 20;

/// Bytes 0..13: signature, screen size, flags (byte 10), background, aspect.
const SCREEN_END: usize = 13;

/// The grey ramp, as a 256-entry colour table.
const RAMP: [u8; 768] = {
    let mut table = [0u8; 768];
    let mut i = 0;
    while i < 768 {
        table[i] = (i / 3) as u8;
        i += 1;
    }
    table
};

/// The first frame's place on the canvas, as the headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GifHeader {
    /// Canvas: the logical screen grown to hold the first frame.
    pub(crate) width: u32,
    pub(crate) height: u32,
    frame_pixels: u64,
}

impl GifHeader {
    /// Peak bytes of the decode: the output (`bpp` bytes a pixel), the frame's indices,
    /// metadata, LZW tables.
    pub(crate) fn decode_bytes(&self, bpp: u64) -> u64 {
        u64::from(self.width) * u64::from(self.height) * bpp
            + self.frame_pixels
            + METADATA_LIMIT
            + (1 << 20)
    }
}

fn failed(e: gif::DecodingError) -> Error {
    match e {
        gif::DecodingError::OutOfMemory | gif::DecodingError::MemoryLimit => Error::LimitExceeded,
        other => refusal(ImageFormat::Gif, other.to_string()),
    }
}

/// Headers up to the first frame's descriptor.
///
/// A GIF without a global colour table is read with the grey ramp as one, spliced in by the
/// reader (no copy): the decoder refuses a frame with no table at all, and the ramp is what
/// "no palette" means to Pillow.
fn open(bytes: &[u8]) -> Result<Decoder<Box<dyn Read + '_>>, Error> {
    let mut options = DecodeOptions::new();
    options.set_color_output(ColorOutput::Indexed);
    // Frames may reach past the screen: Pillow grows the canvas, so must we.
    options.check_frame_consistency(false);
    // Pillow skips extensions it does not know; so must we.
    options.allow_unknown_blocks(true);
    options.set_memory_limit(MemoryLimit::Bytes(
        NonZeroU64::new(METADATA_LIMIT).expect("nonzero"),
    ));
    let has_global_table = bytes.get(10).is_some_and(|flags| flags & 0x80 != 0);
    let reader: Box<dyn Read + '_> = if has_global_table || bytes.len() < SCREEN_END {
        Box::new(bytes)
    } else {
        let flags = [bytes[10] | 0x87]; // a global table of 256 entries
        Box::new(
            bytes[..10]
                .chain(std::io::Cursor::new(flags))
                .chain(&bytes[11..SCREEN_END])
                .chain(&RAMP[..])
                .chain(&bytes[SCREEN_END..]),
        )
    };
    options.read_info(reader).map_err(failed)
}

/// Reads the screen and the first frame's descriptor, without decoding pixels. The second
/// value is a reason to refuse the file as truncated: its frame is larger than the whole
/// file could code.
pub(crate) fn inspect(bytes: &[u8]) -> Result<(GifHeader, Option<String>), Error> {
    let mut decoder = open(bytes)?;
    let (screen_w, screen_h) = (decoder.width(), decoder.height());
    let frame = decoder
        .next_frame_info()
        .map_err(failed)?
        .ok_or_else(|| refusal(ImageFormat::Gif, "no image in the GIF".into()))?;
    if frame.width == 0 || frame.height == 0 {
        // Pillow refuses it too ("tile cannot extend outside image").
        return Err(refusal(ImageFormat::Gif, "zero-sized frame".into()));
    }
    let right = u32::from(frame.left) + u32::from(frame.width);
    let bottom = u32::from(frame.top) + u32::from(frame.height);
    let header = GifHeader {
        width: right.max(u32::from(screen_w)),
        height: bottom.max(u32::from(screen_h)),
        frame_pixels: u64::from(frame.width) * u64::from(frame.height),
    };
    let most = most_lzw_pixels(bytes.len() as u64);
    let unbacked = (header.frame_pixels > most).then(|| {
        format!(
            "truncated: {} bytes cannot code a {}x{} frame",
            bytes.len(),
            frame.width,
            frame.height
        )
    });
    Ok((header, unbacked))
}

/// The most pixels `len` bytes of LZW data can code. A code takes at least one bit here (GIF
/// codes take 2 to 12), and the n-th code after a clear names a string of at most n pixels
/// (each table entry adds one pixel to an earlier one), never more than the 4096 entries.
fn most_lzw_pixels(len: u64) -> u64 {
    let codes = len.saturating_mul(8);
    (codes.saturating_mul(codes.saturating_add(1)) / 2).min(codes.saturating_mul(4096))
}

/// Decodes the first frame onto its canvas, as RGB8 in `bpp` bytes a pixel (a fourth byte
/// of 255 when `bpp` is 4).
pub(crate) fn decode_rgb(bytes: &[u8], header: &GifHeader, bpp: usize) -> Result<Vec<u8>, Error> {
    let mut decoder = open(bytes)?;
    let frame = decoder
        .next_frame_info()
        .map_err(failed)?
        .ok_or_else(|| refusal(ImageFormat::Gif, "no image in the GIF".into()))?;
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
    let fill = transparent_before_first_frame(bytes)
        .unwrap_or(frame.transparent)
        .unwrap_or(0);
    let local = frame.palette.clone(); // at most 768 bytes
    let (width, height) = (header.width as usize, header.height as usize);
    if left + fw > width || top + fh > height {
        // A header from other bytes (`decode_probed` is public): refuse, never index past.
        return Err(refusal(
            ImageFormat::Gif,
            "the frame does not match the probed canvas".into(),
        ));
    }
    let output_len = width
        .checked_mul(height)
        .and_then(|n| n.checked_mul(bpp))
        .ok_or(Error::LimitExceeded)?;

    let mut indices = Vec::new();
    indices
        .try_reserve_exact(fw * fh)
        .map_err(|_| Error::LimitExceeded)?;
    indices.resize(fw * fh, 0);
    decoder.read_into_buffer(&mut indices).map_err(failed)?;
    // The spliced-in ramp of a file without a global table reads as no palette, as it should.
    let colours = Colours::new(local.as_deref(), decoder.global_palette());

    let mut out = Vec::new();
    out.try_reserve_exact(output_len)
        .map_err(|_| Error::LimitExceeded)?;
    let [r, g, b] = colours.rgb(fill);
    let background = [r, g, b, 255];
    for _ in 0..width * height {
        out.extend_from_slice(&background[..bpp]);
    }
    // The canvas holds the frame (checked above), so these slices are in bounds.
    for (y, row) in indices.chunks_exact(fw).enumerate() {
        let start = ((top + y) * width + left) * bpp;
        for (px, &index) in out[start..start + fw * bpp].chunks_exact_mut(bpp).zip(row) {
            px[..3].copy_from_slice(&colours.rgb(index));
        }
    }
    Ok(out)
}

/// The first frame on its canvas as Pillow holds it: mode `P` (indices, and the palette
/// Pillow keeps), or `L` when Pillow keeps no palette (none, or grey ramps only: the index is
/// the grey value); the transparent index as `transparency`.
pub(crate) fn decode_native(bytes: &[u8], header: &GifHeader) -> Result<Raster, Error> {
    let mut decoder = open(bytes)?;
    let frame = decoder
        .next_frame_info()
        .map_err(failed)?
        .ok_or_else(|| refusal(ImageFormat::Gif, "no image in the GIF".into()))?;
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
    let transparent = transparent_before_first_frame(bytes).unwrap_or(frame.transparent);
    let local = frame.palette.clone();
    let (width, height) = (header.width as usize, header.height as usize);
    if left + fw > width || top + fh > height {
        return Err(refusal(
            ImageFormat::Gif,
            "the frame does not match the probed canvas".into(),
        ));
    }
    let mut indices = Vec::new();
    indices
        .try_reserve_exact(fw * fh)
        .map_err(|_| Error::LimitExceeded)?;
    indices.resize(fw * fh, 0);
    decoder.read_into_buffer(&mut indices).map_err(failed)?;
    let palette = [local.as_deref(), decoder.global_palette()]
        .into_iter()
        .flatten()
        .find(|p| !is_ramp(p))
        .map(Arc::from);
    let mut out = Vec::new();
    out.try_reserve_exact(width * height)
        .map_err(|_| Error::LimitExceeded)?;
    out.resize(width * height, transparent.unwrap_or(0));
    for (y, row) in indices.chunks_exact(fw).enumerate() {
        let start = (top + y) * width + left;
        out[start..start + fw].copy_from_slice(row);
    }
    let indexed = palette.is_some();
    // Pillow opens a frame whose local table is a grey ramp as `L`, yet keeps the global
    // palette and converts through it: the colours below are its conversions', not the mode.
    let ramp_over_global = local.as_deref().is_some_and(is_ramp)
        && decoder.global_palette().is_some_and(|g| !is_ramp(g));
    Ok(Raster {
        mode: if indexed { Mode::P } else { Mode::L },
        pixels: out,
        palette,
        // Pillow's `int` either way; an `L` image's is a grey value.
        transparency: transparent.map(|t| match indexed {
            true => Transparency::Index(t),
            false => Transparency::Grey(u16::from(t)),
        }),
        unlike_pillow: ramp_over_global.then_some("a GIF frame with a grey-ramp local table"),
    })
}

/// The mode (`P`, or `L` without a palette Pillow keeps) and whether the first frame has a
/// transparent index, from the headers up to the first frame; `None` when they cannot be read
/// without decoding.
pub(crate) fn opened(bytes: &[u8]) -> Option<(Mode, bool)> {
    let transparent = transparent_before_first_frame(bytes)?.is_some();
    let mut decoder = open(bytes).ok()?;
    let frame = decoder.next_frame_info().ok()??;
    let local = frame.palette.clone();
    // A grey-ramp local table makes the frame `L` (whatever the global table).
    let indexed = match local.as_deref() {
        Some(l) => !is_ramp(l),
        None => decoder.global_palette().is_some_and(|g| !is_ramp(g)),
    };
    Some((if indexed { Mode::P } else { Mode::L }, transparent))
}

/// The transparent index Pillow gives the first frame: the last one a graphic control
/// extension names before it. `None` when the blocks cannot be walked (the decoder's own
/// reading then stands).
fn transparent_before_first_frame(bytes: &[u8]) -> Option<Option<u8>> {
    let flags = *bytes.get(10)?;
    let mut at = SCREEN_END;
    if flags & 0x80 != 0 {
        at += 3 << ((flags & 7) + 1);
    }
    let mut transparent = None;
    loop {
        match *bytes.get(at)? {
            0x2c => return Some(transparent),
            0x21 => {
                let label = *bytes.get(at + 1)?;
                at += 2;
                let first = at;
                // Sub-blocks up to the empty one.
                loop {
                    let len = usize::from(*bytes.get(at)?);
                    at += 1 + len;
                    if len == 0 {
                        break;
                    }
                }
                let block = bytes.get(first + 1..first + 1 + usize::from(bytes[first]))?;
                if label == 0xf9 && block.len() >= 4 && block[0] & 1 != 0 {
                    transparent = Some(block[3]);
                }
            }
            0x3b => return None,
            _ => at += 1, // Pillow skips a stray byte
        }
    }
}

/// Index to RGB, as Pillow's P (or L) image converts.
struct Colours {
    table: [[u8; 3]; 256],
}

impl Colours {
    /// Pillow's choice: the local table unless it is a ramp, then the global one unless it is
    /// a ramp (even under a ramp local table: the image keeps the global palette), else grey.
    fn new(local: Option<&[u8]>, global: Option<&[u8]>) -> Self {
        let palette = [local, global].into_iter().flatten().find(|p| !is_ramp(p));
        let mut table = [[0u8; 3]; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            *entry = match palette {
                Some(p) => p
                    .get(i * 3..i * 3 + 3)
                    .map_or([0; 3], |c| [c[0], c[1], c[2]]),
                None => [u8::try_from(i).expect("256 entries"); 3],
            };
        }
        Self { table }
    }

    fn rgb(&self, index: u8) -> [u8; 3] {
        self.table[usize::from(index)]
    }
}

/// Whether every entry `i` of the table is `(i, i, i)`: Pillow then keeps no palette.
fn is_ramp(palette: &[u8]) -> bool {
    palette
        .chunks_exact(3)
        .enumerate()
        .all(|(i, c)| c.iter().all(|&v| usize::from(v) == i))
}

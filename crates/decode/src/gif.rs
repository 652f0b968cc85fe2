//! GIF: the first frame, composed the way Pillow composes it, so a GIF yields the pixels of
//! `Image.open(b).convert("RGB")`.
//!
//! Pillow's rules for frame 0 (GifImagePlugin), which differ from a browser's:
//! - the image is the logical screen, grown to hold the frame when the frame reaches past it;
//! - outside the frame, every pixel is index `transparent` when the frame has one, else 0;
//! - inside, every index is written, the transparent one included (RGB has no alpha);
//! - an index maps through the frame's palette (local, else global) and past its end to black;
//!   a palette that is the grey ramp `(i, i, i)`, or no palette at all, makes it a greyscale
//!   image whose value is the index itself.

use std::borrow::Cow;
use std::io::Cursor;
use std::num::NonZeroU64;

use gif::{ColorOutput, DecodeOptions, Decoder, MemoryLimit};

use crate::error::Error;
use crate::image::{ImageFormat, refusal};

/// The first frame's place on the canvas, as the headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GifHeader {
    /// Canvas: the logical screen grown to hold the first frame.
    pub(crate) width: u32,
    pub(crate) height: u32,
    frame_pixels: u64,
}

impl GifHeader {
    /// Peak bytes of the decode: the RGB8 output, the frame's indices, the LZW tables.
    pub(crate) fn decode_bytes(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height) * 3 + self.frame_pixels + (1 << 20)
    }
}

/// Headers up to the first frame's descriptor, to the decoder's memory limit (metadata
/// extensions count against it).
///
/// A GIF without a global colour table gets the grey ramp as one: Pillow reads a frame with
/// no table at all as greyscale (value = index), which is what the ramp gives, while the
/// decoder would refuse it. Only those rare files are copied.
fn open(bytes: &[u8], memory: u64) -> Result<Decoder<Cursor<Cow<'_, [u8]>>>, gif::DecodingError> {
    const SCREEN_END: usize = 13;
    let has_global_table = bytes.get(10).is_some_and(|flags| flags & 0x80 != 0);
    let bytes = if has_global_table || bytes.len() < SCREEN_END {
        Cow::Borrowed(bytes)
    } else {
        let mut patched = Vec::with_capacity(bytes.len() + 768);
        patched.extend_from_slice(&bytes[..SCREEN_END]);
        patched[10] |= 0x87; // a global table of 256 entries
        patched.extend((0..=255u8).flat_map(|i| [i; 3]));
        patched.extend_from_slice(&bytes[SCREEN_END..]);
        Cow::Owned(patched)
    };
    let mut options = DecodeOptions::new();
    options.set_color_output(ColorOutput::Indexed);
    // Frames may reach past the screen: Pillow grows the canvas, so must we.
    options.check_frame_consistency(false);
    options.set_memory_limit(MemoryLimit::Bytes(
        NonZeroU64::new(memory.max(1 << 20)).expect("nonzero"),
    ));
    options.read_info(Cursor::new(bytes))
}

/// Reads the screen and the first frame's descriptor, without decoding pixels. The second
/// value is a reason to refuse the file as truncated: its frame is larger than the whole
/// file could code.
pub(crate) fn inspect(bytes: &[u8]) -> Result<(GifHeader, Option<String>), String> {
    let mut decoder = open(bytes, 1 << 24).map_err(|e| e.to_string())?;
    let (screen_w, screen_h) = (decoder.width(), decoder.height());
    let frame = decoder
        .next_frame_info()
        .map_err(|e| e.to_string())?
        .ok_or("no image in the GIF")?;
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

/// Decodes the first frame onto its canvas, as RGB8.
pub(crate) fn decode_rgb(bytes: &[u8], header: &GifHeader, memory: u64) -> Result<Vec<u8>, Error> {
    let failed = |e: gif::DecodingError| match e {
        gif::DecodingError::OutOfMemory | gif::DecodingError::MemoryLimit => Error::LimitExceeded,
        other => refusal(ImageFormat::Gif, other.to_string()),
    };
    let mut decoder = open(bytes, memory).map_err(failed)?;
    let frame = decoder
        .next_frame_info()
        .map_err(failed)?
        .ok_or_else(|| refusal(ImageFormat::Gif, "no image in the GIF".into()))?;
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
    let fill = frame.transparent.unwrap_or(0);
    let (width, height) = (header.width as usize, header.height as usize);
    if left + fw > width || top + fh > height {
        // A header from other bytes (`decode_probed` is public): refuse, never index past.
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
    if !indices.is_empty() {
        decoder.read_into_buffer(&mut indices).map_err(failed)?;
    }
    let colours = Colours::new(decoder.palette().map_err(failed)?);

    let mut out = Vec::new();
    out.try_reserve_exact(width * height * 3)
        .map_err(|_| Error::LimitExceeded)?;
    let background = colours.rgb(fill);
    for _ in 0..width * height {
        out.extend_from_slice(&background);
    }
    // The canvas holds the frame (checked above), so these slices are in bounds.
    for (y, row) in indices.chunks_exact(fw.max(1)).enumerate().take(fh) {
        let start = ((top + y) * width + left) * 3;
        for (px, &index) in out[start..start + fw * 3].chunks_exact_mut(3).zip(row) {
            px.copy_from_slice(&colours.rgb(index));
        }
    }
    Ok(out)
}

/// Index to RGB, as Pillow's P (or L) image converts.
struct Colours {
    table: [[u8; 3]; 256],
}

impl Colours {
    fn new(palette: &[u8]) -> Self {
        let entries = palette.chunks_exact(3);
        // The grey ramp is no palette to Pillow: the image is L and its value is the index.
        let ramp = entries
            .clone()
            .enumerate()
            .all(|(i, c)| c.iter().all(|&v| usize::from(v) == i));
        let mut table = [[0u8; 3]; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            let grey = u8::try_from(i).expect("256 entries");
            *entry = if ramp {
                [grey; 3]
            } else {
                palette
                    .get(i * 3..i * 3 + 3)
                    .map_or([0; 3], |c| [c[0], c[1], c[2]])
            };
        }
        Self { table }
    }

    fn rgb(&self, index: u8) -> [u8; 3] {
        self.table[usize::from(index)]
    }
}

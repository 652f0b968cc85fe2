//! The host tier's entry: one decoded image in one decode profile, as the bytes of a file that
//! the host's processes map read-only from a memory file system. Its layout:
//!
//! - a header (a multiple of [`ENTRY_ALIGN`] bytes): a magic and format version, the entry's
//!   key, an xxh3-64 checksum of the whole entry (the checksum field read as zeros), the
//!   dimensions, format, layout and modes, the content key, the lengths of what follows, and
//!   the metadata Pillow keeps beside the pixels (palette, EXIF, XMP, transparency);
//! - the pixels, starting on a page boundary, as [`DecodedImage::pixels`] holds them;
//! - the kept encoded bytes, when the profile keeps them ([`DecodedImage::source`]).
//!
//! All numbers are little-endian. Reading an entry ([`from_entry`]) checks every length
//! against the entry's size before it slices, the key against the one asked for, the pixel
//! count against the dimensions and mode, then the checksum, then this process's own limits:
//! a damaged, truncated or foreign entry is an [`EntryError`], never wrong pixels. The pixels
//! and kept bytes of the image returned view the entry's bytes (a mapping) without a copy.

use std::sync::Arc;

use bytes::Bytes;
use mmcache_scope::{CacheIdentity, ContentKey};
use xxhash_rust::xxh3::Xxh3;

use crate::format::ImageFormat;
use crate::image::{DecodedImage, Details};
use crate::jpeg_choice::JpegDecoder;
use crate::layout::PixelLayout;
use crate::limits::DecodeLimits;
use crate::mode::{Mode, Opened, Transparency};
use crate::profile::DecodeProfile;

/// The alignment of an entry's pixels: its header is padded to a multiple of this (a page), so
/// the pixels of a mapped entry start on a page boundary.
pub const ENTRY_ALIGN: usize = 4096;

const MAGIC: [u8; 8] = *b"mmcpix\r\n";
const VERSION: u32 = 1;
/// Where the checksum sits in the header.
const CHECKSUM_AT: usize = 48;
/// The fixed part of the header; the metadata follows it.
const FIXED_LEN: usize = 152;

/// Why an entry's bytes are not an image of the key asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// Not an entry of this format and version (another program's file, or another version's).
    #[error("not a pixel entry of format version {VERSION}")]
    Foreign,
    /// An entry of another key: a valid entry stored under the wrong name.
    #[error("the entry is of another key")]
    WrongKey,
    /// The entry's size is not what its header says (a truncated or extended file).
    #[error("the entry holds {held} bytes, its header says {said}")]
    Length {
        /// Bytes the entry holds.
        held: u64,
        /// Bytes its header accounts for.
        said: u64,
    },
    /// A field of the header that cannot be (an unknown mode, pixels that do not match the
    /// dimensions, metadata past the header).
    #[error("invalid header: {0}")]
    Invalid(&'static str),
    /// The checksum does not match: the entry was changed after it was written.
    #[error("checksum mismatch")]
    Checksum,
    /// A valid entry that this process's limits refuse (too many pixels, a format it does not
    /// accept): for this process a miss, for the others still a good entry.
    #[error("refused by this process's limits: {0}")]
    Refused(&'static str),
}

impl EntryError {
    /// Whether the entry is bad for every process (damaged, truncated, foreign), so that the
    /// one who read it may replace it; [`EntryError::Refused`] is not.
    pub fn is_damaged(&self) -> bool {
        !matches!(self, Self::Refused(_))
    }
}

/// The key of `identity`'s image in the host tier when decoded with `profile` under `limits`:
/// a keyed blake3 digest of the identity's SHA-256 (its scope included), the profile (layout,
/// colour, orientation, kept bytes), the JPEG decoder that makes the pixels (and its version
/// when known), and this crate's version and entry format, so processes whose decoders could
/// give other pixels never share an entry.
pub fn host_entry_key(
    identity: &CacheIdentity,
    profile: &DecodeProfile,
    limits: &DecodeLimits,
) -> [u8; 32] {
    let jpeg = match limits.jpeg {
        JpegDecoder::LibjpegTurbo => {
            let version = crate::turbo::active().and_then(|t| t.version());
            format!("libjpeg-turbo {}", version.unwrap_or("system"))
        }
        JpegDecoder::PureRust => "pure-rust".to_owned(),
    };
    let mut h = blake3::Hasher::new_derive_key("mmcache 2026-12 host pixel entry v1");
    h.update(identity.sha256_hex().as_bytes())
        .update(&profile.encode())
        .update(jpeg.as_bytes())
        .update(env!("CARGO_PKG_VERSION").as_bytes())
        .update(&VERSION.to_le_bytes());
    *h.finalize().as_bytes()
}

/// `image` as the parts of an entry under `key`, in file order: the header, the pixels (the
/// image's own handle, no copy) and the kept bytes when any. `None` for an image with no
/// pixels of its own to share (bytes handed back undecoded).
pub fn to_entry(image: &DecodedImage, key: &[u8; 32]) -> Option<Vec<Bytes>> {
    let format = image.format()?;
    let mode = mode_code(image.mode())?;
    let opened = mode_code(image.opened().mode)?;
    let pixels = image.pixel_bytes().clone();
    let source = image.source().cloned().unwrap_or_default();
    fn meta(m: Option<&Arc<[u8]>>) -> &[u8] {
        m.map_or(&[], |m| m)
    }
    let (palette, exif, xmp) = (meta(image.palette()), meta(image.exif()), meta(image.xmp()));
    let (trans_kind, trans) = transparency_bytes(image.transparency());
    let meta_len = palette.len() + exif.len() + xmp.len() + trans.len();
    let header_len = (FIXED_LEN + meta_len).div_ceil(ENTRY_ALIGN) * ENTRY_ALIGN;
    let mut h = Vec::with_capacity(header_len);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&u32::try_from(header_len).ok()?.to_le_bytes());
    h.extend_from_slice(key);
    h.extend_from_slice(&[0; 8]); // the checksum, below
    h.extend_from_slice(&image.width().to_le_bytes());
    h.extend_from_slice(&image.height().to_le_bytes());
    h.extend_from_slice(&[
        format_code(format),
        layout_code(image.layout()),
        mode,
        opened,
        u8::from(image.opened().transparent),
        0,
    ]);
    h.extend_from_slice(&image.orientation().to_le_bytes());
    h.extend_from_slice(image.content_key().as_bytes());
    for n in [image.encoded_len(), pixels.len(), source.len()] {
        h.extend_from_slice(&(n as u64).to_le_bytes());
    }
    for m in [palette, exif, xmp] {
        h.extend_from_slice(&u32::try_from(m.len()).ok()?.to_le_bytes());
    }
    h.extend_from_slice(&[trans_kind, 0, 0, 0]);
    h.extend_from_slice(&u32::try_from(trans.len()).ok()?.to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    debug_assert_eq!(h.len(), FIXED_LEN);
    for m in [palette, exif, xmp, &trans[..]] {
        h.extend_from_slice(m);
    }
    h.resize(header_len, 0);
    let sum = checksum(&h, &pixels, &source);
    h[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
    let mut parts = vec![Bytes::from(h), pixels];
    if !source.is_empty() {
        parts.push(source);
    }
    Some(parts)
}

/// How [`from_entry`] takes an entry's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryRead {
    /// Mapped from the tier's file, shared with the host's other processes: the image
    /// [`is_mapped`](DecodedImage::is_mapped) and counts the entry as mapped bytes.
    Mapped,
    /// Read into this process's memory: the image's bytes are its own.
    Copied,
}

/// Whether [`from_entry`] checks the entry's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verify {
    /// Every byte against the checksum: for an entry of unknown history.
    Checksum,
    /// Not the checksum (every other check still): for the very file this process just wrote
    /// from an image it decoded, known by its device and inode, so that the write's read-back
    /// does not pay a second pass over the pixels.
    WrittenHere,
}

/// The image an entry holds, checked as the module docs say (this process's limits before the
/// checksum, so a refusal costs no pass over the pixels); its pixels and kept bytes view
/// `entry` without a copy. `layout` is the one the reader's profile asks for.
///
/// # Errors
///
/// [`EntryError`]: every kind but [`EntryError::Refused`] means the entry is bad for everyone.
pub fn from_entry(
    entry: Bytes,
    key: &[u8; 32],
    layout: PixelLayout,
    limits: &DecodeLimits,
    read: EntryRead,
    verify: Verify,
) -> Result<DecodedImage, EntryError> {
    let h = Header::parse(&entry, key)?;
    if h.layout != layout {
        return Err(EntryError::Invalid("another pixel layout"));
    }
    if u64::from(h.width) * u64::from(h.height) > limits.max_pixels {
        return Err(EntryError::Refused("more pixels than this process's limit"));
    }
    if !limits.formats.contains(h.format) {
        return Err(EntryError::Refused("a format this process does not accept"));
    }
    let pixels = entry.slice(h.header_len..h.header_len + h.pixels_len);
    let source = entry.slice(h.header_len + h.pixels_len..);
    if verify == Verify::Checksum {
        let mut zeroed = entry[..h.header_len].to_vec();
        zeroed[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
        if checksum(&zeroed, &pixels, &source) != h.checksum {
            return Err(EntryError::Checksum);
        }
    }
    let meta = |at: usize, len: usize| (len > 0).then(|| Arc::from(&entry[at..at + len]));
    let mut at = FIXED_LEN;
    let mut take = |len: usize| {
        let m = meta(at, len);
        at += len;
        m
    };
    let (palette, exif, xmp) = (take(h.palette_len), take(h.exif_len), take(h.xmp_len));
    let transparency = parse_transparency(h.trans_kind, &entry[at..at + h.trans_len])?;
    let image = DecodedImage::new(
        h.width,
        h.height,
        h.format,
        h.layout,
        h.content_key,
        Vec::new(),
    )
    .with_details(Details {
        mode: h.mode,
        opened: h.opened,
        orientation: h.orientation,
        palette,
        transparency,
        exif,
        xmp,
    });
    let mapped_len = if read == EntryRead::Mapped {
        entry.len()
    } else {
        0
    };
    let source = (!source.is_empty()).then_some(source);
    Ok(image.with_entry_payload(pixels, source, h.encoded_len, mapped_len))
}

/// The fields of a header, checked against the entry's length.
struct Header {
    header_len: usize,
    checksum: u64,
    width: u32,
    height: u32,
    format: ImageFormat,
    layout: PixelLayout,
    mode: Mode,
    opened: Opened,
    orientation: u16,
    content_key: ContentKey,
    encoded_len: usize,
    pixels_len: usize,
    palette_len: usize,
    exif_len: usize,
    xmp_len: usize,
    trans_kind: u8,
    trans_len: usize,
}

impl Header {
    fn parse(entry: &[u8], key: &[u8; 32]) -> Result<Self, EntryError> {
        if entry.len() < FIXED_LEN || entry[..8] != MAGIC || le32(entry, 8) != VERSION {
            return Err(EntryError::Foreign);
        }
        if entry[16..48] != key[..] {
            return Err(EntryError::WrongKey);
        }
        let invalid = EntryError::Invalid;
        let header_len = le32(entry, 12) as usize;
        let (pixels_len, source_len) = (le64(entry, 112), le64(entry, 120));
        let said = (header_len as u64)
            .checked_add(pixels_len)
            .and_then(|n| n.checked_add(source_len));
        if said != Some(entry.len() as u64) {
            return Err(EntryError::Length {
                held: entry.len() as u64,
                said: said.unwrap_or(u64::MAX),
            });
        }
        let [palette_len, exif_len, xmp_len, trans_len] =
            [128, 132, 136, 144].map(|at| le32(entry, at) as usize);
        let meta_end = FIXED_LEN + palette_len + exif_len + xmp_len + trans_len;
        if header_len < FIXED_LEN || meta_end > header_len {
            return Err(invalid("metadata past the header"));
        }
        let format = format_of(entry[64]).ok_or(invalid("unknown format"))?;
        let layout = layout_of(entry[65]).ok_or(invalid("unknown layout"))?;
        let mode = mode_of(entry[66]).ok_or(invalid("unknown mode"))?;
        let opened = Opened {
            mode: mode_of(entry[67]).ok_or(invalid("unknown opened mode"))?,
            transparent: entry[68] != 0,
        };
        let (width, height) = (le32(entry, 56), le32(entry, 60));
        let expected = u64::from(width)
            .checked_mul(u64::from(height))
            .and_then(|n| n.checked_mul(mode.bytes_per_pixel(layout) as u64));
        if width == 0 || height == 0 || expected != Some(pixels_len) {
            return Err(invalid("pixels that do not match the dimensions and mode"));
        }
        let orientation = u16::from_le_bytes([entry[70], entry[71]]);
        if !(1..=8).contains(&orientation) {
            return Err(invalid("orientation out of range"));
        }
        let mut content = [0; 32];
        content.copy_from_slice(&entry[72..104]);
        Ok(Self {
            header_len,
            checksum: le64(entry, CHECKSUM_AT),
            width,
            height,
            format,
            layout,
            mode,
            opened,
            orientation,
            content_key: ContentKey::from_bytes(content),
            encoded_len: usize::try_from(le64(entry, 104)).map_err(|_| invalid("length"))?,
            pixels_len: pixels_len as usize,
            palette_len,
            exif_len,
            xmp_len,
            trans_kind: entry[140],
            trans_len,
        })
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

/// xxh3-64 of the header (its checksum field zeroed), the pixels and the kept bytes: memory
/// speed, so a host hit of a large image costs about one pass over its pixels.
fn checksum(header: &[u8], pixels: &[u8], source: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(header);
    h.update(pixels);
    h.update(source);
    h.digest()
}

// The codes below are the entry format's: fixed, whatever the enums' order in the code.

fn format_code(f: ImageFormat) -> u8 {
    match f {
        ImageFormat::Jpeg => 1,
        ImageFormat::Png => 2,
        ImageFormat::WebP => 3,
        ImageFormat::Gif => 4,
    }
}

fn format_of(code: u8) -> Option<ImageFormat> {
    ImageFormat::ALL
        .iter()
        .copied()
        .find(|f| format_code(*f) == code)
}

fn layout_code(l: PixelLayout) -> u8 {
    match l {
        PixelLayout::Rgb => 1,
        PixelLayout::Rgbx => 2,
    }
}

fn layout_of(code: u8) -> Option<PixelLayout> {
    [PixelLayout::Rgb, PixelLayout::Rgbx]
        .into_iter()
        .find(|l| layout_code(*l) == code)
}

const MODES: [(Mode, u8); 8] = [
    (Mode::One, 1),
    (Mode::L, 2),
    (Mode::La, 3),
    (Mode::P, 4),
    (Mode::Rgb, 5),
    (Mode::Rgba, 6),
    (Mode::I16, 7),
    (Mode::Cmyk, 8),
];

/// `None` for [`Mode::Undecoded`]: no pixels to store.
fn mode_code(m: Mode) -> Option<u8> {
    MODES.iter().find(|(mode, _)| *mode == m).map(|(_, c)| *c)
}

fn mode_of(code: u8) -> Option<Mode> {
    MODES.iter().find(|(_, c)| *c == code).map(|(m, _)| *m)
}

fn transparency_bytes(t: Option<&Transparency>) -> (u8, Vec<u8>) {
    match t {
        None => (0, Vec::new()),
        Some(Transparency::Index(i)) => (1, vec![*i]),
        Some(Transparency::Alphas(a)) => (2, a.to_vec()),
        Some(Transparency::Grey(g)) => (3, g.to_le_bytes().to_vec()),
        Some(Transparency::Rgb(rgb)) => (4, rgb.iter().flat_map(|v| v.to_le_bytes()).collect()),
    }
}

fn parse_transparency(kind: u8, b: &[u8]) -> Result<Option<Transparency>, EntryError> {
    let u16_at = |i: usize| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
    Ok(match (kind, b.len()) {
        (0, 0) => None,
        (1, 1) => Some(Transparency::Index(b[0])),
        (2, _) => Some(Transparency::Alphas(Arc::from(b))),
        (3, 2) => Some(Transparency::Grey(u16_at(0))),
        (4, 6) => Some(Transparency::Rgb([u16_at(0), u16_at(1), u16_at(2)])),
        _ => return Err(EntryError::Invalid("transparency")),
    })
}

#[cfg(test)]
#[path = "pixel_entry_tests.rs"]
mod tests;

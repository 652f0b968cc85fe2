//! The metadata Pillow keeps in `info` that changes what an engine does with the pixels: the
//! EXIF block (`info["exif"]`), the XMP packet (`info["xmp"]`) and, from them, the orientation
//! `ImageOps.exif_transpose` applies; read from the bytes as each of Pillow's plugins reads them.
//!
//! Metadata this reading does not follow exactly (text chunks that may carry EXIF or XMP, an
//! animated PNG, XMP in a GIF) makes the result [`Meta::unsure`], for profiles that must hand
//! such files to the engine's own decoder.

use crate::exif::{self, Orientation};
use crate::format::ImageFormat;

/// What Pillow's `info` holds of the orientation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    /// `info["exif"]`.
    pub(crate) exif: Option<Vec<u8>>,
    /// `info["xmp"]`.
    pub(crate) xmp: Option<Vec<u8>>,
    /// Why Pillow's reading is not followed exactly, if it is not.
    pub(crate) unsure: Option<&'static str>,
}

impl Meta {
    /// The orientation Pillow reads from this metadata.
    pub(crate) fn orientation(&self) -> Orientation {
        match self.unsure {
            Some(why) => Orientation::Unsure(why),
            None => exif::orientation(self.exif.as_deref(), self.xmp.as_deref()),
        }
    }
}

/// Reads the metadata of `bytes`, of the sniffed `format`.
pub(crate) fn read(format: ImageFormat, bytes: &[u8]) -> Meta {
    match format {
        ImageFormat::Jpeg => jpeg(bytes),
        ImageFormat::Png => png(bytes),
        ImageFormat::WebP => webp(bytes),
        ImageFormat::Gif => gif(bytes),
    }
}

/// JPEG: the APP1 segments before the first scan, as Pillow's `_open` reads them. Every
/// `Exif\0\0` segment goes to `info["exif"]` (the first whole, later ones without their
/// prefix, appended); the last XMP segment is `info["xmp"]`, from the byte after its
/// namespace's NUL.
fn jpeg(bytes: &[u8]) -> Meta {
    const XMP: &[u8] = b"http://ns.adobe.com/xap/1.0/\0";
    let mut meta = Meta::default();
    let mut at = 2;
    loop {
        // Pillow's walk: a byte that is not 0xFF is skipped, as are 0xFF 0xFF (padding) and
        // 0xFF 0x00 (an escaped 0xFF).
        let (Some(&b), Some(&marker)) = (bytes.get(at), bytes.get(at + 1)) else {
            return meta;
        };
        if b != 0xff || marker == 0xff {
            at += 1;
            continue;
        }
        at += 2;
        match marker {
            0xda | 0xd9 => return meta, // start of scan, or end: the headers are over
            0x00 | 0x01 | 0xd0..=0xd8 => continue,
            _ => {}
        }
        let Some(len) = bytes
            .get(at..at + 2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        else {
            return meta;
        };
        let Some(segment) = bytes.get(at + 2..at + len.max(2)) else {
            return meta;
        };
        at += len.max(2);
        if marker != 0xe1 {
            continue;
        }
        if segment.starts_with(b"Exif\0\0") {
            match &mut meta.exif {
                Some(exif) => exif.extend_from_slice(&segment[6..]),
                None => meta.exif = Some(segment.to_vec()),
            }
        } else if segment.starts_with(XMP) {
            meta.xmp = Some(segment[XMP.len()..].to_vec());
        }
    }
}

/// PNG: the last eXIf chunk (before or after the image data: `exif_transpose` loads the
/// image first), prefixed `Exif\0\0` as Pillow stores it. Text chunks named as EXIF or XMP
/// carriers, and animated PNGs, are not followed.
fn png(bytes: &[u8]) -> Meta {
    let mut meta = Meta::default();
    let mut at = 8;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = &head[4..8];
        let Some(data) = bytes.get(at + 8..(at + 8).saturating_add(len)) else {
            break;
        };
        match kind {
            b"eXIf" => {
                let mut exif = b"Exif\0\0".to_vec();
                exif.extend_from_slice(data);
                meta.exif = Some(exif);
            }
            b"tEXt" | b"zTXt" | b"iTXt" => {
                let keyword = data.split(|&b| b == 0).next().unwrap_or(b"");
                if keyword == b"Raw profile type exif" || keyword == b"XML:com.adobe.xmp" {
                    meta.unsure = Some("EXIF or XMP in a PNG text chunk");
                }
            }
            b"acTL" => meta.unsure = Some("an animated PNG"),
            b"IEND" => break,
            _ => {}
        }
        at += 8 + len + 4;
    }
    meta
}

/// WebP: EXIF and XMP chunks of an extended file are not followed (libwebp's demuxer picks
/// them; they are rare in WebP).
fn webp(bytes: &[u8]) -> Meta {
    let mut meta = Meta::default();
    let mut at = 12;
    while let Some(head) = bytes.get(at..at + 8) {
        let size = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if matches!(&head[..4], b"EXIF" | b"XMP ") {
            meta.unsure = Some("EXIF or XMP in a WebP");
        }
        at = match (at + 8).checked_add(size + (size & 1)) {
            Some(next) => next,
            None => break,
        };
    }
    meta
}

/// GIF: no EXIF; an XMP application extension (Pillow reads it) is not followed.
fn gif(bytes: &[u8]) -> Meta {
    let mut meta = Meta::default();
    if memchr::memmem::find(bytes, b"\x21\xff\x0bXMP DataXMP").is_some() {
        meta.unsure = Some("XMP in a GIF");
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(marker: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0xff, marker];
        out.extend_from_slice(&((payload.len() + 2) as u16).to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn jpeg_exif_segments_join_and_the_last_xmp_wins() {
        let mut file = vec![0xff, 0xd8];
        file.extend(segment(0xe0, b"JFIF\0\x01\x01"));
        file.extend(segment(0xe1, b"Exif\0\0II*\0"));
        file.extend(segment(0xe1, b"http://ns.adobe.com/xap/1.0/\0first"));
        file.extend(segment(0xe1, b"Exif\0\0more"));
        file.extend(segment(0xe1, b"http://ns.adobe.com/xap/1.0/\0second"));
        file.extend([0xff, 0xda]);
        file.extend(segment(0xe1, b"Exif\0\0after the scan")); // never read
        let meta = jpeg(&file);
        assert_eq!(meta.exif.as_deref(), Some(&b"Exif\0\0II*\0more"[..]));
        assert_eq!(meta.xmp.as_deref(), Some(&b"second"[..]));
        assert_eq!(meta.unsure, None);
    }

    #[test]
    fn png_takes_the_last_exif_and_refuses_text_carriers() {
        fn chunk(kind: &[u8], data: &[u8]) -> Vec<u8> {
            let mut out = (data.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            out.extend_from_slice(&[0; 4]);
            out
        }
        let mut file = b"\x89PNG\r\n\x1a\n".to_vec();
        file.extend(chunk(b"IHDR", &[0; 13]));
        file.extend(chunk(b"eXIf", b"one"));
        file.extend(chunk(b"IDAT", b"x"));
        file.extend(chunk(b"eXIf", b"two"));
        let mut text = file.clone();
        file.extend(chunk(b"IEND", b""));
        assert_eq!(png(&file).exif.as_deref(), Some(&b"Exif\0\0two"[..]));
        assert_eq!(png(&file).unsure, None);
        text.extend(chunk(b"tEXt", b"Raw profile type exif\0..."));
        assert!(png(&text).unsure.is_some());
    }
}

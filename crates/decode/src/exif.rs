//! The EXIF orientation as Pillow reads it (`Image.getexif()[0x0112]`, and without one the
//! XMP `tiff:Orientation`), and the transposes of `ImageOps.exif_transpose`.
//!
//! Only what Pillow's reading is certain to give is read: a well-formed TIFF header and IFD0
//! whose orientation entry is an integer. Anything else (BigTIFF, a rational or text value, an
//! IFD cut in the middle) is [`Orientation::Unsure`], and a profile that must be exact hands
//! such bytes to the engine's own decoder.

/// Pillow's `ExifTags.Base.Orientation`.
const ORIENTATION: u16 = 0x0112;

/// What the metadata says of the orientation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Orientation {
    /// The value Pillow reads (1 when there is none); `exif_transpose` acts on 2 to 8.
    Value(u16),
    /// Metadata this reading does not follow Pillow through.
    Unsure(&'static str),
}

/// The orientation of an EXIF block (`info["exif"]`: optionally prefixed with `Exif\0\0`);
/// `None` when the IFD0 has no orientation entry.
pub(crate) fn exif_orientation(exif: &[u8]) -> Result<Option<u16>, &'static str> {
    let mut data = exif;
    while let Some(rest) = data.strip_prefix(b"Exif\0\0") {
        data = rest;
    }
    if data.is_empty() {
        return Ok(None);
    }
    let head = data.get(..8).ok_or("EXIF shorter than its TIFF header")?;
    let big = match &head[..4] {
        b"II\x2a\x00" | b"II\x00\x2a" => false,
        b"MM\x00\x2a" | b"MM\x2a\x00" => true,
        _ => return Err("EXIF without a TIFF header Pillow reads"),
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b = data.get(at..at.checked_add(2)?)?;
        Some(if big {
            u16::from_be_bytes([b[0], b[1]])
        } else {
            u16::from_le_bytes([b[0], b[1]])
        })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b = data.get(at..at.checked_add(4)?)?;
        let b = [b[0], b[1], b[2], b[3]];
        Some(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let ifd = u32_at(4).expect("8 bytes") as usize;
    // Pillow stops at the first read past the end and keeps the entries read before it.
    let Some(count) = u16_at(ifd) else {
        return Ok(None);
    };
    let mut found = None;
    for i in 0..usize::from(count) {
        let entry = ifd + 2 + 12 * i;
        let (Some(tag), Some(kind), Some(n)) =
            (u16_at(entry), u16_at(entry + 2), u32_at(entry + 4))
        else {
            break; // the IFD is cut here: Pillow keeps what it read
        };
        if tag != ORIENTATION {
            continue;
        }
        // Integer types only (BYTE, SHORT, LONG and their signed forms); Pillow skips an
        // entry of an unknown type and one without values, and takes the first of several.
        let width = match kind {
            1 | 6 => 1,
            3 | 8 => 2,
            4 | 9 => 4,
            0 | 13.. => continue,
            _ => return Err("an EXIF orientation that is not an integer"),
        };
        if n == 0 {
            continue;
        }
        let size = width * n as usize;
        let at = if size > 4 {
            u32_at(entry + 8).expect("in the entry") as usize
        } else {
            entry + 8
        };
        if data.len() < at.saturating_add(size) {
            // Pillow reads the values out of line at once, and a short read ends its reading
            // of the IFD: this entry and those after it are lost.
            return Ok(found);
        }
        let value = match kind {
            1 => i64::from(data[at]),
            6 => i64::from(data[at] as i8),
            3 => i64::from(u16_at(at).expect("in the block")),
            8 => i64::from(u16_at(at).expect("in the block") as i16),
            4 => i64::from(u32_at(at).expect("in the block")),
            _ => i64::from(u32_at(at).expect("in the block") as i32),
        };
        // The last of several entries wins, as in Pillow's dictionary.
        found = Some(u16::try_from(value).unwrap_or(0));
    }
    Ok(found)
}

/// The orientation from `tiff:Orientation` in XMP, as Pillow's `getexif` finds it: the first
/// `tiff:Orientation="D` or `tiff:Orientation>D` (a digit).
pub(crate) fn xmp_orientation(xmp: &[u8]) -> Option<u16> {
    const NAME: &[u8] = b"tiff:Orientation";
    let mut from = 0;
    while let Some(p) = memchr::memmem::find(&xmp[from..], NAME) {
        let after = from + p + NAME.len();
        let digit = match xmp.get(after..) {
            Some([b'=', b'"', d, ..]) | Some([b'>', d, ..]) if d.is_ascii_digit() => Some(*d),
            _ => None,
        };
        if let Some(d) = digit {
            return Some(u16::from(d - b'0'));
        }
        from += p + 1;
    }
    None
}

/// Pillow's orientation from `exif` (`info["exif"]`) and, when it has no orientation entry,
/// `xmp`.
pub(crate) fn orientation(exif: Option<&[u8]>, xmp: Option<&[u8]>) -> Orientation {
    let from_exif = match exif.map(exif_orientation) {
        Some(Err(why)) => return Orientation::Unsure(why),
        Some(Ok(v)) => v,
        None => None,
    };
    Orientation::Value(
        from_exif
            .or_else(|| xmp.and_then(xmp_orientation))
            .unwrap_or(1),
    )
}

/// The size after orientation `o` (2 to 8; others leave the image as it is).
pub(crate) fn oriented_size(o: u16, width: u32, height: u32) -> (u32, u32) {
    if matches!(o, 5..=8) {
        (height, width)
    } else {
        (width, height)
    }
}

/// `exif_transpose` of a `width` x `height` image of `bpp`-byte pixels: Pillow's transpose
/// for orientation `o` (2: mirror left-right, 3: rotate 180, 4: mirror top-bottom,
/// 5: transpose, 6: rotate 270, 7: transverse, 8: rotate 90). Others give the pixels back.
pub(crate) fn transpose(pixels: Vec<u8>, width: u32, height: u32, bpp: usize, o: u16) -> Vec<u8> {
    if !(2..=8).contains(&o) {
        return pixels;
    }
    let (w, h) = (width as usize, height as usize);
    let (ow, oh) = oriented_size(o, width, height);
    let (ow, _oh) = (ow as usize, oh as usize);
    let mut out = vec![0u8; pixels.len()];
    for y in 0..h {
        let row = &pixels[y * w * bpp..(y + 1) * w * bpp];
        for (x, px) in row.chunks_exact(bpp).enumerate() {
            // Where source pixel (x, y) lands.
            let (dx, dy) = match o {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (h - 1 - y, x),
                7 => (h - 1 - y, w - 1 - x),
                _ => (y, w - 1 - x), // 8
            };
            let at = (dy * ow + dx) * bpp;
            out[at..at + bpp].copy_from_slice(px);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian TIFF block whose IFD0 holds `entries` (tag, type, count, value/offset).
    fn tiff(entries: &[(u16, u16, u32, [u8; 4])], tail: &[u8]) -> Vec<u8> {
        let mut out = b"Exif\0\0II\x2a\x00\x08\x00\x00\x00".to_vec();
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        for (tag, kind, n, v) in entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(v);
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(tail);
        out
    }

    #[test]
    fn orientation_is_read_as_pillow_reads_it() {
        let short = |v: u16| (ORIENTATION, 3, 1, [v as u8, (v >> 8) as u8, 0, 0]);
        assert_eq!(exif_orientation(&tiff(&[short(6)], b"")), Ok(Some(6)));
        // Another tag first, then two orientation entries: the last one wins.
        let other = (0x010f, 2, 4, *b"abc\0");
        assert_eq!(
            exif_orientation(&tiff(&[other, short(3), short(8)], b"")),
            Ok(Some(8))
        );
        // LONG and BYTE are integers too; a rational is not followed.
        assert_eq!(
            exif_orientation(&tiff(&[(ORIENTATION, 4, 1, [5, 0, 0, 0])], b"")),
            Ok(Some(5))
        );
        assert_eq!(
            exif_orientation(&tiff(&[(ORIENTATION, 1, 1, [2, 0, 0, 0])], b"")),
            Ok(Some(2))
        );
        assert!(exif_orientation(&tiff(&[(ORIENTATION, 5, 1, [20, 0, 0, 0])], b"")).is_err());
        // An unknown type and an empty entry are skipped.
        assert_eq!(
            exif_orientation(&tiff(&[(ORIENTATION, 99, 1, [6, 0, 0, 0])], b"")),
            Ok(None)
        );
        assert_eq!(
            exif_orientation(&tiff(&[(ORIENTATION, 3, 0, [6, 0, 0, 0])], b"")),
            Ok(None)
        );
        // Several values: the first; out of line, read at its offset.
        let at = 8 + 2 + 12 + 4;
        assert_eq!(
            exif_orientation(&tiff(
                &[(ORIENTATION, 3, 3, (at as u32).to_le_bytes())],
                &[7, 0, 1, 0, 1, 0]
            )),
            Ok(Some(7))
        );
        // Cut in the middle of the values: the entry is lost, as in Pillow.
        assert_eq!(
            exif_orientation(&tiff(
                &[(ORIENTATION, 3, 3, (at as u32).to_le_bytes())],
                &[7, 0, 1]
            )),
            Ok(None)
        );
        // Big-endian.
        let mut be = b"MM\x00\x2a\x00\x00\x00\x08\x00\x01".to_vec();
        be.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0]);
        assert_eq!(exif_orientation(&be), Ok(Some(6)));
        // No TIFF header, or nothing at all.
        assert!(exif_orientation(b"Exif\0\0JUNKJUNK").is_err());
        assert_eq!(exif_orientation(b"Exif\0\0"), Ok(None));
        // An IFD offset past the end: no entries.
        assert_eq!(exif_orientation(b"II\x2a\x00\xff\x00\x00\x00"), Ok(None));
    }

    #[test]
    fn xmp_gives_the_first_digit_after_either_spelling() {
        assert_eq!(xmp_orientation(br#"<x tiff:Orientation="6"/>"#), Some(6));
        assert_eq!(
            xmp_orientation(b"<tiff:Orientation>3</tiff:Orientation>"),
            Some(3)
        );
        assert_eq!(
            xmp_orientation(br#"tiff:Orientation='6' tiff:Orientation="8""#),
            Some(8)
        );
        assert_eq!(xmp_orientation(b"tiff:Orientation=\"x\""), None);
        // EXIF first; XMP only without an EXIF entry.
        let exif = tiff(&[(ORIENTATION, 3, 1, [3, 0, 0, 0])], b"");
        let xmp = br#"tiff:Orientation="6""#;
        assert_eq!(orientation(Some(&exif), Some(xmp)), Orientation::Value(3));
        assert_eq!(
            orientation(Some(&tiff(&[], b"")), Some(xmp)),
            Orientation::Value(6)
        );
        assert_eq!(orientation(None, None), Orientation::Value(1));
    }

    #[test]
    fn transposes_move_every_pixel_where_pillow_puts_it() {
        // 3 x 2, one byte a pixel: a b c / d e f.
        let px = b"abcdef".to_vec();
        let cases: [(u16, &[u8]); 8] = [
            (1, b"abcdef"),
            (2, b"cbafed"),
            (3, b"fedcba"),
            (4, b"defabc"),
            (5, b"adbecf"),
            (6, b"daebfc"),
            (7, b"fcebda"),
            (8, b"cfbead"),
        ];
        for (o, want) in cases {
            assert_eq!(transpose(px.clone(), 3, 2, 1, o), want, "orientation {o}");
        }
        // Wider pixels move whole.
        let two: Vec<u8> = b"aAbBcCdDeEfF".to_vec();
        assert_eq!(transpose(two, 3, 2, 2, 6), b"dDaAeEbBfFcC");
        assert_eq!(oriented_size(6, 3, 2), (2, 3));
        assert_eq!(oriented_size(3, 3, 2), (3, 2));
    }
}

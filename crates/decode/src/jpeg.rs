//! A JPEG marker walk that reads what a decode will need before anything is decoded: the
//! frame size, the components and their sampling, and how many bytes the scans really hold.
//!
//! It lets [`crate::probe`] refuse, in one pass over the bytes and without allocating, a file
//! whose declared blocks cannot be backed by its coded data (the classic "146 bytes that
//! decode to 300 MB of grey"), and estimate the memory the decoder will hold.

use crate::jpeg_choice::JpegDecoder;

/// What the headers of a JPEG say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JpegHeader {
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// Number of components: 1 (grey), 3 (YCbCr or RGB) or 4 (CMYK or YCCK).
    pub(crate) components: u8,
    /// Progressive, or sequential with more than one scan (a first scan that does not name
    /// every component): libjpeg then holds every coefficient of the image at once.
    pub(crate) buffered: bool,
    /// Blocks of all components, padded to whole MCUs (what a coefficient buffer holds).
    pub(crate) padded_blocks: u64,
}

impl JpegHeader {
    /// Bytes the libjpeg-turbo path holds at its peak: the output (`bpp` bytes a pixel, 4 for
    /// CMYK, converted in place), a progressive file's coefficients (64 × i16 a block), row
    /// buffers.
    pub(crate) fn decode_bytes(&self, bpp: u64) -> u64 {
        let pixels = u64::from(self.width) * u64::from(self.height);
        let out = pixels * if self.components == 4 { 4 } else { bpp };
        let coefficients = if self.buffered {
            self.padded_blocks * 128
        } else {
            0
        };
        out + coefficients + u64::from(self.width) * 64 + (1 << 20)
    }
}

/// Scans libjpeg-turbo decodes at most: its `TJFLAG_LIMITSCANS` limit, which releases before
/// 2.1 ignore, so the probe counts them itself.
const MAX_SCANS_LIBJPEG_TURBO: u32 = 500;
/// Scans the pure-Rust decoder (zune-jpeg) decodes at most: its `max_scans` default.
const MAX_SCANS_PURE_RUST: u32 = 100;

/// The most scans `decoder` decodes (a file with more is a CPU bomb: real files have ~10).
pub(crate) fn max_scans(decoder: JpegDecoder) -> u32 {
    match decoder {
        JpegDecoder::LibjpegTurbo => MAX_SCANS_LIBJPEG_TURBO,
        JpegDecoder::PureRust => MAX_SCANS_PURE_RUST,
    }
}

/// SOFn markers that libjpeg decodes (not DHT, JPG or DAC, which share the range).
fn is_sof(marker: u8) -> bool {
    matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc)
}

#[derive(Debug, Clone, Copy, Default)]
struct Component {
    id: u8,
    h: u8,
    v: u8,
    /// Coded by a scan that gives it its DC (sequential) or first DC pass (progressive).
    covered: bool,
}

fn be16(bytes: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(u16::from_be_bytes([
        *bytes.get(at)?,
        *bytes.get(at + 1)?,
    ])))
}

/// Reads the headers and every scan's extent, refusing a file with more than `max_scans`
/// scans. Errors are reasons, reported as invalid JPEG. A header whose coded data cannot back
/// it comes back with the reason beside it, so the caller can check the pixel limit first (a
/// refusal that says more).
pub(crate) fn inspect(
    bytes: &[u8],
    max_scans: u32,
) -> Result<(JpegHeader, Option<String>), String> {
    if !bytes.starts_with(&[0xff, 0xd8]) {
        return Err("no start of image".into());
    }
    let mut at = 2;
    let mut frame: Option<(u32, u32, bool, bool)> = None;
    let mut components: Vec<Component> = Vec::new();
    let mut coded_bytes: u64 = 0;
    let mut scans = 0u32;
    let mut first_scan_components = 0usize;
    let mut ended = false;
    while at < bytes.len() {
        // Bytes that are not a marker are skipped, as libjpeg skips them (warning of
        // "extraneous bytes before marker"): Pillow decodes such files.
        if bytes[at] != 0xff {
            match memchr::memchr(0xff, &bytes[at..]) {
                Some(p) => at += p,
                None => break,
            }
        }
        // Any number of 0xFF fill bytes may precede a marker.
        while at < bytes.len() && bytes[at] == 0xff {
            at += 1;
        }
        let Some(&marker) = bytes.get(at) else { break };
        at += 1;
        match marker {
            0x00 => continue, // a stuffed zero outside a scan: libjpeg discards it too
            0xd9 => {
                ended = true;
                break;
            }
            0xd0..=0xd7 | 0x01 => continue, // standalone markers
            0xd8 => return Err("a second start of image".into()),
            _ => {}
        }
        let len = be16(bytes, at).ok_or("truncated marker segment")?;
        if len < 2 || at + len > bytes.len() {
            return Err("truncated marker segment".into());
        }
        let segment = &bytes[at + 2..at + len];
        at += len;
        if is_sof(marker) {
            if frame.is_some() {
                return Err("more than one frame header".into());
            }
            let (progressive, arithmetic) = (marker & 0x03 == 2, marker >= 0xc9);
            if segment.len() < 6 {
                return Err("short frame header".into());
            }
            if segment[0] != 8 {
                return Err(format!("unsupported: {}-bit samples", segment[0]));
            }
            let height = be16(segment, 1).unwrap_or(0) as u32;
            let width = be16(segment, 3).unwrap_or(0) as u32;
            let count = usize::from(segment[5]);
            if height == 0 || width == 0 {
                return Err("unsupported: zero height in the frame header (DNL)".into());
            }
            if !matches!(count, 1 | 3 | 4) || segment.len() < 6 + 3 * count {
                return Err(format!("unsupported: {count} components"));
            }
            for c in segment[6..6 + 3 * count].chunks_exact(3) {
                let (h, v) = (c[1] >> 4, c[1] & 0x0f);
                if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
                    return Err("bad sampling factors".into());
                }
                components.push(Component {
                    id: c[0],
                    h,
                    v,
                    covered: false,
                });
            }
            frame = Some((width, height, progressive, arithmetic));
        } else if marker == 0xda {
            let Some((_, _, progressive, _)) = frame else {
                return Err("scan before frame header".into());
            };
            let count = usize::from(*segment.first().ok_or("short scan header")?);
            if count == 0 || segment.len() < 1 + 2 * count + 3 {
                return Err("short scan header".into());
            }
            let ss = segment[1 + 2 * count];
            let ah = segment[3 + 2 * count] >> 4;
            let gives_dc = !progressive || (ss == 0 && ah == 0);
            for sel in segment[1..1 + 2 * count].chunks_exact(2) {
                let c = components
                    .iter_mut()
                    .find(|c| c.id == sel[0])
                    .ok_or("scan names an unknown component")?;
                c.covered |= gives_dc;
            }
            if scans == 0 {
                first_scan_components = count;
            }
            scans += 1;
            if scans > max_scans {
                return Err(format!("unsupported: more than {max_scans} scans"));
            }
            // Skip the entropy-coded data: it ends at the first marker that is neither a
            // stuffed zero nor a restart marker.
            let start = at;
            loop {
                match memchr::memchr(0xff, &bytes[at..]) {
                    None => {
                        at = bytes.len();
                        break;
                    }
                    Some(p) => {
                        at += p;
                        match bytes.get(at + 1) {
                            Some(0x00 | 0xd0..=0xd7 | 0xff) => at += 1,
                            _ => break,
                        }
                    }
                }
            }
            coded_bytes += (at - start) as u64;
        }
    }
    let (width, height, progressive, arithmetic) = frame.ok_or("no frame header")?;
    if scans == 0 {
        return Err("no scan".into());
    }
    if !ended {
        return Err("truncated (no end of image)".into());
    }
    let hmax = u64::from(components.iter().map(|c| c.h).max().unwrap_or(1));
    let vmax = u64::from(components.iter().map(|c| c.v).max().unwrap_or(1));
    let (w, h) = (u64::from(width), u64::from(height));
    let (mcu_x, mcu_y) = (w.div_ceil(8 * hmax), h.div_ceil(8 * vmax));
    let mut padded_blocks = 0u64;
    let mut least_blocks = 0u64;
    for c in &components {
        let (ch, cv) = (u64::from(c.h), u64::from(c.v));
        padded_blocks += mcu_x * ch * mcu_y * cv;
        // A component's own blocks (what a non-interleaved scan codes): a lower bound.
        least_blocks += (w * ch).div_ceil(hmax).div_ceil(8) * (h * cv).div_ceil(vmax).div_ceil(8);
        if !c.covered {
            return Err(format!("truncated: component {} is never coded", c.id));
        }
    }
    // Huffman coding spends at least one bit on every block's DC (and a sequential block one
    // more on its end-of-block code). Arithmetic coding can go below a bit, so it is exempt.
    let least_bits = least_blocks * if progressive { 1 } else { 2 };
    let unbacked = (!arithmetic && coded_bytes.saturating_mul(8) < least_bits).then(|| {
        format!(
            "truncated: {width}x{height} needs at least {} bytes of coded data, the scans hold {coded_bytes}",
            least_bits.div_ceil(8)
        )
    });
    let header = JpegHeader {
        width,
        height,
        components: components.len() as u8,
        buffered: progressive || first_scan_components < components.len(),
        padded_blocks,
    };
    Ok((header, unbacked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_scan_cannot_back_a_large_frame() {
        let bytes = mmcache_test_support::images::jpeg_empty_scan(10_000, 10_000);
        let (header, unbacked) = inspect(&bytes, 500).unwrap();
        assert_eq!((header.width, header.height), (10_000, 10_000));
        assert!(unbacked.unwrap().starts_with("truncated"));
    }

    #[test]
    fn real_files_pass_and_report_their_frame() {
        let jpeg = mmcache_test_support::images::jpeg(64, 48, 3);
        let (h, unbacked) = inspect(&jpeg, 500).unwrap();
        assert_eq!(unbacked, None);
        assert_eq!((h.width, h.height, h.components), (64, 48, 3));
        assert!(!h.buffered);
        // Cut anywhere after the scan starts: refused.
        let sos = jpeg.windows(2).position(|w| w == [0xff, 0xda]).unwrap();
        assert!(inspect(&jpeg[..sos + 20], 500).is_err());
    }
}

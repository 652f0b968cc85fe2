//! WebP: `image` (image-webp) decodes it; one difference from Pillow is undone here.
//!
//! Pillow reads every WebP through libwebp's animation decoder, which draws the first frame of
//! an animation onto a cleared canvas as a key frame, without blending. image-webp blends it
//! onto transparent black, and its integer blend loses a level on every channel. Clearing the
//! first frame's blend bit (in a copy, only when it is set) gives libwebp's pixels.

use std::borrow::Cow;

/// Offset of the flags byte in an ANMF payload: X, Y, width, height, duration (3 bytes each).
const ANMF_FLAGS: usize = 15;
/// Set: "do not blend".
const NO_BLEND: u8 = 0b10;

/// `bytes` with the first animation frame's blend bit cleared to "do not blend".
pub(crate) fn first_frame_unblended(bytes: &[u8]) -> Cow<'_, [u8]> {
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WEBP" {
        return Cow::Borrowed(bytes);
    }
    let mut at = 12usize;
    while let Some(header) = bytes.get(at..at.saturating_add(8)) {
        let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if &header[..4] == b"ANMF" {
            let flags = at + 8 + ANMF_FLAGS;
            return match bytes.get(flags) {
                Some(&f) if f & NO_BLEND == 0 => {
                    let mut patched = bytes.to_vec();
                    patched[flags] |= NO_BLEND;
                    Cow::Owned(patched)
                }
                _ => Cow::Borrowed(bytes),
            };
        }
        // Chunks are padded to an even size.
        match at
            .checked_add(8)
            .and_then(|a| a.checked_add(size))
            .and_then(|a| a.checked_add(size & 1))
        {
            Some(next) if next < bytes.len() => at = next,
            _ => break,
        }
    }
    Cow::Borrowed(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut out = kind.to_vec();
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        if payload.len() % 2 == 1 {
            out.push(0);
        }
        out
    }

    fn riff(chunks: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = chunks.concat();
        let mut out = b"RIFF".to_vec();
        out.extend_from_slice(&(4 + body.len() as u32).to_le_bytes());
        out.extend_from_slice(b"WEBP");
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn only_the_first_frame_is_patched_and_only_when_it_blends() {
        let blended = chunk(b"ANMF", &[0; 16]);
        let mut second = [0u8; 16];
        second[ANMF_FLAGS] = 0;
        let file = riff(&[
            chunk(b"VP8X", &[0x12; 10]),
            chunk(b"ICCP", &[7; 3]), // odd: padded
            chunk(b"ANIM", &[0; 6]),
            blended,
            chunk(b"ANMF", &second),
        ]);
        let out = first_frame_unblended(&file);
        assert!(matches!(out, Cow::Owned(_)));
        let changed: Vec<usize> = (0..file.len()).filter(|&i| out[i] != file[i]).collect();
        // RIFF header 12, VP8X 18, ICCP 8 + 3 + 1 pad, ANIM 14: the first ANMF payload at 64.
        assert_eq!(changed, vec![64 + ANMF_FLAGS]);
        assert_eq!(out[64 + ANMF_FLAGS], NO_BLEND);

        // Already unblended, a still image, a cut or lying chunk size: borrowed, unchanged.
        assert!(matches!(first_frame_unblended(&out), Cow::Borrowed(_)));
        let still = riff(&[chunk(b"VP8L", &[1, 2, 3])]);
        assert!(matches!(first_frame_unblended(&still), Cow::Borrowed(_)));
        assert!(matches!(
            first_frame_unblended(&file[..70]),
            Cow::Borrowed(_)
        ));
        let mut lying = file.clone();
        lying[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(first_frame_unblended(&lying), Cow::Borrowed(_)));
    }
}

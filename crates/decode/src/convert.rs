//! vLLM's conversion of a transparent image to RGB (`convert_image_mode(image, "RGB",
//! background)`): Pillow's `convert("RGBA")`, then `Image.new("RGB", size, background)` with
//! the RGBA image pasted over it through its alpha band.

use crate::layout::PixelLayout;
use crate::mode::{Mode, Raster, Transparency};

/// Pillow's `convert("RGBA")` of a transparent raster (RGB stored in Pillow's 4-byte layout),
/// 4 bytes a pixel; `None` for a mode or transparency whose conversion is not reproduced here
/// (16-bit grey, a CMYK image).
pub(crate) fn to_rgba(raster: Raster) -> Option<Vec<u8>> {
    let Raster {
        mode,
        mut pixels,
        palette,
        transparency,
        ..
    } = raster;
    match (mode, transparency) {
        // `LA` is stored L, L, L, A: its RGBA conversion is the same bytes.
        (Mode::Rgba | Mode::La, _) => Some(pixels),
        (Mode::P, t) => {
            let palette = palette.as_deref().unwrap_or(&[]);
            // The palette as Pillow's RGBA conversion reads it: entries past the palette are
            // black; alphas from tRNS (one transparent index, or one alpha an entry).
            let mut table = [[0u8, 0, 0, 255]; 256];
            for (entry, rgb) in table.iter_mut().zip(palette.chunks_exact(3)) {
                entry[..3].copy_from_slice(rgb);
            }
            match t {
                Some(Transparency::Index(i)) => table[usize::from(i)][3] = 0,
                Some(Transparency::Alphas(alphas)) => {
                    for (entry, &a) in table.iter_mut().zip(alphas.iter()) {
                        entry[3] = a;
                    }
                }
                _ => {}
            }
            Some(pixels.iter().flat_map(|&i| table[usize::from(i)]).collect())
        }
        // A transparent colour: Pillow's `convert_transparent`, alpha 0 where the stored value
        // equals the tRNS number (which may be a 16-bit one that never does).
        (Mode::L | Mode::One, Some(Transparency::Grey(t))) => Some(
            pixels
                .iter()
                .flat_map(|&v| [v, v, v, if u16::from(v) == t { 0 } else { 255 }])
                .collect(),
        ),
        // Stored RGBX: the raster path decodes in Pillow's layout.
        (Mode::Rgb, Some(Transparency::Rgb(t))) if pixels.len() % 4 == 0 => {
            for px in pixels.chunks_exact_mut(4) {
                let same = px[..3].iter().zip(t).all(|(&v, t)| u16::from(v) == t);
                px[3] = if same { 0 } else { 255 };
            }
            Some(pixels)
        }
        _ => None,
    }
}

/// Pillow's `DIV255`: `(v + 128 + ((v + 128) >> 8)) >> 8`, exact division by 255 rounded.
fn div255(v: u32) -> u8 {
    let t = v + 128;
    (((t >> 8) + t) >> 8) as u8
}

/// `Image.new("RGB", size, background).paste(rgba, mask=alpha)`: every byte of Pillow's
/// 4-byte RGB pixel (its fourth byte 255) blended with the RGBA pixel's through its alpha,
/// `DIV255(out * (255 - a) + in * a)`. In `layout` (the fourth byte dropped for RGB).
pub(crate) fn composite(rgba: &[u8], background: [u8; 3], layout: PixelLayout) -> Vec<u8> {
    let under = [background[0], background[1], background[2], 255];
    let bpp = layout.bytes_per_pixel();
    let mut out = Vec::with_capacity(rgba.len() / 4 * bpp);
    for px in rgba.chunks_exact(4) {
        let a = u32::from(px[3]);
        let blend = |i: usize| div255(u32::from(under[i]) * (255 - a) + u32::from(px[i]) * a);
        match a {
            255 => out.extend_from_slice(&px[..bpp]),
            0 => out.extend_from_slice(&under[..bpp]),
            _ => (0..bpp).for_each(|i| out.push(blend(i))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn div255_is_exact_rounding() {
        for v in 0..=255u32 * 255 {
            assert_eq!(u32::from(div255(v)), (v * 2 + 255) / 510, "{v}");
        }
    }

    #[test]
    fn composite_blends_every_byte_over_the_background() {
        let rgba = [10, 20, 30, 255, 10, 20, 30, 0, 200, 100, 0, 128];
        let out = composite(&rgba, [255, 255, 255], PixelLayout::Rgbx);
        assert_eq!(&out[..8], &[10, 20, 30, 255, 255, 255, 255, 255]);
        // 200 * 128 + 255 * 127 = 57985 -> 227; 100 -> 177; 0 -> 127; 255 * 127 + 128 * 128 -> 191.
        assert_eq!(&out[8..], &[227, 177, 127, 191]);
        let rgb = composite(&rgba, [0, 0, 0], PixelLayout::Rgb);
        assert_eq!(rgb.len(), 9);
        assert_eq!(&rgb[6..], &[100, 50, 0]);
    }

    #[test]
    fn palette_and_colour_transparency_become_alpha() {
        let p = Raster {
            mode: Mode::P,
            pixels: vec![0, 1, 2],
            palette: Some(Arc::from(&[1u8, 2, 3, 4, 5, 6][..])),
            transparency: Some(Transparency::Index(1)),
            unlike_pillow: None,
        };
        assert_eq!(
            to_rgba(p).unwrap(),
            [1, 2, 3, 255, 4, 5, 6, 0, 0, 0, 0, 255]
        );
        let l = Raster {
            mode: Mode::L,
            pixels: vec![7, 8],
            palette: None,
            transparency: Some(Transparency::Grey(8)),
            unlike_pillow: None,
        };
        assert_eq!(to_rgba(l).unwrap(), [7, 7, 7, 255, 8, 8, 8, 0]);
        let deep = Raster {
            mode: Mode::I16,
            pixels: vec![0, 1],
            palette: None,
            transparency: Some(Transparency::Grey(256)),
            unlike_pillow: None,
        };
        assert_eq!(to_rgba(deep), None);
    }
}

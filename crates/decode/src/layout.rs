//! How a decoded image's pixels are laid out in memory: 3 bytes a pixel, or 4 as Pillow keeps
//! its RGB images.

use std::str::FromStr;

/// The memory layout of a [`DecodedImage`](crate::DecodedImage)'s pixels: row-major, no padding
/// between rows, either way.
///
/// The pixel values are the same in both: Pillow's `Image.open(b).convert("RGB")`. `Rgbx` adds
/// a fourth byte to every pixel, the one Pillow itself holds for a mode `RGB` image
/// (`im.tobytes("raw", "RGBX")` shows it): 255, except for an 8-bit grey+alpha PNG, whose
/// alpha Pillow's conversion keeps there. A PIL image can then read the pixels in place. A
/// loader chooses one layout for all its images (the Python package's loaders choose `Rgbx`);
/// the default is `Rgb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PixelLayout {
    /// 3 bytes a pixel: R, G, B (`width * height * 3` bytes). The default.
    #[default]
    Rgb,
    /// 4 bytes a pixel: R, G, B and Pillow's fourth byte (`width * height * 4` bytes):
    /// Pillow's storage of RGB.
    Rgbx,
}

impl PixelLayout {
    /// The most bytes a pixel takes in any layout (for sizing before the layout is known).
    pub const MAX_BYTES_PER_PIXEL: usize = 4;

    /// Bytes a pixel: 3 or 4.
    pub const fn bytes_per_pixel(self) -> usize {
        match self {
            Self::Rgb => 3,
            Self::Rgbx => 4,
        }
    }

    /// `"rgb"` or `"rgbx"`: the spelling [`FromStr`] reads.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Rgb => "rgb",
            Self::Rgbx => "rgbx",
        }
    }
}

impl std::fmt::Display for PixelLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PixelLayout {
    type Err = ();

    /// `rgb` or `rgbx`, in any case, blanks around ignored.
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.trim().to_ascii_lowercase().as_str() {
            "rgb" => Ok(Self::Rgb),
            "rgbx" => Ok(Self::Rgbx),
            _ => Err(()),
        }
    }
}

/// `rgb` (3 bytes a pixel) in `layout`: itself for `Rgb`; for `Rgbx` the pixels spread to 4
/// bytes in place (the buffer grows once, then is filled from its end).
pub(crate) fn rgb_into(mut rgb: Vec<u8>, layout: PixelLayout) -> Vec<u8> {
    if layout == PixelLayout::Rgb {
        return rgb;
    }
    let pixels = rgb.len() / 3;
    rgb.resize(pixels * 4, 255);
    // From the last pixel down: pixel i moves from 3i to 4i >= 3i, never over one not yet
    // moved.
    for i in (0..pixels).rev() {
        let (from, to) = (3 * i, 4 * i);
        rgb.copy_within(from..from + 3, to);
        rgb[to + 3] = 255;
    }
    rgb
}

/// Pixels of `rgb` (3 bytes each) copied into `out` (`bpp` bytes each, which already hold the
/// fourth byte when `bpp` is 4).
pub(crate) fn put_rgb(rgb: &[u8], out: &mut [u8], bpp: usize) {
    if bpp == 3 {
        out.copy_from_slice(&rgb[..out.len()]);
        return;
    }
    for (px, o) in rgb.chunks_exact(3).zip(out.chunks_exact_mut(bpp)) {
        o[..3].copy_from_slice(px);
    }
}

/// The RGB bytes of `pixels` in `layout` (a copy without the fourth bytes for `Rgbx`).
pub(crate) fn to_rgb(pixels: &[u8], layout: PixelLayout) -> std::borrow::Cow<'_, [u8]> {
    match layout {
        PixelLayout::Rgb => std::borrow::Cow::Borrowed(pixels),
        PixelLayout::Rgbx => {
            let mut rgb = Vec::with_capacity(pixels.len() / 4 * 3);
            for px in pixels.chunks_exact(4) {
                rgb.extend_from_slice(&px[..3]);
            }
            std::borrow::Cow::Owned(rgb)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rgb_spreads_to_rgbx_in_place_with_255() {
        let rgb: Vec<u8> = (0..30).collect();
        let rgbx = rgb_into(rgb.clone(), PixelLayout::Rgbx);
        assert_eq!(rgbx.len(), 40);
        for (i, px) in rgbx.chunks_exact(4).enumerate() {
            assert_eq!(&px[..3], &rgb[3 * i..3 * i + 3]);
            assert_eq!(px[3], 255);
        }
        assert_eq!(to_rgb(&rgbx, PixelLayout::Rgbx).as_ref(), &rgb[..]);
        assert_eq!(rgb_into(rgb.clone(), PixelLayout::Rgb), rgb);
        assert!(matches!(
            to_rgb(&rgb, PixelLayout::Rgb),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn layouts_parse_and_print() {
        for layout in [PixelLayout::Rgb, PixelLayout::Rgbx] {
            assert_eq!(layout.as_str().parse(), Ok(layout));
            assert_eq!(layout.to_string(), layout.as_str());
        }
        assert_eq!(" RGBX ".parse(), Ok(PixelLayout::Rgbx));
        assert_eq!("rgba".parse::<PixelLayout>(), Err(()));
        assert_eq!(PixelLayout::default(), PixelLayout::Rgb);
    }
}

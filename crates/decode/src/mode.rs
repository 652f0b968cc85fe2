//! A decoded image's mode, as Pillow names it, and what Pillow keeps beside the pixels of some
//! modes (a palette, a transparent colour or palette entry).

use std::sync::Arc;

use crate::layout::PixelLayout;

/// The mode of a decoded image's pixels, as Pillow names it, each stored as Pillow stores it
/// (so a PIL image can map the pixels without a copy):
///
/// | mode | bytes a pixel | storage |
/// |---|---|---|
/// | `1` | 1 | 0 or 255 |
/// | `L`, `P` | 1 | the grey value, the palette index |
/// | `I;16` | 2 | little-endian 16-bit grey |
/// | `LA` | 4 | L, L, L, A |
/// | `RGB` | 3 or 4 | R, G, B (and Pillow's fourth byte with [`PixelLayout::Rgbx`]) |
/// | `RGBA`, `CMYK` | 4 | R, G, B, A; C, M, Y, K |
///
/// Every image of the default profile is `RGB`; the others come from
/// [`ColorPolicy::Original`](crate::ColorPolicy::Original).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Bilevel: 0 or 255 a pixel.
    One,
    /// 8-bit grey.
    L,
    /// 8-bit grey with alpha.
    La,
    /// 8-bit palette indices ([`DecodedImage::palette`](crate::DecodedImage::palette)).
    P,
    /// RGB, in the image's [`PixelLayout`].
    Rgb,
    /// RGB with alpha.
    Rgba,
    /// 16-bit grey, little-endian.
    I16,
    /// CMYK, as Pillow reads a JPEG's (Adobe-inverted samples).
    Cmyk,
    /// Not decoded: the bytes, in [`DecodedImage::source`](crate::DecodedImage::source), are
    /// for the caller's own decoder ([`Fallback::Caller`](crate::Fallback::Caller)). No pixels.
    Undecoded,
}

impl Mode {
    /// Pillow's name: `"1"`, `"L"`, `"LA"`, `"P"`, `"RGB"`, `"RGBA"`, `"I;16"`, `"CMYK"`;
    /// `""` for [`Mode::Undecoded`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::One => "1",
            Self::L => "L",
            Self::La => "LA",
            Self::P => "P",
            Self::Rgb => "RGB",
            Self::Rgba => "RGBA",
            Self::I16 => "I;16",
            Self::Cmyk => "CMYK",
            Self::Undecoded => "",
        }
    }

    /// Bytes a pixel takes in storage (`layout` decides for `RGB`).
    pub const fn bytes_per_pixel(self, layout: PixelLayout) -> usize {
        match self {
            Self::One | Self::L | Self::P => 1,
            Self::I16 => 2,
            Self::La | Self::Rgba | Self::Cmyk => 4,
            Self::Rgb => layout.bytes_per_pixel(),
            Self::Undecoded => 0,
        }
    }

    /// Whether Pillow counts an image of this mode as transparent by its mode alone.
    pub(crate) const fn has_alpha(self) -> bool {
        matches!(self, Self::La | Self::Rgba)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pillow's `info["transparency"]` of an image opened in a mode without alpha: the colour or
/// palette entries drawn transparent by a conversion to RGBA.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transparency {
    /// One fully transparent palette index (an `int` in Pillow).
    Index(u8),
    /// An alpha value for each palette entry from the first (`bytes` in Pillow); entries past
    /// the end are opaque.
    Alphas(Arc<[u8]>),
    /// A transparent grey value (`int`; of mode `1`, 0 or 255).
    Grey(u16),
    /// A transparent RGB colour (`(r, g, b)`).
    Rgb([u16; 3]),
}

/// What Pillow opened, before any conversion: the mode, and whether the image has
/// transparency (an alpha channel, or `transparency` in its info), which is what vLLM's
/// conversion looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opened {
    /// The mode `Image.open` gives.
    pub mode: Mode,
    /// An alpha mode, or a transparent colour or palette entry.
    pub transparent: bool,
}

/// A decoded image in a mode of Pillow's, before any conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Raster {
    pub(crate) mode: Mode,
    /// Pillow's storage of `mode` (RGB in the layout the raster was made with).
    pub(crate) pixels: Vec<u8>,
    pub(crate) palette: Option<Arc<[u8]>>,
    pub(crate) transparency: Option<Transparency>,
    /// Why this is not the image Pillow holds in its original mode, though its conversions
    /// are Pillow's (a quirk of Pillow's not reproduced).
    pub(crate) unlike_pillow: Option<&'static str>,
}

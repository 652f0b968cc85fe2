//! What a decode gives: the decode profile, chosen once per load, before any byte is read.
//!
//! Engines differ in the pixels they hand their models for the same bytes: Dynamo's
//! `ImageLoader` converts with Pillow's `convert("RGB")` (alpha dropped), vLLM applies the
//! EXIF orientation and composites transparency onto a background colour, SGLang keeps the mode
//! Pillow opened. A [`DecodeProfile`] names one of these; the decode follows it, and the
//! profile is part of the decoded cache's key (through [`DecodeProfile::variant`]), so images
//! of two profiles never alias. Encoded bytes are the same for every profile: the byte tiers
//! share them.

use crate::layout::PixelLayout;

/// How colours are converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ColorPolicy {
    /// Pillow's `Image.open(b).convert("RGB")`: alpha and transparency dropped, never
    /// composited (Dynamo's `ImageLoader`). The default.
    #[default]
    Rgb,
    /// vLLM's `convert_image_mode(image, "RGB", background)`: an image with transparency
    /// (an alpha channel, or a transparent colour or palette entry) is converted to RGBA and
    /// composited onto `background` as Pillow's `paste` with the alpha as mask does; any other
    /// image is converted as [`ColorPolicy::Rgb`].
    RgbOver {
        /// The colour under transparent pixels (vLLM's `rgba_background_color`).
        background: [u8; 3],
    },
    /// The mode Pillow opens the image in, unconverted ([`Mode`](crate::Mode)): SGLang's
    /// `load_image`, and vLLM with `image_mode=None`.
    Original,
    /// No decode: the bytes come back as they are ([`Mode::Undecoded`](crate::Mode::Undecoded),
    /// [`Undecoded::NotHere`](crate::Undecoded::NotHere)), for media this crate does not
    /// decode (video, audio) that an engine decodes itself. Nothing is checked but the size
    /// cap.
    Encoded,
}

/// Whether the EXIF orientation is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Orientation {
    /// The pixels as stored, whatever the EXIF says (Pillow's `Image.open`). The default.
    #[default]
    AsStored,
    /// Pillow's `ImageOps.exif_transpose`: the orientation of the EXIF (or, without one,
    /// of the XMP `tiff:Orientation`) applied, as vLLM does.
    Exif,
}

/// What happens to bytes this crate cannot decode exactly as the profile's engine would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Fallback {
    /// They are refused with the decode error. The default.
    #[default]
    Error,
    /// They come back undecoded ([`Mode::Undecoded`](crate::Mode::Undecoded), with their
    /// bytes in [`DecodedImage::source`](crate::DecodedImage::source)), for the caller to
    /// decode with the engine's own decoder: a format this crate does not decode (TIFF, BMP,
    /// ...), a mode or metadata it does not reproduce exactly, or a file its decoders refuse
    /// that another decoder might read. The pixel limit and the decode budget still refuse.
    Caller,
}

/// What a decode gives: the pixel layout, the colour conversion, the orientation, whether the
/// encoded bytes are kept with the image, and what happens to bytes this crate cannot decode
/// exactly. Small and `Copy`; chosen once per load.
///
/// The default is what [`decode`](crate::decode) has always given: Pillow's
/// `convert("RGB")`, as stored, 3 bytes a pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct DecodeProfile {
    /// How RGB pixels are laid out (for [`ColorPolicy::Rgb`] and [`ColorPolicy::RgbOver`], and
    /// an RGB image kept in its [`ColorPolicy::Original`] mode).
    pub layout: PixelLayout,
    /// The colour conversion.
    pub color: ColorPolicy,
    /// Whether the EXIF orientation is applied.
    pub orientation: Orientation,
    /// Keep the encoded bytes with the decoded image ([`DecodedImage::source`]): vLLM hashes
    /// them (its mm_hash), so every memory hit must have them. They count toward the cache's
    /// weight.
    ///
    /// [`DecodedImage::source`]: crate::DecodedImage::source
    pub keep_source: bool,
    /// Bytes this crate cannot decode exactly: refused, or handed back undecoded.
    pub fallback: Fallback,
}

/// A profile's share of the decoded cache's key: 32 bytes folded into an identity's digest,
/// all zero for the profile a cache's loads use by default ([`Variant::DEFAULT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Variant([u8; 32]);

impl Variant {
    /// The loader's own profile: keys are the identity's digest, unchanged.
    pub const DEFAULT: Self = Self([0; 32]);

    /// `key` made this variant's (the default leaves it as it is).
    pub fn apply(self, mut key: [u8; 32]) -> [u8; 32] {
        for (k, m) in key.iter_mut().zip(self.0) {
            *k ^= m;
        }
        key
    }

    /// The 32 bytes folded in.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl DecodeProfile {
    /// Dynamo's `ImageLoader` (and every Rust loader by default): `convert("RGB")`, as stored,
    /// in `layout`.
    pub const fn rgb(layout: PixelLayout) -> Self {
        Self {
            layout,
            color: ColorPolicy::Rgb,
            orientation: Orientation::AsStored,
            keep_source: false,
            fallback: Fallback::Error,
        }
    }

    /// vLLM's media connector with `image_mode="RGB"`: EXIF orientation applied, transparency
    /// composited onto `background`, encoded bytes kept (for vLLM's hash), in Pillow's layout;
    /// what is not decoded exactly is handed back for vLLM's own decoder.
    pub const fn vllm_rgb(background: [u8; 3]) -> Self {
        Self {
            layout: PixelLayout::Rgbx,
            color: ColorPolicy::RgbOver { background },
            orientation: Orientation::Exif,
            keep_source: true,
            fallback: Fallback::Caller,
        }
    }

    /// vLLM's media connector with `image_mode=None`: the original mode, EXIF orientation
    /// applied, encoded bytes kept.
    pub const fn vllm_original() -> Self {
        Self {
            layout: PixelLayout::Rgbx,
            color: ColorPolicy::Original,
            orientation: Orientation::Exif,
            keep_source: true,
            fallback: Fallback::Caller,
        }
    }

    /// The encoded bytes alone, for the engine's own decoder ([`ColorPolicy::Encoded`]).
    pub const fn encoded() -> Self {
        Self {
            layout: PixelLayout::Rgbx,
            color: ColorPolicy::Encoded,
            orientation: Orientation::AsStored,
            keep_source: true,
            fallback: Fallback::Caller,
        }
    }

    /// SGLang's `load_image` on the CPU: the original mode, as stored.
    pub const fn sglang() -> Self {
        Self {
            layout: PixelLayout::Rgbx,
            color: ColorPolicy::Original,
            orientation: Orientation::AsStored,
            keep_source: false,
            fallback: Fallback::Caller,
        }
    }

    /// This profile's bytes, one value per distinct profile.
    pub(crate) fn encode(&self) -> [u8; 8] {
        let (color, bg) = match self.color {
            ColorPolicy::Rgb => (0, [0; 3]),
            ColorPolicy::RgbOver { background } => (1, background),
            ColorPolicy::Original => (2, [0; 3]),
            ColorPolicy::Encoded => (3, [0; 3]),
        };
        let layout = match self.layout {
            PixelLayout::Rgb => 0,
            PixelLayout::Rgbx => 1,
        };
        let orientation = match self.orientation {
            Orientation::AsStored => 0,
            Orientation::Exif => 1,
        };
        let fallback = match self.fallback {
            Fallback::Error => 0,
            Fallback::Caller => 1,
        };
        [
            layout,
            color,
            bg[0],
            bg[1],
            bg[2],
            orientation,
            u8::from(self.keep_source),
            fallback,
        ]
    }

    /// The key variant of this profile, for a loader whose own profile is `default`: the
    /// default itself is [`Variant::DEFAULT`] (keys as they always were), any other profile a
    /// keyed blake3 digest of its fields, so no two profiles share an entry.
    pub fn variant(&self, default: &DecodeProfile) -> Variant {
        if self == default {
            return Variant::DEFAULT;
        }
        let mut h = blake3::Hasher::new_derive_key("mmcache 2026-12 decode profile v1");
        Variant(*h.update(&self.encode()).finalize().as_bytes())
    }

    /// A short stable name of the profile's colour policy, for logs and metrics labels.
    pub fn color_name(&self) -> &'static str {
        match self.color {
            ColorPolicy::Rgb => "rgb",
            ColorPolicy::RgbOver { .. } => "rgb_over",
            ColorPolicy::Original => "original",
            ColorPolicy::Encoded => "encoded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_the_variant_and_the_default_is_zero() {
        let base = DecodeProfile::rgb(PixelLayout::Rgbx);
        assert_eq!(base.variant(&base), Variant::DEFAULT);
        let others = [
            DecodeProfile::rgb(PixelLayout::Rgb),
            DecodeProfile::vllm_rgb([255, 255, 255]),
            DecodeProfile::vllm_rgb([255, 255, 254]),
            DecodeProfile::vllm_original(),
            DecodeProfile::sglang(),
            DecodeProfile::encoded(),
            DecodeProfile {
                keep_source: true,
                ..base
            },
            DecodeProfile {
                fallback: Fallback::Caller,
                ..base
            },
            DecodeProfile {
                orientation: Orientation::Exif,
                ..base
            },
        ];
        let mut seen = std::collections::HashSet::new();
        for p in others {
            let v = p.variant(&base);
            assert_ne!(v, Variant::DEFAULT, "{p:?}");
            assert!(seen.insert(v), "two profiles share a variant: {p:?}");
        }
        // Folding is its own inverse, and the default changes nothing.
        let key = [7u8; 32];
        let v = DecodeProfile::sglang().variant(&base);
        assert_ne!(v.apply(key), key);
        assert_eq!(v.apply(v.apply(key)), key);
        assert_eq!(Variant::DEFAULT.apply(key), key);
    }
}

//! The formats mmcache decodes, how they are sniffed and named, and how a codec's refusal
//! becomes an [`Error`]: the types every codec module and the entry points share.

use crate::error::Error;

mmcache_metrics::label_values! {
    /// A raster format mmcache decodes, sniffed from the bytes (never from the URL).
    #[non_exhaustive]
    pub enum ImageFormat: "format" {
        /// JPEG (baseline and progressive, CMYK included).
        Jpeg = "jpeg",
        /// PNG (any bit depth and colour type).
        Png = "png",
        /// WebP (lossy and lossless).
        WebP = "webp",
        /// GIF (first frame).
        Gif = "gif",
    }
}

impl ImageFormat {
    fn bit(self) -> u8 {
        match self {
            Self::Jpeg => 1,
            Self::Png => 2,
            Self::WebP => 4,
            Self::Gif => 8,
        }
    }

    /// The `image` crate's name for this format.
    pub(crate) fn to_image(self) -> image::ImageFormat {
        match self {
            Self::Jpeg => image::ImageFormat::Jpeg,
            Self::Png => image::ImageFormat::Png,
            Self::WebP => image::ImageFormat::WebP,
            Self::Gif => image::ImageFormat::Gif,
        }
    }
}

impl std::str::FromStr for ImageFormat {
    type Err = ();

    /// `jpeg` (or `jpg`), `png`, `webp`, `gif`, in any case.
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        match s.trim().to_ascii_lowercase().as_str() {
            "jpeg" | "jpg" => Ok(Self::Jpeg),
            "png" => Ok(Self::Png),
            "webp" => Ok(Self::WebP),
            "gif" => Ok(Self::Gif),
            _ => Err(()),
        }
    }
}

/// The formats a worker accepts. Default: all four. Dynamo's Python `ImageLoader` accepts
/// JPEG, PNG and WebP only ([`ImageFormats::DYNAMO`]); bytes of another format are refused
/// with [`Error::FormatNotAccepted`] (415) and left in the shared caches for workers that
/// accept them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageFormats(u8);

impl ImageFormats {
    /// JPEG, PNG, WebP and GIF.
    pub const ALL: Self = Self(0b1111);
    /// JPEG, PNG and WebP: what Dynamo's Python `ImageLoader` opens.
    pub const DYNAMO: Self = Self(0b0111);

    /// Whether `format` is accepted.
    pub fn contains(self, format: ImageFormat) -> bool {
        self.0 & format.bit() != 0
    }

    /// True when no format is accepted (every image would be refused).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The accepted formats, in a fixed order.
    pub fn iter(self) -> impl Iterator<Item = ImageFormat> {
        ImageFormat::ALL
            .iter()
            .copied()
            .filter(move |f| self.contains(*f))
    }
}

impl Default for ImageFormats {
    fn default() -> Self {
        Self::ALL
    }
}

impl FromIterator<ImageFormat> for ImageFormats {
    fn from_iter<I: IntoIterator<Item = ImageFormat>>(formats: I) -> Self {
        Self(formats.into_iter().fold(0, |bits, f| bits | f.bit()))
    }
}

impl std::fmt::Display for ImageFormats {
    /// Comma-separated names: `jpeg,png,webp`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.iter().map(ImageFormat::as_str).collect();
        f.write_str(&names.join(","))
    }
}

impl std::fmt::Debug for ImageFormats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImageFormats({self})")
    }
}

impl std::str::FromStr for ImageFormats {
    type Err = String;

    /// A comma-separated list of format names (`jpeg,png,webp`); at least one, each known.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let mut formats = Self(0);
        for name in s.split(',').filter(|n| !n.trim().is_empty()) {
            let format: ImageFormat = name
                .parse()
                .map_err(|()| format!("unknown image format {:?}", name.trim()))?;
            formats.0 |= format.bit();
        }
        if formats.is_empty() {
            return Err("no image format named".into());
        }
        Ok(formats)
    }
}

/// Identifies the format from the magic bytes.
pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    match bytes {
        [0xff, 0xd8, 0xff, ..] => Some(ImageFormat::Jpeg),
        [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => Some(ImageFormat::Png),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some(ImageFormat::WebP),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some(ImageFormat::Gif),
        _ => None,
    }
}

/// A refusal with its reason: `unsupported: …` reasons are [`Error::UnsupportedFeature`]
/// (the decoder's limit, not the bytes' fault), anything else [`Error::Invalid`].
pub(crate) fn refusal(format: ImageFormat, reason: String) -> Error {
    match reason.strip_prefix("unsupported: ") {
        Some(what) => Error::UnsupportedFeature {
            format: format.as_str(),
            reason: what.to_owned(),
        },
        None => Error::Invalid {
            format: format.as_str(),
            reason,
        },
    }
}

//! Which JPEG decoder decodes JPEG files, and how it is chosen at start-up.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::turbo;

mmcache_metrics::label_values! {
    /// Which JPEG decoder decodes JPEG files.
    #[non_exhaustive]
    pub enum JpegDecoder: "decoder" {
        /// libjpeg-turbo, loaded at run time: Pillow's pixels, byte for byte.
        LibjpegTurbo = "libjpeg-turbo",
        /// The pure-Rust decoder (zune-jpeg through `image`): no system library needed, pixels
        /// within a few levels of Pillow's (see docs/decoding.md).
        PureRust = "pure-rust",
    }
}

/// How the JPEG decoder is chosen (`MMCACHE_JPEG_DECODER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum JpegDecoderChoice {
    /// libjpeg-turbo when the library loads, else the pure-Rust decoder (the default).
    #[default]
    Auto,
    /// libjpeg-turbo or a start-up error.
    LibjpegTurbo,
    /// Always the pure-Rust decoder.
    PureRust,
}

impl std::str::FromStr for JpegDecoderChoice {
    type Err = ();

    /// `auto`, `libjpeg-turbo` or `pure-rust`.
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "libjpeg-turbo" => Ok(Self::LibjpegTurbo),
            "pure-rust" => Ok(Self::PureRust),
            _ => Err(()),
        }
    }
}

/// The outcome of choosing a JPEG decoder: which one, and why when it is not the one asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JpegSelection {
    /// The decoder in use.
    pub decoder: JpegDecoder,
    /// The libjpeg-turbo library loaded at run time, when it is in use (`None` when the
    /// linked-in one is: see [`JpegSelection::libjpeg_turbo_version`]).
    pub library: Option<PathBuf>,
    /// The version of the libjpeg-turbo in use, when known: that of the one linked in with the
    /// `vendored-libjpeg-turbo` feature (a library loaded at run time does not say).
    pub libjpeg_turbo_version: Option<&'static str>,
    /// Why `Auto` fell back to the pure-Rust decoder.
    pub fallback_reason: Option<String>,
}

/// Chooses the JPEG decoder once, at start-up: loads libturbojpeg from `library` (or the
/// usual names) unless the choice is [`JpegDecoderChoice::PureRust`].
///
/// # Errors
///
/// [`Error::JpegDecoderUnavailable`] when [`JpegDecoderChoice::LibjpegTurbo`] is asked and the
/// library does not load.
pub fn select_jpeg_decoder(
    choice: JpegDecoderChoice,
    library: Option<&Path>,
) -> Result<JpegSelection> {
    if choice == JpegDecoderChoice::PureRust {
        return Ok(JpegSelection {
            decoder: JpegDecoder::PureRust,
            library: None,
            libjpeg_turbo_version: None,
            fallback_reason: None,
        });
    }
    match turbo::select(library) {
        Ok(t) => Ok(JpegSelection {
            decoder: JpegDecoder::LibjpegTurbo,
            library: t.path().map(Path::to_owned),
            libjpeg_turbo_version: t.version(),
            fallback_reason: None,
        }),
        Err(reason) if choice == JpegDecoderChoice::Auto => Ok(JpegSelection {
            decoder: JpegDecoder::PureRust,
            library: None,
            libjpeg_turbo_version: None,
            fallback_reason: Some(reason),
        }),
        Err(reason) => Err(Error::JpegDecoderUnavailable(reason)),
    }
}

//! Sniffing and bounded decoding to RGB8.

use std::io::Cursor;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use image::{DynamicImage, ImageReader};
use mmcache_scope::ContentKey;

use crate::error::{Error, Result};
use crate::format::{ImageFormat, refusal, sniff};
use crate::jpeg_choice::JpegDecoder;
use crate::layout::{self, PixelLayout};
use crate::limits::DecodeLimits;
use crate::mode::{Mode, Opened, Transparency};
use crate::{gif, jpeg, png, turbo, webp};

/// What the headers of an image say, read before any pixel is decoded: enough to refuse it,
/// or to reserve the memory its decode will hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Probe {
    /// The sniffed format.
    pub format: ImageFormat,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Bytes the decode may hold at its peak (output included), estimated from the headers.
    pub memory_bytes: u64,
    /// The blake3 digest of the bytes probed, computed here once: the decoded image keeps it.
    pub content_key: ContentKey,
    pub(crate) headers: Headers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Headers {
    Jpeg(jpeg::JpegHeader),
    Png(png::PngHeader),
    Gif(gif::GifHeader),
    Other,
}

/// Reads the headers of `bytes` and checks them against `limits`, without decoding.
///
/// # Errors
///
/// [`Error::Empty`], [`Error::Unsupported`], [`Error::Invalid`] (corrupt, or truncated: the
/// coded data cannot back the declared size), [`Error::TooManyPixels`].
pub fn probe(bytes: &[u8], limits: &DecodeLimits) -> Result<Probe> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    let format = sniff(bytes).ok_or(Error::Unsupported)?;
    if !limits.formats.contains(format) {
        return Err(Error::FormatNotAccepted {
            format: format.as_str(),
        });
    }
    let invalid = |reason: String| refusal(format, reason);
    let (width, height, headers, unbacked) = match format {
        ImageFormat::Jpeg => {
            let (h, unbacked) =
                jpeg::inspect(bytes, jpeg::max_scans(limits.jpeg)).map_err(invalid)?;
            (h.width, h.height, Headers::Jpeg(h), unbacked)
        }
        ImageFormat::Png => {
            let (h, unbacked) = png::inspect(bytes).map_err(invalid)?;
            (h.width, h.height, Headers::Png(h), unbacked)
        }
        ImageFormat::Gif => {
            let (h, unbacked) = gif::inspect(bytes)?;
            (h.width, h.height, Headers::Gif(h), unbacked)
        }
        ImageFormat::WebP => {
            let (w, h) = ImageReader::with_format(Cursor::new(bytes), format.to_image())
                .into_dimensions()
                .map_err(|e| invalid(e.to_string()))?;
            (w, h, Headers::Other, None)
        }
    };
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.max_pixels {
        return Err(Error::TooManyPixels {
            width,
            height,
            limit: limits.max_pixels,
        });
    }
    if pixels == 0 {
        return Err(invalid("zero-sized image".into()));
    }
    if let Some(reason) = unbacked {
        return Err(invalid(reason));
    }
    let bpp = limits.layout.bytes_per_pixel() as u64;
    let memory_bytes = match headers {
        Headers::Jpeg(h) if limits.jpeg == JpegDecoder::LibjpegTurbo => h.decode_bytes(bpp),
        Headers::Png(h) => h.decode_bytes(bpp),
        Headers::Gif(h) => h.decode_bytes(bpp),
        // `image` decodes to its own buffer (up to 4 bytes a pixel, 2 more a sample for a
        // progressive JPEG's coefficients), then converts to the layout's `bpp` bytes.
        Headers::Jpeg(h) => pixels * (4 + bpp + 2 * u64::from(h.components)) + (1 << 20),
        // WebP; plus a copy of the file when its first frame's blend bit is cleared.
        Headers::Other => pixels * (4 + bpp) + (1 << 20) + bytes.len() as u64,
    };
    Ok(Probe {
        format,
        width,
        height,
        memory_bytes,
        // Last: refused bytes are never hashed.
        content_key: ContentKey::of(bytes),
        headers,
    })
}
/// A decoded image: Pillow's RGB pixels, row-major, no padding, in the [`PixelLayout`] its
/// loader chose (`width * height * 3` bytes by default, `* 4` with [`PixelLayout::Rgbx`]); or,
/// with another [`DecodeProfile`](crate::DecodeProfile), the pixels that profile gives (in
/// the [`Mode`] it gives, with what Pillow keeps beside them), or no pixels at all
/// ([`Mode::Undecoded`]: bytes for the caller's own decoder).
///
/// Two images are equal when their size, format, layout, mode, palette and pixels are
/// (whichever bytes they came from, whether their vLLM hash was computed yet).
#[derive(Clone)]
pub struct DecodedImage {
    width: u32,
    height: u32,
    /// `None` only for an undecoded image of a format this crate does not decode.
    format: Option<ImageFormat>,
    layout: PixelLayout,
    content_key: ContentKey,
    /// vLLM's hash of these pixels, computed on first use.
    vllm_hash: OnceLock<[u8; 32]>,
    /// A buffer of this process's own, or a read-only view of a host-tier entry mapped from a
    /// memory file system, shared with the host's other processes.
    pixels: Bytes,
    /// The length of the mapped entry the pixels view (header included), 0 when they are this
    /// process's own.
    mapped_len: usize,
    mode: Mode,
    opened: Opened,
    orientation: u16,
    palette: Option<Arc<[u8]>>,
    transparency: Option<Transparency>,
    exif: Option<Arc<[u8]>>,
    xmp: Option<Arc<[u8]>>,
    source: Option<Bytes>,
    encoded_len: usize,
    undecoded: Option<Undecoded>,
}

/// Why an image came back undecoded ([`Mode::Undecoded`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Undecoded {
    /// Bytes of an image this crate does not decode exactly as the profile asks (another
    /// format, a mode or metadata it does not follow): they passed the checks this crate can
    /// make, and a cache may keep them.
    NotHere(String),
    /// Bytes this crate's decoders refused; another decoder may read them, or refuse them in
    /// its own words. A cache keeps none of them.
    Refused(Error),
}

impl PartialEq for DecodedImage {
    fn eq(&self, other: &Self) -> bool {
        (self.width, self.height, self.format, self.layout, self.mode)
            == (
                other.width,
                other.height,
                other.format,
                other.layout,
                other.mode,
            )
            && self.palette == other.palette
            && self.pixels == other.pixels
    }
}

impl Eq for DecodedImage {}

impl std::fmt::Debug for DecodedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedImage")
            .field("width", &self.width)
            .field("height", &self.height)
            .field("format", &self.format)
            .field("mode", &self.mode)
            .field("layout", &self.layout)
            .field("content_key", &self.content_key)
            .finish_non_exhaustive()
    }
}

impl DecodedImage {
    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The format the bytes were in (sniffed from them); `None` only for an undecoded image
    /// ([`Mode::Undecoded`]) whose bytes are of a format this crate does not decode.
    pub fn format(&self) -> Option<ImageFormat> {
        self.format
    }

    /// The blake3 digest of the encoded bytes this image was decoded from, computed once
    /// when they arrived (no rehash on a cache hit). Equal for two URLs of the same bytes.
    pub fn content_key(&self) -> ContentKey {
        self.content_key
    }

    /// vLLM's `MultiModalHasher.hash_kwargs("blake3", image=img)` for the PIL RGB image of
    /// these pixels (vLLM 0.33.0; it hashes pixels, mode and shape, not bytes; the same in
    /// every layout). Computed on the first call (a pass over the pixels) and memoised; never
    /// on the load's path.
    pub fn vllm_hash(&self) -> [u8; 32] {
        *self.vllm_hash.get_or_init(|| {
            crate::vllm::hash(
                self.width,
                self.height,
                &self.pixels,
                self.layout.bytes_per_pixel(),
            )
        })
    }

    /// How [`pixels`](Self::pixels) are laid out: [`PixelLayout::Rgb`] unless the loader chose
    /// another layout.
    pub fn layout(&self) -> PixelLayout {
        self.layout
    }

    /// The pixels, borrowed (no copy), in [`layout`](Self::layout): RGB8, `width * height * 3`
    /// bytes, with the default layout; R, G, B and Pillow's fourth byte (`* 4`) with
    /// [`PixelLayout::Rgbx`]. In another [`mode`](Self::mode), that mode's storage; empty when
    /// undecoded.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// The pixels as a shared handle (a reference count, no copy).
    pub fn pixel_bytes(&self) -> &Bytes {
        &self.pixels
    }

    /// Whether the pixels (and kept bytes) are a read-only mapping of a host-tier entry,
    /// shared with the host's other processes, rather than this process's own memory.
    pub fn is_mapped(&self) -> bool {
        self.mapped_len > 0
    }

    /// The mode of [`pixels`](Self::pixels): [`Mode::Rgb`] unless the profile kept the
    /// original mode, [`Mode::Undecoded`] when the bytes came back for the caller to decode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// What Pillow opened (mode, transparency), before the profile's conversion.
    pub fn opened(&self) -> Opened {
        self.opened
    }

    /// The EXIF orientation applied (2 to 8), or 1 when none was.
    pub fn orientation(&self) -> u16 {
        self.orientation
    }

    /// A `P` image's palette: RGB triplets, as Pillow keeps them.
    pub fn palette(&self) -> Option<&Arc<[u8]>> {
        self.palette.as_ref()
    }

    /// Pillow's `info["transparency"]`, for an image kept in its original mode.
    pub fn transparency(&self) -> Option<&Transparency> {
        self.transparency.as_ref()
    }

    /// Pillow's `info["exif"]`, for an image kept in its original mode.
    pub fn exif(&self) -> Option<&Arc<[u8]>> {
        self.exif.as_ref()
    }

    /// Pillow's `info["xmp"]`, for an image kept in its original mode.
    pub fn xmp(&self) -> Option<&Arc<[u8]>> {
        self.xmp.as_ref()
    }

    /// The encoded bytes this image came from, when its profile keeps them (and always for an
    /// undecoded image).
    pub fn source(&self) -> Option<&Bytes> {
        self.source.as_ref()
    }

    /// Size of the encoded bytes the image came from (kept or not).
    pub fn encoded_len(&self) -> usize {
        self.encoded_len
    }

    /// Why the image is undecoded, for [`Mode::Undecoded`].
    pub fn undecoded(&self) -> Option<&Undecoded> {
        self.undecoded.as_ref()
    }

    /// This image with `source` kept as its encoded bytes.
    pub fn with_source(mut self, source: Bytes) -> Self {
        self.source = Some(source);
        self
    }

    /// The bytes `source`, not decoded here, for the caller's own decoder.
    pub fn undecoded_from(source: Bytes, why: Undecoded) -> Self {
        let mut image = Self::new(
            0,
            0,
            ImageFormat::Png,
            PixelLayout::Rgb,
            ContentKey::of(&source),
            Vec::new(),
        );
        image.format = sniff(&source);
        image.mode = Mode::Undecoded;
        image.opened.mode = Mode::Undecoded;
        image.encoded_len = source.len();
        image.source = Some(source);
        image.undecoded = Some(why);
        image
    }

    /// What the image holds in memory: its pixels, its kept bytes and its metadata, whether
    /// its own or mapped ([`private_len`](Self::private_len) + [`mapped_len`](Self::mapped_len)).
    pub fn memory_len(&self) -> usize {
        self.private_len() + self.mapped_len()
    }

    /// What the image holds in this process's own memory: everything for a decoded image;
    /// only its metadata for a mapped one ([`is_mapped`](Self::is_mapped)).
    pub fn private_len(&self) -> usize {
        let meta = |m: &Option<Arc<[u8]>>| m.as_ref().map_or(0, |m| m.len());
        let own = meta(&self.palette) + meta(&self.exif) + meta(&self.xmp);
        if self.is_mapped() {
            own
        } else {
            own + self.payload_len()
        }
    }

    /// The bytes of the host-tier mapping this image views (the whole entry: header, pixels
    /// and kept bytes); 0 for an image of this process's own.
    pub fn mapped_len(&self) -> usize {
        self.mapped_len
    }

    fn payload_len(&self) -> usize {
        self.pixels.len() + self.source.as_ref().map_or(0, Bytes::len)
    }

    /// An RGB image of `pixels` with nothing beside them.
    pub(crate) fn new(
        width: u32,
        height: u32,
        format: ImageFormat,
        layout: PixelLayout,
        content_key: ContentKey,
        pixels: Vec<u8>,
    ) -> Self {
        Self {
            width,
            height,
            format: Some(format),
            layout,
            content_key,
            vllm_hash: OnceLock::new(),
            pixels: Bytes::from(pixels),
            mapped_len: 0,
            mode: Mode::Rgb,
            opened: Opened {
                mode: Mode::Rgb,
                transparent: false,
            },
            orientation: 1,
            palette: None,
            transparency: None,
            exif: None,
            xmp: None,
            source: None,
            encoded_len: 0,
            undecoded: None,
        }
    }

    /// This image with the pixels and kept bytes of a host-tier entry (views of its bytes),
    /// `mapped_len` the length of the entry mapped (0: read into this process's memory).
    pub(crate) fn with_entry_payload(
        self,
        pixels: Bytes,
        source: Option<Bytes>,
        encoded_len: usize,
        mapped_len: usize,
    ) -> Self {
        Self {
            pixels,
            source,
            encoded_len,
            mapped_len,
            ..self
        }
    }

    pub(crate) fn set_encoded_len(&mut self, len: usize) {
        self.encoded_len = len;
    }

    /// Sets what the profiled decode found beside the pixels.
    pub(crate) fn with_details(self, details: Details) -> Self {
        Self {
            mode: details.mode,
            opened: details.opened,
            orientation: details.orientation,
            palette: details.palette,
            transparency: details.transparency,
            exif: details.exif,
            xmp: details.xmp,
            ..self
        }
    }

    /// The RGB8 pixels, `width * height * 3` bytes: borrowed in the default layout, a copy
    /// without the fourth bytes in [`PixelLayout::Rgbx`].
    pub fn rgb(&self) -> std::borrow::Cow<'_, [u8]> {
        layout::to_rgb(&self.pixels, self.layout)
    }

    /// Size of the pixel buffer in bytes.
    pub fn byte_len(&self) -> usize {
        self.pixels.len()
    }

    /// A blank `width` x `height` image whose content key is `ContentKey::of(bytes)`: the
    /// cache's tests need many distinct contents without decoding each.
    #[cfg(test)]
    pub(crate) fn blank(width: u32, height: u32, bytes: &[u8]) -> Self {
        let pixels = vec![0; width as usize * height as usize * 3];
        Self::new(
            width,
            height,
            ImageFormat::Png,
            PixelLayout::Rgb,
            ContentKey::of(bytes),
            pixels,
        )
    }

    /// Takes the pixel buffer (in [`layout`](Self::layout)): without a copy when this image
    /// holds the only handle to pixels of its own, else a copy.
    pub fn into_pixels(self) -> Vec<u8> {
        Vec::from(self.pixels)
    }
}

impl From<&DecodedImage> for ContentKey {
    fn from(image: &DecodedImage) -> Self {
        image.content_key
    }
}

/// Sniffs, checks the headers against `limits` ([`probe`]), then decodes to RGB8 (in the
/// limits' [`PixelLayout`]).
///
/// # Errors
///
/// [`Error::Empty`], [`Error::Unsupported`] (not a supported raster format),
/// [`Error::Invalid`] (corrupt or truncated), [`Error::TooManyPixels`] (refused from the
/// header, before any pixel is decoded), [`Error::LimitExceeded`].
pub fn decode(bytes: &[u8], limits: &DecodeLimits) -> Result<DecodedImage> {
    let probe = probe(bytes, limits)?;
    decode_probed(bytes, &probe, limits)
}

/// Decodes `bytes` that [`probe`] accepted (with the same `limits`) to the pixels of Pillow's
/// `Image.open(b).convert("RGB")`, in the limits' [`PixelLayout`].
///
/// # Errors
///
/// As [`decode`].
pub fn decode_probed(bytes: &[u8], probe: &Probe, limits: &DecodeLimits) -> Result<DecodedImage> {
    let format = probe.format;
    let bpp = limits.layout.bytes_per_pixel();
    let pixels = match probe.headers {
        Headers::Jpeg(h) if limits.jpeg == JpegDecoder::LibjpegTurbo => {
            let turbo = turbo::active().ok_or_else(|| {
                Error::JpegDecoderUnavailable("libjpeg-turbo is not loaded".into())
            })?;
            turbo
                .decode_rgb(bytes, probe.width, probe.height, h.components == 4, bpp)
                .map_err(|e| turbo_error(format, e))?
        }
        Headers::Png(h) => png::decode_rgb(bytes, &h, probe.memory_bytes, bpp)?,
        Headers::Gif(h) => gif::decode_rgb(bytes, &h, bpp)?,
        _ => layout::rgb_into(decode_with_image(bytes, probe)?, limits.layout),
    };
    // The size comes from the probe; a decoder that read other dimensions (a second SOF)
    // must not yield an image whose pixels do not match it.
    if Some(pixels.len() as u64)
        != u64::from(probe.width).checked_mul(u64::from(probe.height) * bpp as u64)
    {
        return Err(Error::Invalid {
            format: format.as_str(),
            reason: format!(
                "decoded {} bytes for {}x{} pixels",
                pixels.len(),
                probe.width,
                probe.height
            ),
        });
    }
    let mut image = DecodedImage::new(
        probe.width,
        probe.height,
        format,
        limits.layout,
        probe.content_key,
        pixels,
    );
    image.encoded_len = bytes.len();
    Ok(image)
}

/// libjpeg-turbo's refusal as a decode error.
pub(crate) fn turbo_error(format: ImageFormat, e: turbo::TurboError) -> Error {
    match e {
        turbo::TurboError::Truncated(m) => refusal(format, format!("truncated: {m}")),
        turbo::TurboError::Invalid(m) => refusal(format, m),
        turbo::TurboError::OutOfMemory => Error::LimitExceeded,
        turbo::TurboError::Unsupported(m) => refusal(format, format!("unsupported: {m}")),
    }
}

/// What a profiled decode sets beside the pixels (see [`DecodedImage`]'s accessors).
pub(crate) struct Details {
    pub(crate) mode: Mode,
    pub(crate) opened: Opened,
    pub(crate) orientation: u16,
    pub(crate) palette: Option<Arc<[u8]>>,
    pub(crate) transparency: Option<Transparency>,
    pub(crate) exif: Option<Arc<[u8]>>,
    pub(crate) xmp: Option<Arc<[u8]>>,
}

/// The `image` crate's decoders (WebP, and JPEG through zune-jpeg), bounded by the
/// probe's estimate, to RGB8.
fn decode_with_image(bytes: &[u8], probe: &Probe) -> Result<Vec<u8>> {
    Ok(decode_dynamic(bytes, probe)?.into_rgb8().into_raw()) // no copy when already RGB8
}

/// The `image` crate's decode of `bytes`, in the colour type it gives.
pub(crate) fn decode_dynamic(bytes: &[u8], probe: &Probe) -> Result<DynamicImage> {
    let format = probe.format;
    let bytes = match format {
        ImageFormat::WebP => webp::first_frame_unblended(bytes),
        _ => std::borrow::Cow::Borrowed(bytes),
    };
    let mut reader = ImageReader::with_format(Cursor::new(&bytes[..]), format.to_image());
    let mut decoder_limits = image::Limits::default();
    decoder_limits.max_image_width = Some(probe.width);
    decoder_limits.max_image_height = Some(probe.height);
    decoder_limits.max_alloc = Some(probe.memory_bytes);
    reader.limits(decoder_limits);
    reader.decode().map_err(|e| match e {
        image::ImageError::Limits(_) => Error::LimitExceeded,
        image::ImageError::Unsupported(u) => Error::UnsupportedFeature {
            format: format.as_str(),
            reason: u.to_string(),
        },
        other => Error::Invalid {
            format: format.as_str(),
            reason: other.to_string(),
        },
    })
}

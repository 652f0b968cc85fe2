//! libjpeg-turbo through its TurboJPEG API: linked in when built with the
//! `vendored-libjpeg-turbo` feature (libjpeg-turbo built from source by turbojpeg-sys), else
//! loaded at run time (`libturbojpeg.so.0`).
//!
//! Pillow decodes JPEG with libjpeg-turbo (ISLOW DCT, fancy upsampling); so does this path,
//! with the same settings, which gives the same pixels byte for byte. Loaded at run time (the
//! default for Rust users), building needs no C toolchain and a host without the library still
//! decodes (with the pure-Rust decoder, said at start-up and in metrics); linked in (the Python
//! wheel), no host library is needed at all. An explicit path is always loaded at run time.
//! The TurboJPEG 2 entry points are used: libjpeg-turbo 2.x exports them and 3.x keeps them.

// The crate's only unsafe code: calls into a C library through function pointers resolved
// from it. Each call passes buffers whose sizes are checked just before.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_ulong, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

type Handle = *mut c_void;

const TJPF_RGB: c_int = 0;
const TJPF_RGBX: c_int = 2;
const TJPF_GRAY: c_int = 6;
const TJPF_CMYK: c_int = 11;
const TJERR_WARNING: c_int = 0;
/// Refuse files with more than 500 scans (a CPU bomb; real files have ~10). Releases before
/// 2.1 ignore the flag: the probe counts scans itself (`jpeg::max_scans`).
const TJFLAG_LIMITSCANS: c_int = 32768;

/// The library names tried, in order, when no path is configured (and none is linked in).
#[cfg(not(feature = "vendored-libjpeg-turbo"))]
const NAMES: [&str; 4] = [
    "libturbojpeg.so.0",
    "libturbojpeg.so",
    "libturbojpeg.0.dylib",
    "libturbojpeg.dylib",
];

/// The resolved TurboJPEG entry points; the library stays loaded for the process' life.
pub(crate) struct Turbo {
    /// Where it was loaded from; `None` when linked in.
    path: Option<PathBuf>,
    /// libjpeg-turbo's version, known when linked in (a loaded library does not say).
    version: Option<&'static str>,
    init: unsafe extern "C" fn() -> Handle,
    decompress: unsafe extern "C" fn(
        Handle,
        *const u8,
        c_ulong,
        *mut u8,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
    ) -> c_int,
    error_str: unsafe extern "C" fn(Handle) -> *mut c_char,
    error_code: unsafe extern "C" fn(Handle) -> c_int,
    destroy: unsafe extern "C" fn(Handle) -> c_int,
    _library: Option<libloading::Library>,
}

impl std::fmt::Debug for Turbo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turbo")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

static DEFAULT: OnceLock<Result<&'static Turbo, String>> = OnceLock::new();

/// The library from `path`, or else the linked-in one (with `vendored-libjpeg-turbo`), or else
/// the first of the usual names found; loaded once.
pub(crate) fn load(path: Option<&Path>) -> Result<&'static Turbo, String> {
    match path {
        // An explicit path is a deployment choice, made once at start-up: load it as asked.
        Some(path) => open(path).map(|t| &*Box::leak(Box::new(t))),
        #[cfg(feature = "vendored-libjpeg-turbo")]
        None => DEFAULT.get_or_init(|| Ok(&VENDORED)).clone(),
        #[cfg(not(feature = "vendored-libjpeg-turbo"))]
        None => DEFAULT
            .get_or_init(|| {
                let mut reasons = Vec::new();
                for name in NAMES {
                    match open(Path::new(name)) {
                        Ok(t) => return Ok(&*Box::leak(Box::new(t))),
                        Err(e) => reasons.push(e),
                    }
                }
                Err(reasons.join("; "))
            })
            .clone(),
    }
}

fn open(path: &Path) -> Result<Turbo, String> {
    let fail = |e: libloading::Error| format!("{}: {e}", path.display());
    // SAFETY: loading libturbojpeg runs its (trivial) initialisers; every symbol is then
    // resolved with the signature turbojpeg.h gives it, and the library is never unloaded
    // while the pointers live (it is owned by the same struct, which is leaked).
    unsafe {
        let library = libloading::Library::new(path.as_os_str()).map_err(fail)?;
        Ok(Turbo {
            path: Some(path.to_owned()),
            version: None,
            init: *library.get(b"tjInitDecompress\0").map_err(fail)?,
            decompress: *library.get(b"tjDecompress2\0").map_err(fail)?,
            error_str: *library.get(b"tjGetErrorStr2\0").map_err(fail)?,
            error_code: *library.get(b"tjGetErrorCode\0").map_err(fail)?,
            destroy: *library.get(b"tjDestroy\0").map_err(fail)?,
            _library: Some(library),
        })
    }
}

/// libjpeg-turbo as linked into this binary (built from source by turbojpeg-sys).
#[cfg(feature = "vendored-libjpeg-turbo")]
static VENDORED: Turbo = Turbo {
    path: None,
    version: Some(env!("MMCACHE_LIBJPEG_TURBO_VERSION")),
    init: turbojpeg_sys::tjInitDecompress,
    decompress: turbojpeg_sys::tjDecompress2,
    error_str: turbojpeg_sys::tjGetErrorStr2,
    error_code: turbojpeg_sys::tjGetErrorCode,
    destroy: turbojpeg_sys::tjDestroy,
    _library: None,
};

static SELECTED: OnceLock<&'static Turbo> = OnceLock::new();

/// Makes the library from `path` (or the usual names) the one decodes use. A process uses
/// one libturbojpeg: asking for another path once one is selected is an error.
pub(crate) fn select(path: Option<&Path>) -> Result<&'static Turbo, String> {
    let selected = match SELECTED.get() {
        Some(t) => *t,
        None => {
            let t = load(path)?;
            *SELECTED.get_or_init(|| t)
        }
    };
    match (path, selected.path()) {
        (Some(p), Some(loaded)) if p != loaded => Err(format!(
            "libturbojpeg is already loaded from {}; a process uses one",
            loaded.display()
        )),
        (Some(_), None) => Err("libjpeg-turbo is linked in and already in use; a process \
             uses one"
            .into()),
        _ => Ok(selected),
    }
}

/// The selected library, else the usual names if one loads.
pub(crate) fn active() -> Option<&'static Turbo> {
    SELECTED.get().copied().or_else(|| load(None).ok())
}

/// Why libjpeg-turbo did not give an image.
#[derive(Debug)]
pub(crate) enum TurboError {
    /// The data ends before the image does (a scan cut short, or no more data).
    Truncated(String),
    /// libjpeg-turbo ran out of memory.
    OutOfMemory,
    /// A valid file this libjpeg-turbo cannot decode (lossless on 2.x, ...), or no handle.
    Unsupported(String),
    /// Anything else libjpeg-turbo refused: the bytes are corrupt.
    Invalid(String),
}

impl TurboError {
    /// Sorts a fatal libjpeg message: only corrupt data counts as `Invalid`.
    fn fatal(message: String) -> Self {
        let lower = message.to_ascii_lowercase();
        if lower.contains("insufficient memory") {
            Self::OutOfMemory
        } else if lower.contains("unsupported") || lower.contains("not supported") {
            Self::Unsupported(message)
        } else {
            Self::Invalid(message)
        }
    }
}

/// A decompressor handle, destroyed on drop.
struct Decompressor<'a> {
    turbo: &'a Turbo,
    handle: Handle,
}

impl Drop for Decompressor<'_> {
    fn drop(&mut self) {
        // SAFETY: `handle` came from tjInitDecompress and is destroyed once.
        unsafe { (self.turbo.destroy)(self.handle) };
    }
}

impl Decompressor<'_> {
    fn message(&self) -> String {
        // SAFETY: tjGetErrorStr2 returns a NUL-terminated string owned by the handle, valid
        // until the next call on it; it is copied at once.
        unsafe {
            let p = (self.turbo.error_str)(self.handle);
            if p.is_null() {
                "unknown libjpeg-turbo error".into()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }
}

impl Turbo {
    /// Where the library was loaded from; `None` when it is linked in.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// libjpeg-turbo's version, when known (linked in).
    pub(crate) fn version(&self) -> Option<&'static str> {
        self.version
    }

    /// Decodes `bytes` (already inspected: `width` x `height`, four components when `cmyk`)
    /// to RGB8 in `bpp` bytes a pixel (3, or 4 with a fourth byte of 255: libjpeg-turbo's
    /// RGBX, as Pillow's own decode writes its RGB images) as Pillow's
    /// `Image.open(b).convert("RGB")` does: YCbCr, RGB and grey through libjpeg-turbo's own
    /// conversion; CMYK and YCCK as libjpeg-turbo's CMYK, read Adobe-inverted and converted
    /// with Pillow's formula.
    pub(crate) fn decode_rgb(
        &self,
        bytes: &[u8],
        width: u32,
        height: u32,
        cmyk: bool,
        bpp: usize,
    ) -> Result<Vec<u8>, TurboError> {
        let format = match (cmyk, bpp) {
            (true, _) => TJPF_CMYK,
            (false, 4) => TJPF_RGBX,
            (false, _) => TJPF_RGB,
        };
        let mut out = self.decompress(bytes, width, height, format, if cmyk { 4 } else { bpp })?;
        if cmyk {
            cmyk_to_rgb_in_place(&mut out, bpp);
        }
        Ok(out)
    }

    /// Decodes `bytes` (inspected: `width` x `height`, `components` components) to the mode
    /// Pillow opens it in, stored as Pillow stores it: grey (1 byte a pixel), RGB (`rgb_bpp`
    /// bytes), or CMYK as Pillow reads it (`CMYK;I`: Adobe-inverted samples).
    pub(crate) fn decode_native(
        &self,
        bytes: &[u8],
        width: u32,
        height: u32,
        components: u8,
        rgb_bpp: usize,
    ) -> Result<Vec<u8>, TurboError> {
        match components {
            1 => self.decompress(bytes, width, height, TJPF_GRAY, 1),
            4 => {
                let mut out = self.decompress(bytes, width, height, TJPF_CMYK, 4)?;
                out.iter_mut().for_each(|v| *v = 255 - *v);
                Ok(out)
            }
            _ => self.decode_rgb(bytes, width, height, false, rgb_bpp),
        }
    }

    /// One decompression to the TurboJPEG pixel format `format` (`channels` bytes a pixel).
    fn decompress(
        &self,
        bytes: &[u8],
        width: u32,
        height: u32,
        format: c_int,
        channels: usize,
    ) -> Result<Vec<u8>, TurboError> {
        let size = c_ulong::try_from(bytes.len())
            .map_err(|_| TurboError::Invalid("file too large".into()))?;
        // SAFETY: tjInitDecompress has no preconditions; a null handle is checked.
        let handle = unsafe { (self.init)() };
        if handle.is_null() {
            return Err(TurboError::Invalid("libjpeg-turbo: no decompressor".into()));
        }
        let d = Decompressor {
            turbo: self,
            handle,
        };
        // The frame size comes from the probe's own header walk (one SOF, no DNL: the same
        // numbers libjpeg reads), and every 4-component JPEG is CMYK or YCCK to libjpeg. No
        // tjDecompressHeader3: libjpeg-turbo 2.x refuses files whose sampling it cannot name
        // (4:1:0, 1x4, ...), which decode fine.
        let (w, h) = (width as c_int, height as c_int);
        let pixels = width as usize * height as usize;
        let pitch = width as usize * channels;
        // Zeroed, so that even a file libjpeg read as smaller than the probe did could not
        // expose uninitialised memory.
        let mut out = vec![0u8; pixels * channels];
        // SAFETY: `out` holds exactly pitch * height bytes; tjDecompress2 writes at most that
        // for this width, pitch, height and pixel format (it scales a larger image down to fit).
        let rc = unsafe {
            (self.decompress)(
                d.handle,
                bytes.as_ptr(),
                size,
                out.as_mut_ptr(),
                w,
                pitch as c_int,
                h,
                format,
                TJFLAG_LIMITSCANS,
            )
        };
        if rc != 0 {
            let message = d.message();
            // SAFETY: a valid handle.
            let code = unsafe { (self.error_code)(d.handle) };
            if code != TJERR_WARNING {
                return Err(TurboError::fatal(message));
            }
            // Pillow keeps images with "extraneous bytes" and similar warnings; a scan that
            // ran out of data is padded with grey by libjpeg, and that we refuse.
            if message.to_ascii_lowercase().contains("premature end") {
                return Err(TurboError::Truncated(message));
            }
        }
        Ok(out)
    }
}

/// Pillow's CMYK JPEG path: the samples are read Adobe-inverted (`CMYK;I`), then converted with
/// `cmyk2rgb`: `nk = 255 - k; out = clip(nk - muldiv255(c, nk))`. Works in place, 4 → `bpp`
/// bytes (the fourth, when `bpp` is 4, set to 255).
fn cmyk_to_rgb_in_place(buf: &mut Vec<u8>, bpp: usize) {
    fn muldiv255(a: i32, b: i32) -> i32 {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    }
    let pixels = buf.len() / 4;
    for i in 0..pixels {
        let s = i * 4;
        let (c, m, y) = (
            255 - buf[s] as i32,
            255 - buf[s + 1] as i32,
            255 - buf[s + 2] as i32,
        );
        let nk = buf[s + 3] as i32; // 255 - inverted k
        let d = i * bpp; // d <= s: writing never overtakes reading
        buf[d] = (nk - muldiv255(c, nk)).clamp(0, 255) as u8;
        buf[d + 1] = (nk - muldiv255(m, nk)).clamp(0, 255) as u8;
        buf[d + 2] = (nk - muldiv255(y, nk)).clamp(0, 255) as u8;
        if bpp == 4 {
            buf[d + 3] = 255;
        }
    }
    if bpp == 3 {
        buf.truncate(pixels * 3);
        buf.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmyk_conversion_follows_pillow() {
        // Raw (inverted) samples: 255 means no ink.
        let mut b = vec![
            255, 255, 255, 255, 0, 0, 0, 0, 255, 0, 255, 255, 200, 100, 50, 128,
        ];
        let mut x = b.clone();
        cmyk_to_rgb_in_place(&mut b, 3);
        // No ink → white; full ink everywhere → black; magenta ink → (255, 0, 255).
        assert_eq!(&b[..9], &[255, 255, 255, 0, 0, 0, 255, 0, 255]);
        // c = 55, m = 155, y = 205, nk = 128: 128 - round(55*128/255) = 128 - 28 = 100, ...
        assert_eq!(&b[9..], &[100, 50, 25]);
        assert_eq!(b.len(), 12);
        // The same pixels with a fourth byte of 255.
        cmyk_to_rgb_in_place(&mut x, 4);
        let rgb: Vec<u8> = x.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        assert_eq!(rgb, b);
        assert!(x.chunks_exact(4).all(|p| p[3] == 255));
    }
}

//! Decoded pixels handed to numpy and Pillow without a copy.

use std::sync::Arc;

use mmcache_loader::{Image, Mode, PixelLayout};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

/// Owner of a decoded image's pixels, shared with the decoded-image cache.
///
/// numpy reads it through `__array_interface__` (read-only, no copy) and keeps it as the
/// array's `base`; Pillow's `Image.fromarrow` reads it through `__arrow_c_array__` and keeps
/// the export; either way the pixels live as long as anything that views them.
#[pyclass(frozen, module = "mmcache._native")]
pub(crate) struct Pixels {
    image: Arc<Image>,
}

#[pymethods]
impl Pixels {
    /// Width in pixels.
    #[getter]
    fn width(&self) -> u32 {
        self.image.width()
    }

    /// Height in pixels.
    #[getter]
    fn height(&self) -> u32 {
        self.image.height()
    }

    /// `"rgbx"` (4 bytes a pixel, the fourth as Pillow holds it: Pillow's storage of RGB, the Python
    /// package's default) or `"rgb"` (3 bytes a pixel, with `pixel_layout="rgb"`).
    #[getter]
    fn layout(&self) -> &'static str {
        self.image.layout().as_str()
    }

    /// The image's content key: blake3 of its encoded bytes as 64 hex digits, taken once
    /// when the bytes arrived (never recomputed here).
    #[getter]
    fn content_key(&self) -> String {
        self.image.content_key().to_string()
    }

    /// Pillow's name of the pixels' mode (`"RGB"` unless the decode profile kept the
    /// original mode: `"L"`, `"P"`, `"RGBA"`, ...); `""` for bytes handed back undecoded.
    #[getter]
    fn mode(&self) -> &'static str {
        self.image.mode().as_str()
    }

    /// The mode Pillow opened the image in, before the profile's conversion.
    #[getter]
    fn opened_mode(&self) -> &'static str {
        self.image.opened().mode.as_str()
    }

    /// Whether the opened image had transparency (an alpha mode, or `transparency` in its
    /// info): what vLLM's conversion looks at.
    #[getter]
    fn opened_transparent(&self) -> bool {
        self.image.opened().transparent
    }

    /// The EXIF orientation the decode applied (1: none).
    #[getter]
    fn orientation(&self) -> u16 {
        self.image.orientation()
    }

    /// A `P` image's palette (RGB triplets), else `None`.
    #[getter]
    fn palette<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.image.palette().map(|p| PyBytes::new(py, p))
    }

    /// Pillow's `info["transparency"]` of an image kept in its original mode: an `int`
    /// (index or grey), `bytes` (a palette's alphas) or an `(r, g, b)` tuple; else `None`.
    #[getter]
    fn transparency<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        use mmcache_loader::Transparency;
        let Some(t) = self.image.transparency() else {
            return Ok(None);
        };
        Ok(Some(match t {
            Transparency::Index(i) => i.into_bound_py_any(py)?,
            Transparency::Grey(v) => v.into_bound_py_any(py)?,
            Transparency::Alphas(a) => PyBytes::new(py, a).into_any(),
            Transparency::Rgb([r, g, b]) => (*r, *g, *b).into_bound_py_any(py)?,
            _ => return Ok(None),
        }))
    }

    /// Pillow's `info["exif"]` of an image kept in its original mode, else `None`.
    #[getter]
    fn exif<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.image.exif().map(|e| PyBytes::new(py, e))
    }

    /// Pillow's `info["xmp"]` of an image kept in its original mode, else `None`.
    #[getter]
    fn xmp<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.image.xmp().map(|x| PyBytes::new(py, x))
    }

    /// The encoded bytes (a copy), when the decode profile keeps them or the image came
    /// back undecoded; else `None`.
    #[getter]
    fn source<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.image.source().map(|b| PyBytes::new(py, b))
    }

    /// Size of the encoded bytes the image came from.
    #[getter]
    fn encoded_len(&self) -> usize {
        self.image.encoded_len()
    }

    /// Why the bytes came back undecoded (for the engine's own decoder), else `None`.
    #[getter]
    fn undecoded(&self) -> Option<String> {
        self.image.undecoded().map(|why| match why {
            mmcache_loader::Undecoded::NotHere(why) => why.clone(),
            mmcache_loader::Undecoded::Refused(e) => e.to_string(),
            other => format!("{other:?}"),
        })
    }

    /// numpy's array interface, version 3: read-only, uint8 (little-endian uint16 for
    /// `I;16`). RGB: shape (H, W, 3), strides (4W, 4, 1) in the 4-byte layout (a view that
    /// skips the fourth bytes: not C-contiguous), none (C-contiguous) in the 3-byte one;
    /// `1`, `L`, `P`, `I;16`: (H, W); `RGBA`, `CMYK`: (H, W, 4); `LA`: (H, W, 2), the L and A
    /// bytes of each stored pixel.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (shape, strides) = view_of(&self.image)?;
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, shape)?)?;
        let typestr = if self.image.mode() == Mode::I16 {
            "<u2"
        } else {
            "|u1"
        };
        d.set_item("typestr", typestr)?;
        if let Some(strides) = strides {
            d.set_item("strides", PyTuple::new(py, strides)?)?;
        }
        // The address as an integer: numpy reads the bytes in place. `true`: read-only,
        // because the same pixels are shared with the cache and every other caller.
        d.set_item("data", (self.image.pixels().as_ptr() as usize, true))?;
        Ok(d)
    }

    /// The Arrow PyCapsule interface: the whole pixel buffer as one flat `uint8` array
    /// (`4 * W * H` values in the 4-byte layout, which `PIL.Image.fromarrow(pixels, "RGB",
    /// (W, H))` maps without a copy). Arrow arrays are immutable: consumers must not write.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        // The schema is ours to choose: a consumer that asked for another gets this one and
        // may cast (the protocol's rule), or refuse.
        let _ = requested_schema;
        crate::arrow::export(py, &self.image)
    }

    fn __repr__(&self) -> String {
        match self.image.mode() {
            Mode::Undecoded => "<mmcache Pixels undecoded>".to_owned(),
            Mode::Rgb => format!(
                "<mmcache Pixels {}x{} RGB ({})>",
                self.image.width(),
                self.image.height(),
                self.image.layout()
            ),
            mode => format!(
                "<mmcache Pixels {}x{} {mode}>",
                self.image.width(),
                self.image.height()
            ),
        }
    }
}

/// The owner of `image`'s pixels, after checking the buffer holds what its size says.
pub(crate) fn owner(py: Python<'_>, image: Arc<Image>) -> PyResult<Bound<'_, Pixels>> {
    // numpy and Pillow read exactly H x W x bpp bytes from the address: never hand them a
    // shorter buffer.
    let bpp = image.mode().bytes_per_pixel(image.layout());
    let expected = (image.width() as usize)
        .checked_mul(image.height() as usize)
        .and_then(|n| n.checked_mul(bpp));
    if expected != Some(image.pixels().len()) {
        return Err(PyRuntimeError::new_err(format!(
            "mmcache internal error: a {}x{} image of mode {} in layout {} has {} pixel bytes",
            image.width(),
            image.height(),
            image.mode(),
            image.layout(),
            image.pixels().len()
        )));
    }
    Bound::new(py, Pixels { image })
}

/// The numpy shape and strides (none: C-contiguous) of `image`'s pixels.
#[allow(clippy::type_complexity)]
fn view_of(image: &Image) -> PyResult<(Vec<usize>, Option<Vec<usize>>)> {
    let (w, h) = (image.width() as usize, image.height() as usize);
    Ok(match image.mode() {
        Mode::Rgb => {
            let bpp = image.layout().bytes_per_pixel();
            (vec![h, w, 3], (bpp != 3).then(|| vec![w * bpp, bpp, 1]))
        }
        Mode::One | Mode::L | Mode::P | Mode::I16 => (vec![h, w], None),
        Mode::Rgba | Mode::Cmyk => (vec![h, w, 4], None),
        Mode::La => (vec![h, w, 2], Some(vec![w * 4, 4, 3])),
        _ => {
            return Err(PyValueError::new_err(
                "these bytes were not decoded here: decode Pixels.source",
            ));
        }
    })
}

/// A read-only `numpy.ndarray` (H, W, 3) uint8 viewing `image`'s pixels, made with numpy's C
/// API (a fraction of what `numpy.asarray` on the array interface costs: this is a memory
/// hit's price), its `base` the [`Pixels`] owner.
pub(crate) fn to_array(py: Python<'_>, image: Arc<Image>) -> PyResult<Bound<'_, PyAny>> {
    let (width, height) = (image.width() as isize, image.height() as isize);
    let bpp = image.layout().bytes_per_pixel() as isize;
    let data = image.pixels().as_ptr();
    let owner = owner(py, image)?;
    let mut dims = [height, width, 3];
    let mut strides = [width * bpp, bpp, 1];
    new_view(py, &mut dims, &mut strides, data, owner.into_any())
}

/// An ndarray of `dims` and `strides` over `data`, read-only, kept alive by `owner`.
#[allow(unsafe_code)]
fn new_view<'py>(
    py: Python<'py>,
    dims: &mut [isize; 3],
    strides: &mut [isize; 3],
    data: *const u8,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    use numpy::npyffi::{NPY_TYPES, NpyTypes, PY_ARRAY_API, PyArrayObject, get_type_object};
    // SAFETY: numpy's own constructor over memory `owner` keeps alive (it holds the image the
    // pixels belong to) for `dims` x `strides`, which stay inside the buffer (checked by
    // `owner()`); flags 0: not writeable. The descriptor reference is stolen by the call, the
    // owner's by SetBaseObject; a null result is numpy's error, fetched.
    unsafe {
        let descr = PY_ARRAY_API.PyArray_DescrFromType(py, NPY_TYPES::NPY_UBYTE as _);
        if descr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            get_type_object(py, NpyTypes::PyArray_Type),
            descr,
            3,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
            data.cast_mut().cast(),
            0,
            std::ptr::null_mut(),
        );
        if array.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = Bound::from_owned_ptr(py, array);
        if PY_ARRAY_API.PyArray_SetBaseObject(
            py,
            array.as_ptr().cast::<PyArrayObject>(),
            owner.into_ptr(),
        ) != 0
        {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

/// The layout the Python package's loaders keep unless told otherwise: Pillow's, so that
/// `mmcache.dynamo` maps its PIL images onto the cached pixels.
pub(crate) const PYTHON_LAYOUT: PixelLayout = PixelLayout::Rgbx;

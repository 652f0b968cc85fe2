//! Decoded pixels handed to numpy and Pillow without a copy.

use std::sync::Arc;

use mmcache_loader::{Image, PixelLayout};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

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

    /// numpy's array interface, version 3: shape (H, W, 3), uint8, read-only; strides
    /// (4W, 4, 1) in the 4-byte layout (a view that skips the fourth bytes: not
    /// C-contiguous), none (C-contiguous) in the 3-byte one.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (width, height) = (self.image.width() as usize, self.image.height() as usize);
        let bpp = self.image.layout().bytes_per_pixel();
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (height, width, 3usize))?;
        d.set_item("typestr", "|u1")?;
        if bpp != 3 {
            d.set_item("strides", (width * bpp, bpp, 1usize))?;
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
        format!(
            "<mmcache Pixels {}x{} RGB ({})>",
            self.image.width(),
            self.image.height(),
            self.image.layout()
        )
    }
}

/// The owner of `image`'s pixels, after checking the buffer holds what its size says.
pub(crate) fn owner(py: Python<'_>, image: Arc<Image>) -> PyResult<Bound<'_, Pixels>> {
    // numpy and Pillow read exactly H x W x bpp bytes from the address: never hand them a
    // shorter buffer.
    let bpp = image.layout().bytes_per_pixel();
    let expected = (image.width() as usize)
        .checked_mul(image.height() as usize)
        .and_then(|n| n.checked_mul(bpp));
    if expected != Some(image.pixels().len()) {
        return Err(PyRuntimeError::new_err(format!(
            "mmcache internal error: a {}x{} image in layout {} has {} pixel bytes",
            image.width(),
            image.height(),
            image.layout(),
            image.pixels().len()
        )));
    }
    Bound::new(py, Pixels { image })
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

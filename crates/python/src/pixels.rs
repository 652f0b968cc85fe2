//! Decoded pixels handed to numpy without a copy.

use std::sync::Arc;

use mmcache_loader::Image;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

/// Owner of a decoded image's pixels, shared with the decoded-image cache.
///
/// numpy reads it through `__array_interface__` (read-only, no copy) and keeps it as the
/// array's `base`, so the pixels live as long as any array that views them.
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

    /// The image's content key: blake3 of its encoded bytes as 64 hex digits, taken once
    /// when the bytes arrived (never recomputed here).
    #[getter]
    fn content_key(&self) -> String {
        self.image.content_key().to_string()
    }

    /// numpy's array interface, version 3: shape (H, W, 3), uint8, read-only.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item(
            "shape",
            (
                self.image.height() as usize,
                self.image.width() as usize,
                3usize,
            ),
        )?;
        d.set_item("typestr", "|u1")?;
        // The address as an integer: numpy reads the bytes in place. `true`: read-only,
        // because the same pixels are shared with the cache and every other caller.
        d.set_item("data", (self.image.pixels().as_ptr() as usize, true))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<mmcache Pixels {}x{} RGB>",
            self.image.width(),
            self.image.height()
        )
    }
}

/// A read-only `numpy.ndarray` (H, W, 3) uint8 viewing `image`'s pixels.
pub(crate) fn to_array(py: Python<'_>, image: Arc<Image>) -> PyResult<Bound<'_, PyAny>> {
    static ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    // numpy reads exactly H x W x 3 bytes from the address: never hand it a shorter buffer.
    let expected = (image.width() as usize)
        .checked_mul(image.height() as usize)
        .and_then(|n| n.checked_mul(3));
    if expected != Some(image.pixels().len()) {
        return Err(PyRuntimeError::new_err(format!(
            "mmcache internal error: a {}x{} image has {} pixel bytes",
            image.width(),
            image.height(),
            image.pixels().len()
        )));
    }
    let asarray = ASARRAY.get_or_try_init(py, || {
        py.import("numpy")?.getattr("asarray").map(Bound::unbind)
    })?;
    let owner = Bound::new(py, Pixels { image })?;
    asarray.bind(py).call1((owner,))
}

//! Tensors in and out of the embedding caches: a compute's numpy array or DLPack tensor into
//! an [`Embedding`] (one copy, refused with a typed error when it is not a contiguous CPU
//! float32/float16/bfloat16 tensor), and cached bytes back out as read-only numpy views.

use std::ffi::c_void;

use mmcache_loader::embeddings::{DType, Embedding, MAX_EMBEDDING_METADATA_BYTES};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyCapsule, PyCapsuleMethods, PyDict, PyTuple};

use crate::errors;

/// Dimensions a tensor may have: more is surely not an embedding, and bounds the shape read.
const MAX_DIMS: usize = 32;

/// DLPack's `kDLCPU` and `kDLCUDAHost` (pinned host memory, readable by the CPU).
pub(crate) const DL_CPU: i64 = 1;
const DL_CUDA_HOST: i64 = 3;

/// DLPack's `DLDataType` codes.
pub(crate) const DL_FLOAT: u8 = 2;
pub(crate) const DL_BFLOAT: u8 = 4;

/// DLPack's `DLTensor`: read at the start of a `dltensor` capsule's `DLManagedTensor` (v0.x),
/// and written into our own `dltensor_versioned` export (dlpack.rs).
#[repr(C)]
pub(crate) struct DlTensor {
    pub(crate) data: *mut c_void,
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
    pub(crate) ndim: i32,
    pub(crate) code: u8,
    pub(crate) bits: u8,
    pub(crate) lanes: u16,
    pub(crate) shape: *mut i64,
    pub(crate) strides: *mut i64,
    pub(crate) byte_offset: u64,
}

/// A compute's return value: an array, or `(array, metadata)` with `metadata` bytes or None.
pub(crate) fn from_compute(value: &Bound<'_, PyAny>) -> PyResult<Embedding> {
    let py = value.py();
    let (array, metadata) = match value.cast::<PyTuple>() {
        Ok(t) if t.len() == 2 => (t.get_item(0)?, Some(t.get_item(1)?)),
        Ok(t) => {
            return Err(errors::embedding_type(
                py,
                format!(
                    "compute returned a tuple of {} items; expected an array or (array, metadata)",
                    t.len()
                ),
            ));
        }
        Err(_) => (value.clone(), None),
    };
    let embedding = from_array(&array)?;
    let Some(metadata) = metadata.filter(|m| !m.is_none()) else {
        return Ok(embedding);
    };
    let Ok(bytes) = metadata.cast::<PyBytes>() else {
        return Err(errors::embedding_type(
            py,
            format!(
                "embedding metadata must be bytes or None, got {}",
                type_name(&metadata)
            ),
        ));
    };
    let len = bytes.as_bytes().len();
    if len > MAX_EMBEDDING_METADATA_BYTES {
        return Err(errors::embedding_too_large(
            py,
            format!(
                "embedding metadata of {len} bytes is over the {MAX_EMBEDDING_METADATA_BYTES}-byte cap"
            ),
        ));
    }
    embedding
        .with_metadata(bytes::Bytes::copy_from_slice(bytes.as_bytes()))
        .map_err(|e| errors::invalid_embedding(py, e.to_string()))
}

/// A numpy array (read through its array interface) or any other DLPack tensor.
pub(crate) fn from_array(array: &Bound<'_, PyAny>) -> PyResult<Embedding> {
    let py = array.py();
    // The type itself, not `isinstance`, which a `__class__` property can fake.
    if array.get_type().is_subclass(&numpy_attr(py, "ndarray")?)? {
        return from_numpy(array);
    }
    if array.hasattr("__dlpack__")? && array.hasattr("__dlpack_device__")? {
        return from_dlpack(array);
    }
    Err(errors::embedding_type(
        py,
        format!(
            "an embedding must be a numpy array or a DLPack tensor (torch), got {}",
            type_name(array)
        ),
    ))
}

fn from_numpy(array: &Bound<'_, PyAny>) -> PyResult<Embedding> {
    let py = array.py();
    // A subclass can override `nbytes`, `shape`, `flags` or `__array_interface__` with Python
    // code; the memory read below must follow numpy's own record of the array, so read a
    // base-class view of it (no copy; numpy's C getters, which nothing overrides).
    let base = numpy_attr(py, "ndarray")?;
    let view;
    let array = if array.get_type().is(&base) {
        array
    } else {
        // `ndarray.view` itself, not an override of the subclass's.
        view = base.getattr("view")?.call1((array, &base))?;
        &view
    };
    let np_dtype = array.getattr("dtype")?;
    let name: String = np_dtype.getattr("name")?.extract()?;
    let dtype = dtype_named(py, &name)?;
    // A byte-swapped dtype has the same name: its bytes would be read as little-endian.
    if !np_dtype.getattr("isnative")?.extract::<bool>()? {
        return Err(errors::invalid_embedding(
            py,
            format!(
                "the embedding array is {name} in non-native byte order: pass a.astype(a.dtype.newbyteorder('='))"
            ),
        ));
    }
    if !array
        .getattr("flags")?
        .getattr("c_contiguous")?
        .extract::<bool>()?
    {
        return Err(errors::invalid_embedding(
            py,
            "the embedding array is not C-contiguous: pass numpy.ascontiguousarray(a) \
             (or tensor.contiguous())"
                .to_owned(),
        ));
    }
    let shape: Vec<usize> = array.getattr("shape")?.extract()?;
    let nbytes: usize = array.getattr("nbytes")?.extract()?;
    let interface = array.getattr("__array_interface__")?;
    let (address, _read_only): (usize, bool) = interface.get_item("data")?.extract()?;
    // numpy holds `nbytes` contiguous bytes at `address` while `array` lives (we hold it).
    let data = raw_slice(address as *const u8, nbytes);
    Embedding::from_bytes(dtype, shape, data)
        .map_err(|e| errors::invalid_embedding(py, e.to_string()))
}

fn from_dlpack(tensor: &Bound<'_, PyAny>) -> PyResult<Embedding> {
    let py = tensor.py();
    // torch refuses to export such a tensor with an exception of its own (BufferError in
    // 2.15, RuntimeError in older releases): asked first, so the caller gets our typed error.
    if let Some(grad) = tensor.getattr_opt("requires_grad")?
        && grad.extract::<bool>().unwrap_or(false)
    {
        return Err(errors::invalid_embedding(
            py,
            "the embedding tensor requires grad: return tensor.detach() (mmcache caches the \
             values, not the autograd graph)"
                .to_owned(),
        ));
    }
    let device: (i64, i64) = tensor
        .call_method0("__dlpack_device__")?
        .extract()
        .map_err(|_| errors::embedding_type(py, "__dlpack_device__() is not a pair".to_owned()))?;
    if device.0 != DL_CPU && device.0 != DL_CUDA_HOST {
        return Err(errors::embedding_device(
            py,
            format!(
                "the embedding tensor is on {} device {}: move it to the CPU first \
                 (tensor.cpu()), mmcache caches host memory",
                device_name(device.0),
                device.1
            ),
        ));
    }
    let capsule = tensor.call_method0("__dlpack__")?;
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        errors::embedding_type(
            py,
            "__dlpack__() did not return a DLPack capsule".to_owned(),
        )
    })?;
    let ptr = capsule.pointer_checked(Some(c"dltensor")).map_err(|_| {
        errors::embedding_type(py, "the DLPack capsule is not a dltensor".to_owned())
    })?;
    // The capsule keeps the tensor alive (its destructor calls the producer's deleter, since
    // we do not rename it): everything below is read while `capsule` lives.
    let t = read_tensor(ptr.as_ptr().cast::<DlTensor>());
    if i64::from(t.device_type) != DL_CPU && i64::from(t.device_type) != DL_CUDA_HOST {
        return Err(errors::embedding_device(
            py,
            format!(
                "the embedding tensor is on {} device {}: move it to the CPU first (tensor.cpu())",
                device_name(i64::from(t.device_type)),
                t.device_id
            ),
        ));
    }
    let dtype = match (t.code, t.bits, t.lanes) {
        (DL_FLOAT, 32, 1) => DType::F32,
        (DL_FLOAT, 16, 1) => DType::F16,
        (DL_BFLOAT, 16, 1) => DType::BF16,
        (code, bits, lanes) => {
            return Err(errors::invalid_embedding(
                py,
                format!(
                    "unsupported embedding dtype (DLPack code {code}, {bits} bits, {lanes} lanes): \
                     use float32, float16 or bfloat16"
                ),
            ));
        }
    };
    let ndim = usize::try_from(t.ndim)
        .ok()
        .filter(|n| *n <= MAX_DIMS)
        .ok_or_else(|| {
            errors::invalid_embedding(py, format!("a tensor of {} dimensions", t.ndim))
        })?;
    let raw_shape = read_i64s(t.shape, ndim);
    let mut shape = Vec::with_capacity(ndim);
    for d in &raw_shape {
        shape.push(usize::try_from(*d).map_err(|_| {
            errors::invalid_embedding(py, format!("negative dimension in shape {raw_shape:?}"))
        })?);
    }
    if !t.strides.is_null() && !c_contiguous(&shape, &read_i64s(t.strides, ndim)) {
        return Err(errors::invalid_embedding(
            py,
            "the embedding tensor is not C-contiguous: pass tensor.contiguous()".to_owned(),
        ));
    }
    let nbytes = shape
        .iter()
        .try_fold(dtype.element_size(), |n, d| n.checked_mul(*d))
        .ok_or_else(|| errors::invalid_embedding(py, format!("shape {shape:?} overflows")))?;
    let offset = usize::try_from(t.byte_offset)
        .map_err(|_| errors::invalid_embedding(py, "byte offset overflows".to_owned()))?;
    if nbytes > 0 && t.data.is_null() {
        return Err(errors::invalid_embedding(
            py,
            "the tensor has no data".to_owned(),
        ));
    }
    let data = raw_slice(t.data.cast::<u8>().wrapping_add(offset), nbytes);
    let embedding = Embedding::from_bytes(dtype, shape, data);
    embedding.map_err(|e| errors::invalid_embedding(py, e.to_string()))
}

/// C-contiguous strides (in elements), ignoring dimensions of size 1 (their stride is free).
fn c_contiguous(shape: &[usize], strides: &[i64]) -> bool {
    let mut expected: i64 = 1;
    for (d, s) in shape.iter().zip(strides).rev() {
        if *d == 0 {
            return true;
        }
        if *d != 1 && *s != expected {
            return false;
        }
        expected = expected.saturating_mul(i64::try_from(*d).unwrap_or(i64::MAX));
    }
    true
}

#[allow(unsafe_code)]
fn read_tensor(ptr: *const DlTensor) -> DlTensor {
    // SAFETY: a `dltensor` capsule points at a live DLManagedTensor, which starts with a
    // DLTensor of this layout (DLPack ABI); read by value, so no reference outlives the call.
    unsafe { std::ptr::read(ptr) }
}

#[allow(unsafe_code)]
fn read_i64s(ptr: *const i64, n: usize) -> Vec<i64> {
    if n == 0 || ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: DLPack's shape and strides arrays hold `ndim` elements while the capsule lives.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

#[allow(unsafe_code)]
fn raw_slice<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: callers pass the address and length of a producer's contiguous buffer that
    // they keep alive (the array or the capsule) for as long as the slice is used.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

fn dtype_named(py: Python<'_>, name: &str) -> PyResult<DType> {
    match name {
        "float32" => Ok(DType::F32),
        "float16" => Ok(DType::F16),
        "bfloat16" => Ok(DType::BF16),
        other => Err(errors::invalid_embedding(
            py,
            format!("unsupported embedding dtype {other}: use float32, float16 or bfloat16"),
        )),
    }
}

fn device_name(code: i64) -> String {
    match code {
        2 => "CUDA".to_owned(),
        4 => "OpenCL".to_owned(),
        7 => "Vulkan".to_owned(),
        8 => "Metal".to_owned(),
        10 => "ROCm".to_owned(),
        13 => "CUDA managed".to_owned(),
        14 => "oneAPI".to_owned(),
        other => format!("DLPack device type {other}"),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "an unknown type".to_owned(), |n| n.to_string())
}

fn numpy_attr<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))?
        .bind(py)
        .getattr(name)
}

/// Owner of a cached embedding's bytes: numpy views them through `__array_interface__`
/// (read-only, no copy) and keeps this as the array's `base`.
#[pyclass(frozen, module = "mmcache._native")]
pub(crate) struct TensorBytes {
    embedding: Embedding,
}

#[pymethods]
impl TensorBytes {
    /// numpy's array interface, version 3: the tensor's shape and dtype (bfloat16 as `<u2`,
    /// viewed as `ml_dtypes.bfloat16` by [`to_array`]), read-only.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, self.embedding.shape())?)?;
        let typestr = match self.embedding.dtype() {
            DType::F32 => "<f4",
            DType::F16 => "<f2",
            DType::BF16 => "<u2",
            other => {
                return Err(errors::invalid_embedding(
                    py,
                    format!("no numpy view of {}", other.as_str()),
                ));
            }
        };
        d.set_item("typestr", typestr)?;
        d.set_item("data", (self.embedding.bytes().as_ptr() as usize, true))?;
        Ok(d)
    }
}

/// A read-only numpy array over `embedding`'s cached bytes (bfloat16 through `ml_dtypes`).
pub(crate) fn to_array<'py>(py: Python<'py>, embedding: &Embedding) -> PyResult<Bound<'py, PyAny>> {
    let dtype = embedding.dtype();
    let owner = Bound::new(
        py,
        TensorBytes {
            embedding: embedding.clone(),
        },
    )?;
    let array = numpy_attr(py, "asarray")?.call1((owner,))?;
    if dtype != DType::BF16 {
        return Ok(array);
    }
    let bf16 = py.import("ml_dtypes").map_err(|_| {
        pyo3::exceptions::PyImportError::new_err(
            "a bfloat16 embedding needs the ml_dtypes package for numpy: pip install ml_dtypes",
        )
    })?;
    array.call_method1("view", (bf16.getattr("bfloat16")?,))
}

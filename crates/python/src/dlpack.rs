//! DLPack 1.0 export of a cached embedding (capsule `dltensor_versioned`, flagged read-only),
//! for the dtypes numpy cannot export itself (bfloat16): `torch.from_dlpack(entry)`.

use std::ffi::{CStr, c_void};

use mmcache_loader::embeddings::{DType, Embedding};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use crate::tensor::{DL_BFLOAT, DL_CPU, DL_FLOAT, DlTensor};

const NAME: &CStr = c"dltensor_versioned";
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the bytes are shared with the cache and other callers.
const READ_ONLY: u64 = 1;

#[repr(C)]
struct DlManagedTensorVersioned {
    major: u32,
    minor: u32,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

/// What the capsule owns: a clone of the entry (its bytes stay alive) and the shape.
struct Owner {
    _embedding: Embedding,
    shape: Vec<i64>,
}

/// A `dltensor_versioned` capsule over `embedding`'s bytes (no copy), for a consumer that
/// asked for DLPack 1.0 or later (`max_version`); older consumers cannot see the read-only
/// flag, so they are refused, as numpy refuses them for read-only arrays.
pub(crate) fn export<'py>(
    py: Python<'py>,
    embedding: &Embedding,
    max_version: Option<(u32, u32)>,
) -> PyResult<Bound<'py, PyAny>> {
    if max_version.is_none_or(|(major, _)| major < 1) {
        return Err(PyBufferError::new_err(
            "this embedding is read-only and DLPack before 1.0 cannot say so: call \
             __dlpack__(max_version=(1, 0)) (torch.from_dlpack and numpy.from_dlpack do)",
        ));
    }
    let (code, bits) = match embedding.dtype() {
        DType::F32 => (DL_FLOAT, 32),
        DType::F16 => (DL_FLOAT, 16),
        DType::BF16 => (DL_BFLOAT, 16),
        other => {
            return Err(PyBufferError::new_err(format!(
                "no DLPack export of {}",
                other.as_str()
            )));
        }
    };
    let mut shape = Vec::with_capacity(embedding.shape().len());
    for d in embedding.shape() {
        shape.push(
            i64::try_from(*d).map_err(|_| PyBufferError::new_err("a dimension overflows i64"))?,
        );
    }
    let ndim = i32::try_from(shape.len()).map_err(|_| PyBufferError::new_err("too many dims"))?;
    let mut owner = Box::new(Owner {
        _embedding: embedding.clone(),
        shape,
    });
    let managed = Box::new(DlManagedTensorVersioned {
        major: 1,
        minor: 0,
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(deleter),
        flags: READ_ONLY,
        dl_tensor: DlTensor {
            data: embedding.bytes().as_ptr().cast_mut().cast(),
            device_type: DL_CPU as i32,
            device_id: 0,
            ndim,
            code,
            bits,
            lanes: 1,
            shape: owner.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
    });
    let mut managed = managed;
    managed.manager_ctx = Box::into_raw(owner).cast();
    new_capsule(py, Box::into_raw(managed))
}

#[allow(unsafe_code)]
fn new_capsule(
    py: Python<'_>,
    managed: *mut DlManagedTensorVersioned,
) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: `managed` is a live heap allocation handed to the capsule; the name is static.
    let raw = unsafe { pyo3::ffi::PyCapsule_New(managed.cast(), NAME.as_ptr(), Some(destructor)) };
    if raw.is_null() {
        // SAFETY: the capsule was not made, so nobody else owns `managed`.
        unsafe { deleter(managed) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, raw) })
}

/// Frees the tensor and its owner; DLPack calls it once (the consumer, or our destructor).
#[allow(unsafe_code)]
unsafe extern "C" fn deleter(managed: *mut DlManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: both pointers come from `Box::into_raw` in `export`, freed only here, once.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<Owner>()));
    }
}

/// A capsule never consumed (still named `dltensor_versioned`) frees its tensor; a consumer
/// renames it to `used_dltensor_versioned` and calls the deleter itself.
#[allow(unsafe_code)]
unsafe extern "C" fn destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with the capsule; IsValid checks the name without raising.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) == 1 {
            let ptr = pyo3::ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr());
            deleter(ptr.cast());
        }
    }
}

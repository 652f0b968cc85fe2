//! DLPack export of a cached embedding (`torch.from_dlpack(entry)`, `numpy.from_dlpack(entry)`):
//! a private copy by default, the cached bytes themselves only when the caller asks.
//!
//! A copy is the default because consumers do not all honour DLPack's read-only flag: torch
//! 2.15 imports a read-only tensor as writable, so `torch.from_dlpack(entry).add_(1)` over the
//! shared bytes would change the entry for every later caller (docs/embeddings.md, "What a
//! consumer gets"). A copy costs a memcpy of the value, small next to the encoder that made it.
//! `copy=False` exports the cached bytes flagged read-only (DLPack 1.0 consumers only: an older
//! one cannot see the flag), for a caller that will not write.

use std::ffi::{CStr, c_void};

use mmcache_loader::embeddings::{DType, Embedding};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use crate::tensor::{DL_BFLOAT, DL_CPU, DL_FLOAT, DlTensor};

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the bytes are shared with the cache and other callers.
const READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the bytes are a copy made for this consumer.
const IS_COPIED: u64 = 2;
/// Copies from this size on run with the GIL released.
const COPY_OFF_THE_GIL: usize = 1 << 20;

/// DLPack 1.0's `DLManagedTensorVersioned` (capsule `dltensor_versioned`).
#[repr(C)]
struct Versioned {
    major: u32,
    minor: u32,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Versioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

/// DLPack 0.x's `DLManagedTensor` (capsule `dltensor`), for consumers before 1.0; it has no
/// flags, so it only ever carries a copy.
#[repr(C)]
struct Legacy {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Legacy)>,
}

/// The two managed-tensor layouts: their capsule name and their owner.
trait Managed: Sized {
    /// The capsule's name before a consumer takes it (it renames it `used_...`).
    const NAME: &'static CStr;
    fn manager_ctx(&self) -> *mut c_void;
}

impl Managed for Versioned {
    const NAME: &'static CStr = c"dltensor_versioned";
    fn manager_ctx(&self) -> *mut c_void {
        self.manager_ctx
    }
}

impl Managed for Legacy {
    const NAME: &'static CStr = c"dltensor";
    fn manager_ctx(&self) -> *mut c_void {
        self.manager_ctx
    }
}

/// The bytes a capsule exports.
enum Data {
    /// A clone of the entry: its bytes stay alive, shared (read-only).
    Shared(Embedding),
    /// A copy of them, 8-byte aligned (any dtype's alignment), the consumer's to write.
    Copy(Vec<u64>),
}

/// What the capsule owns: the bytes and the shape the tensor points into.
struct Owner {
    data: Data,
    shape: Vec<i64>,
}

/// A DLPack capsule of `embedding`, as `__dlpack__(max_version=..., copy=...)` asked: a copy
/// unless `copy` is `Some(false)`; `dltensor_versioned` for a consumer that takes DLPack 1.0
/// or later (`max_version`), else `dltensor`.
pub(crate) fn export<'py>(
    py: Python<'py>,
    embedding: &Embedding,
    max_version: Option<(u32, u32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let versioned = max_version.is_some_and(|(major, _)| major >= 1);
    let shared = copy == Some(false);
    if shared && !versioned {
        return Err(PyBufferError::new_err(
            "copy=False shares the cached bytes, read-only, and DLPack before 1.0 cannot say \
             so: also pass max_version=(1, 0) (torch.from_dlpack and numpy >= 2.1's \
             numpy.from_dlpack do), or take the default, a copy",
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
    let data = if shared {
        Data::Shared(embedding.clone())
    } else {
        // 8-byte words: an aligned copy. Off the GIL when large (a value may be tens of MB);
        // a small one copies faster than the GIL is given back and taken again.
        let bytes = embedding.bytes().clone();
        let copy = move || {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
            words
        };
        Data::Copy(if embedding.bytes().len() >= COPY_OFF_THE_GIL {
            py.detach(copy)
        } else {
            copy()
        })
    };
    let mut owner = Box::new(Owner { data, shape });
    let ptr: *mut c_void = match &mut owner.data {
        Data::Shared(e) => e.bytes().as_ptr().cast_mut().cast(),
        Data::Copy(words) => words.as_mut_ptr().cast(),
    };
    let dl_tensor = DlTensor {
        data: ptr,
        device_type: DL_CPU as i32,
        device_id: 0,
        ndim,
        code,
        bits,
        lanes: 1,
        shape: owner.shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    // The boxes move nowhere from here: the pointers into them stay valid until the deleter.
    let manager_ctx = Box::into_raw(owner).cast();
    if versioned {
        let managed = Box::new(Versioned {
            major: 1,
            minor: 0,
            manager_ctx,
            deleter: Some(deleter::<Versioned>),
            flags: if shared { READ_ONLY } else { IS_COPIED },
            dl_tensor,
        });
        new_capsule(py, Box::into_raw(managed))
    } else {
        let managed = Box::new(Legacy {
            dl_tensor,
            manager_ctx,
            deleter: Some(deleter::<Legacy>),
        });
        new_capsule(py, Box::into_raw(managed))
    }
}

#[allow(unsafe_code)]
fn new_capsule<T: Managed>(py: Python<'_>, managed: *mut T) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: `managed` is a live heap allocation handed to the capsule; the name is static.
    let raw = unsafe {
        pyo3::ffi::PyCapsule_New(managed.cast(), T::NAME.as_ptr(), Some(destructor::<T>))
    };
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
unsafe extern "C" fn deleter<T: Managed>(managed: *mut T) {
    if managed.is_null() {
        return;
    }
    // SAFETY: both pointers come from `Box::into_raw` in `export`, freed only here, once.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx().cast::<Owner>()));
    }
}

/// A capsule never consumed (still named `T::NAME`) frees its tensor; a consumer renames it
/// (`used_dltensor...`) and calls the deleter itself.
#[allow(unsafe_code)]
unsafe extern "C" fn destructor<T: Managed>(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with the capsule; IsValid checks the name without raising.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, T::NAME.as_ptr()) == 1 {
            let ptr = pyo3::ffi::PyCapsule_GetPointer(capsule, T::NAME.as_ptr());
            deleter::<T>(ptr.cast());
        }
    }
}

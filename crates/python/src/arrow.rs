//! Arrow C data interface export of a decoded image's pixel buffer, so that Pillow's
//! `Image.fromarrow` maps a PIL image onto the cached pixels without a copy.
//!
//! The export is one flat `uint8` array (format `"C"`, no validity bitmap) over the whole
//! buffer (`int16`, format `"s"`, for a mode `I;16` image). Pillow (11.3 and later) accepts it for a mode whose pixels take 4 bytes when the
//! array holds `4 * width * height` values, borrows the buffer row by row, keeps the array's
//! capsule as long as its image lives, and marks the image read-only. The capsule's destructor
//! releases the array, which drops our hold on the image.

use std::ffi::{CStr, c_char, c_void};
use std::sync::Arc;

use mmcache_loader::Image;
use pyo3::prelude::*;

const SCHEMA: &CStr = c"arrow_schema";
const ARRAY: &CStr = c"arrow_array";
/// Arrow's format string of `uint8`.
const UINT8: &CStr = c"C";
/// Arrow's format string of `int16`: what Pillow reads a mode `I;16` image from.
const INT16: &CStr = c"s";

/// `struct ArrowSchema` of the Arrow C data interface.
#[repr(C)]
struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

/// `struct ArrowArray` of the Arrow C data interface.
#[repr(C)]
struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// What an exported array owns: the image (so its pixels stay alive) and the buffer list.
struct Owner {
    _image: Arc<Image>,
    buffers: [*const c_void; 2],
}

/// `(schema, array)` capsules of a flat `uint8` array over `image`'s pixels: what
/// `__arrow_c_array__` returns.
pub(crate) fn export<'py>(
    py: Python<'py>,
    image: &Arc<Image>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    // Bytes, except for 16-bit grey: Pillow maps `I;16` from an `int16` array of one value
    // a pixel.
    let (format, value_len) = match image.mode() {
        mmcache_loader::Mode::I16 => (INT16, 2),
        _ => (UINT8, 1),
    };
    let length = i64::try_from(image.pixels().len() / value_len)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("pixel buffer too large"))?;
    let schema = Box::new(ArrowSchema {
        format: format.as_ptr(),
        name: c"".as_ptr(),
        metadata: std::ptr::null(),
        flags: 0,
        n_children: 0,
        children: std::ptr::null_mut(),
        dictionary: std::ptr::null_mut(),
        release: Some(release_schema),
        private_data: std::ptr::null_mut(),
    });
    let schema = capsule(
        py,
        Box::into_raw(schema),
        SCHEMA,
        destroy_schema,
        free_schema,
    )?;
    let mut owner = Box::new(Owner {
        _image: image.clone(),
        // No validity bitmap (null_count 0), then the values.
        buffers: [std::ptr::null(), image.pixels().as_ptr().cast()],
    });
    let buffers = owner.buffers.as_mut_ptr();
    let array = Box::new(ArrowArray {
        length,
        null_count: 0,
        offset: 0,
        n_buffers: 2,
        n_children: 0,
        buffers,
        children: std::ptr::null_mut(),
        dictionary: std::ptr::null_mut(),
        release: Some(release_array),
        private_data: Box::into_raw(owner).cast(),
    });
    let array = capsule(py, Box::into_raw(array), ARRAY, destroy_array, free_array)?;
    Ok((schema, array))
}

/// A capsule named `name` owning `ptr`, which `destroy` frees; on failure `free` frees it at
/// once.
#[allow(unsafe_code)]
fn capsule<'py, T>(
    py: Python<'py>,
    ptr: *mut T,
    name: &'static CStr,
    destroy: unsafe extern "C" fn(*mut pyo3::ffi::PyObject),
    free: unsafe fn(*mut T),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `ptr` is a live heap allocation handed to the capsule; the name is static.
    let raw = unsafe { pyo3::ffi::PyCapsule_New(ptr.cast(), name.as_ptr(), Some(destroy)) };
    if raw.is_null() {
        // SAFETY: the capsule was not made, so nobody else owns `ptr`.
        unsafe { free(ptr) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, raw) })
}

/// Frees a schema its capsule owned: releases it (unless a consumer moved it out, which
/// leaves `release` null), then frees the allocation.
///
/// # Safety
/// `ptr` comes from `Box::into_raw` and is freed only here, once.
#[allow(unsafe_code)]
unsafe fn free_schema(ptr: *mut ArrowSchema) {
    // SAFETY: the caller's contract; `release` is ours or null.
    unsafe {
        if let Some(release) = (*ptr).release {
            release(ptr);
        }
        drop(Box::from_raw(ptr));
    }
}

/// [`free_schema`] for an array.
///
/// # Safety
/// As [`free_schema`].
#[allow(unsafe_code)]
unsafe fn free_array(ptr: *mut ArrowArray) {
    // SAFETY: the caller's contract; `release` is ours or null.
    unsafe {
        if let Some(release) = (*ptr).release {
            release(ptr);
        }
        drop(Box::from_raw(ptr));
    }
}

/// The schema owns nothing beyond its static strings: releasing marks it released.
#[allow(unsafe_code)]
unsafe extern "C" fn release_schema(schema: *mut ArrowSchema) {
    // SAFETY: Arrow calls it with a live, unreleased schema of ours.
    unsafe { (*schema).release = None };
}

/// Drops the array's hold on the image, then marks it released.
#[allow(unsafe_code)]
unsafe extern "C" fn release_array(array: *mut ArrowArray) {
    // SAFETY: Arrow calls it once with a live, unreleased array of ours, whose private data
    // comes from `Box::into_raw` in `export`.
    unsafe {
        let owner = (*array).private_data.cast::<Owner>();
        if !owner.is_null() {
            drop(Box::from_raw(owner));
        }
        (*array).private_data = std::ptr::null_mut();
        (*array).release = None;
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn destroy_schema(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with our capsule, whose pointer is a boxed ArrowSchema;
    // IsValid checks the name without raising.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, SCHEMA.as_ptr()) == 1 {
            let ptr = pyo3::ffi::PyCapsule_GetPointer(capsule, SCHEMA.as_ptr());
            free_schema(ptr.cast());
        }
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn destroy_array(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with our capsule, whose pointer is a boxed ArrowArray;
    // IsValid checks the name without raising.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, ARRAY.as_ptr()) == 1 {
            let ptr = pyo3::ffi::PyCapsule_GetPointer(capsule, ARRAY.as_ptr());
            free_array(ptr.cast());
        }
    }
}

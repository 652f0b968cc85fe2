//! Rust errors as the Python exceptions of `mmcache.errors`.
//!
//! The classes are declared in Python (python/mmcache/errors.py): several derive from two bases
//! (`ConfigError(MmcacheError, ValueError)`, `OriginTimeoutError(MmcacheError, TimeoutError)`),
//! which pyo3's `create_exception!` and `#[pyclass(extends = ...)]` cannot express, and their
//! `__module__` stays `mmcache.errors`, which pickling and reprs use. [`Class`] names each of
//! them once; [`init`] imports them once, when the native module loads, into typed handles,
//! and refuses to load if one is missing or is not an `MmcacheError`. Load errors map to a
//! [`Class`] with an exhaustive `match`, so a new error variant does not compile until it has
//! its class.

use mmcache_loader::{ConfigError, DataUrlError, DecodeError, Error, OriginError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple, PyType};

/// Declares [`Class`], its list and its Python names in one place.
macro_rules! classes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A class of `mmcache.errors`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Class {
            $($(#[$doc])* $variant,)*
        }

        impl Class {
            /// Every class, in declaration order (the order of the handles).
            const ALL: &[Class] = &[$(Class::$variant,)*];

            /// The class's name in `mmcache.errors`.
            const fn name(self) -> &'static str {
                match self {
                    $(Class::$variant => $name,)*
                }
            }
        }
    };
}

classes! {
    /// The base of every class; also a load that failed inside mmcache (a bug).
    Mmcache => "MmcacheError",
    /// A bad setting (`ValueError`).
    Config => "ConfigError",
    /// The URL policy or a redirect refused the URL (`ValueError`).
    UrlPolicy => "UrlPolicyError",
    /// The origin answered with an error status.
    OriginStatus => "OriginStatusError",
    /// The origin timed out (`TimeoutError`).
    OriginTimeout => "OriginTimeoutError",
    /// The whole load passed its deadline.
    LoadTimeout => "LoadTimeoutError",
    /// The origin could not be reached (`ConnectionError`).
    OriginConnection => "OriginConnectionError",
    /// The base of the size limits (`ValueError`).
    TooLarge => "TooLargeError",
    /// The body (or data URL) is over the size cap.
    BodyTooLarge => "BodyTooLargeError",
    /// Too many pixels, or over the decode budget.
    ImageTooLarge => "ImageTooLargeError",
    /// The body is over the whole download budget.
    DownloadBudget => "DownloadBudgetError",
    /// Not a supported image (`ValueError`).
    UnsupportedImage => "UnsupportedImageError",
    /// The origin sent no bytes (`ValueError`).
    EmptyBody => "EmptyBodyError",
    /// A malformed `data:` URL (`ValueError`).
    InvalidDataUrl => "InvalidDataUrlError",
    /// The base of the memory-budget waits.
    Busy => "BusyError",
    /// The decode budget stayed taken.
    DecodeBusy => "DecodeBusyError",
    /// The download budget stayed taken.
    DownloadBusy => "DownloadBusyError",
    /// Several loads of a batch failed.
    Batch => "BatchError",
    /// The base of the embedding errors.
    Embedding => "EmbeddingError",
    /// A key, model, compute or its result of the wrong type (`TypeError`).
    EmbeddingType => "EmbeddingTypeError",
    /// An array of an unsupported dtype, layout or shape (`ValueError`).
    InvalidEmbedding => "InvalidEmbeddingError",
    /// A tensor outside host memory.
    EmbeddingDevice => "EmbeddingDeviceError",
    /// Metadata over its cap.
    EmbeddingTooLarge => "EmbeddingTooLargeError",
    /// A compute that panicked or was cancelled.
    EmbeddingCompute => "EmbeddingComputeError",
    /// A compute past its deadline (`TimeoutError`).
    EmbeddingTimeout => "EmbeddingTimeoutError",
}

/// The classes of `mmcache.errors`, indexed by `Class as usize`.
static CLASSES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// Imports every class of `mmcache.errors`, checking each is an `MmcacheError`.
fn import(py: Python<'_>) -> PyResult<Vec<Py<PyType>>> {
    let module = py.import("mmcache.errors")?;
    let base = module
        .getattr(Class::Mmcache.name())?
        .cast_into::<PyType>()?;
    Class::ALL
        .iter()
        .map(|class| {
            let found = module
                .getattr(class.name())
                .ok()
                .and_then(|c| c.cast_into::<PyType>().ok());
            match found {
                Some(found) if found.is_subclass(&base)? => Ok(found.unbind()),
                _ => Err(pyo3::exceptions::PyImportError::new_err(format!(
                    "mmcache.errors.{} is not an MmcacheError class: the native module and \
                     errors.py disagree",
                    class.name()
                ))),
            }
        })
        .collect()
}

/// Loads the classes when the native module loads (so a missing one fails the import, not a
/// later load), and lists their names as `_native._ERROR_CLASSES` for the test that keeps
/// this list and errors.py in agreement.
pub(crate) fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    CLASSES.get_or_try_init(py, || import(py))?;
    let names = PyTuple::new(py, Class::ALL.iter().map(|c| c.name()))?;
    m.add("_ERROR_CLASSES", names)
}

/// The Python class of `class`.
fn class(py: Python<'_>, class: Class) -> PyResult<Bound<'_, PyType>> {
    let all = CLASSES.get_or_try_init(py, || import(py))?;
    Ok(all[class as usize].bind(py).clone())
}

/// An instance of `class` with `message` and `http_status`.
fn new(py: Python<'_>, of: Class, message: String, status: u16) -> PyResult<Bound<'_, PyAny>> {
    class(py, of)?.call1((message, status))
}

/// The class for a failed load.
fn class_of(err: &Error) -> Class {
    match err {
        Error::Origin(e) => origin_class(e),
        Error::Decode(e) => decode_class(e),
        Error::DataUrl(DataUrlError::TooLarge { .. }) => Class::BodyTooLarge,
        Error::DataUrl(
            DataUrlError::Malformed
            | DataUrlError::NotImage
            | DataUrlError::NotBase64
            | DataUrlError::BadBase64,
        ) => Class::InvalidDataUrl,
        Error::OverDecodeBudget { .. } => Class::ImageTooLarge,
        Error::DecodeBusy { .. } => Class::DecodeBusy,
        Error::LoadTimeout { .. } => Class::LoadTimeout,
        Error::Batch(_) => Class::Batch,
        Error::Internal(_) => Class::Mmcache,
    }
}

fn origin_class(err: &OriginError) -> Class {
    match err {
        OriginError::Status(_) => Class::OriginStatus,
        OriginError::Timeout => Class::OriginTimeout,
        OriginError::TooLarge { .. } => Class::BodyTooLarge,
        OriginError::Policy(_)
        | OriginError::TooManyRedirects(_)
        | OriginError::RedirectLoop
        | OriginError::BadRedirect => Class::UrlPolicy,
        OriginError::Connect(_) => Class::OriginConnection,
        OriginError::EmptyBody => Class::EmptyBody,
        OriginError::OverDownloadBudget { .. } => Class::DownloadBudget,
        OriginError::DownloadBusy { .. } => Class::DownloadBusy,
        OriginError::Client(_) => Class::Mmcache,
    }
}

fn decode_class(err: &DecodeError) -> Class {
    match err {
        DecodeError::TooManyPixels { .. } | DecodeError::LimitExceeded => Class::ImageTooLarge,
        DecodeError::Empty
        | DecodeError::Unsupported
        | DecodeError::Invalid { .. }
        | DecodeError::UnsupportedFeature { .. }
        | DecodeError::FormatNotAccepted { .. } => Class::UnsupportedImage,
        DecodeError::JpegDecoderUnavailable(_) => Class::Mmcache,
    }
}

/// Where a load went, for messages: the URL's host (never its user, password, path or
/// query: those may carry secrets), or "data URL".
fn place(url: &str) -> String {
    if url
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
    {
        return "data URL".to_owned();
    }
    match url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    {
        Some(host) => format!("image host {host}"),
        None => "unparsable URL".to_owned(),
    }
}

/// `urls`: the one URL of a load, or every URL of a batch (failures name theirs by index).
fn build(py: Python<'_>, err: &Error, urls: &[&str]) -> PyResult<PyErr> {
    let message = match (err, urls) {
        (_, [url]) => format!("{err} ({})", place(url)),
        _ => err.to_string(),
    };
    let value = new(py, class_of(err), message, err.http_status())?;
    if let Some(status) = err.origin_status() {
        value.setattr("origin_status", status)?;
    }
    if let Error::DataUrl(reason) = err {
        value.setattr("reason", data_url_reason(reason))?;
    }
    if let Error::Batch(failures) = err {
        let list = PyList::empty(py);
        for (index, failure) in failures.iter() {
            let url = urls.get(*index).copied().unwrap_or_default();
            list.append((*index, build(py, failure, &[url])?.into_value(py)))?;
        }
        value.setattr("failures", list)?;
    }
    Ok(PyErr::from_value(value))
}

/// What is wrong with a `data:` URL, as `InvalidDataUrlError.reason`.
fn data_url_reason(err: &DataUrlError) -> &'static str {
    match err {
        DataUrlError::NotImage => "not_image",
        DataUrlError::NotBase64 => "not_base64",
        DataUrlError::BadBase64 => "bad_base64",
        DataUrlError::Malformed | DataUrlError::TooLarge { .. } => "malformed",
    }
}

/// The Python exception for a failed load of `url`.
pub(crate) fn load_error(py: Python<'_>, err: &Error, url: &str) -> PyErr {
    build(py, err, &[url]).unwrap_or_else(|e| e)
}

/// The Python exception for a failed batch, by the Rust loader's rule
/// ([`Error::batch_representative`]: the first failure with an origin status, else the first
/// URL-policy refusal), else the only failure (each naming its URL's host), else a
/// `BatchError` listing all. The one step Rust lacks, the only failure raised as itself, is the
/// documented Python API: an `except OriginTimeoutError` around a batch keeps working.
pub(crate) fn batch_error(py: Python<'_>, failures: Vec<(usize, Error)>, urls: &[&str]) -> PyErr {
    let pick = Error::batch_representative(&failures).or(match failures.as_slice() {
        [only] => Some(only),
        _ => None,
    });
    let made = match pick {
        Some((index, err)) => build(py, err, &[urls[*index]]),
        None => build(py, &Error::Batch(failures.into()), urls),
    };
    made.unwrap_or_else(|e| e)
}

/// An instance of `class` with `message`, as an error to raise.
fn raise(py: Python<'_>, of: Class, message: String, status: u16) -> PyErr {
    match new(py, of, message, status) {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// The Python exception (`mmcache.errors.ConfigError`, a `ValueError`) for a bad setting.
pub(crate) fn config_error(py: Python<'_>, err: &ConfigError) -> PyErr {
    raise(py, Class::Config, err.to_string(), 500)
}

/// `EmbeddingTypeError` (a `TypeError`): a compute returned no array, a key is not a string.
pub(crate) fn embedding_type(py: Python<'_>, message: String) -> PyErr {
    raise(py, Class::EmbeddingType, message, 500)
}

/// `InvalidEmbeddingError` (a `ValueError`): a wrong dtype, a non-contiguous tensor.
pub(crate) fn invalid_embedding(py: Python<'_>, message: String) -> PyErr {
    raise(py, Class::InvalidEmbedding, message, 500)
}

/// `EmbeddingDeviceError`: a tensor outside host memory (a GPU tensor).
pub(crate) fn embedding_device(py: Python<'_>, message: String) -> PyErr {
    raise(py, Class::EmbeddingDevice, message, 500)
}

/// `EmbeddingTooLargeError`: metadata over its cap.
pub(crate) fn embedding_too_large(py: Python<'_>, message: String) -> PyErr {
    raise(py, Class::EmbeddingTooLarge, message, 413)
}

/// The Python exception for a failed `get_or_compute`: the compute's own exception, a copy
/// of it for each waiter (a bad return value is one of ours, raised the same way);
/// `EmbeddingComputeError` for a panic or a cancelled compute task; `EmbeddingTimeoutError`
/// (408) for a compute past its deadline.
pub(crate) fn embedding_error(
    py: Python<'_>,
    err: &mmcache_loader::embeddings::EmbeddingError,
) -> PyErr {
    use mmcache_loader::embeddings::EmbeddingError;
    let class = match err {
        EmbeddingError::Compute { source } => {
            if let Some(raised) = source.downcast_ref::<PyErr>() {
                // A compute task cancelled (its loop shut down, or its own code cancelled it)
                // must not raise CancelledError in the other waiters: asyncio would take that
                // for their own cancellation.
                if raised.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) {
                    return raise(
                        py,
                        Class::EmbeddingCompute,
                        "the embedding compute was cancelled (its event loop stopped or \
                         cancelled it); the next call computes again"
                            .to_owned(),
                        500,
                    );
                }
                return for_waiter(py, raised);
            }
            Class::EmbeddingCompute
        }
        EmbeddingError::Panicked { .. } | EmbeddingError::Cancelled => Class::EmbeddingCompute,
        EmbeddingError::Timeout { .. } => Class::EmbeddingTimeout,
    };
    raise(py, class, err.to_string(), err.http_status())
}

/// One waiter's own copy of a compute's exception (`mmcache.embeddings._for_waiter`): one
/// object raised in every waiter would grow its traceback by each waiter's frames, under the
/// others' feet. The original when even the copy fails.
fn for_waiter(py: Python<'_>, raised: &PyErr) -> PyErr {
    let copy = py
        .import("mmcache.embeddings")
        .and_then(|m| m.getattr("_for_waiter"))
        .and_then(|f| f.call1((raised.value(py),)));
    match copy {
        Ok(copy) => PyErr::from_value(copy),
        Err(_) => raised.clone_ref(py),
    }
}

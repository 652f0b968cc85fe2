//! Rust errors as the Python exceptions of `mmcache.errors`.

use mmcache_loader::{ConfigError, DataUrlError, Error, OriginError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

/// The `mmcache.errors` class for a failed load.
fn class_of(err: &Error) -> &'static str {
    match err {
        Error::Origin(e) => match e {
            OriginError::Status(_) => "OriginStatusError",
            OriginError::Timeout => "OriginTimeoutError",
            OriginError::TooLarge { .. } => "BodyTooLargeError",
            OriginError::Policy(_)
            | OriginError::TooManyRedirects(_)
            | OriginError::RedirectLoop
            | OriginError::BadRedirect => "UrlPolicyError",
            OriginError::Connect(_) => "OriginConnectionError",
            OriginError::EmptyBody => "EmptyBodyError",
            OriginError::OverDownloadBudget { .. } => "DownloadBudgetError",
            OriginError::DownloadBusy { .. } => "DownloadBusyError",
            _ => "MmcacheError",
        },
        Error::Decode(e) if e.is_too_large() => "ImageTooLargeError",
        Error::Decode(e) if e.http_status() == 415 => "UnsupportedImageError",
        Error::DataUrl(DataUrlError::TooLarge { .. }) => "BodyTooLargeError",
        Error::DataUrl(_) => "InvalidDataUrlError",
        Error::OverDecodeBudget { .. } => "ImageTooLargeError",
        Error::DecodeBusy { .. } => "DecodeBusyError",
        Error::LoadTimeout { .. } => "LoadTimeoutError",
        Error::Batch(_) => "BatchError",
        _ => "MmcacheError",
    }
}

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || py.import("mmcache.errors").map(Bound::unbind))
        .map(|m| m.bind(py))
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
    let class = errors_module(py)?.getattr(class_of(err))?;
    let message = match (err, urls) {
        (_, [url]) => format!("{err} ({})", place(url)),
        _ => err.to_string(),
    };
    let value = class.call1((message, err.http_status()))?;
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
        _ => "malformed",
    }
}

/// The Python exception for a failed load of `url`.
pub(crate) fn load_error(py: Python<'_>, err: &Error, url: &str) -> PyErr {
    build(py, err, &[url]).unwrap_or_else(|e| e)
}

/// The Python exception for a failed batch: the first failure with an origin status, else the
/// first URL-policy failure, else the only failure (each naming its URL's host), else a
/// `BatchError` listing all.
pub(crate) fn batch_error(py: Python<'_>, failures: Vec<(usize, Error)>, urls: &[&str]) -> PyErr {
    let pick = failures
        .iter()
        .find(|(_, e)| e.origin_status().is_some())
        .or_else(|| {
            failures
                .iter()
                .find(|(_, e)| class_of(e) == "UrlPolicyError")
        })
        .or(match failures.as_slice() {
            [only] => Some(only),
            _ => None,
        });
    let made = match pick {
        Some((index, err)) => build(py, err, &[urls[*index]]),
        None => build(py, &Error::Batch(failures.into()), urls),
    };
    made.unwrap_or_else(|e| e)
}

/// The Python exception (`mmcache.errors.ConfigError`, a `ValueError`) for a bad setting.
pub(crate) fn config_error(py: Python<'_>, err: &ConfigError) -> PyErr {
    let made = errors_module(py)
        .and_then(|m| m.getattr("ConfigError"))
        .and_then(|class| class.call1((err.to_string(), 500u16)));
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// An instance of the `mmcache.errors` class `class` (an embedding error) with `message`.
fn embedding_class(py: Python<'_>, class: &str, message: String, status: u16) -> PyErr {
    let made = errors_module(py)
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((message, status)));
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// `EmbeddingTypeError` (a `TypeError`): a compute returned no array, a key is not a string.
pub(crate) fn embedding_type(py: Python<'_>, message: String) -> PyErr {
    embedding_class(py, "EmbeddingTypeError", message, 500)
}

/// `InvalidEmbeddingError` (a `ValueError`): a wrong dtype, a non-contiguous tensor.
pub(crate) fn invalid_embedding(py: Python<'_>, message: String) -> PyErr {
    embedding_class(py, "InvalidEmbeddingError", message, 500)
}

/// `EmbeddingDeviceError`: a tensor outside host memory (a GPU tensor).
pub(crate) fn embedding_device(py: Python<'_>, message: String) -> PyErr {
    embedding_class(py, "EmbeddingDeviceError", message, 500)
}

/// `EmbeddingTooLargeError`: metadata over its cap.
pub(crate) fn embedding_too_large(py: Python<'_>, message: String) -> PyErr {
    embedding_class(py, "EmbeddingTooLargeError", message, 413)
}

/// The Python exception for a failed `get_or_compute`: the compute's own exception, the
/// same object for every waiter (a bad return value is one of ours, raised the same way);
/// `EmbeddingComputeError` for a panic or a cancelled compute task.
pub(crate) fn embedding_error(
    py: Python<'_>,
    err: &mmcache_loader::embeddings::EmbeddingError,
) -> PyErr {
    use mmcache_loader::embeddings::EmbeddingError;
    if let EmbeddingError::Compute { source } = err
        && let Some(raised) = source.downcast_ref::<PyErr>()
    {
        // A compute task cancelled (its loop shut down, or its own code cancelled it) must not
        // raise CancelledError in the other waiters: asyncio would take that for their own
        // cancellation.
        if raised.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) {
            return embedding_class(
                py,
                "EmbeddingComputeError",
                "the embedding compute was cancelled (its event loop stopped or cancelled \
                 it); the next call computes again"
                    .to_owned(),
                500,
            );
        }
        return raised.clone_ref(py);
    }
    embedding_class(py, "EmbeddingComputeError", err.to_string(), 500)
}

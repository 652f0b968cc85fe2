//! Python bindings of mmcache: the module `mmcache` (this crate builds its native part,
//! `mmcache._native`), for Python inference workers that want the Rust loader.
//!
//! Nothing here is for Rust users: depend on `mmcache-loader` instead. The crate is built with
//! maturin (`pip install ./crates/python`) and tested from Python (`tests/python`).
//!
//! ```python
//! import asyncio, mmcache
//!
//! loader = mmcache.Loader.from_env()          # the DYN_MM_* / MMCACHE_* variables
//! pixels = asyncio.run(loader.load("https://example.com/cat.png"))
//! print(pixels.shape, pixels.dtype)           # (H, W, 3) uint8, read-only, not copied
//! ```
//!
//! One tokio runtime serves the process; it starts with the first loader. See
//! `crates/python/README.md` for the behaviour after `fork`.

mod arrow;
mod dlpack;
mod embeddings;
mod errors;
mod exit;
mod loader;
mod pixels;
mod profiled;
mod runtime;
mod shared_stats;
mod tensor;

use pyo3::prelude::*;

/// The Prometheus text of every mmcache metric of this process (names as in docs/metrics.md).
/// `exclude_dynamo_shared_cache=True` leaves out the two shared-cache histograms that carry
/// Dynamo's names, for an endpoint that also serves Dynamo's `register_image_loader_metrics`
/// (which fills them from `shared_image_cache_stats`): one family twice fails the scrape.
#[pyfunction]
#[pyo3(signature = (*, exclude_dynamo_shared_cache = false))]
fn metrics_text(exclude_dynamo_shared_cache: bool) -> String {
    let text = runtime::metrics().render();
    if !exclude_dynamo_shared_cache {
        return text;
    }
    let dynamo: Vec<&str> = mmcache_loader::metrics::shared_cache::ALL
        .iter()
        .filter(|m| m.name.starts_with("dynamo_"))
        .map(|m| m.name)
        .collect();
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line);
        if !dynamo.iter().any(|family| name.starts_with(family)) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// `python -m mmcache doctor`: the checks of `mmcache doctor` (`mmcache_loader::doctor`) with
/// this process's `DYN_MM_*`/`MMCACHE_*` environment: its report and its exit code. A bad
/// setting raises `mmcache.errors.ConfigError`, as `Loader.from_env` does. The GIL is released
/// while it runs (bounded by the shared cache's timeouts).
#[pyfunction]
fn doctor(py: Python<'_>) -> PyResult<(String, u8)> {
    let rt = runtime::get()?;
    let checked = py.detach(|| {
        rt.block_on(async {
            let loader = mmcache_loader::Loader::from_env()?;
            let report = mmcache_loader::doctor::run(&loader).await;
            // Nothing was loaded, so nothing is left to write.
            let _ = loader.shutdown(std::time::Duration::ZERO).await;
            let code = report.exit_code();
            Ok::<_, mmcache_loader::ConfigError>((report.text, code))
        })
    });
    checked.map_err(|e| errors::config_error(py, &e))
}

/// `mmcache doctor --help`'s list of exit codes (`python -m mmcache doctor --help` prints it).
#[pyfunction]
fn doctor_exit_codes() -> String {
    mmcache_loader::doctor::exit_codes_help()
}

/// The session scope of a request from its headers (a mapping or an iterable of pairs, as
/// `str` or `bytes`; names in any case), by the precedence of docs/configuration.md; `None`
/// when no usable header is present.
#[pyfunction]
fn scope_from_headers(headers: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let pairs = if let Ok(mapping) = headers.cast::<pyo3::types::PyMapping>() {
        mapping.items()?.into_any()
    } else {
        headers.clone()
    };
    let mut collected: Vec<(String, Vec<u8>)> = Vec::new();
    for pair in pairs.try_iter()? {
        // A 2-tuple or a 2-item list (ASGI allows both).
        let pair = pair?;
        if pair.len()? != 2 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "headers must be (name, value) pairs",
            ));
        }
        let (name, value) = (pair.get_item(0)?, pair.get_item(1)?);
        collected.push((text_or_bytes(&name)?.0, text_or_bytes(&value)?.1));
    }
    let scope =
        mmcache_loader::scope_from_pairs(collected.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
    Ok(scope.map(|s| s.as_str().to_owned()))
}

/// A header name or value given as `str` or `bytes` (ASGI servers give bytes): as text
/// (names are ASCII; other bytes never match a header we read) and as bytes.
fn text_or_bytes(obj: &Bound<'_, PyAny>) -> PyResult<(String, Vec<u8>)> {
    if let Ok(text) = obj.extract::<String>() {
        let bytes = text.clone().into_bytes();
        return Ok((text, bytes));
    }
    let bytes: Vec<u8> = obj.extract()?;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), bytes))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<loader::Loader>()?;
    m.add_class::<pixels::Pixels>()?;
    m.add_class::<profiled::ProfiledLoader>()?;
    m.add_class::<embeddings::Embeddings>()?;
    m.add_class::<embeddings::CachedEmbedding>()?;
    m.add_class::<tensor::TensorBytes>()?;
    m.add_class::<shared_stats::SharedCacheStats>()?;
    m.add_function(wrap_pyfunction!(metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(scope_from_headers, m)?)?;
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_exit_codes, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Keyword of `Loader(...)` -> its environment variable, from the one declaration.
    let settings = pyo3::types::PyDict::new(m.py());
    for s in &mmcache_loader::SETTINGS {
        settings.set_item(s.python, s.name)?;
    }
    m.add("SETTINGS", settings)?;
    // Every variable the package reads: the settings' and those read outside a loader's.
    let variables: Vec<&str> = mmcache_loader::SETTINGS
        .iter()
        .map(|s| s.name)
        .chain(mmcache_loader::PROCESS_VARIABLES.iter().map(|v| v.name))
        .collect();
    m.add("VARIABLES", variables)?;
    errors::init(m)?;
    exit::register(m)?;
    Ok(())
}

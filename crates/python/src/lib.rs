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

mod errors;
mod loader;
mod pixels;
mod runtime;

use pyo3::prelude::*;

/// The Prometheus text of every mmcache metric of this process (names as in docs/metrics.md).
#[pyfunction]
fn metrics_text() -> String {
    runtime::metrics().render()
}

/// The session scope of a request from its headers (a mapping or an iterable of pairs; names
/// in any case, values `str` or `bytes`), by the precedence of docs/configuration.md; `None`
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
        let (name, value): (String, Bound<'_, PyAny>) = pair?.extract()?;
        let value = if let Ok(text) = value.extract::<String>() {
            text.into_bytes()
        } else {
            value.extract::<Vec<u8>>()?
        };
        collected.push((name, value));
    }
    let scope =
        mmcache_loader::scope_from_pairs(collected.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
    Ok(scope.map(|s| s.as_str().to_owned()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<loader::Loader>()?;
    m.add_class::<pixels::Pixels>()?;
    m.add_function(wrap_pyfunction!(metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(scope_from_headers, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

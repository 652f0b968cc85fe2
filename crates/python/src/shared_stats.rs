//! `SharedCacheStats`: the shared cache's GET/SET latency samples in the shape of Dynamo's
//! `SharedImageCacheStats`, which Dynamo's `register_image_loader_metrics` drains on every
//! scrape of a worker's `/metrics`.

use mmcache_loader::SharedCache;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::runtime;

/// Latency samples of one loader's shared-cache GETs and SETs, kept from the moment this
/// object was made (`Loader.shared_cache_stats()`), at most 10,000 between two drains.
#[pyclass(frozen, module = "mmcache._native")]
pub(crate) struct SharedCacheStats {
    cache: SharedCache,
    /// The process that built the loader (see `runtime::check_owner`).
    pid: u32,
}

impl SharedCacheStats {
    /// Turns sampling on for `cache` and wraps it.
    pub(crate) fn start(cache: SharedCache, pid: u32) -> Self {
        cache.enable_duration_samples();
        Self { cache, pid }
    }
}

#[pymethods]
impl SharedCacheStats {
    /// Takes every pending sample: `{(operation, outcome, size_bucket): [seconds, ...]}`,
    /// operation `"get"` or `"set"`, as Dynamo's `snapshot_and_drain()`.
    fn snapshot_and_drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        runtime::check_owner(self.pid)?;
        let dict = PyDict::new(py);
        for s in self
            .cache
            .drain_duration_samples()
            .unwrap_or_default()
            .series
        {
            dict.set_item((s.op.as_str(), s.outcome, s.size_bucket), s.seconds)?;
        }
        Ok(dict)
    }

    /// Samples dropped because 10,000 were already waiting for a drain (Dynamo drops them
    /// silently).
    #[getter]
    fn dropped(&self) -> u64 {
        self.cache.duration_samples_dropped()
    }
}

//! `mmcache.Loader`: the Rust loader with awaitable and blocking loads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mmcache_loader::Scope;
use mmcache_loader::env;
use mmcache_loader::{Config, Image, Loaded, LoaderBuilder, SETTINGS};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3_async_runtimes::generic::future_into_py;

use crate::runtime::{self, PerProcess};
use crate::{errors, pixels};

/// Loads image URLs through every cache layer: the decoded-image cache, a load in flight,
/// the host's disk tier, the shared cache, the origin.
///
/// The native half of `mmcache.Loader` (whose `async def` methods await these futures).
/// `Loader(**settings)` starts from the defaults and does not read the environment;
/// `Loader(env=True, **settings)` reads the `DYN_MM_*`/`MMCACHE_*` variables first. Settings
/// (all optional): one keyword per variable, declared with it in `mmcache_loader::SETTINGS`
/// (`_native.SETTINGS` maps each keyword to its variable; docs/configuration.md lists them).
#[pyclass(frozen, subclass, module = "mmcache._native")]
pub(crate) struct Loader {
    /// Always `Some` until dropped (see the `Drop` impl).
    inner: Option<mmcache_loader::Loader>,
    /// The process that built it: its runtime and connections exist only there.
    pid: u32,
}

impl Drop for Loader {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take()
            && self.pid != std::process::id()
        {
            // In a forked child the loader's tasks, sockets and locks belong to the parent's
            // runtime, which has no threads here: dropping them could block on a lock held
            // at fork time or deregister the parent's sockets from a shared epoll. Leak.
            std::mem::forget(inner);
        }
    }
}

#[pymethods]
impl Loader {
    /// `env=True` reads the environment first (what `Loader.from_env` does); `environ`, a
    /// `dict` of variables, is read instead of the process environment.
    #[new]
    #[pyo3(signature = (*, env=false, environ=None, **settings))]
    fn new(
        py: Python<'_>,
        env: bool,
        environ: Option<HashMap<String, String>>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // Pillow's layout unless the environment read names one (a keyword wins over both).
        // A blank value is unset, as the settings read it.
        let named = |v: Option<&str>| v.is_some_and(|v| !v.trim().is_empty());
        let layout_set = match (&environ, env) {
            (Some(vars), _) => named(vars.get(env::PIXEL_LAYOUT).map(String::as_str)),
            (None, true) => named(std::env::var(env::PIXEL_LAYOUT).ok().as_deref()),
            (None, false) => false,
        };
        let builder = match (env, environ) {
            (_, Some(vars)) => {
                Config::from_lookup(|name| vars.get(name).cloned()).map(LoaderBuilder::from_config)
            }
            (true, None) => LoaderBuilder::from_env(),
            (false, None) => Ok(mmcache_loader::Loader::builder()),
        }
        .map_err(|e| errors::config_error(py, &e))?;
        let builder = if layout_set {
            builder
        } else {
            builder.pixel_layout(pixels::PYTHON_LAYOUT)
        };
        Self::build(py, builder, settings)
    }

    /// `await loader.load(url, scope=None)`: a read-only `numpy.ndarray` (H, W, 3) uint8
    /// viewing the decoded pixels (no copy; a cache hit shares the cached pixels).
    /// Cancelling the awaiting task does not cancel the load others wait for.
    #[pyo3(signature = (url, scope=None))]
    fn load<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.awaitable(py, url, scope, Form::Array)
    }

    /// The array `load` would return from the decoded-image cache, at once, or `None` where
    /// `load` would look further (counted as `load`'s memory hit; nothing counted on `None`).
    /// `mmcache.Loader.load` calls it first, so a memory hit takes no task and no thread hop.
    #[pyo3(name = "_cached", signature = (url, scope=None))]
    fn cached<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        scope: Option<&str>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.memory_hit(url, scope)?
            .map(|image| pixels::to_array(py, image))
            .transpose()
    }

    /// `_cached`, giving the pixels' owner (`Pixels`) instead of an array: what
    /// `mmcache.dynamo` maps its PIL images onto.
    #[pyo3(name = "_cached_pixels", signature = (url, scope=None))]
    fn cached_pixels<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        scope: Option<&str>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.memory_hit(url, scope)?
            .map(|image| pixels::owner(py, image).map(Bound::into_any))
            .transpose()
    }

    /// `await loader._load_pixels(url, scope=None)`: `load`, giving the pixels' owner
    /// (`Pixels`) instead of an array.
    #[pyo3(name = "_load_pixels", signature = (url, scope=None))]
    fn load_pixels<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.awaitable(py, url, scope, Form::Pixels)
    }

    /// `await loader.load_detailed(url, scope=None)`: `(array, source)`, the source being
    /// `"memory"`, `"inflight"`, `"host"`, `"disk"`, `"shared"`, `"origin"` or `"data"`.
    #[pyo3(signature = (url, scope=None))]
    fn load_detailed<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.awaitable(py, url, scope, Form::ArrayAndSource)
    }

    /// The blocking form of `load`, for threads without an event loop. The GIL is released
    /// while it waits.
    #[pyo3(signature = (url, scope=None))]
    fn load_sync<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(image) = self.memory_hit(&url, scope)? {
            return pixels::to_array(py, image);
        }
        let loader = self.start()?;
        let rt = runtime::get()?;
        let scope = scope_of(scope);
        let result = py.detach(|| rt.block_on(loader.load_detailed(&url, scope.as_ref())));
        One {
            result,
            url,
            form: Form::Array,
        }
        .into_pyobject(py)
    }

    /// `await loader.load_batch(urls, scope=None)`: arrays in order, loaded concurrently.
    /// A failure raises the first error with an origin status, else the first URL-policy
    /// error, else (one failure) that error, else a `BatchError` whose `failures` lists
    /// `(index, error)`.
    #[pyo3(signature = (urls, scope=None))]
    fn load_batch<'py>(
        &self,
        py: Python<'py>,
        urls: Vec<String>,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (loader, scope) = (self.start()?, scope_of(scope));
        future_into_py::<PerProcess, _, _>(py, async move {
            let results = loader.load_batch_each(&urls, scope.as_ref()).await;
            Ok(Batch { results, urls })
        })
    }

    /// The blocking form of `load_batch`.
    #[pyo3(signature = (urls, scope=None))]
    fn load_batch_sync<'py>(
        &self,
        py: Python<'py>,
        urls: Vec<String>,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let loader = self.start()?;
        let rt = runtime::get()?;
        let scope = scope_of(scope);
        let results = py.detach(|| rt.block_on(loader.load_batch_each(&urls, scope.as_ref())));
        Batch { results, urls }.into_pyobject(py)
    }

    /// Number of images in the decoded-image cache.
    #[getter]
    fn cache_entries(&self) -> usize {
        self.loader().decoded_cache().stats().entries
    }

    /// Bytes the decoded-image cache holds: each image's pixels as kept (4 bytes a pixel in
    /// Pillow's layout, the default here), plus 256 bytes an entry for the cache's own
    /// structures; what its byte budget (`decoded_cache_bytes`) bounds.
    #[getter]
    fn cache_bytes(&self) -> u64 {
        self.loader().decoded_cache().stats().bytes
    }

    /// Whether caches are partitioned by session scope.
    #[getter]
    fn session_scoped(&self) -> bool {
        self.loader().config().session_scoped
    }

    /// Whether the shared cache is configured.
    #[getter]
    fn shared_cache_enabled(&self) -> bool {
        self.loader().shared_cache().is_some()
    }

    /// The shared cache's GET/SET latency samples (Dynamo's `SharedImageCacheStats` shape),
    /// kept from the first call on; `None` when the shared cache is off. Every call returns a
    /// view of the same buffer.
    fn shared_cache_stats(&self) -> PyResult<Option<crate::shared_stats::SharedCacheStats>> {
        runtime::check_owner(self.pid)?;
        Ok(self
            .loader()
            .shared_cache()
            .map(|c| crate::shared_stats::SharedCacheStats::start(c.clone(), self.pid)))
    }

    /// Waits up to `timeout_secs` for queued shared-cache writes; returns whether all landed.
    /// Blocks (without the GIL): from a coroutine, `await loader.flush_async()`.
    #[pyo3(signature = (timeout_secs=5.0))]
    fn flush(&self, py: Python<'_>, timeout_secs: f64) -> PyResult<bool> {
        let loader = self.start()?;
        let rt = runtime::get()?;
        let deadline = secs("timeout_secs", timeout_secs)?;
        Ok(py.detach(|| rt.block_on(loader.shutdown(deadline))))
    }

    /// `await loader.flush_async(timeout_secs=5.0)`: `flush` for coroutines.
    #[pyo3(signature = (timeout_secs=5.0))]
    fn flush_async<'py>(&self, py: Python<'py>, timeout_secs: f64) -> PyResult<Bound<'py, PyAny>> {
        let loader = self.start()?;
        let deadline = secs("timeout_secs", timeout_secs)?;
        future_into_py::<PerProcess, _, _>(py, async move { Ok(loader.shutdown(deadline).await) })
    }

    /// The embedding caches: `await loader.embeddings.get_or_compute(key, compute, model=...)`.
    #[getter]
    fn embeddings(&self) -> PyResult<crate::embeddings::Embeddings> {
        runtime::check_owner(self.pid)?;
        Ok(crate::embeddings::Embeddings::new(
            self.loader().clone(),
            self.pid,
        ))
    }

    /// The loader's loads in one decode profile (see `mmcache.vllm`, `mmcache.sglang`):
    /// `color` `"rgb"` (with `background`: composited over it, vLLM's), `"original"` (the
    /// mode Pillow opens) or `"encoded"` (the bytes alone); `exif_orientation` applies the
    /// EXIF orientation; `keep_source` keeps the encoded bytes with each image; `fallback`
    /// hands back, undecoded, what is not decoded exactly as the profile asks.
    #[pyo3(name = "_profiled", signature = (color, *, background=None, exif_orientation=false, keep_source=false, fallback=false))]
    fn profiled(
        &self,
        color: &str,
        background: Option<(u8, u8, u8)>,
        exif_orientation: bool,
        keep_source: bool,
        fallback: bool,
    ) -> PyResult<crate::profiled::ProfiledLoader> {
        runtime::check_owner(self.pid)?;
        let profile = crate::profiled::profile_of(
            color,
            background,
            exif_orientation,
            keep_source,
            fallback,
        )?;
        Ok(crate::profiled::ProfiledLoader::new(
            self.loader().clone(),
            profile,
            self.pid,
        ))
    }

    fn __repr__(&self) -> String {
        format!("<mmcache.Loader {:?}>", self.loader().config())
    }
}

/// What a load gives Python.
#[derive(Clone, Copy)]
enum Form {
    /// The numpy array.
    Array,
    /// `(array, source)`.
    ArrayAndSource,
    /// The pixels' owner, `Pixels` (for PIL).
    Pixels,
}

/// One load's outcome, made into Python objects by pyo3-async-runtimes on a blocking thread
/// that holds the GIL (never on a runtime worker, whose other tasks must keep running). Each
/// form costs the same whatever the image's size: nothing is copied.
struct One {
    result: mmcache_loader::Result<Loaded>,
    url: String,
    form: Form,
}

impl<'py> IntoPyObject<'py> for One {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.result {
            Ok(loaded) => match self.form {
                Form::Array => pixels::to_array(py, loaded.image),
                Form::ArrayAndSource => {
                    (pixels::to_array(py, loaded.image)?, loaded.source.as_str())
                        .into_bound_py_any(py)
                }
                Form::Pixels => pixels::owner(py, loaded.image).map(Bound::into_any),
            },
            Err(e) => Err(errors::load_error(py, &e, &self.url)),
        }
    }
}

/// A batch's outcomes (see [`One`]).
struct Batch {
    results: Vec<mmcache_loader::Result<Loaded>>,
    urls: Vec<String>,
}

impl<'py> IntoPyObject<'py> for Batch {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut images: Vec<Arc<Image>> = Vec::with_capacity(self.results.len());
        let mut failures = Vec::new();
        for (i, r) in self.results.into_iter().enumerate() {
            match r {
                Ok(l) => images.push(l.image),
                Err(e) => failures.push((i, e)),
            }
        }
        if !failures.is_empty() {
            let urls: Vec<&str> = self.urls.iter().map(String::as_str).collect();
            return Err(errors::batch_error(py, failures, &urls));
        }
        let arrays = images
            .into_iter()
            .map(|i| pixels::to_array(py, i))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, arrays).map(Bound::into_any)
    }
}

impl Loader {
    fn loader(&self) -> &mmcache_loader::Loader {
        self.inner
            .as_ref()
            .expect("a loader is present until dropped")
    }

    /// An awaitable load of `url`, giving `form`.
    fn awaitable<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
        form: Form,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (loader, scope) = (self.start()?, scope_of(scope));
        future_into_py::<PerProcess, _, _>(py, async move {
            let result = loader.load_detailed(&url, scope.as_ref()).await;
            Ok(One { result, url, form })
        })
    }

    /// The decoded cache's image of `url`, without awaiting (see `_cached`).
    fn memory_hit(&self, url: &str, scope: Option<&str>) -> PyResult<Option<Arc<Image>>> {
        runtime::check_owner(self.pid)?;
        Ok(self.loader().load_cached(url, scope_of(scope).as_ref()))
    }

    /// The loader, after checking it runs in the process that built it.
    fn start(&self) -> PyResult<mmcache_loader::Loader> {
        runtime::check_owner(self.pid)?;
        runtime::get()?;
        Ok(self.loader().clone())
    }

    fn build(
        py: Python<'_>,
        mut builder: LoaderBuilder,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        if let Some(settings) = settings {
            for (name, value) in settings.iter() {
                let name: String = name.extract()?;
                // Keywords only: a variable's name is no keyword argument.
                if !SETTINGS.iter().any(|s| s.python == name) {
                    return Err(PyTypeError::new_err(format!(
                        "Loader got an unexpected keyword argument '{name}'"
                    )));
                }
                let text = keyword_text(&name, &value)?;
                builder = builder
                    .with_setting(&name, &text)
                    .map_err(|e| errors::config_error(py, &e))?;
            }
        }
        // Before the build: the loader resolves its metric handles once, at build time.
        runtime::metrics();
        runtime::init_logs();
        let rt = runtime::get()?;
        let _entered = rt.enter();
        let inner = builder.build().map_err(|e| errors::config_error(py, &e))?;
        Ok(Self {
            inner: Some(inner),
            pid: std::process::id(),
        })
    }
}

/// A blank scope is no scope, as in Dynamo.
fn scope_of(raw: Option<&str>) -> Option<Scope> {
    raw.and_then(Scope::new)
}

/// A duration setting in seconds: finite and not negative (upper bounds: the builder's).
fn secs(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!("{name}={value} is not a valid number of seconds"))
    })
}

/// The text a keyword's Python value stands for, which the setting's reader then reads as it
/// reads its variable's text (the one generic place where a keyword becomes text): `True` and
/// `False` (`numpy.bool_` too) are `1` and `0`, an integer (anything with `__index__`: numpy's,
/// an `IntEnum`) its decimal spelling, a `float` (anything with `__float__`: numpy's, a
/// `Decimal`) its integer spelling when whole, else its own, a `str` itself, a path (`os.PathLike`) its
/// file-system spelling, `bytes` or a `bytearray` their UTF-8 text, a list or a tuple its
/// items' texts joined by commas, and `None` the blank text (unset).
fn keyword_text(keyword: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if value.is_none() {
        return Ok(String::new());
    }
    if let Ok(text) = value.cast::<PyString>() {
        return text.extract::<String>();
    }
    // Before integers: a bool is one in Python.
    if let Ok(flag) = value.extract::<bool>() {
        return Ok(if flag { "1" } else { "0" }.to_owned());
    }
    // An integer: anything `operator.index` takes (numpy's, an IntEnum), as a Python int.
    if let Ok(index) = value
        .py()
        .import("operator")?
        .call_method1("index", (value,))
    {
        return index.str()?.extract::<String>();
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value
            .try_iter()?
            .map(|item| keyword_text(keyword, &item?))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(items.join(","));
    }
    let bytes = if let Ok(bytes) = value.cast::<PyBytes>() {
        Some(bytes.as_bytes().to_vec())
    } else if let Ok(bytes) = value.cast::<PyByteArray>() {
        Some(bytes.to_vec())
    } else {
        None
    };
    if let Some(bytes) = bytes {
        return String::from_utf8(bytes)
            .map_err(|_| PyValueError::new_err(format!("{keyword}: expected UTF-8 bytes")));
    }
    if let Ok(path) = value.extract::<std::path::PathBuf>() {
        return path
            .into_os_string()
            .into_string()
            .map_err(|_| PyValueError::new_err(format!("{keyword}: expected a UTF-8 path")));
    }
    // Last: `__float__` (a float, numpy's, a Decimal). A whole number as an integer (`1e8`
    // sets an integer setting too; `-0.0` is `0`); any other as Python spells it when that
    // reads as the same kind of number (numpy's float32 0.1 is `0.1`, a Decimal keeps its
    // digits), else as the f64's shortest spelling (a 0-d tensor's `str` is not a number).
    if let Ok(number) = value.extract::<f64>() {
        let number = number + 0.0;
        if number.fract() == 0.0 {
            return Ok(format!("{number:.0}"));
        }
        let spelled = value.str()?.extract::<String>()?;
        if spelled.trim().parse::<f64>().is_ok() {
            return Ok(spelled);
        }
        return Ok(number.to_string());
    }
    Err(PyTypeError::new_err(format!(
        "{keyword}: expected a bool, int, float, str, path, bytes, bytearray, list, tuple or \
         None, got {}",
        value.get_type().name()?
    )))
}

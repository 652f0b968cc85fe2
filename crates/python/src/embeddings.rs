//! `loader.embeddings`: the Rust embedding caches for Python computes.
//!
//! A compute is a Python async callable. It runs on the event loop of the call that starts
//! it, as an asyncio task of its own (so cancelling any caller cancels nothing), while the
//! join and the cache live in Rust: concurrent callers of one key, on any loop or thread,
//! share it. Python objects are touched only on blocking threads holding the GIL, never on a
//! runtime worker.

use mmcache_loader::Scope;
use mmcache_loader::embeddings::{
    Embedding, EmbeddingError, EmbeddingKeyInput, EmbeddingLoaded, EmbeddingSource,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{future_into_py_with_locals, get_current_locals};

use crate::runtime::{self, PerProcess};
use crate::{errors, exit, tensor};

/// The loader's embedding caches (`loader.embeddings`).
#[pyclass(frozen, module = "mmcache._native")]
pub(crate) struct Embeddings {
    loader: mmcache_loader::Loader,
    pid: u32,
}

impl Embeddings {
    pub(crate) fn new(loader: mmcache_loader::Loader, pid: u32) -> Self {
        Self { loader, pid }
    }

    fn start(&self) -> PyResult<mmcache_loader::Loader> {
        runtime::check_owner(self.pid)?;
        runtime::get()?;
        Ok(self.loader.clone())
    }
}

#[pymethods]
impl Embeddings {
    /// `await embeddings.get_or_compute(key, compute, *, model, scope=None)`: the cached
    /// embedding of `key` under `model`, else a compute of it in flight (joined), else
    /// `await compute()`, whose array (or `(array, metadata)`) is cached.
    #[pyo3(signature = (key, compute, *, model, scope=None))]
    fn get_or_compute<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        compute: &Bound<'py, PyAny>,
        model: &Bound<'py, PyAny>,
        scope: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = Call::parse(py, key, model, scope)?;
        if !compute.is_callable() {
            return Err(errors::embedding_type(
                py,
                "compute must be an async callable (a coroutine function)".to_owned(),
            ));
        }
        let loader = self.start()?;
        let locals = get_current_locals::<PerProcess>(py)?;
        let compute = compute.clone().unbind();
        let on_loop = locals.clone();
        future_into_py_with_locals::<PerProcess, _, _>(py, locals, async move {
            let result = loader
                .embeddings()
                .get_or_compute(&call.input, &call.model, call.scope.as_ref(), move || {
                    run_compute(compute, on_loop)
                })
                .await;
            Ok(Outcome(result.map(|l| Some(l.into()))))
        })
    }

    /// `await embeddings.get(key, *, model, scope=None)`: the cached embedding, or `None`.
    #[pyo3(signature = (key, *, model, scope=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        model: &Bound<'py, PyAny>,
        scope: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = Call::parse(py, key, model, scope)?;
        let loader = self.start()?;
        let locals = get_current_locals::<PerProcess>(py)?;
        future_into_py_with_locals::<PerProcess, _, _>(py, locals, async move {
            let hit = loader
                .embeddings()
                .find(&call.input, &call.model, call.scope.as_ref())
                .await;
            Ok(Outcome(Ok(hit.map(|l| Loaded {
                embedding: l.embedding,
                source: l.source,
            }))))
        })
    }

    /// The embedding `get` and `get_or_compute` would return from memory, at once, or `None`
    /// where they would look further (counted as their memory hit; nothing counted on
    /// `None`). The Python methods call it first, so a memory hit takes no task and no
    /// thread hop.
    #[pyo3(name = "_cached", signature = (key, *, model, scope=None))]
    fn cached<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        model: &Bound<'py, PyAny>,
        scope: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = Call::parse(py, key, model, scope)?;
        runtime::check_owner(self.pid)?;
        let hit = self
            .loader
            .embeddings()
            .cached(&call.input, &call.model, call.scope.as_ref());
        Outcome(Ok(hit.map(|embedding| Loaded {
            embedding,
            source: EmbeddingSource::Memory,
        })))
        .into_pyobject(py)
    }

    /// `{"entries", "current_bytes", "capacity_bytes", "inflight"}` of the memory cache now.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let e = self.loader.embeddings();
        let stats = e.stats();
        let d = PyDict::new(py);
        d.set_item("entries", stats.entries)?;
        d.set_item("current_bytes", stats.bytes)?;
        d.set_item("capacity_bytes", e.max_bytes())?;
        d.set_item("inflight", e.inflight())?;
        Ok(d)
    }

    /// The compute deadline in seconds (`MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`), as the
    /// loader has it: the setting, else its default.
    #[getter]
    fn compute_timeout_secs(&self) -> f64 {
        self.loader
            .config()
            .embedding_compute_timeout()
            .as_secs_f64()
    }

    fn __repr__(&self) -> String {
        let stats = self.loader.embeddings().stats();
        format!(
            "<mmcache Embeddings {} entries, {} bytes>",
            stats.entries, stats.bytes
        )
    }
}

/// A call's key, model and scope, checked while the caller still holds the GIL.
struct Call {
    input: EmbeddingKeyInput,
    model: String,
    scope: Option<Scope>,
}

impl Call {
    fn parse(
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        model: &Bound<'_, PyAny>,
        scope: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let text = |what: &str, v: &Bound<'_, PyAny>| -> PyResult<String> {
            match v.cast::<PyString>() {
                Ok(s) => s.extract::<String>(),
                Err(_) => Err(errors::embedding_type(
                    py,
                    format!(
                        "the embedding {what} must be a str, got {}",
                        v.get_type()
                            .name()
                            .map_or_else(|_| "?".to_owned(), |n| n.to_string())
                    ),
                )),
            }
        };
        let scope = match scope.filter(|s| !s.is_none()) {
            Some(s) => Scope::new(&text("scope", s)?),
            None => None,
        };
        // `mmcache.ContentKey` (a str of 64 hex digits) keys by content, as Rust's
        // `EmbeddingKeyInput::content` does, so Rust and Python workers share its entries.
        let input = if key.hasattr("__mmcache_content_key__")? {
            let hex = text("key", key)?;
            match content_key_bytes(&hex) {
                Some(bytes) => EmbeddingKeyInput::content(bytes),
                None => {
                    return Err(errors::embedding_type(
                        py,
                        format!(
                            "a ContentKey is 64 hex digits, got {} characters",
                            hex.len()
                        ),
                    ));
                }
            }
        } else {
            EmbeddingKeyInput::caller(text("key", key)?)
        };
        Ok(Self {
            input,
            model: text("model", model)?,
            scope,
        })
    }
}

/// The 32 bytes of a content key written as 64 hex digits.
fn content_key_bytes(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let nibble = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// Runs `compute()` on the caller's loop (`locals`) and converts what it returns. Dropped
/// before it finishes (the compute deadline aborts it), it cancels the Python task.
async fn run_compute(compute: Py<PyAny>, locals: TaskLocals) -> Result<Embedding, PyErr> {
    // The guard is armed on the blocking thread the moment the task exists: if this future
    // is dropped while that thread still runs (the deadline passed during `compute()`'s own
    // call), the thread's result is dropped unclaimed, and the guard with it cancels the task.
    let (started, mut cancel) = tokio::task::spawn_blocking(move || {
        exit::attach(|py| {
            let awaitable = compute.bind(py).call0()?;
            let inspect = py.import("inspect")?;
            if !inspect
                .call_method1("isawaitable", (&awaitable,))?
                .extract::<bool>()?
            {
                return Err(errors::embedding_type(
                    py,
                    "compute must be an async callable: it returned something not awaitable"
                        .to_owned(),
                ));
            }
            let task = py
                .import("mmcache.embeddings")?
                .getattr("_Compute")?
                .call1((awaitable, locals.event_loop(py)))?;
            let cancel = CancelOnDrop(Some(task.clone().unbind()));
            let started =
                pyo3_async_runtimes::into_future_with_locals(&locals, task.call_method0("run")?)?;
            Ok((started, cancel))
        })
        .unwrap_or_else(|| Err(exit::exiting()))
    })
    .await
    .map_err(join_error)??;
    let value = started.await;
    cancel.0 = None;
    let value = value?;
    tokio::task::spawn_blocking(move || {
        exit::attach(|py| tensor::from_compute(value.bind(py)))
            .unwrap_or_else(|| Err(exit::exiting()))
    })
    .await
    .map_err(join_error)?
}

/// Cancels a compute's Python task (`mmcache.embeddings._Compute`) when dropped while set.
struct CancelOnDrop(Option<Py<PyAny>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(task) = self.0.take() else { return };
        // The GIL is taken on a blocking thread, never on a runtime worker. Without a runtime
        // (it is shutting down) the loop's own shutdown ends the task.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn_blocking(move || {
                exit::attach(|py| {
                    if let Err(e) = task.bind(py).call_method0("cancel") {
                        e.print(py);
                    }
                });
            });
        }
    }
}

fn join_error(e: tokio::task::JoinError) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!("mmcache embedding compute thread: {e}"))
}

/// An embedding and its source (not using `EmbeddingLoaded`'s constructor: it is
/// non-exhaustive).
struct Loaded {
    embedding: Embedding,
    source: EmbeddingSource,
}

/// A call's outcome, made into Python objects by pyo3-async-runtimes with the GIL.
struct Outcome(Result<Option<Loaded>, EmbeddingError>);

impl From<EmbeddingLoaded> for Loaded {
    fn from(l: EmbeddingLoaded) -> Self {
        Self {
            embedding: l.embedding,
            source: l.source,
        }
    }
}

impl<'py> IntoPyObject<'py> for Outcome {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(None) => Ok(py.None().into_bound(py)),
            Ok(Some(l)) => Ok(Bound::new(
                py,
                CachedEmbedding {
                    embedding: l.embedding,
                    source: l.source.as_str(),
                },
            )?
            .into_any()),
            Err(e) => Err(errors::embedding_error(py, &e)),
        }
    }
}

/// One embedding from the cache or a compute: `.array` (a read-only numpy view of the
/// cached bytes, no copy), `.metadata`, `.source`; DLPack export (a copy unless asked not to)
/// for `torch.from_dlpack`.
#[pyclass(frozen, name = "Embedding", module = "mmcache._native")]
pub(crate) struct CachedEmbedding {
    embedding: Embedding,
    source: &'static str,
}

#[pymethods]
impl CachedEmbedding {
    /// A read-only numpy array over the cached bytes (bfloat16 as `ml_dtypes.bfloat16`).
    #[getter]
    fn array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        tensor::to_array(py, &self.embedding)
    }

    /// The metadata stored with the tensor, or `None`.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.embedding.metadata().map(|m| PyBytes::new(py, m))
    }

    /// Where it came from: `memory`, `inflight`, `disk`, `shared` or `computed`.
    #[getter]
    fn source(&self) -> &'static str {
        self.source
    }

    /// `float32`, `float16` or `bfloat16`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.embedding.dtype().as_str()
    }

    /// The tensor's shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.embedding.shape())
    }

    /// The tensor's size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.embedding.bytes().len()
    }

    /// DLPack export (float32, float16, bfloat16) for `torch.from_dlpack(entry)` and
    /// `numpy.from_dlpack(entry)`: a copy of its own by default (torch does not honour a
    /// read-only flag); `copy=False` (with `max_version` 1.0 or later): the cached bytes,
    /// flagged read-only, no copy.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // `stream` is for device memory; ours is the host's.
        let _ = stream;
        if dl_device.is_some_and(|d| d != (1, 0)) {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "an embedding is in host memory: export to the CPU, then copy to the device",
            ));
        }
        crate::dlpack::export(py, &self.embedding, max_version, copy)
    }

    /// `(kDLCPU, 0)`: embeddings live in host memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    fn __repr__(&self) -> String {
        format!(
            "<mmcache Embedding {} {:?} from {}>",
            self.embedding.dtype().as_str(),
            self.embedding.shape(),
            self.source
        )
    }
}

//! The process's tokio runtime, metrics recorder and log output.
//!
//! One runtime per process, started by the first loader. A forked child does not inherit a
//! working runtime (threads do not survive `fork`), so the runtime is keyed by process id: a
//! child that builds a loader gets a runtime of its own; a loader built before the fork
//! refuses to run in the child with a clear error instead of hanging. The one unsafe block
//! reads the published runtime pointer (lock-free, so a fork can never leave it locked).

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use mmcache_loader::env;
use mmcache_loader::metrics::prometheus::PrometheusHandle;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{ContextExt, Runtime as AsyncRuntime};

/// A process's runtime. Never freed: it lives as long as its process (a parent's, copied into
/// a child by `fork`, has no threads there and must not be dropped).
struct ProcessRuntime {
    pid: u32,
    runtime: tokio::runtime::Runtime,
}

static CURRENT: AtomicPtr<ProcessRuntime> = AtomicPtr::new(std::ptr::null_mut());
static METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// How often histogram samples are folded in when nobody scrapes.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Worker threads of the runtime: `MMCACHE_RUNTIME_THREADS`, default one per CPU.
fn worker_threads() -> PyResult<usize> {
    match std::env::var(env::RUNTIME_THREADS) {
        Err(_) => Ok(std::thread::available_parallelism().map_or(2, |n| n.get())),
        Ok(raw) => match raw.trim().parse::<usize>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(n),
            _ => Err(PyRuntimeError::new_err(format!(
                "{}={raw:?} is invalid: expected an integer from 1 to 1024",
                env::RUNTIME_THREADS
            ))),
        },
    }
}

/// This process's runtime, started on first use.
pub(crate) fn get() -> PyResult<&'static tokio::runtime::Runtime> {
    let pid = std::process::id();
    let seen = CURRENT.load(Ordering::Acquire);
    if let Some(current) = published(seen)
        && current.pid == pid
    {
        return Ok(&current.runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads()?)
        .thread_name("mmcache")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("start the mmcache runtime: {e}")))?;
    let fresh: &'static mut ProcessRuntime = Box::leak(Box::new(ProcessRuntime { pid, runtime }));
    let fresh_ptr: *mut ProcessRuntime = fresh;
    match CURRENT.compare_exchange(seen, fresh_ptr, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            let started: &'static ProcessRuntime = fresh;
            // Histograms keep raw samples until folded in: fold them in even without scrapes.
            started.runtime.spawn(async {
                let mut tick = tokio::time::interval(METRICS_UPKEEP);
                loop {
                    tick.tick().await;
                    if let Some(handle) = METRICS.get() {
                        handle.run_upkeep();
                    }
                }
            });
            Ok(&started.runtime)
        }
        // Another thread published first: use that one (ours stays leaked, idle). Not reached
        // today: runtimes are only started with the GIL held, and the module is abi3, so it
        // never runs on a free-threaded interpreter.
        Err(_) => get(),
    }
}

/// Reads a pointer published in [`CURRENT`].
#[allow(unsafe_code)]
fn published(ptr: *mut ProcessRuntime) -> Option<&'static ProcessRuntime> {
    // SAFETY: CURRENT only ever holds null or a pointer from `Box::leak`, which is never freed
    // and never written through after publication, so a non-null value is a valid shared
    // `&'static` (the Acquire load pairs with the AcqRel publication).
    unsafe { ptr.as_ref() }
}

/// The raising form of the fork check, for loaders: a loader belongs to the process that
/// built it.
pub(crate) fn check_owner(owner_pid: u32) -> PyResult<()> {
    let pid = std::process::id();
    if owner_pid == pid {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(format!(
        "this mmcache Loader was built in process {owner_pid}, before this process ({pid}) \
         forked from it, and cannot run here; build a new Loader in this process"
    )))
}

/// The runtime of pyo3-async-runtimes' `future_into_py`: spawns on this process's runtime.
pub(crate) struct PerProcess;

tokio::task_local! {
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

impl AsyncRuntime for PerProcess {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // A loader checked its process and started the runtime before any spawn.
        current().spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        // Its completions enter Python: not once the interpreter is exiting (see `exit`).
        current().spawn_blocking(move || crate::exit::unless_exiting(f))
    }
}

impl ContextExt for PerProcess {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}

/// This process's runtime, which a loader of this process has started.
fn current() -> &'static tokio::runtime::Runtime {
    match get() {
        Ok(rt) => rt,
        // Only a bad MMCACHE_RUNTIME_THREADS fails, and the loader's build reported it first.
        Err(e) => panic!("mmcache runtime: {e}"),
    }
}

/// The Prometheus recorder, installed once before the first loader resolves its metric
/// handles. Another recorder installed first (by an embedding Rust program) wins; the text
/// is then empty.
pub(crate) fn metrics() -> &'static PrometheusHandle {
    METRICS.get_or_init(|| {
        match mmcache_loader::metrics::install_prometheus() {
            Ok(handle) => handle,
            // Someone else's recorder: a handle of our own that nothing records into.
            Err(_) => mmcache_loader::metrics::prometheus_builder()
                .build_recorder()
                .handle(),
        }
    })
}

/// Log lines of the Rust layers on stderr, at the level of `MMCACHE_LOG` (default warn), like
/// the `mmcache` command.
pub(crate) fn init_logs() {
    let level = match env::log_level(&std::env::var(env::LOG).unwrap_or_default()) {
        Ok(level) => level,
        // Importing the package must not fail over a log level: say so, and log at warn.
        Err(e) => {
            eprintln!("mmcache: {e}; logging at warn");
            tracing_subscriber::filter::LevelFilter::WARN
        }
    };
    if level == tracing_subscriber::filter::LevelFilter::OFF {
        return;
    }
    // Fails when a subscriber is already set: then that one gets the lines.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
}

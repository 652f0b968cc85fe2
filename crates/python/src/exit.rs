//! Interpreter exit: no runtime thread is inside Python once the interpreter finalizes.
//!
//! A load's result reaches Python from a runtime thread (pyo3-async-runtimes' `set_result`,
//! and the embedding computes). Such a thread can release the GIL midway (the event loop's
//! wake-up is a socket write); the main thread then finishes `asyncio.run` and finalizes the
//! interpreter, and when the runtime thread asks for the GIL again, CPython ends it with
//! `pthread_exit`. That unwinds through Rust frames that drop Python objects without the GIL:
//! the process crashed at exit (measured: 9 of 40 runs of a three-load script, a segfault or
//! "PyGILState_Release ... finalizing").
//!
//! So every entry into Python from a runtime thread goes through [`attach`], counted; an
//! `atexit` hook ([`before_exit`], registered when the module loads, run before the
//! interpreter finalizes) stops new entries and waits, without the GIL, for those under way.
//! An entry refused at exit leaks what it holds: the process is ending. (`atexit` runs its
//! hooks last first: a load awaited in a hook registered before `mmcache` was imported runs
//! after ours and never completes; said once on stderr.) A forked child starts with none
//! inside: the threads counted were the parent's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Runtime threads inside [`attach`] now.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// Set by [`before_exit`]: no new entry into Python.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Whether a refused entry has been reported on stderr.
static REPORTED: AtomicBool = AtomicBool::new(false);
/// Longest [`before_exit`] waits for entries under way (a compute's Python call may be one).
const EXIT_WAIT: Duration = Duration::from_secs(2);

struct Inside;

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `f` with the GIL, from a runtime thread; `None` (and `f`, with what it holds, leaked) once
/// the interpreter is exiting.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    // Counted before the flag is read (both SeqCst): `before_exit` either sees this entry
    // and waits for it, or this entry sees the flag.
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let _inside = Inside;
    if EXITING.load(Ordering::SeqCst) {
        std::mem::forget(f);
        refused();
        return None;
    }
    Some(Python::attach(f))
}

/// `f` (which takes the GIL itself, as pyo3-async-runtimes' completions do), counted like
/// [`attach`]; not run, and leaked, once the interpreter is exiting.
pub(crate) fn unless_exiting(f: impl FnOnce()) {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let _inside = Inside;
    if EXITING.load(Ordering::SeqCst) {
        std::mem::forget(f);
        refused();
        return;
    }
    f();
}

/// Says once, without Python (it may be finalizing), that a result was dropped at exit.
fn refused() {
    if !REPORTED.swap(true, Ordering::SeqCst) {
        eprintln!(
            "mmcache: a result reached Python after the interpreter began to exit and was \
             dropped (a load awaited in an atexit hook registered before mmcache was imported \
             never completes: import mmcache first)"
        );
    }
}

/// The `atexit` hook: no runtime thread enters Python from now on, and those inside are
/// waited for (at most [`EXIT_WAIT`]) with the GIL released, so they can finish.
#[pyfunction]
#[pyo3(name = "_before_exit")]
pub(crate) fn before_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = Instant::now() + EXIT_WAIT;
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// The error of a compute refused at exit.
pub(crate) fn exiting() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("the interpreter is exiting")
}

/// A forked child's state: no thread of its own is inside (the parent's counted threads do
/// not exist in it), and it is not exiting.
#[pyfunction]
#[pyo3(name = "_after_fork_in_child")]
pub(crate) fn after_fork_in_child() {
    INSIDE.store(0, Ordering::SeqCst);
    EXITING.store(false, Ordering::SeqCst);
}

/// Registers [`before_exit`] with `atexit`, and [`after_fork_in_child`] with
/// `os.register_at_fork`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let hook = wrap_pyfunction!(before_exit, m)?;
    py.import("atexit")?.call_method1("register", (hook,))?;
    let child = wrap_pyfunction!(after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("after_in_child", child)?;
    py.import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    Ok(())
}

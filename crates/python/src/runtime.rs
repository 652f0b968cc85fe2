//! The process's tokio runtime, metrics recorder and log output, started with the first loader.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

struct Started {
    runtime: &'static tokio::runtime::Runtime,
    pid: u32,
}

static STARTED: OnceLock<Started> = OnceLock::new();
static METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// The runtime, started on first use. A forked child cannot use its parent's runtime (its
/// threads did not survive the fork), so it gets a clear error instead of a hang.
pub(crate) fn get() -> PyResult<&'static tokio::runtime::Runtime> {
    let started = STARTED.get_or_init(|| {
        // Leaked on purpose: it lives as long as the process, and pyo3-async-runtimes needs
        // a 'static runtime to run `await`ed loads on.
        let runtime: &'static tokio::runtime::Runtime = Box::leak(Box::new(
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("mmcache")
                .enable_all()
                .build()
                .expect("start the mmcache tokio runtime"),
        ));
        // Fails only when a runtime was already given, which nothing else here does.
        let _ = pyo3_async_runtimes::tokio::init_with_runtime(runtime);
        Started {
            runtime,
            pid: std::process::id(),
        }
    });
    if started.pid != std::process::id() {
        return Err(PyRuntimeError::new_err(format!(
            "mmcache started its runtime in process {} before this process forked from it; \
             create loaders only after fork (or use the 'spawn' or 'forkserver' start method)",
            started.pid
        )));
    }
    Ok(started.runtime)
}

/// The Prometheus recorder, installed once before the first loader resolves its metric
/// handles. Another recorder installed first (by an embedding Rust program) wins; the text
/// is then empty.
pub(crate) fn metrics() -> &'static PrometheusHandle {
    METRICS.get_or_init(|| {
        let mut builder = PrometheusBuilder::new();
        for (name, buckets) in mmcache_loader::metrics::histogram_buckets() {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
                .expect("histogram buckets are not empty");
        }
        match builder.install_recorder() {
            Ok(handle) => {
                mmcache_loader::metrics::describe();
                handle
            }
            // Someone else's recorder: a handle of our own that nothing records into.
            Err(_) => PrometheusBuilder::new().build_recorder().handle(),
        }
    })
}

/// Log lines of the Rust layers on stderr, at the level of `MMCACHE_LOG` (default warn), like
/// the `mmcache` command.
pub(crate) fn init_logs() {
    let level = match std::env::var("MMCACHE_LOG").unwrap_or_default().as_str() {
        "off" => return,
        "error" => tracing_subscriber::filter::LevelFilter::ERROR,
        "info" => tracing_subscriber::filter::LevelFilter::INFO,
        "debug" => tracing_subscriber::filter::LevelFilter::DEBUG,
        "trace" => tracing_subscriber::filter::LevelFilter::TRACE,
        _ => tracing_subscriber::filter::LevelFilter::WARN,
    };
    // Fails when a subscriber is already set: then that one gets the lines.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
}

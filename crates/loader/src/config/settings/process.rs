//! The variables read outside a loader's configuration: by the `mmcache` command, the Python
//! runtime and `mmcache.dynamo`, each as its documentation says. [`crate::Config`] never reads
//! them, and `LoaderBuilder::with_setting` knows none of them.
//!
//! Each variable's name is declared in this file with its [`Variable`]; [`crate::env`]
//! re-exports it.

use super::shape::Variable;

/// Level of the log lines that the `mmcache` command and the Python package write on stderr;
/// read by them through [`crate::env::log_level`], not by a `Config`.
pub const LOG: &str = "MMCACHE_LOG";
/// Worker threads of the Python package's runtime.
pub const RUNTIME_THREADS: &str = "MMCACHE_RUNTIME_THREADS";
/// Dynamo's HTTP timeout in seconds, read by `mmcache.dynamo.ImageLoader` alone.
pub const HTTP_TIMEOUT: &str = "DYN_MM_HTTP_TIMEOUT";

/// Read outside a loader's configuration.
pub(super) const VARIABLES: [Variable; 3] = [
    Variable {
        name: RUNTIME_THREADS,
        default: "one per CPU",
        rule: "integer 1 to 1024",
        doc: ": worker threads of the Python package's tokio runtime (read when the first \
            `Loader` is built)",
    },
    Variable {
        name: LOG,
        default: "`warn`",
        rule: "`error`, `warn`, `info`, `debug`, `trace` or `off`",
        doc: ": level of the Rust layers' log lines on stderr, for the `mmcache` command and the \
            Python package (read once, `mmcache_loader::env::log_level`): the command refuses \
            any other value, the package says so on stderr and logs at `warn`",
    },
    Variable {
        name: HTTP_TIMEOUT,
        default: "unset",
        rule: "finite number > 0",
        doc: ": read by `mmcache.dynamo.ImageLoader` alone, as Dynamo reads it: it overrides the \
            `http_timeout` argument (30 s), the origin deadline of that loader; an invalid value \
            warns and keeps the argument. Other loaders' origin deadline is \
            `MMCACHE_ORIGIN_TIMEOUT_SECS` (see [dynamo-differences.md](dynamo-differences.md))",
    },
];

//! Real servers and real data for mmcache tests: a local HTTP origin, Redis Cluster processes
//! and generated images. Not published; used by tests, `cargo xtask demo`, `chaos` and `bench`.
//!
//! # Examples
//!
//! ```
//! use mmcache_test_support::{images, origin::{Route, TestOrigin}};
//!
//! let origin = TestOrigin::start();
//! origin.set("/cat.png", Route::ok(images::png(8, 8, 1)));
//! assert!(origin.url("/cat.png").starts_with("http://127.0.0.1:"));
//! assert_eq!(origin.hits("/cat.png"), 0);
//! ```

pub mod alloc;
pub mod dns;
pub mod forward;
pub mod images;
pub mod manifest;
pub mod origin;
pub mod redis;
mod redis_files;
pub mod scrape;
mod server;

/// The Rust examples of the workspace's own pages, compiled as doctests so they stay true (the
/// published crates compile their READMEs themselves). `tests/it/docs.rs` checks that every page
/// with a Rust example is listed here.
#[cfg(doctest)]
pub mod doc_examples {
    /// README.md.
    #[doc = include_str!("../../../README.md")]
    pub struct Readme;
    /// docs/embeddings.md.
    #[doc = include_str!("../../../docs/embeddings.md")]
    pub struct Embeddings;
}

/// True when running under CI (`CI` set to anything but `0`/`false`/empty): there a missing
/// server is a failure, never a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A fresh path (removed if it was there, not created) for `name` on a memory file system
/// (`/dev/shm`, as the host pixel tier wants), else in the temporary folder.
pub fn memory_dir(name: &str) -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let p = base.join(format!("mmcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// A port on 127.0.0.1 where nothing listens: bound, then released at once. Connections to it
/// are refused (another process could take it in between; tests accept that tiny chance).
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

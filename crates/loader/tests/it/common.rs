//! What tests of several modules share: a scratch directory removed on drop, and a flag that
//! shows a future was dropped.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A directory under the temp dir, removed (with what is in it) on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sets its flag when dropped: shows that the compute's future was dropped.
pub(crate) struct DropFlag(pub(crate) Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

//! What the disk-cache tests share: a scratch directory and test identities.

use std::path::PathBuf;

use mmcache_scope::CacheIdentity;

/// A fresh directory under the temp dir, removed on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    /// `<tmp>/mmcache-<name>-<pid>`, emptied first.
    pub(crate) fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("mmcache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The identity of test image `n`.
pub(crate) fn id(n: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://example.com/{n}.png"))
}

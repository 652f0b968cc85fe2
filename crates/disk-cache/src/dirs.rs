//! Directory handles kept open, so that a hit costs the entry's own syscalls (`openat`, `fstat`,
//! the reads, `close`) and not its path's: `v1`, opened when the tier starts, and each shard
//! folder `v1/<aa>`, opened at its first read. Each was opened and judged once as every folder
//! is (`fsops::open_dir_at`: no link followed, ours or the group's, not writable by everyone);
//! the entries in them are still opened and judged one by one, every time.
//!
//! A kept handle names the folder it was opened on, wherever that is now: a link planted at its
//! name later is never followed, since the name is not looked up again. A folder removed or
//! replaced since (an operator emptied the directory, a co-tenant of the group moved it) finds
//! nothing, so a read that finds nothing through the kept handles looks again from the
//! configured path, afresh, and keeps what it opened there (or forgets the handles when the path
//! no longer leads to a folder of ours). Writes, locks, removals and sweeps open their folders
//! from the path every time, as before.
//!
//! The shard handles are kept only when the process may open [`KEEP_SHARDS_FROM`] files or more
//! (its soft `RLIMIT_NOFILE`): 257 descriptors must stay a small share of what sockets and
//! files need. Below that only `v1` is kept, and a hit also opens its shard folder.

use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::fsops::{FsResult, Kept, Owners, open_kept};
use crate::trust::open_root;

/// The soft limit on open files from which the shard folders' handles are kept.
pub(crate) const KEEP_SHARDS_FROM: u64 = 4096;

type Slot = RwLock<Option<Arc<Kept>>>;

/// The kept handles of one cache: `v1` and the 256 shard folders.
#[derive(Debug)]
pub(crate) struct Dirs {
    v1: Slot,
    /// Empty when the shards' handles are not kept (a low limit on open files).
    shards: Box<[Slot]>,
}

fn get(slot: &Slot) -> Option<Arc<Kept>> {
    slot.read().ok().and_then(|k| k.clone())
}

fn set(slot: &Slot, kept: Option<Arc<Kept>>) {
    if let Ok(mut s) = slot.write() {
        *s = kept;
    }
}

impl Dirs {
    /// Handles to keep, starting with `v1` when the tier's start opened it.
    pub(crate) fn new(v1: Option<Arc<Kept>>) -> Self {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let keep_shards = nofile.is_none_or(|n| n >= KEEP_SHARDS_FROM); // None: unlimited
        Self {
            v1: RwLock::new(v1),
            shards: (0..if keep_shards { 256 } else { 0 })
                .map(|_| RwLock::new(None))
                .collect(),
        }
    }

    /// The slot of shard `aa` (two hex digits; any other name is not kept).
    fn slot(&self, aa: &str) -> Option<&Slot> {
        let n = (aa.len() == 2).then(|| u8::from_str_radix(aa, 16).ok())??;
        self.shards.get(usize::from(n))
    }

    /// The kept shard folder `aa`, opened through the kept `v1` at its first use (and kept, when
    /// shards are). `None` when that fails or `v1` is not kept: the caller then looks from the
    /// path.
    pub(crate) fn shard(&self, aa: &str, owners: &Owners) -> Option<Arc<Kept>> {
        let slot = self.slot(aa);
        if let Some(kept) = slot.and_then(get) {
            return Some(kept);
        }
        let kept = open_kept(&get(&self.v1)?.fd, aa, owners).ok()?;
        if let Some(slot) = slot {
            set(slot, Some(kept.clone()));
        }
        Some(kept)
    }

    /// Opens `v1` and the shard folder `aa` afresh from the configured directory `dir`, and
    /// keeps them; a folder that cannot be opened so is forgotten, with the error returned.
    pub(crate) fn reopen(&self, dir: &Path, aa: &str, owners: &Owners) -> FsResult<Arc<Kept>> {
        let v1 = open_root(dir, owners, false).and_then(|root| open_kept(&root, "v1", owners));
        set(&self.v1, v1.as_ref().ok().cloned());
        let shard = v1.and_then(|v1| open_kept(&v1.fd, aa, owners));
        if let Some(slot) = self.slot(aa) {
            set(slot, shard.as_ref().ok().cloned());
        }
        shard
    }
}

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

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::fsops::{self, FsError, FsResult, Owners};
use crate::{DiskCache, Found, ReadHold, metrics};

/// The soft limit on open files from which the shard folders' handles are kept.
pub(crate) const KEEP_SHARDS_FROM: u64 = 4096;

/// A folder handle kept open, with the identity of the folder it was opened on.
#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) fd: OwnedFd,
    dev: u64,
    ino: u64,
}

impl Kept {
    /// The handle `fd` of the folder whose `fstat` is `st`.
    pub(crate) fn new(fd: OwnedFd, st: &rustix::fs::Stat) -> Arc<Self> {
        #[allow(clippy::unnecessary_cast)] // the types differ between targets
        let (dev, ino) = (st.st_dev as u64, st.st_ino as u64);
        Arc::new(Self { fd, dev, ino })
    }

    /// Whether both handles are of one folder.
    pub(crate) fn same(&self, other: &Kept) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

type Slot = RwLock<Option<Arc<Kept>>>;

/// The kept handles of one cache: `v1` and the 256 shard folders.
#[derive(Debug)]
pub(crate) struct Dirs {
    v1: Slot,
    /// Empty when the shards' handles are not kept (a low limit on open files).
    shards: Box<[Slot]>,
}

/// Opens the folder `name` in `parent` (not making it) and keeps it with its identity.
pub(crate) fn open_kept(parent: &OwnedFd, name: &str, owners: &Owners) -> FsResult<Arc<Kept>> {
    let (fd, st) = fsops::open_dir_at_stat(parent, name, owners, false)?;
    Ok(Kept::new(fd, &st))
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
        let v1 =
            fsops::open_root(dir, owners, false).and_then(|root| open_kept(&root, "v1", owners));
        set(&self.v1, v1.as_ref().ok().cloned());
        let shard = v1.and_then(|v1| open_kept(&v1.fd, aa, owners));
        if let Some(slot) = self.slot(aa) {
            set(slot, shard.as_ref().ok().cloned());
        }
        shard
    }
}

impl DiskCache {
    /// Reads `digest`'s entry through the kept folder handles; when that finds nothing, again
    /// from the configured path (the kept folder may have been removed or replaced; see `dirs`).
    pub(crate) fn read(&self, digest: &str) -> FsResult<Found> {
        let (aa, dirs, owners) = (&digest[..2], &self.inner.dirs, &self.inner.owners);
        let kept = dirs.shard(aa, owners);
        let first = match &kept {
            Some(shard) => match self.read_in(&shard.fd, digest) {
                // Nothing there, or an I/O error (a removed folder on NFS is ESTALE): the
                // folder may be gone, so look from the path.
                r @ Err(FsError::Missing | FsError::Io(_)) => Some(r),
                found => return found,
            },
            None => None,
        };
        let fresh = dirs.reopen(&self.inner.config.dir, aa, owners)?;
        if let (Some(kept), Some(first)) = (&kept, first)
            && kept.same(&fresh)
        {
            return first; // the same folder: looked there already
        }
        self.read_in(&fresh.fd, digest)
    }

    fn read_in(&self, shard: &OwnedFd, digest: &str) -> FsResult<Found> {
        let (mut file, st) = fsops::open_file_at(shard, digest, &self.inner.owners)?;
        if self.expired(&st) {
            if fsops::unlink_if_same(shard, digest, &st) {
                self.inner.metrics.evicted(metrics::EvictReason::Expired);
            }
            return Ok(Found::Expired);
        }
        if !self.valid(&st) {
            return Ok(Found::Miss); // empty, or over this worker's cap
        }
        let len = usize::try_from(st.st_size).unwrap_or(0);
        let hold: Option<ReadHold> = match self.inner.read_memory.get() {
            None => None,
            Some((_, now)) => match now(len as u64) {
                Some(hold) => Some(hold),
                None => return Ok(Found::Open(file, len)), // read once its memory is reserved
            },
        };
        self.read_file(&mut file, len).map(|v| match (v, hold) {
            (None, _) => Found::Miss,
            (Some(v), Some(hold)) => Found::Hit(hold(v)),
            (Some(v), None) => Found::Hit(v.into()),
        })
    }
}

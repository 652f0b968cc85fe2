//! Entries mapped instead of read: the host pixel tier's readers view an entry's bytes in
//! place, shared with every process of the host that maps it, without a copy.
//!
//! The mapping is read-only (`PROT_READ`, `MAP_SHARED`) and populated at once (the reader
//! checks every byte anyway; see `mmap`). Small entries, and entries past a cap on the mappings
//! a process holds, are read into the process's memory instead
//! ([`MAP_MIN_BYTES`](crate::mmap::MAP_MIN_BYTES), [`MAX_MAPPINGS`](crate::mmap::MAX_MAPPINGS)). It stays valid when the entry is evicted or replaced: unlinking
//! or renaming over a file does not touch the pages of the file mapped. Only a write into the
//! file itself (or a truncation) would change what a reader sees, and entries to map are
//! read-only to everyone: a reader maps only a file whose mode has no write bit (see
//! `read`), and checks what it mapped against the entry's checksum (above this crate).

use bytes::Bytes;

use crate::cache::DiskCache;
use crate::named::EntryName;
use crate::read::{EntryStamp, How};

/// An entry of the host pixel tier, as [`DiskCache::get_mapped_named`] found it.
#[derive(Debug)]
#[non_exhaustive]
pub struct MappedEntry {
    /// The entry's bytes: a read-only mapping of its file, or (see `mapped`) a copy.
    pub bytes: Bytes,
    /// The file they came from.
    pub stamp: EntryStamp,
    /// Whether `bytes` map the file (shared with the host's other processes); false for an
    /// entry under [`MAP_MIN_BYTES`](crate::mmap::MAP_MIN_BYTES), or when the process holds
    /// [`MAX_MAPPINGS`](crate::mmap::MAX_MAPPINGS) already.
    pub mapped: bool,
}

impl DiskCache {
    /// The entry named `name`, mapped read-only: [`DiskCache::get_named_stamped`] without a
    /// copy into this process's memory (and without the read memory, which counts copies).
    /// For a [`Tier::Host`](crate::config::Tier::Host) cache on a memory file system; a file that
    /// anyone may write is not mapped (a miss, counted as skipped `writable`). A hit refreshes
    /// the file's access time (the sweep keeps the entries last used). Not counted as a read:
    /// the caller, which checks the bytes, counts the outcome ([`DiskCache::count_read`]).
    pub async fn get_mapped_named(&self, name: &EntryName) -> Option<MappedEntry> {
        let (bytes, stamp, mapped) = self
            .get_digest_as(name.as_str().to_owned(), How::Map)
            .await?;
        Some(MappedEntry {
            bytes,
            stamp,
            mapped,
        })
    }
}

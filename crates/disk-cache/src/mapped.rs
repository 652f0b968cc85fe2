//! Entries mapped instead of read: the host pixel tier's readers view an entry's bytes in
//! place, shared with every process of the host that maps it, without a copy.
//!
//! The mapping is read-only (`PROT_READ`, `MAP_SHARED`) and populated at once (the reader
//! checks every byte anyway). It stays valid when the entry is evicted or replaced: unlinking
//! or renaming over a file does not touch the pages of the file mapped. Only a write into the
//! file itself (or a truncation) would change what a reader sees, and entries to map are
//! read-only to everyone: a reader maps only a file whose mode has no write bit (see
//! `read`), and checks what it mapped against the entry's checksum (above this crate).

use bytes::Bytes;

use crate::cache::DiskCache;
use crate::named::EntryName;
use crate::read::{EntryStamp, How};

impl DiskCache {
    /// The entry named `name`, mapped read-only: [`DiskCache::get_named_stamped`] without a
    /// copy into this process's memory (and without the read memory, which counts copies).
    /// For a [`Tier::Host`](crate::Tier::Host) cache on a memory file system; a file that
    /// anyone may write is not mapped (a miss, counted as skipped `writable`).
    pub async fn get_mapped_named(&self, name: &EntryName) -> Option<(Bytes, EntryStamp)> {
        self.get_digest_as(name.as_str().to_owned(), How::Map).await
    }
}

/// `file` mapped read-only, as [`Bytes`] that unmap it when the last handle goes.
#[allow(unsafe_code)]
pub(crate) fn map(file: &std::fs::File) -> std::io::Result<Bytes> {
    // SAFETY: `Mmap` is unsafe because another process could change the file's bytes while
    // they are borrowed. The entries mapped are regular files that nobody may write (checked
    // from their `fstat` just before), written once and renamed into place by their writer;
    // what a process trusted to own them (this uid, or the configured group) does to them
    // beyond that is outside this crate's trust boundary, and the reader checks the bytes
    // against their checksum after mapping them.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(file)? };
    Ok(Bytes::from_owner(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_mapping_outlives_the_file_that_was_unlinked() {
        let dir = std::env::temp_dir().join(format!("mmcache-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("entry");
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(b"pixels"))
            .expect("write");
        let mapped = map(&std::fs::File::open(&path).expect("open")).expect("map");
        std::fs::remove_dir_all(&dir).expect("remove");
        assert_eq!(&mapped[..], b"pixels");
        let view = mapped.slice(1..3);
        drop(mapped);
        assert_eq!(&view[..], b"ix");
    }
}

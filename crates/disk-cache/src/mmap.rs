//! The mapping of an entry's file (the one `unsafe` call of this crate), and the bounds on
//! what a process maps: entries are mapped read-only and shared, populated at once, and counted
//! while mapped.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

/// Entries smaller than this are read into the process's memory instead of mapped: a copy of
/// them costs microseconds, and a mapping each would spend the process's map count (a process
/// has at most `vm.max_map_count` of them, 65530 by default, and every allocation, thread stack
/// and library needs some).
pub const MAP_MIN_BYTES: u64 = 64 << 10;
/// Mappings of entries this process holds at most at once; past it entries are read instead
/// (a quarter of the default `vm.max_map_count`).
pub const MAX_MAPPINGS: usize = 16 << 10;

/// Mappings of entries live in this process.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// A mapping of an entry, counted in [`LIVE`] until unmapped.
struct Mapping(memmap2::Mmap);

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `file` (of `len` bytes by its `fstat`) mapped read-only, as [`Bytes`] that unmap it when the
/// last handle goes; `None` when it should be read instead (small, or too many mappings).
#[allow(unsafe_code)]
pub(crate) fn map(file: &std::fs::File, len: u64) -> std::io::Result<Option<Bytes>> {
    if len < MAP_MIN_BYTES {
        return Ok(None);
    }
    if LIVE.fetch_add(1, Ordering::Relaxed) >= MAX_MAPPINGS {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        return Ok(None);
    }
    // SAFETY: `Mmap` is unsafe because another process could change the file's bytes while
    // they are borrowed. The entries mapped are regular files that nobody may write (checked
    // from their `fstat` just before), written once and renamed into place by their writer;
    // what a process trusted to own them (this uid, or the configured group) does to them
    // beyond that is outside this crate's trust boundary, and the reader checks the bytes
    // against their checksum after mapping them.
    match unsafe { memmap2::MmapOptions::new().populate().map(file) } {
        Ok(map) => Ok(Some(Bytes::from_owner(Mapping(map)))),
        Err(e) => {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            Err(e)
        }
    }
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
        let file = std::fs::File::open(&path).expect("open");
        assert!(
            map(&file, 6).expect("small").is_none(),
            "a small entry is read"
        );
        let mapped = map(&file, MAP_MIN_BYTES).expect("map").expect("mapped");
        let live = LIVE.load(Ordering::Relaxed);
        std::fs::remove_dir_all(&dir).expect("remove");
        assert_eq!(&mapped[..], b"pixels");
        let view = mapped.slice(1..3);
        drop(mapped);
        assert_eq!(&view[..], b"ix");
        drop(view);
        assert_eq!(
            LIVE.load(Ordering::Relaxed),
            live - 1,
            "unmapped with its last view"
        );
    }
}

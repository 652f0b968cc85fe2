//! The most memory a loader's budgets let it hold, from the settings in force: what
//! `mmcache doctor` prints, and what a worker's memory limit is sized from. The shares of the
//! download budget that reads and writes take beside it are decided here, once.

use super::Config;
use super::env;

/// One budget: what it holds, the setting that sizes it, its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryPart {
    /// What the budget holds.
    pub what: &'static str,
    /// The variable that sets it (or that it is a share of).
    pub setting: &'static str,
    /// Its size in bytes.
    pub bytes: u64,
}

impl Config {
    /// The write allowance: cache writes (disk and shared) hold a copy of a load's bytes under
    /// it, a quarter of the download budget, beside it.
    pub fn write_allowance_bytes(&self) -> u64 {
        self.download_memory_bytes / 4
    }

    /// The pool of shared-cache reads' first steps (made before a value's length is known): an
    /// eighth of the download budget, beside it.
    pub fn read_first_steps_bytes(&self) -> u64 {
        self.download_memory_bytes / 8
    }

    /// Every budget that bounds what a loader holds, in bytes: the decoded cache, the
    /// embedding cache, the decode budget, the download budget and the two shares beside it.
    /// Their sum ([`Config::memory_bound`]) is the worst case the budgets allow, before the
    /// runtime's, the allocator's and the caller's own memory (the embeddings a caller is
    /// computing, the images it still holds after they left the decoded cache).
    pub fn memory_parts(&self) -> [MemoryPart; 6] {
        let part = |what, setting, bytes| MemoryPart {
            what,
            setting,
            bytes,
        };
        [
            part(
                "decoded cache",
                env::DECODED_CACHE_BYTES,
                self.decoded_cache_bytes,
            ),
            part(
                "embedding cache",
                env::EMBEDDING_CACHE_BYTES,
                self.embedding_cache_bytes,
            ),
            part(
                "decode budget",
                env::DECODE_MEMORY_BYTES,
                self.decode_memory_bytes,
            ),
            part(
                "download budget",
                env::DOWNLOAD_MEMORY_BYTES,
                self.download_memory_bytes,
            ),
            part(
                "shared reads' first steps (1/8 of the download budget)",
                env::DOWNLOAD_MEMORY_BYTES,
                self.read_first_steps_bytes(),
            ),
            part(
                "write allowance (1/4 of the download budget)",
                env::DOWNLOAD_MEMORY_BYTES,
                self.write_allowance_bytes(),
            ),
        ]
    }

    /// The sum of [`Config::memory_parts`]: the most the loader's budgets let it hold.
    pub fn memory_bound(&self) -> u64 {
        self.memory_parts()
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_sum_to_4800_mib() {
        let c = Config::default();
        // 1 GiB + 1 GiB + 2 GiB + 512 MiB × (1 + 1/8 + 1/4).
        assert_eq!(c.memory_bound(), 4800 << 20);
        assert_eq!(c.write_allowance_bytes(), 128 << 20);
        assert_eq!(c.read_first_steps_bytes(), 64 << 20);
    }
}

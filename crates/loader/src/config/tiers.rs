//! Where settings go: the origin client's configuration, made from a checked [`Config`] (the
//! only place its fields are copied), and the shared cache's and the disk tier's, which
//! [`Config`] holds, completed at build with what the loader derives from its own settings.

use std::sync::Arc;

use mmcache_disk_cache::DiskCacheConfig;
use mmcache_origin::{DomainAllowlist, DownloadBudget, OriginConfig};
use mmcache_shared_cache::{BoxFuture, ReadHold, ReadMemory, SharedCacheConfig};

use super::Config;

impl Config {
    /// The one download budget of a loader: origin bodies, shared-cache values and disk
    /// entries are all reserved in it before they are read. A wait for it is bounded like the
    /// decode budget's (and, for a download, by the fetch deadline, which covers the body).
    pub(crate) fn download_budget(&self) -> DownloadBudget {
        DownloadBudget::new(self.download_memory_bytes, self.decode_wait)
    }

    /// The origin client's configuration, with the allowlist [`Config::check`] parsed.
    pub(crate) fn origin_config(
        &self,
        allowlist: DomainAllowlist,
        budget: &DownloadBudget,
    ) -> OriginConfig {
        let mut c = OriginConfig::default();
        c.allow_internal = self.allow_internal;
        c.allow_http = self.allow_http;
        c.allowed_domains = allowlist;
        c.max_body_bytes = self.max_file_size_bytes;
        c.connect_timeout = self.origin_connect_timeout;
        c.timeout = self.origin_timeout;
        c.download_budget = Some(budget.clone());
        c
    }

    /// Completes the tiers' configurations with what the loader derives from its own
    /// settings, at build, so that [`crate::Loader::config`] shows the values in force.
    pub(crate) fn complete(&mut self, budget: &DownloadBudget) {
        // A cached value or entry may be as large as a download may be, never larger.
        self.shared.max_read_bytes =
            usize::try_from(self.max_file_size_bytes).unwrap_or(usize::MAX);
        self.shared.read_memory = Some(Arc::new(BudgetReads::new(
            budget,
            self.read_first_steps_bytes(),
        )));
        self.disk.max_entry_bytes = self.max_file_size_bytes;
        // The largest image the pixel limit lets through, in the widest layout, with its header
        // and the encoded bytes a profile may keep beside it.
        self.host.max_entry_bytes = self
            .max_pixels
            .saturating_mul(mmcache_decode::PixelLayout::MAX_BYTES_PER_PIXEL as u64)
            .saturating_add(self.max_file_size_bytes)
            .saturating_add(1 << 20);
        // The host pixel tier's budget within its file system (a container's /dev/shm is often
        // 64 MiB): beyond it, writes would fail before any sweep frees room.
        if self.host_enabled()
            && let Some(size) = file_system_size(&self.host.dir)
            && self.host.max_bytes > size / 10 * 9
        {
            tracing::warn!(
                budget = self.host.max_bytes,
                file_system = size,
                "MMCACHE_HOST_PIXELS_MAX_BYTES is over 90 % of its file system's size; the \
                 host pixel tier keeps to 90 % of it"
            );
            self.host.max_bytes = (size / 10 * 9).max(1);
        }
    }

    /// The shared cache's configuration; `None` when it is off.
    pub(crate) fn shared_cache_config(&self) -> Option<SharedCacheConfig> {
        self.shared_enabled.then(|| self.shared.clone())
    }

    /// The disk tier's configuration; `None` when it is off.
    pub(crate) fn disk_cache_config(&self) -> Option<DiskCacheConfig> {
        self.disk_enabled().then(|| self.disk.clone())
    }

    /// The host pixel tier's configuration; `None` when it is off.
    pub(crate) fn host_pixels_config(&self) -> Option<DiskCacheConfig> {
        self.host_enabled().then(|| self.host.clone())
    }
}

/// Whether `dir` is on a memory file system (tmpfs, ramfs), as the host pixel tier wants.
pub(crate) fn in_memory(dir: &std::path::Path) -> bool {
    /// `TMPFS_MAGIC` and `RAMFS_MAGIC` of `statfs(2)`.
    const MEMORY: [i64; 2] = [0x0102_1994, 0x8584_58f6];
    #[allow(clippy::unnecessary_cast)] // i64 here, other widths on other targets
    rustix::fs::statfs(dir).is_ok_and(|s| MEMORY.contains(&(s.f_type as i64)))
}

/// The size of the file system `dir` is on (or would be made on: its nearest existing folder).
fn file_system_size(dir: &std::path::Path) -> Option<u64> {
    let s = dir.ancestors().find_map(|d| rustix::fs::statvfs(d).ok())?;
    Some(s.f_blocks.saturating_mul(s.f_frsize))
}

/// Disk-tier reads reserved in the download budget, as shared-cache reads are ([`BudgetReads`]):
/// taken at once when there is room, else waited for.
pub(crate) fn disk_read_memory(
    budget: &DownloadBudget,
) -> (
    mmcache_disk_cache::ReadMemory,
    mmcache_disk_cache::TryReadMemory,
) {
    let waiting = budget.clone();
    let wait: mmcache_disk_cache::ReadMemory = Arc::new(move |len| {
        let budget = waiting.clone();
        Box::pin(async move {
            let reservation = budget.reserve(len).await.ok()?;
            Some(Box::new(move |v| reservation.hold(v)) as mmcache_disk_cache::ReadHold)
        })
    });
    let budget = budget.clone();
    let now: mmcache_disk_cache::TryReadMemory = Arc::new(move |len| {
        let reservation = budget.try_reserve(len)?;
        Some(Box::new(move |v| reservation.hold(v)) as mmcache_disk_cache::ReadHold)
    });
    (wait, now)
}

/// Shared-cache reads reserved in the download budget; their first steps (made before the
/// value's length is known) in a pool of their own ([`Config::read_first_steps_bytes`]), taken without
/// waiting, so GETs in flight to a hung node never hold what other reads or origin downloads
/// wait for. No room within the budget's wait: the
/// value is not read, and the load goes to the origin, whose download waits for the same
/// budget and fails as any download does (503, or 413) if it stays full (the shared tier
/// stays fail-open: it never fails a load itself).
struct BudgetReads {
    budget: DownloadBudget,
    first_steps: DownloadBudget,
}

impl BudgetReads {
    fn new(budget: &DownloadBudget, first_steps: u64) -> Self {
        Self {
            budget: budget.clone(),
            // Reservations come from a budget's first half: made twice the pool.
            first_steps: DownloadBudget::new(first_steps * 2, std::time::Duration::ZERO),
        }
    }
}

async fn hold_in(budget: &DownloadBudget, bytes: u64) -> Option<ReadHold> {
    let reservation = budget.reserve(bytes).await.ok()?;
    Some(ReadHold::new(move |v| reservation.hold(v)))
}

impl ReadMemory for BudgetReads {
    fn reserve(&self, bytes: u64) -> BoxFuture<'_, Option<ReadHold>> {
        Box::pin(hold_in(&self.budget, bytes))
    }

    fn try_reserve_first(&self, bytes: u64) -> Option<ReadHold> {
        let reservation = self.first_steps.try_reserve(bytes)?;
        Some(ReadHold::new(move |v| reservation.hold(v)))
    }
}

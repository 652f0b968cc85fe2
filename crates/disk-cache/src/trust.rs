//! Whether the configured directory may be trusted: checked once at start (the verdict a
//! `doctor` prints) and again, from the handle, by every operation.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::fsops::{self, FsError, FsResult, Kept, Owners, Skip, open_kept};

/// Why the disk tier refused its directory (the tier is then off: every read a miss).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Every user may write in it and it has no sticky bit: anyone could plant or swap files.
    #[error("{} is writable by every user and has no sticky bit", path.display())]
    WorldWritable {
        /// The directory.
        path: PathBuf,
    },
    /// Another user owns it, and it is not shared through the configured group.
    #[error(
        "{} is owned by uid {owner}, not by this process's uid {uid}, and not by the shared \
         group (MMCACHE_DISK_CACHE_GROUP)",
        path.display()
    )]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
}

/// The disk tier's verdict on its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiskStatus {
    /// In use.
    Enabled,
    /// Refused at start: the tier is off for this process.
    Refused(Refusal),
}

impl DiskStatus {
    /// Whether the tier is in use.
    pub fn is_enabled(&self) -> bool {
        matches!(self, DiskStatus::Enabled)
    }
}

/// Judges the directory's own `stat`.
pub(crate) fn judge(path: &Path, st: &Stat, owners: &Owners) -> Result<(), Refusal> {
    if fsops::world_writable(st) {
        return Err(Refusal::WorldWritable {
            path: path.to_owned(),
        });
    }
    let ours = st.st_uid == owners.uid();
    let group_shared = owners.group().is_some_and(|g| st.st_gid == g);
    if !ours && !group_shared {
        return Err(Refusal::ForeignOwner {
            path: path.to_owned(),
            owner: st.st_uid,
            uid: owners.uid(),
        });
    }
    Ok(())
}

/// Opens the configured directory (the operator's path: links in it are followed), making it
/// when `create`, and checks that it may be trusted.
pub(crate) fn open_root(dir: &Path, owners: &Owners, create: bool) -> FsResult<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    // The operator's path: anything wrong with it is an error to count, not a name to skip.
    let io = |e: Errno| match e {
        Errno::NOENT => FsError::Missing,
        e => FsError::Io(e.into()),
    };
    let fd = match rustix::fs::open(dir, flags, Mode::empty()) {
        Err(Errno::NOENT) if create => {
            fsops::make_dir_all(dir, owners).map_err(|e| match e {
                FsError::Skipped(_) => FsError::Io(Errno::NOTDIR.into()),
                e => e,
            })?;
            rustix::fs::open(dir, flags, Mode::empty()).map_err(io)?
        }
        r => r.map_err(io)?,
    };
    let st = rustix::fs::fstat(&fd)?;
    if judge(dir, &st, owners).is_err() {
        return Err(FsError::Skipped(Skip::UntrustedDir));
    }
    Ok(fd)
}

/// The verdict at start: the directory is made when missing, then judged. A directory that
/// cannot be made or opened now (read-only, deleted, a slow disk past `within`) is not
/// refused: every operation tries again and fails open. With the verdict, the handle of `v1`
/// when it is there and a folder of ours (see `dirs`), for reads to start from.
pub(crate) fn check_at_start(
    dir: &Path,
    owners: Owners,
    within: Duration,
) -> (DiskStatus, Option<Arc<Kept>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = dir.to_owned();
    // On its own thread, so a hung disk cannot hold up `build()` past the deadline.
    let spawned = std::thread::Builder::new()
        .name("mmcache-disk-check".into())
        .spawn(move || {
            let verdict = (|| {
                let _ = fsops::make_dir_all(&path, &owners);
                let fd = rustix::fs::open(
                    &path,
                    rustix::fs::OFlags::RDONLY
                        | rustix::fs::OFlags::DIRECTORY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .ok()?;
                let st = rustix::fs::fstat(&fd).ok()?;
                Some(judge(&path, &st, &owners).map(|()| open_kept(&fd, "v1", &owners).ok()))
            })();
            let _ = tx.send(verdict);
        });
    if spawned.is_err() {
        return (DiskStatus::Enabled, None);
    }
    match rx.recv_timeout(within) {
        Ok(Some(Err(refusal))) => {
            tracing::warn!(
                reason = %refusal,
                "disk cache directory refused; the disk tier is off (loads go on to the next tier)"
            );
            (DiskStatus::Refused(refusal), None)
        }
        Ok(Some(Ok(v1))) => (DiskStatus::Enabled, v1),
        _ => (DiskStatus::Enabled, None),
    }
}

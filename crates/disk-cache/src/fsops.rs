//! File operations relative to directory handles that never follow a link: the directory is
//! shared with other processes, some of them possibly hostile (see the design's trust
//! boundaries). Every name below the configured directory is opened with `O_NOFOLLOW` relative
//! to its parent's handle, files also with `O_NONBLOCK` (a FIFO cannot block the open), and
//! nothing is used before `fstat` says it is a regular file or directory owned by us (or by the
//! configured group).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustix::fs::{self, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::metrics::{Handles, SkipReason};

/// Why an operation did not touch a name (the `reason` label of [`SKIPPED`](crate::metrics::SKIPPED)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// A symbolic link where a file or folder of ours should be.
    Link,
    /// A FIFO, socket, device, or a folder where a file should be (and the reverse).
    NotRegular,
    /// Owned by another user, outside the configured group.
    Foreign,
    /// The directory (or a folder in it) is writable by every user, or owned by another.
    UntrustedDir,
    /// An entry to map that someone may write (its mode has a write bit).
    Writable,
}

impl Skip {
    pub(crate) fn label(self) -> SkipReason {
        match self {
            Skip::Link => SkipReason::Link,
            Skip::NotRegular => SkipReason::NotRegular,
            Skip::Foreign => SkipReason::Foreign,
            Skip::UntrustedDir => SkipReason::UntrustedDir,
            Skip::Writable => SkipReason::Writable,
        }
    }

    pub(crate) fn count(self, metrics: &Handles) {
        metrics.skipped(self.label());
    }
}

/// How a file operation failed.
#[derive(Debug)]
pub(crate) enum FsError {
    /// Nothing there (a miss, not an error).
    Missing,
    /// Something there that is not ours to use: skipped and counted.
    Skipped(Skip),
    /// An I/O error.
    Io(std::io::Error),
}

impl From<Errno> for FsError {
    fn from(e: Errno) -> Self {
        match e {
            Errno::NOENT => FsError::Missing,
            // O_NOFOLLOW on a link, O_DIRECTORY on a non-folder, O_NONBLOCK on a device.
            Errno::LOOP => FsError::Skipped(Skip::Link),
            Errno::NOTDIR | Errno::NXIO | Errno::ISDIR => FsError::Skipped(Skip::NotRegular),
            e => FsError::Io(e.into()),
        }
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(n) => Errno::from_raw_os_error(n).into(),
            None => FsError::Io(e),
        }
    }
}

pub(crate) type FsResult<T> = Result<T, FsError>;

/// Who may own what this process reads, and the modes it creates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owners {
    uid: u32,
    /// The shared group: files and folders it owns are trusted too, and ours are made for it.
    group: Option<u32>,
}

impl Owners {
    pub(crate) fn new(group: Option<u32>) -> Self {
        Self {
            uid: rustix::process::geteuid().as_raw(),
            group,
        }
    }

    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    pub(crate) fn group(&self) -> Option<u32> {
        self.group
    }

    pub(crate) fn trusts(&self, st: &Stat) -> bool {
        st.st_uid == self.uid || self.group.is_some_and(|g| st.st_gid == g)
    }

    /// Entries and temporary files: 0600, or 0640 for the group.
    pub(crate) fn file_mode(&self) -> Mode {
        Mode::from_raw_mode(if self.group.is_some() { 0o640 } else { 0o600 })
    }

    /// Entries to map, once written: 0400, or 0440 for the group. Nobody may write them, so
    /// no process changes (or truncates) what another has mapped without first changing
    /// their mode, which a reader checks.
    pub(crate) fn read_only_mode(&self) -> Mode {
        Mode::from_raw_mode(if self.group.is_some() { 0o440 } else { 0o400 })
    }

    /// Lock files: the group may also refresh their times (which needs write access).
    pub(crate) fn lock_mode(&self) -> Mode {
        Mode::from_raw_mode(if self.group.is_some() { 0o660 } else { 0o600 })
    }

    /// Folders: 0700, or 2770 for the group (setgid: what is made inside gets the group).
    pub(crate) fn dir_mode(&self) -> Mode {
        Mode::from_raw_mode(if self.group.is_some() { 0o2770 } else { 0o700 })
    }

    /// Sets the exact mode (the umask narrowed it) and the group of something just made.
    fn adopt(&self, fd: impl AsFd, mode: Mode) {
        if let Some(g) = self.group {
            // Best effort: not a member, or the folder's setgid already gave it the group.
            let _ = fs::fchown(&fd, None, Some(rustix::fs::Gid::from_raw(g)));
        }
        let _ = fs::fchmod(&fd, mode);
    }
}

pub(crate) fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

pub(crate) fn is_file(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
}

/// Writable by every user, without the sticky bit that would stop them removing our files.
pub(crate) fn world_writable(st: &Stat) -> bool {
    st.st_mode & 0o002 != 0 && st.st_mode & 0o1000 == 0
}

/// A name in a folder; names we make never hold a NUL.
pub(crate) fn name(s: &str) -> FsResult<CString> {
    CString::new(s).map_err(|_| FsError::Skipped(Skip::NotRegular))
}

/// Makes the configured directory and its missing parents (the last one with our mode).
pub(crate) fn make_dir_all(dir: &Path, owners: &Owners) -> FsResult<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new().recursive(true).create(parent)?;
    }
    match std::fs::DirBuilder::new()
        .mode(owners.dir_mode().as_raw_mode())
        .create(dir)
    {
        Ok(()) => {
            let fd = fs::open(
                dir,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            owners.adopt(&fd, owners.dir_mode());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Opens the folder `name` in `parent` without following a link, making it when `create`.
pub(crate) fn open_dir_at(
    parent: impl AsFd,
    name: &str,
    owners: &Owners,
    create: bool,
) -> FsResult<OwnedFd> {
    open_dir_at_stat(parent, name, owners, create).map(|(fd, _)| fd)
}

/// [`open_dir_at`], also returning the folder's `fstat`.
pub(crate) fn open_dir_at_stat(
    parent: impl AsFd,
    name: &str,
    owners: &Owners,
    create: bool,
) -> FsResult<(OwnedFd, Stat)> {
    let name = self::name(name)?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match fs::openat(&parent, &name, flags, Mode::empty()) {
        Err(Errno::NOENT) if create => match fs::mkdirat(&parent, &name, owners.dir_mode()) {
            Ok(()) => {
                let fd = fs::openat(&parent, &name, flags, Mode::empty())?;
                owners.adopt(&fd, owners.dir_mode());
                fd
            }
            Err(Errno::EXIST) => fs::openat(&parent, &name, flags, Mode::empty())?,
            Err(e) => return Err(e.into()),
        },
        r => r?,
    };
    let st = fs::fstat(&fd)?;
    if !owners.trusts(&st) {
        return Err(FsError::Skipped(Skip::Foreign));
    }
    if world_writable(&st) {
        return Err(FsError::Skipped(Skip::UntrustedDir));
    }
    Ok((fd, st))
}

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

/// Opens the folder `name` in `parent` (not making it) and keeps it with its identity.
pub(crate) fn open_kept(parent: &OwnedFd, name: &str, owners: &Owners) -> FsResult<Arc<Kept>> {
    let (fd, st) = open_dir_at_stat(parent, name, owners, false)?;
    Ok(Kept::new(fd, &st))
}

/// Reads `file`, whose `fstat` gave `len` bytes, up to `cap` bytes plus one (whatever it grew
/// to since the stat): a buffer of `len + 1` bytes at once, so a file that did not change costs
/// one read and the read that finds its end.
pub(crate) fn read_capped(file: &mut File, len: u64, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let want = usize::try_from(len.min(cap).saturating_add(1)).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; want];
    let mut filled = 0;
    while filled < want {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    if filled == want {
        // Longer than its stat said: the rest, up to the cap plus one byte.
        let rest = cap.saturating_add(1).saturating_sub(filled as u64);
        file.by_ref().take(rest).read_to_end(&mut buf)?;
    }
    Ok(buf)
}

/// Opens the regular file `name` in `dir` for reading: never a link, never blocking (a FIFO),
/// and only when we (or the group) own it. Returns the file and its `fstat`.
pub(crate) fn open_file_at(dir: impl AsFd, name: &str, owners: &Owners) -> FsResult<(File, Stat)> {
    let name = self::name(name)?;
    let flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = fs::openat(&dir, &name, flags, Mode::empty())?;
    let st = fs::fstat(&fd)?;
    check_file(&st, owners)?;
    Ok((File::from(fd), st))
}

/// Opens (or makes) the lock file `name` in `dir`: read-write (its times are refreshed),
/// never a link, never blocking; it must be a regular file we (or the group) own.
pub(crate) fn open_lock_at(dir: impl AsFd, name: &str, owners: &Owners) -> FsResult<(File, Stat)> {
    let name = self::name(name)?;
    let flags =
        OFlags::RDWR | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match fs::openat(
        &dir,
        &name,
        flags | OFlags::CREATE | OFlags::EXCL,
        owners.lock_mode(),
    ) {
        Ok(fd) => {
            owners.adopt(&fd, owners.lock_mode());
            fd
        }
        Err(Errno::EXIST) => fs::openat(&dir, &name, flags, Mode::empty())?,
        Err(e) => return Err(e.into()),
    };
    let st = fs::fstat(&fd)?;
    check_file(&st, owners)?;
    Ok((File::from(fd), st))
}

/// Makes a new file `name` in `dir` for writing (never an existing one, never through a link).
pub(crate) fn create_file_at(dir: impl AsFd, name: &str, owners: &Owners) -> FsResult<File> {
    let name = self::name(name)?;
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC
        | OFlags::NOCTTY;
    let fd = fs::openat(&dir, &name, flags, owners.file_mode())?;
    owners.adopt(&fd, owners.file_mode());
    Ok(File::from(fd))
}

/// Makes a written file read-only to everyone ([`Owners::read_only_mode`]).
pub(crate) fn make_read_only(file: &File, owners: &Owners) -> FsResult<()> {
    Ok(fs::fchmod(file, owners.read_only_mode())?)
}

/// Sets `file`'s access time to now, leaving its modification time (the TTL's) as it is. Best
/// effort: a file of the group's, not ours, may refuse it.
pub(crate) fn touch_access(file: &File) {
    let times = fs::Timestamps {
        last_access: fs::Timespec {
            tv_sec: 0,
            tv_nsec: fs::UTIME_NOW,
        },
        last_modification: fs::Timespec {
            tv_sec: 0,
            tv_nsec: fs::UTIME_OMIT,
        },
    };
    let _ = fs::futimens(file, &times);
}

/// When the file `st` describes was last used: its access or its modification time, the
/// later (a host pixel entry's hits refresh its access time).
pub(crate) fn used(st: &Stat) -> SystemTime {
    #[allow(clippy::unnecessary_cast)] // u64 here, u32 on some targets
    let nanos = Duration::from_nanos(st.st_atime_nsec as u64);
    let atime = if st.st_atime >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(st.st_atime as u64) + nanos
    } else {
        SystemTime::UNIX_EPOCH
    };
    atime.max(mtime(st))
}

/// Whether anyone may write the file `st` describes.
pub(crate) fn writable(st: &Stat) -> bool {
    st.st_mode & 0o222 != 0
}

fn check_file(st: &Stat, owners: &Owners) -> FsResult<()> {
    if !is_file(st) {
        return Err(FsError::Skipped(Skip::NotRegular));
    }
    if !owners.trusts(st) {
        return Err(FsError::Skipped(Skip::Foreign));
    }
    Ok(())
}

/// `lstat` of `name` in `dir` (a link is reported as a link).
pub(crate) fn lstat_at(dir: impl AsFd, name: &str) -> FsResult<Stat> {
    Ok(fs::statat(
        dir,
        self::name(name)?.as_c_str(),
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// Whether two `stat`s are of one file.
pub(crate) fn same_file(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// Removes `name` from `dir` if it still is the file that was judged (`judged`): another
/// process may have renamed a fresh entry over it since. Unlinking never follows a link.
pub(crate) fn unlink_if_same(dir: impl AsFd, name: &str, judged: &Stat) -> bool {
    let Ok(now) = lstat_at(&dir, name) else {
        return false;
    };
    let unchanged = same_file(&now, judged)
        && now.st_size == judged.st_size
        && now.st_mtime == judged.st_mtime
        && now.st_mtime_nsec == judged.st_mtime_nsec;
    unchanged
        && self::name(name)
            .is_ok_and(|n| fs::unlinkat(&dir, n.as_c_str(), AtFlags::empty()).is_ok())
}

/// Renames `from` in `from_dir` to `to` in `to_dir` (replacing whatever name `to` was: a link or
/// a FIFO planted there is replaced, never followed).
pub(crate) fn rename_at(
    from_dir: impl AsFd,
    from: &str,
    to_dir: impl AsFd,
    to: &str,
) -> FsResult<()> {
    fs::renameat(
        from_dir,
        name(from)?.as_c_str(),
        to_dir,
        name(to)?.as_c_str(),
    )?;
    Ok(())
}

/// Removes `name` from `dir` (the name itself, whatever it is; a folder is left).
pub(crate) fn unlink_at(dir: impl AsFd, name: &str) -> FsResult<()> {
    fs::unlinkat(dir, self::name(name)?.as_c_str(), AtFlags::empty())?;
    Ok(())
}

/// The names in a folder (without `.` and `..`), read through its handle.
pub(crate) fn names(dir: impl AsFd) -> Vec<String> {
    let Ok(listing) = fs::Dir::read_from(&dir) else {
        return Vec::new();
    };
    listing
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
        .filter(|n| n != "." && n != "..")
        .collect()
}

/// The modification time of a `stat`.
pub(crate) fn mtime(st: &Stat) -> SystemTime {
    #[allow(clippy::unnecessary_cast)] // u64 here, u32 on some targets
    let nanos = Duration::from_nanos(st.st_mtime_nsec as u64);
    if st.st_mtime >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(st.st_mtime as u64) + nanos
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(st.st_mtime.unsigned_abs()) + nanos
    }
}

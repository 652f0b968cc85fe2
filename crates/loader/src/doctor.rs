//! `doctor`: what a worker with this configuration runs with, checked, for the `mmcache doctor`
//! command and `python -m mmcache doctor` alike. It prints the effective configuration (the
//! cache URL without user or password), the JPEG decoder, the shared cache (reachable, slots,
//! nodes, engine) and its data path as a worker runs it (the data-path module), the disk tier,
//! and the most memory the budgets allow; each problem has an exit code of its own
//! ([`Problem`]).
//!
//! A start-up check, not a probe: run it once where a worker starts. The cache fails open, so
//! a problem it finds never stops loads, and each run writes and deletes keys of its own.

mod data_path;

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use mmcache_decode::select_jpeg_decoder;

pub use data_path::{Step, StepResult};

use crate::{DiskStatus, JpegDecoder, Loader};

/// A problem the doctor reports; its exit code is its discriminant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Problem {
    /// The shared cache is on but does not answer.
    Unreachable = 10,
    /// Some slots have no master.
    SlotsUncovered = 11,
    /// JPEG goes through the pure-Rust decoder.
    PureRustJpeg = 12,
    /// The disk tier refused its directory.
    DiskRefused = 13,
    /// The shared cache denied a command or the credentials.
    Denied = 14,
    /// A data-path command failed otherwise.
    DataPathFailed = 15,
    /// The host pixel tier refused its directory.
    HostRefused = 17,
    /// The host pixel tier's directory is not on a memory file system.
    HostNotInMemory = 18,
}

impl Problem {
    /// Every problem, by exit code.
    pub const ALL: [Self; 8] = [
        Self::Unreachable,
        Self::SlotsUncovered,
        Self::PureRustJpeg,
        Self::DiskRefused,
        Self::Denied,
        Self::DataPathFailed,
        Self::HostRefused,
        Self::HostNotInMemory,
    ];

    /// The process exit code.
    pub fn exit_code(self) -> u8 {
        self as u8
    }

    /// One line saying what it is and what it costs.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unreachable => {
                "shared cache enabled but unreachable (every load pays a timeout, then the origin)"
            }
            Self::SlotsUncovered => "shared cache slots not all covered (those keys always miss)",
            Self::PureRustJpeg => {
                "pure-Rust JPEG decoder active (pixels differ from Pillow's; install libturbojpeg0)"
            }
            Self::DiskRefused => "disk directory refused (the disk tier is off)",
            Self::Denied => {
                "shared cache denied a command or the credentials (fix the ACL or the URL's user)"
            }
            Self::DataPathFailed => "a shared-cache data-path command failed otherwise",
            Self::HostRefused => {
                "host pixel directory refused (the host pixel tier is off: every process decodes)"
            }
            Self::HostNotInMemory => {
                "host pixel directory not on a memory file system (its pixels go to a disk)"
            }
        }
    }
}

/// The exit codes, for the command's help and the docs: `  10  …` a line each.
pub fn exit_codes_help() -> String {
    let mut out = String::from(
        "Exit codes (several problems: the lowest code; each is printed):\n  0   nothing found\n  2   bad usage or configuration\n",
    );
    for p in Problem::ALL {
        let _ = writeln!(out, "  {:<3} {}", p.exit_code(), p.describe());
    }
    out.pop();
    out
}

/// What the doctor found: its report, and the problems (lowest exit code first).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// The text to print.
    pub text: String,
    /// The problems found, sorted; empty when nothing is wrong.
    pub problems: Vec<Problem>,
    /// The shared cache's data path, step by step (empty when the cache is off).
    pub steps: Vec<Step>,
}

impl Report {
    /// 0, or the lowest problem's code.
    pub fn exit_code(&self) -> u8 {
        self.problems.first().map_or(0, |p| p.exit_code())
    }
}

/// Runs every check on `loader` (built from the worker's settings) and returns the report.
/// Bounded by the shared cache's timeouts. Writes and deletes keys of its own.
pub async fn run(loader: &Loader) -> Report {
    let mut r = Report::default();
    let config = loader.config();
    let out = &mut r.text;
    let _ = writeln!(out, "configuration (the URL is never printed in full):");
    let _ = writeln!(out, "{config:#?}");
    if !config.shared.url.is_empty() {
        let _ = writeln!(out, "shared cache URL: {}", redact(&config.shared.url));
    }

    match select_jpeg_decoder(config.jpeg_decoder, config.libturbojpeg.as_deref()) {
        Ok(jpeg) => {
            let _ = writeln!(out, "\nJPEG decoder: {}", jpeg.decoder.as_str());
            if let Some(lib) = &jpeg.library {
                let _ = writeln!(out, "  library: {}", lib.display());
                let version = turbo_version().unwrap_or_else(|| "unknown".into());
                let _ = writeln!(out, "  version: {version}");
            }
            if let Some(reason) = &jpeg.fallback_reason {
                let _ = writeln!(out, "  libjpeg-turbo did not load: {reason}");
            }
            if jpeg.decoder == JpegDecoder::PureRust {
                r.problems.push(Problem::PureRustJpeg);
            }
        }
        Err(e) => {
            let _ = writeln!(out, "\nJPEG decoder: {e}");
            r.problems.push(Problem::PureRustJpeg);
        }
    }

    match loader.shared_cache() {
        None => {
            let _ = writeln!(out, "\nshared cache: off");
        }
        Some(cache) => shared(cache, &mut r).await,
    }
    let out = &mut r.text;

    match loader.host_pixels() {
        None => {
            let _ = writeln!(out, "\nhost pixel tier: off");
        }
        Some(host) => {
            let _ = writeln!(out, "\nhost pixel tier:");
            if !tier_dir(host, out) {
                r.problems.push(Problem::HostRefused);
            }
            if !crate::config::in_memory(&host.config().dir) {
                r.problems.push(Problem::HostNotInMemory);
            }
        }
    }
    let out = &mut r.text;
    match loader.disk_cache() {
        None => {
            let _ = writeln!(out, "\ndisk tier: off");
        }
        Some(disk) => {
            let _ = writeln!(out, "\ndisk tier:");
            if !tier_dir(disk, out) {
                r.problems.push(Problem::DiskRefused);
            }
        }
    }

    memory(config, &mut r.text);
    r.problems.sort();
    r.problems.dedup();
    if r.problems.is_empty() {
        let _ = writeln!(r.text, "\nno problems found");
    } else {
        let _ = writeln!(r.text, "\nproblems:");
        for p in &r.problems {
            let _ = writeln!(r.text, "  exit {}: {}", p.exit_code(), p.describe());
        }
    }
    r
}

/// The cluster as the worker sees it, then its data path.
async fn shared(cache: &mmcache_shared_cache::SharedCache, r: &mut Report) {
    let report = cache.inspect().await;
    let out = &mut r.text;
    let _ = writeln!(out, "\nshared cache:");
    if report.reachable {
        let _ = writeln!(out, "  reachable: yes");
        let _ = writeln!(
            out,
            "  slots: {}/{}",
            report.slots_covered,
            mmcache_shared_cache::CLUSTER_SLOTS
        );
        let _ = writeln!(
            out,
            "  nodes: {} ({} masters serving slots)",
            report.nodes, report.masters
        );
        let _ = writeln!(
            out,
            "  engine: {} {}",
            report.engine.as_deref().unwrap_or("unknown"),
            report.version.as_deref().unwrap_or("")
        );
        if !report.fully_covered() {
            r.problems.push(Problem::SlotsUncovered);
        }
    } else {
        let why = report.error.as_deref().unwrap_or("no answer");
        let _ = writeln!(out, "  reachable: no ({why})");
        // A refused connect is a denial, reported by the data path below.
        if cache.denials().is_empty() {
            r.problems.push(Problem::Unreachable);
        }
    }
    let _ = writeln!(
        out,
        "  data path (a worker's commands, on keys of the doctor's own, deleted after):"
    );
    r.steps = data_path::run(cache).await;
    for step in &r.steps {
        let what = format!(
            "{}* {} ({})",
            step.key_space,
            step.name,
            step.commands.join(" + ")
        );
        let _ = match &step.result {
            StepResult::Ok => writeln!(out, "    {what}: ok"),
            StepResult::Denied(d) => {
                r.problems.push(Problem::Denied);
                writeln!(out, "    {what}: DENIED: {d}")
            }
            StepResult::Failed(why) => {
                r.problems.push(Problem::DataPathFailed);
                writeln!(out, "    {what}: FAILED: {why}")
            }
        };
    }
}

/// The budgets and their sum.
fn memory(config: &crate::Config, out: &mut String) {
    let mib = |b: u64| b.div_ceil(1 << 20);
    let _ = writeln!(
        out,
        "\nmemory, the most the budgets allow (MiB, from the settings in force):"
    );
    for p in config.memory_parts() {
        let _ = writeln!(out, "  {:>7}  {} ({})", mib(p.bytes), p.what, p.setting);
    }
    let _ = writeln!(
        out,
        "  {:>7}  in all, before the runtime, the allocator and the caller's own memory",
        mib(config.memory_bound())
    );
    if config.host_enabled() {
        let _ = writeln!(
            out,
            "  and once per host, shared by its processes: {} MiB of host pixels ({}), on the \
             memory file system; a process's decoded cache charges what it maps at {:.3} of \
             its bytes",
            mib(config.host.max_bytes),
            crate::env::HOST_PIXELS_MAX_BYTES,
            (config.decoded_cache_bytes as f64 / config.host.max_bytes.max(1) as f64).min(1.0)
        );
    }
}

/// A tier's directory, what it holds now and its verdict; whether it is trusted.
fn tier_dir(tier: &crate::DiskCache, out: &mut String) -> bool {
    let dir = &tier.config().dir;
    let _ = writeln!(out, "  directory: {}", dir.display());
    describe_dir(dir, out);
    if tier.config().tier == mmcache_disk_cache::Tier::Host {
        let verdict = if crate::config::in_memory(dir) {
            "yes"
        } else {
            "no: its entries are written to a disk (use /dev/shm or a tmpfs)"
        };
        let _ = writeln!(out, "  memory file system: {verdict}");
    }
    let (entries, bytes) = held(dir);
    let _ = writeln!(
        out,
        "  holds: {entries} entries, {} MiB of a {} MiB budget (for every process of the host)",
        bytes >> 20,
        tier.config().max_bytes >> 20
    );
    match tier.status() {
        DiskStatus::Enabled => {
            let _ = writeln!(out, "  verdict: trusted");
            true
        }
        DiskStatus::Refused(why) => {
            let _ = writeln!(out, "  verdict: refused: {why}");
            false
        }
        other => {
            let _ = writeln!(out, "  verdict: {other:?}");
            true
        }
    }
}

/// The entries of a tier's directory (`v1/<aa>/<digest>`) and their bytes, by name only (a
/// doctor's look, not the tier's trusted read).
fn held(dir: &Path) -> (u64, u64) {
    let (mut entries, mut bytes) = (0, 0);
    let shards = std::fs::read_dir(dir.join("v1"))
        .into_iter()
        .flatten()
        .flatten();
    for shard in shards.filter(|s| s.file_name().len() == 2) {
        for entry in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(m) = entry.metadata() {
                entries += 1;
                bytes += m.len();
            }
        }
    }
    (entries, bytes)
}

/// Owner, mode and free space of a tier's directory.
fn describe_dir(dir: &Path, out: &mut String) {
    let _ = match std::fs::symlink_metadata(dir) {
        Ok(m) => writeln!(
            out,
            "  owner: uid {} gid {}; mode {:04o}{}",
            m.uid(),
            m.gid(),
            m.mode() & 0o7777,
            if m.file_type().is_symlink() {
                " (a symbolic link)"
            } else {
                ""
            }
        ),
        Err(e) => writeln!(out, "  stat: {e}"),
    };
    let _ = match rustix::fs::statvfs(dir) {
        Ok(s) => writeln!(
            out,
            "  free: {} MiB",
            s.f_bavail.saturating_mul(s.f_frsize) >> 20
        ),
        Err(e) => writeln!(out, "  free: unknown ({e})"),
    };
}

/// A Redis URL without its user and password: `redis://***@host:port/…`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<unparsable URL>".into();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://***@{}{tail}", &authority[at + 1..]),
        None => url.to_owned(),
    }
}

/// The version libjpeg-turbo states in the library this process mapped (its build string,
/// `libjpeg-turbo version X.Y.Z (build …)`); the TurboJPEG API has no version call.
fn turbo_version() -> Option<String> {
    use std::io::Read;
    const CAP: u64 = 32 << 20;
    const NEEDLE: &[u8] = b"libjpeg-turbo version ";
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("turbojpeg"))?;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(CAP)
        .read_to_end(&mut bytes)
        .ok()?;
    let at = bytes.windows(NEEDLE.len()).position(|w| w == NEEDLE)?;
    let text = &bytes[at..bytes.len().min(at + 80)];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    Some(String::from_utf8_lossy(&text[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_drops_user_and_password() {
        assert_eq!(redact("redis://:pw@h:6379"), "redis://***@h:6379");
        assert_eq!(redact("rediss://u:p@w@h:1/0?x=@"), "rediss://***@h:1/0?x=@");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("nonsense"), "<unparsable URL>");
    }

    #[test]
    fn each_problem_has_its_own_code_in_the_help() {
        let help = exit_codes_help();
        for p in Problem::ALL {
            assert!(help.contains(&format!("  {:<3} {}", p.exit_code(), p.describe())));
        }
        let mut codes: Vec<u8> = Problem::ALL.iter().map(|p| p.exit_code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), Problem::ALL.len());
    }

    /// docs/deployment.md lists the exit codes as the help does, and the memory sum's default.
    #[test]
    fn the_docs_list_the_exit_codes_and_the_default_memory_sum() {
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deployment.md"),
        )
        .unwrap();
        let indented: String = exit_codes_help()
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect();
        assert!(
            doc.contains(&indented),
            "docs/deployment.md should list, indented in its doctor item:\n{indented}"
        );
        let sum = crate::Config::default().memory_bound() >> 20;
        assert!(doc.contains(&format!("{sum} MiB in all with the defaults")));
    }
}

//! `mmcache doctor`: prints what a worker with this environment would run with, and exits
//! with a distinct code for each problem that makes loads slower or pixels different.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use mmcache_decode::select_jpeg_decoder;
use mmcache_loader::{DiskStatus, JpegDecoder, Loader};

/// Help text after `mmcache doctor --help`.
pub(crate) const HELP: &str = "\
Prints the effective configuration (the cache URL without user or password), the JPEG
decoder and its version, the shared cache (reachable, slots covered, nodes, engine and
version) and the disk tier (directory, owner, mode, trust verdict, free space).

Examples:
  mmcache doctor
  MMCACHE_DISK_CACHE_DIR=/tmp/mmcache-doctor mmcache doctor

Exit codes (several problems: the lowest code; each is printed):
  0   nothing found
  2   bad usage or configuration
  10  shared cache enabled but unreachable (every load pays a timeout, then the origin)
  11  shared cache slots not all covered (those keys always miss)
  12  pure-Rust JPEG decoder active (pixels differ from Pillow's; install libturbojpeg0)
  13  disk directory refused (the disk tier is off)";

/// A problem `doctor` reports, with its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Problem {
    Unreachable = 10,
    SlotsUncovered = 11,
    PureRustJpeg = 12,
    DiskRefused = 13,
}

impl Problem {
    fn describe(self) -> &'static str {
        match self {
            Self::Unreachable => "shared cache unreachable",
            Self::SlotsUncovered => "shared cache slots not fully covered",
            Self::PureRustJpeg => "pure-Rust JPEG decoder active",
            Self::DiskRefused => "disk directory refused",
        }
    }
}

/// Runs every check; the exit code of the first problem, or 0.
pub(crate) async fn run() -> anyhow::Result<u8> {
    let loader = Loader::from_env()?;
    let config = loader.config();
    let mut problems = Vec::new();

    println!("configuration (the URL is never printed in full):");
    println!("{config:#?}");
    if !config.shared.url.is_empty() {
        println!("shared cache URL: {}", redact(&config.shared.url));
    }

    let jpeg = select_jpeg_decoder(config.jpeg_decoder, config.libturbojpeg.as_deref())?;
    println!("\nJPEG decoder: {}", jpeg.decoder.as_str());
    if let Some(lib) = &jpeg.library {
        println!("  library: {}", lib.display());
        println!(
            "  version: {}",
            turbo_version().unwrap_or_else(|| "unknown".into())
        );
    }
    if let Some(reason) = &jpeg.fallback_reason {
        println!("  libjpeg-turbo did not load: {reason}");
    }
    if jpeg.decoder == JpegDecoder::PureRust {
        problems.push(Problem::PureRustJpeg);
    }

    match loader.shared_cache() {
        None => println!("\nshared cache: off"),
        Some(cache) => {
            let r = cache.inspect().await;
            println!("\nshared cache:");
            if r.reachable {
                println!("  reachable: yes");
                println!(
                    "  slots: {}/{}",
                    r.slots_covered,
                    mmcache_shared_cache::CLUSTER_SLOTS
                );
                println!("  nodes: {} ({} masters serving slots)", r.nodes, r.masters);
                println!(
                    "  engine: {} {}",
                    r.engine.as_deref().unwrap_or("unknown"),
                    r.version.as_deref().unwrap_or("")
                );
                if !r.fully_covered() {
                    problems.push(Problem::SlotsUncovered);
                }
            } else {
                println!(
                    "  reachable: no ({})",
                    r.error.as_deref().unwrap_or("no answer")
                );
                problems.push(Problem::Unreachable);
            }
        }
    }

    match loader.disk_cache() {
        None => println!("\ndisk tier: off"),
        Some(disk) => {
            let dir = &disk.config().dir;
            println!("\ndisk tier:\n  directory: {}", dir.display());
            print_dir(dir);
            match disk.status() {
                DiskStatus::Enabled => println!("  verdict: trusted"),
                DiskStatus::Refused(why) => {
                    println!("  verdict: refused: {why}");
                    problems.push(Problem::DiskRefused);
                }
                other => println!("  verdict: {other:?}"),
            }
        }
    }
    // Nothing was loaded, so nothing is left to write.
    let _ = loader.shutdown(std::time::Duration::ZERO).await;

    problems.sort();
    if problems.is_empty() {
        println!("\nno problems found");
        return Ok(0);
    }
    println!("\nproblems:");
    for p in &problems {
        println!("  exit {}: {}", *p as u8, p.describe());
    }
    Ok(problems[0] as u8)
}

/// Owner, mode and free space of the disk tier's directory.
fn print_dir(dir: &Path) {
    match std::fs::symlink_metadata(dir) {
        Ok(m) => println!(
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
        Err(e) => println!("  stat: {e}"),
    }
    match rustix::fs::statvfs(dir) {
        Ok(s) => {
            let free = s.f_bavail.saturating_mul(s.f_frsize);
            println!("  free: {} MiB", free >> 20);
        }
        Err(e) => println!("  free: unknown ({e})"),
    }
}

/// A Redis URL without its user and password: `redis://***@host:port/…`.
fn redact(url: &str) -> String {
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
}

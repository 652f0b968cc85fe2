//! Files of a test cluster: where node directories go, and the TLS certificates of a
//! `rediss://` cluster.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

/// Where node directories go: `/dev/shm` when it is a roomy tmpfs, else the temp dir.
/// Redis fsyncs `nodes.conf` on every cluster change in its main thread; on a slow disk that
/// stalls the node past its handshake timeout while a cluster forms.
pub(crate) fn scratch_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(pick_scratch_dir).clone()
}

fn pick_scratch_dir() -> PathBuf {
    const ROOMY_KIB: u64 = 256 * 1024;
    let shm = PathBuf::from("/dev/shm");
    let avail_kib = Command::new("df")
        .args(["-Pk", "/dev/shm"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.lines()
                .nth(1)?
                .split_whitespace()
                .nth(3)?
                .parse::<u64>()
                .ok()
        });
    let writable = || {
        let probe = shm.join(format!("mmcache-probe-{}", std::process::id()));
        let ok = std::fs::create_dir_all(&probe).is_ok();
        let _ = std::fs::remove_dir(&probe);
        ok
    };
    if avail_kib.is_some_and(|k| k >= ROOMY_KIB) && writable() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Loopback addresses a TLS certificate covers: 127.0.0.1..=127.0.0.60 (tests move nodes
/// within that range).
pub(crate) fn all_loopback_ips() -> Vec<Ipv4Addr> {
    (1..=60).map(|d| Ipv4Addr::new(127, 0, 0, d)).collect()
}

/// Makes a CA and a server certificate for `ips` with the `openssl` command.
pub(crate) fn make_tls_files(dir: &Path, ips: &[Ipv4Addr]) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let run = |args: &[&str]| -> anyhow::Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .context("run openssl (is it installed?)")?;
        anyhow::ensure!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let san: Vec<String> = ips
        .iter()
        .map(|ip| format!("IP:{ip}"))
        .chain(["DNS:localhost".to_owned()])
        .collect();
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
            san.join(",")
        ),
    )?;
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=mmcache test CA",
    ])?;
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ])?;
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ])?;
    Ok(dir.to_path_buf())
}

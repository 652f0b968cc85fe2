//! Files of a test cluster: where node directories go, and the TLS certificates of a
//! `rediss://` cluster.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// Makes a CA and a server certificate for `ips` and `localhost` with `rcgen`, written as PEM
/// files in `dir`: `ca.crt`, `ca.key`, `server.crt` and `server.key`, valid for 2 days.
pub(crate) fn make_tls_files(dir: &Path, ips: &[Ipv4Addr]) -> anyhow::Result<PathBuf> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, SanType,
    };
    std::fs::create_dir_all(dir)?;
    // rcgen takes `time` dates; it names the type, so build "now" from its epoch.
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("clock before 1970")?;
    let now = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
    let (not_before, not_after) = (
        now - Duration::from_secs(3600),
        now + Duration::from_secs(2 * 24 * 3600),
    );

    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "mmcache test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (ca.not_before, ca.not_after) = (not_before, not_after);
    let ca_key = KeyPair::generate().context("generate the CA key")?;
    let ca_cert = ca.self_signed(&ca_key).context("self-sign the CA")?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca, ca_key);

    let mut server = CertificateParams::new(vec!["localhost".to_owned()])
        .context("server certificate parameters")?;
    server
        .subject_alt_names
        .extend(ips.iter().map(|&ip| SanType::IpAddress(IpAddr::V4(ip))));
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server.is_ca = IsCa::ExplicitNoCa;
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    (server.not_before, server.not_after) = (not_before, not_after);
    let server_key = KeyPair::generate().context("generate the server key")?;
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .context("sign the server certificate")?;

    for (name, pem) in [
        ("ca.crt", ca_cert.pem()),
        ("ca.key", ca_key_pem),
        ("server.crt", server_cert.pem()),
        ("server.key", server_key.serialize_pem()),
    ] {
        std::fs::write(dir.join(name), pem).with_context(|| format!("write {name}"))?;
    }
    Ok(dir.to_path_buf())
}

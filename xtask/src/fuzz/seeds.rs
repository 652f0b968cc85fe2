//! Seed inputs of the fuzz targets, made fresh for every run: tiny images from the test
//! generators (and from cjpeg, for JPEG layouts the `image` encoder cannot write), URLs, header
//! sets and entry files. Nothing large is committed; the committed regression inputs of the
//! crates' tests are added as seeds too.

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use base64::Engine as _;
use mmcache_test_support::images;

/// Writes the seeds of `target` into `dir` (which exists and is empty).
pub(crate) fn write(target: &str, dir: &Path) -> anyhow::Result<usize> {
    let seeds = match target {
        "decode" => decode(dir)?,
        "data_url" => data_url(),
        "url_policy" => url_policy(),
        "scope" => scope(),
        "disk_entry" => disk_entry(),
        other => anyhow::bail!("no seeds for `{other}`"),
    };
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), seed)?;
    }
    Ok(seeds.len())
}

fn decode(dir: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut seeds = vec![
        images::png(8, 6, 1),
        images::noise_png(4, 4, 2),
        images::zero_png(5, 3, 16, 6, &[]),
        images::zero_png(4, 4, 8, 4, &[]),
        images::jpeg(16, 8, 3),
        images::photo_jpeg(17, 9, 4),
        images::webp(8, 6, 5),
        images::gif(8, 6, 6),
        images::gif_raw((4, 4), (1, 1, 3, 3), &[0x44, 0x01]),
        images::jpeg_empty_scan(16, 16),
    ];
    // Progressive, arithmetic-coded, odd-sampled, greyscale and restart-marker JPEGs, when
    // libjpeg-turbo's cjpeg is installed (`cargo xtask test` installs it).
    let ppm = dir.join("pattern.ppm");
    let mut raw = b"P6\n12 10\n255\n".to_vec();
    raw.extend_from_slice(images::pattern(12, 10, 7).as_raw());
    std::fs::write(&ppm, raw)?;
    for args in [
        &["-progressive"][..],
        &["-arithmetic"],
        &["-sample", "2x1"],
        &["-grayscale", "-restart", "1"],
        &["-progressive", "-sample", "1x2", "-optimize"],
    ] {
        let out = Command::new("cjpeg").args(args).arg(&ppm).output();
        match out {
            Ok(o) if o.status.success() => seeds.push(o.stdout),
            _ => break, // no cjpeg here: the generators' seeds are enough to start from
        }
    }
    std::fs::remove_file(&ppm).context("remove pattern.ppm")?;
    Ok(seeds)
}

fn data_url() -> Vec<Vec<u8>> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    [
        format!("4096\ndata:image/png;base64,{}", b64(&images::png(2, 2, 1))),
        format!("64\nDATA:IMAGE/GIF;charset=x;BASE64,{}", b64(b"GIF89a")),
        "2\ndata:image/jpeg;base64,AA==".to_owned(),
        "100\ndata:image/webp,raw".to_owned(),
        "100\ndata:text/plain;base64,aGk=".to_owned(),
        "100\ndata:image/png;base64,aGl=".to_owned(),
        "0\ndata:image/png;base64".to_owned(),
    ]
    .map(String::into_bytes)
    .into()
}

fn url_policy() -> Vec<Vec<u8>> {
    [
        "https://example.com/a.png?x=1#frag\nexample.com\n*.example.org",
        "https://img.example.org./b.jpg\n*.example.org",
        "http://127.0.0.1:8080/x",
        "https://0x7f.1/",
        "https://[::ffff:10.0.0.1]/",
        "https://[64:ff9b::a9fe:a9fe]/latest",
        "https://[2002:c0a8:101::]/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[fe80::1%25eth0]/",
        "https://user:pw@example.com/",
        "https://xn--nxasmq6b.example/\n10.0.0.1\n[::1]",
        "file:///etc/passwd",
        "/etc/passwd",
        "gopher://example.com/",
    ]
    .map(|s| s.as_bytes().to_vec())
    .into()
}

fn scope() -> Vec<Vec<u8>> {
    [
        "x-dynamo-session-id: session-a\nthread-id:b",
        "X-Claude-Code-Session-Id: s\nx-claude-code-agent-id: child\nhttps://e.com/x.png",
        "x-claude-code-agent-id: lone\nx-session-id:\t opencode \t",
        "thread-id:   \nx-deepseek-harness-session-id: ds\nx-session-id: z",
        "x-dynamo-session-id: caf\u{e9}\nX-DYNAMO-SESSION-ID: second\nthread-id: t",
    ]
    .map(|s| s.as_bytes().to_vec())
    .into()
}

fn disk_entry() -> Vec<Vec<u8>> {
    let mut big = vec![200u8];
    big.extend((0..=200u8).map(|b| b.wrapping_mul(31)));
    vec![
        b"\x10\x89PNG\r\n\x1a\n".to_vec(),
        b"\x00".to_vec(),
        b"\x04abcd".to_vec(),
        b"\x04abcde".to_vec(),
        big,
    ]
}

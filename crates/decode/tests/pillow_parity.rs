//! Parity with Pillow itself: `tests/pillow/make_cases.py` writes images of every kind the
//! loader decodes and the bytes of Pillow's `Image.open(f).convert("RGB")` for each; every one
//! must decode here to the same bytes. Run by `cargo xtask test`, which installs the pinned
//! Pillow (tests/requirements.txt) and libjpeg-turbo; in CI a missing piece is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use mmcache_decode::{DecodeLimits, JpegDecoder, JpegDecoderChoice, decode, select_jpeg_decoder};
use mmcache_test_support::in_ci;

struct Case {
    name: String,
    file: String,
    width: u32,
    height: u32,
}

/// Skips outside CI (saying so); fails in CI.
fn unavailable(what: &str) {
    assert!(
        !in_ci(),
        "pillow parity: {what} (CI must have it: run `cargo xtask test`)"
    );
    eprintln!("SKIPPED pillow parity outside CI: {what}");
}

/// Runs the case generator with the interpreter `cargo xtask test` set up (or `python3`).
fn generate() -> Option<(PathBuf, String, Vec<Case>)> {
    let python = std::env::var("MMCACHE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/pillow/make_cases.py");
    let out = std::env::temp_dir().join(format!("mmcache-pillow-parity-{}", std::process::id()));
    let run = Command::new(&python).arg(&script).arg(&out).output();
    match run {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            unavailable(&format!(
                "{python} {} failed: {}",
                script.display(),
                String::from_utf8_lossy(&o.stderr)
            ));
            return None;
        }
        Err(e) => {
            unavailable(&format!("cannot run {python}: {e}"));
            return None;
        }
    }
    let manifest = std::fs::read_to_string(out.join("manifest.txt")).expect("manifest");
    let mut lines = manifest.lines();
    let versions = lines.next().expect("versions line").to_owned();
    let cases = lines
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Case {
                name: f[0].into(),
                file: f[1].into(),
                width: f[2].parse().expect("width"),
                height: f[3].parse().expect("height"),
            }
        })
        .collect();
    Some((out, versions, cases))
}

/// Largest channel difference and how many channel values differ.
fn diff(a: &[u8], b: &[u8]) -> (u8, usize) {
    a.iter().zip(b).fold((0, 0), |(max, n), (x, y)| {
        let d = x.abs_diff(*y);
        (max.max(d), n + usize::from(d != 0))
    })
}

#[test]
fn every_kind_decodes_to_pillows_bytes() {
    if select_jpeg_decoder(JpegDecoderChoice::LibjpegTurbo, None).is_err() {
        unavailable("libturbojpeg is not installed (apt-get install libturbojpeg0)");
        return;
    }
    let Some((dir, versions, cases)) = generate() else {
        return;
    };
    assert!(cases.len() > 100, "only {} cases", cases.len());
    let turbo = DecodeLimits::default().with_jpeg_decoder(JpegDecoder::LibjpegTurbo);
    let pure = DecodeLimits::default().with_jpeg_decoder(JpegDecoder::PureRust);
    println!("{versions}: {} cases", cases.len());
    let mut mismatches = Vec::new();
    let mut pure_worst = (0u8, 0usize, 0usize); // max diff, differing values, total values
    // Per kind (the name without its size): cases, identical, pure-Rust max diff and share.
    let mut kinds: Vec<(String, usize, usize, u8, usize, usize)> = Vec::new();
    for case in &cases {
        let kind = match case.name.rsplit_once('-') {
            Some((k, size)) if size.contains('x') => k.to_owned(),
            _ => case.name.clone(),
        };
        if !kinds.iter().any(|k| k.0 == kind) {
            kinds.push((kind.clone(), 0, 0, 0, 0, 0));
        }
        let row = kinds.iter_mut().find(|k| k.0 == kind).expect("row");
        row.1 += 1;
        let bytes = std::fs::read(dir.join(&case.file)).expect("case file");
        let expected = std::fs::read(dir.join(format!("{}.rgb", case.name))).expect("rgb");
        match decode(&bytes, &turbo) {
            Ok(img) => {
                assert_eq!((img.width(), img.height()), (case.width, case.height));
                if img.pixels() == expected.as_slice() {
                    row.2 += 1;
                } else {
                    let (max, n) = diff(img.pixels(), &expected);
                    mismatches.push(format!(
                        "{}: {n} of {} values differ, by up to {max}",
                        case.name,
                        expected.len()
                    ));
                }
            }
            Err(e) => mismatches.push(format!("{}: {e}", case.name)),
        }
        if case.file.ends_with(".jpg") {
            let img = decode(&bytes, &pure).expect("pure-Rust decode");
            let (max, n) = diff(img.pixels(), &expected);
            pure_worst = (
                pure_worst.0.max(max),
                pure_worst.1 + n,
                pure_worst.2 + expected.len(),
            );
            row.3 = row.3.max(max);
            row.4 += n;
            row.5 += expected.len();
        }
    }
    println!(
        "| kind | cases | identical to Pillow | pure-Rust fallback: max diff, values differing |"
    );
    println!("|---|---:|---:|---|");
    for (kind, n, same, max, differ, total) in &kinds {
        let pure = if *total == 0 {
            "same decoder".to_owned()
        } else {
            format!("{max}, {:.1} %", 100.0 * *differ as f64 / *total as f64)
        };
        println!("| {kind} | {n} | {same} | {pure} |");
    }
    println!(
        "pure-Rust JPEG fallback: up to {} levels off, {:.1} % of values differ",
        pure_worst.0,
        100.0 * pure_worst.1 as f64 / pure_worst.2.max(1) as f64
    );
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from Pillow ({versions}):\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

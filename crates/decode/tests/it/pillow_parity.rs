//! Parity with Pillow itself: `tests/pillow/make_cases.py` writes images of every kind the
//! loader decodes and the bytes of Pillow's `Image.open(f).convert("RGB")` for each; every one
//! must decode here to the same bytes. Run by `cargo xtask test`, which installs the pinned
//! Pillow (tests/requirements.txt) and libjpeg-turbo; in CI a missing piece is a failure.

use std::path::PathBuf;

use crate::pillow_cases;
use mmcache_decode::{
    DecodeLimits, JpegDecoder, JpegDecoderChoice, PixelLayout, decode, select_jpeg_decoder,
};

struct Case {
    name: String,
    file: String,
    width: u32,
    height: u32,
}

/// Runs the case generator with the interpreter `cargo xtask test` set up (or `python3`).
fn generate() -> Option<(PathBuf, String, Vec<Case>)> {
    let out = pillow_cases::generate("pillow parity", "make_cases.py")?;
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

/// Removes the generated cases, whatever the test's outcome.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One row of the per-kind table.
struct Kind {
    name: String,
    cases: usize,
    identical: usize,
    pure_max: u8,
    pure_differ: usize,
    pure_total: usize,
    pure_refused: usize,
}

impl Kind {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            cases: 0,
            identical: 0,
            pure_max: 0,
            pure_differ: 0,
            pure_total: 0,
            pure_refused: 0,
        }
    }

    /// The pure-Rust column: what the fallback does with this kind.
    fn pure(&self) -> String {
        if self.pure_refused > 0 {
            format!("refuses it ({} of {})", self.pure_refused, self.cases)
        } else if self.pure_total == 0 {
            "same decoder".to_owned()
        } else {
            let share = 100.0 * self.pure_differ as f64 / self.pure_total as f64;
            format!("{}, {share:.1} %", self.pure_max)
        }
    }
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
        pillow_cases::unavailable(
            "pillow parity",
            "libturbojpeg is not installed (apt-get install libturbojpeg0)",
        );
        return;
    }
    let Some((dir, versions, cases)) = generate() else {
        return;
    };
    let _cleanup = RemoveOnDrop(dir.clone());
    assert!(cases.len() > 100, "only {} cases", cases.len());
    let turbo = DecodeLimits::default().with_jpeg_decoder(JpegDecoder::LibjpegTurbo);
    let pure = DecodeLimits::default().with_jpeg_decoder(JpegDecoder::PureRust);
    println!("{versions}: {} cases", cases.len());
    let mut mismatches = Vec::new();
    let mut kinds: Vec<Kind> = Vec::new();
    for case in &cases {
        // The kind is the name without its size suffix.
        let name = match case.name.rsplit_once('-') {
            Some((k, size))
                if size.contains('x') && size.starts_with(|c: char| c.is_ascii_digit()) =>
            {
                k
            }
            _ => case.name.as_str(),
        };
        let at = match kinds.iter().position(|k| k.name == name) {
            Some(i) => i,
            None => {
                kinds.push(Kind::new(name));
                kinds.len() - 1
            }
        };
        let row = &mut kinds[at];
        row.cases += 1;
        let bytes = std::fs::read(dir.join(&case.file)).expect("case file");
        let expected = std::fs::read(dir.join(format!("{}.rgb", case.name))).expect("rgb");
        // The 4-byte layout holds what Pillow's RGB image holds, fourth byte included.
        let held = std::fs::read(dir.join(format!("{}.rgbx", case.name))).expect("rgbx");
        match decode(&bytes, &turbo.with_layout(PixelLayout::Rgbx)) {
            Ok(img) if img.pixels() == held.as_slice() => {}
            Ok(img) => {
                let (max, n) = diff(img.pixels(), &held);
                mismatches.push(format!(
                    "{} (rgbx): {n} of {} values differ, by up to {max}",
                    case.name,
                    held.len()
                ));
            }
            Err(e) => mismatches.push(format!("{} (rgbx): {e}", case.name)),
        }
        match decode(&bytes, &turbo) {
            Ok(img) => {
                assert_eq!((img.width(), img.height()), (case.width, case.height));
                if img.pixels() == expected.as_slice() {
                    row.identical += 1;
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
            match decode(&bytes, &pure) {
                Ok(img) => {
                    let (max, n) = diff(img.pixels(), &expected);
                    row.pure_max = row.pure_max.max(max);
                    row.pure_differ += n;
                    row.pure_total += expected.len();
                }
                Err(_) => row.pure_refused += 1,
            }
        }
    }
    println!(
        "| kind | cases | identical to Pillow | pure-Rust fallback: max diff, values differing |"
    );
    println!("|---|---:|---:|---|");
    for k in &kinds {
        println!(
            "| {} | {} | {} | {} |",
            k.name,
            k.cases,
            k.identical,
            k.pure()
        );
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from Pillow ({versions}):\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

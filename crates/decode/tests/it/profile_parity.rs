//! The decode profiles against Pillow: `tests/pillow/make_profile_cases.py` writes a corpus
//! (every kind of make_cases.py, EXIF orientations, transparency of every kind, broken files,
//! formats not decoded here) and what Pillow gives for each the way vLLM (RGB over white, over
//! a colour, original mode) and SGLang (original mode) ask. Every case must come out the same
//! (mode, size, stored pixels, palette, transparency, EXIF, XMP), or be handed back for the
//! engine's own decoder where that is expected; a file Pillow refuses must never decode here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::pillow_cases;
use bytes::Bytes;
use mmcache_decode::{
    DecodeLimits, DecodeProfile, DecodedImage, JpegDecoder, JpegDecoderChoice, Mode, Transparency,
    Undecoded, decode_profiled, select_jpeg_decoder,
};
use serde_json::Value;

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn generate() -> Option<(PathBuf, Vec<Value>)> {
    let out = pillow_cases::generate("profile parity", "make_profile_cases.py")?;
    let manifest = std::fs::read_to_string(out.join("manifest.jsonl")).expect("manifest");
    let cases = manifest
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    Some((out, cases))
}

/// The profiles the generator wrote, by its names.
fn profiles() -> [(&'static str, DecodeProfile); 4] {
    [
        ("vllm", DecodeProfile::vllm_rgb([255, 255, 255])),
        ("vllm_bg", DecodeProfile::vllm_rgb([0, 128, 255])),
        ("vllm_none", DecodeProfile::vllm_original()),
        ("sglang", DecodeProfile::sglang()),
    ]
}

/// Cases expected to come back for the engine's own decoder, with why.
fn handed_back_by_design(name: &str) -> bool {
    name.starts_with("other-") // TIFF, BMP: not decoded here
        || name == "png-xmp-text" // XMP in a text chunk: not followed
        || name == "png-animated" // APNG: not followed
        || name.starts_with("gif-made-ramp-local-over-global") // Pillow's L with a palette
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|v| format!("{v:02x}")).collect()
}

/// Pillow's `info["transparency"]` as the generator wrote it.
fn transparency_json(t: &Transparency) -> Value {
    match t {
        Transparency::Index(i) => Value::from(*i),
        Transparency::Grey(v) => Value::from(*v),
        Transparency::Alphas(a) => Value::from(hex(a)),
        Transparency::Rgb(rgb) => Value::from(rgb.to_vec()),
        other => panic!("unexpected {other:?}"),
    }
}

/// Differences between our image and Pillow's outcome `want`, empty when none.
fn differences(dir: &Path, image: &DecodedImage, want: &Value, kept_info: bool) -> Vec<String> {
    let mut out = Vec::new();
    let expect = |key: &str| want.get(key).cloned().unwrap_or(Value::Null);
    if image.mode().as_str() != expect("mode").as_str().unwrap_or("") {
        out.push(format!("mode {} != {}", image.mode(), expect("mode")));
    }
    let size = (Value::from(image.width()), Value::from(image.height()));
    if size != (expect("width"), expect("height")) {
        out.push(format!(
            "size {:?} != {}x{}",
            size,
            expect("width"),
            expect("height")
        ));
    }
    let pixels = std::fs::read(dir.join(expect("pixels").as_str().unwrap_or("?"))).unwrap();
    if image.pixels() != pixels.as_slice() {
        let n = image
            .pixels()
            .iter()
            .zip(&pixels)
            .filter(|(a, b)| a != b)
            .count();
        out.push(format!(
            "pixels: {n} of {} bytes differ (lengths {} and {})",
            pixels.len(),
            image.pixels().len(),
            pixels.len()
        ));
    }
    let palette = image.palette().map(|p| Value::from(hex(p)));
    if palette.unwrap_or(Value::Null) != expect("palette") {
        out.push("palette differs".into());
    }
    if kept_info {
        let t = image.transparency().map(transparency_json);
        if t.clone().unwrap_or(Value::Null) != expect("transparency") {
            out.push(format!("transparency {t:?} != {}", expect("transparency")));
        }
        for (key, ours) in [("exif", image.exif()), ("xmp", image.xmp())] {
            let ours = ours.map(|v| Value::from(hex(v))).unwrap_or(Value::Null);
            // After a transpose Pillow rewrites the EXIF without its orientation; we give none
            // (a later exif_transpose does nothing with either).
            let rewritten = image.orientation() != 1 && ours.is_null();
            if ours != expect(key) && !rewritten {
                out.push(format!("{key} differs"));
            }
        }
    }
    out
}

#[test]
fn every_profile_gives_pillows_outcome() {
    if select_jpeg_decoder(JpegDecoderChoice::LibjpegTurbo, None).is_err() {
        pillow_cases::unavailable(
            "profile parity",
            "libturbojpeg is not installed (apt-get install libturbojpeg0)",
        );
        return;
    }
    let Some((dir, cases)) = generate() else {
        return;
    };
    let _cleanup = Cleanup(dir.clone());
    assert!(cases.len() > 100, "only {} cases", cases.len());
    let limits = DecodeLimits::default().with_jpeg_decoder(JpegDecoder::LibjpegTurbo);
    // Per profile: identical; handed back by design; refused here and by Pillow (the engine
    // raises its own error); refused here, loaded by Pillow (a broken file Pillow reads).
    let mut table: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let bytes = Bytes::from(std::fs::read(dir.join(case["file"].as_str().unwrap())).unwrap());
        for (profile_name, profile) in profiles() {
            let want = &case["profiles"][profile_name];
            let row = table.entry(profile_name).or_default();
            let ours = decode_profiled(&bytes, &limits, &profile);
            let refused_by_pillow = want.get("error").is_some();
            match ours {
                Err(e) if !refused_by_pillow => {
                    failures.push(format!(
                        "{name} [{profile_name}]: refused ({e}), Pillow loads it"
                    ));
                }
                Err(_) => row[2] += 1,
                Ok(image) if image.mode() == Mode::Undecoded => {
                    match image.undecoded() {
                        // The engine's own decoder decides.
                        Some(Undecoded::Refused(_)) if refused_by_pillow => row[2] += 1,
                        Some(Undecoded::Refused(_)) if name.starts_with("broken-") => row[3] += 1,
                        _ if handed_back_by_design(name) => row[1] += 1,
                        why => {
                            failures.push(format!("{name} [{profile_name}]: handed back ({why:?})"))
                        }
                    }
                    assert_eq!(image.source().map(|b| b.len()), Some(bytes.len()));
                }
                Ok(_) if refused_by_pillow => {
                    failures.push(format!(
                        "{name} [{profile_name}]: decoded, Pillow refuses it ({})",
                        want["error"]
                    ));
                }
                Ok(image) => {
                    let kept_info = profile_name.ends_with("none") || profile_name == "sglang";
                    let diffs = differences(&dir, &image, want, kept_info);
                    if profile_name.starts_with("vllm") && !kept_info {
                        let converted =
                            image.opened().mode != Mode::Rgb || image.opened().transparent;
                        if want["converted"] != converted {
                            failures.push(format!("{name} [{profile_name}]: converted flag"));
                        }
                    }
                    if diffs.is_empty() {
                        row[0] += 1;
                    } else {
                        failures.push(format!("{name} [{profile_name}]: {}", diffs.join("; ")));
                    }
                    if profile.keep_source {
                        assert_eq!(image.source(), Some(&bytes), "{name}: the bytes are kept");
                    }
                }
            }
        }
    }
    println!(
        "| profile | identical | handed back by design | refused, as by Pillow | refused, Pillow reads it |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (profile, [same, back, refused, engine]) in &table {
        println!("| {profile} | {same} | {back} | {refused} | {engine} |");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

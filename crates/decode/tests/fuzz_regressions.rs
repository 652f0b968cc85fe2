// Not in tests/it: its counting global allocator counts the whole process.
//! Inputs that `cargo xtask fuzz` found (tests/fuzz/, a few hundred bytes each), replayed with
//! the fuzz target's assertions: no panic, a typed 413/415 error or an image of exactly the
//! probed size, and a decode whose allocations peak within the probe's estimate.

use mmcache_decode::{DecodeLimits, JpegDecoder, decode_probed, probe};
use mmcache_test_support::alloc::{Counting, peak_during};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn check(name: &str, data: &[u8], limits: &DecodeLimits) {
    let p = match probe(data, limits) {
        Ok(p) => p,
        Err(e) => {
            let status = e.http_status();
            assert!(
                status == 413 || status == 415,
                "{name}: {e} has status {status}"
            );
            return;
        }
    };
    let (result, peak) = peak_during(|| decode_probed(data, &p, limits));
    match result {
        Ok(image) => assert_eq!(
            (image.width(), image.height()),
            (p.width, p.height),
            "{name}"
        ),
        Err(e) => {
            let status = e.http_status();
            assert!(
                status == 413 || status == 415,
                "{name}: {e} has status {status}"
            );
        }
    }
    if limits.jpeg == JpegDecoder::PureRust {
        assert!(
            peak as u64 <= p.memory_bytes,
            "{name}: {peak} bytes over the estimate"
        );
    }
}

#[test]
fn fuzz_findings_are_refused_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/fuzz") {
        let path = entry.expect("entry").path();
        let data = std::fs::read(&path).expect("read");
        let name = path.display().to_string();
        // The fuzz runs' pixel limit and the default one, with each JPEG decoder.
        for limits in [
            DecodeLimits::with_max_pixels(1 << 20),
            DecodeLimits::default(),
        ] {
            check(
                &name,
                &data,
                &limits.with_jpeg_decoder(JpegDecoder::PureRust),
            );
            check(&name, &data, &limits);
        }
        n += 1;
    }
    assert!(n > 0, "no inputs in {}", dir.display());
}

// Not in tests/it: its counting global allocator counts the whole process.
//! Hostile images, byte for byte: each is refused (or decoded) while the memory the process
//! allocates stays small and fixed. A counting allocator measures the peak of live bytes
//! during each decode, so "never allocates the full buffer" is asserted, not assumed.

use mmcache_decode::{
    DecodeLimits, Error, ImageFormat, JpegDecoder, JpegDecoderChoice, decode, probe,
    select_jpeg_decoder,
};
use mmcache_test_support::alloc::{Counting, peak_during};
use mmcache_test_support::{images, in_ci};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

fn assert_truncated(result: Result<mmcache_decode::DecodedImage, Error>, what: &str) {
    match result {
        Err(e @ Error::Invalid { .. }) => {
            assert_eq!(e.http_status(), 415, "{what}");
            assert!(e.to_string().contains("truncated"), "{what}: {e}");
        }
        other => panic!("{what}: expected a truncated refusal, got {other:?}"),
    }
}

// One test: the allocator counts the whole process, so the cases must not overlap.
#[test]
fn hostile_images_cost_little() {
    let limits = DecodeLimits::default();

    // A baseline 10000x10000 JPEG whose scan is empty: 300 MB of grey for a lenient decoder.
    let jpeg = images::jpeg_empty_scan(10_000, 10_000);
    assert!(jpeg.len() < 200, "{} bytes", jpeg.len());
    let (result, peak) = peak_during(|| decode(&jpeg, &limits));
    assert_truncated(result, "empty-scan JPEG");
    assert!(peak < MIB, "empty-scan JPEG: {peak} bytes allocated");

    // A real JPEG cut inside its scan: no end of image.
    let real = images::jpeg(640, 480, 9);
    let sos = real
        .windows(2)
        .rposition(|w| w == [0xff, 0xda])
        .expect("a scan");
    let cut = &real[..sos + (real.len() - sos) / 2];
    let (result, peak) = peak_during(|| decode(cut, &limits));
    assert!(result.is_err(), "cut JPEG decoded");
    assert!(peak < MIB, "cut JPEG: {peak} bytes allocated");

    // The same, with an end-of-image marker glued on: the scan still runs out of data, which
    // libjpeg-turbo reports (the pure-Rust fallback pads it silently).
    let mut glued = cut.to_vec();
    glued.extend_from_slice(&[0xff, 0xd9]);
    if select_jpeg_decoder(JpegDecoderChoice::LibjpegTurbo, None).is_ok() {
        let turbo = limits.with_jpeg_decoder(JpegDecoder::LibjpegTurbo);
        assert_truncated(decode(&glued, &turbo), "cut JPEG with EOI");
    } else {
        assert!(!in_ci(), "libturbojpeg is missing (CI must have it)");
        eprintln!("SKIPPED outside CI: cut JPEG with EOI needs libturbojpeg");
    }

    // A 10000x10000 PNG with eight bytes of IDAT: its rows cannot come out of them.
    let png = images::png_header_claiming(10_000, 10_000);
    let (result, peak) = peak_during(|| decode(&png, &limits));
    assert_truncated(result, "IDAT-starved PNG");
    assert!(peak < MIB, "IDAT-starved PNG: {peak} bytes allocated");

    // A GIF whose 60000x60000 frame has four bytes of data: refused from its headers.
    let gif = images::gif_raw((60_000, 60_000), (0, 0, 60_000, 60_000), &[0x44, 0x01]);
    let (result, peak) = peak_during(|| decode(&gif, &DecodeLimits::with_max_pixels(u64::MAX)));
    assert_truncated(result, "data-starved GIF");
    assert!(peak < 2 * MIB, "data-starved GIF: {peak} bytes allocated");

    // A GIF frame placed far past its 1x1 screen: the canvas Pillow would grow to is refused
    // by the pixel limit from the headers.
    let gif = images::gif_raw((1, 1), (65_000, 65_000, 1, 1), &[0x44, 0x01]);
    let (result, peak) = peak_during(|| decode(&gif, &limits));
    assert!(
        matches!(
            result,
            Err(Error::TooManyPixels {
                width: 65_001,
                height: 65_001,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(
        peak < 2 * MIB,
        "far-placed GIF frame: {peak} bytes allocated"
    );

    // A 1x1 PNG carrying a 256 MiB iCCP profile and a 256 MiB zTXt: both skipped unread.
    let bombs = images::zero_png(
        1,
        1,
        8,
        2,
        &[
            (b"iCCP", images::iccp_bomb(256 << 20)),
            (b"zTXt", images::ztxt_bomb(256 << 20)),
        ],
    );
    let (result, peak) = peak_during(|| decode(&bombs, &limits));
    let image = result.expect("the 1x1 image itself is fine");
    assert_eq!(image.pixels(), &[0, 0, 0]);
    assert!(peak < 4 * MIB, "ancillary bombs: {peak} bytes allocated");

    // A real 16-bit RGBA 4000x3000 image in about a megabyte: decoded straight to RGB8, so it
    // costs its 36 MB output and rows, never a 96 MB 16-bit buffer on top.
    let deep = images::zero_png(4000, 3000, 16, 6, &[]);
    let p = probe(&deep, &limits).expect("probe");
    assert_eq!(
        (p.format, p.width, p.height),
        (ImageFormat::Png, 4000, 3000)
    );
    let out = 4000 * 3000 * 3;
    assert!(p.memory_bytes >= out as u64 && p.memory_bytes < (out + 4 * MIB) as u64);
    let (result, peak) = peak_during(|| decode(&deep, &limits));
    assert_eq!(result.expect("decodes").byte_len(), out);
    assert!(
        peak < out + 4 * MIB,
        "16-bit PNG: {peak} bytes allocated for {out} of output"
    );
    assert!(
        peak <= p.memory_bytes as usize,
        "the probe's estimate must cover the decode"
    );
}

//! Decoding real encoded images of every supported format and refusing hostile ones.

use image::{DynamicImage, ImageBuffer, ImageFormat as Fmt, Luma, LumaA, Rgb, Rgba};
use mmcache_decode::{DecodeLimits, Error, ImageFormat, JpegDecoder, PixelLayout, decode, sniff};
use mmcache_test_support::images;

fn limits() -> DecodeLimits {
    DecodeLimits::default()
}

#[test]
fn every_supported_format_decodes_to_rgb8() {
    let cases = [
        (images::png(31, 17, 3), ImageFormat::Png),
        (images::jpeg(31, 17, 3), ImageFormat::Jpeg),
        (images::webp(31, 17, 3), ImageFormat::WebP),
        (images::gif(31, 17, 3), ImageFormat::Gif),
    ];
    for (bytes, format) in cases {
        assert_eq!(sniff(&bytes), Some(format));
        let img = decode(&bytes, &limits()).unwrap_or_else(|e| panic!("{format:?}: {e}"));
        assert_eq!(
            (img.width(), img.height(), img.format()),
            (31, 17, Some(format))
        );
        assert_eq!(img.pixels().len(), 31 * 17 * 3);
    }
}

/// The 4-byte layout holds the same pixels with a fourth byte of 255, whichever codec decoded
/// them, and the vLLM hash (of the RGB image) does not change with it.
#[test]
fn the_rgbx_layout_holds_the_same_pixels() {
    let rgba = DynamicImage::ImageRgba8(ImageBuffer::from_fn(9, 5, |x, y| {
        Rgba([x as u8 * 20, y as u8 * 40, 7, (x * y) as u8])
    }));
    let grey16 = DynamicImage::ImageLuma16(ImageBuffer::from_fn(6, 4, |x, y| {
        Luma([(x * 9000 + y * 300) as u16])
    }));
    let cases = [
        ("png", images::png(31, 17, 3)),
        ("png rgba", images::encode(&rgba, Fmt::Png)),
        ("png grey16", images::encode(&grey16, Fmt::Png)),
        ("jpeg", images::jpeg(31, 17, 3)),
        ("webp", images::webp(31, 17, 3)),
        ("gif", images::gif(31, 17, 3)),
    ];
    let decoders = [JpegDecoder::PureRust, DecodeLimits::default().jpeg];
    for (what, bytes) in &cases {
        for jpeg in decoders {
            let rgb_limits = limits().with_jpeg_decoder(jpeg);
            let rgb = decode(bytes, &rgb_limits).unwrap();
            let rgbx = decode(bytes, &rgb_limits.with_layout(PixelLayout::Rgbx)).unwrap();
            assert_eq!(rgb.layout(), PixelLayout::Rgb);
            assert_eq!(rgbx.layout(), PixelLayout::Rgbx, "{what}");
            assert_eq!(rgbx.pixels().len(), rgb.pixels().len() / 3 * 4, "{what}");
            assert_eq!(rgbx.rgb().as_ref(), rgb.pixels(), "{what} ({jpeg:?})");
            assert!(
                rgbx.pixels().chunks_exact(4).all(|px| px[3] == 255),
                "{what}"
            );
            assert_eq!(rgbx.vllm_hash(), rgb.vllm_hash(), "{what}");
            assert_ne!(rgbx, rgb, "images of two layouts are not equal");
        }
    }
}

#[test]
fn lossless_formats_round_trip_exactly() {
    let want = images::pattern(20, 10, 9).into_raw();
    for bytes in [images::png(20, 10, 9), images::webp(20, 10, 9)] {
        assert_eq!(decode(&bytes, &limits()).unwrap().pixels(), &want[..]);
    }
}

#[test]
fn other_colour_types_are_converted() {
    let gray = DynamicImage::ImageLuma8(ImageBuffer::from_pixel(3, 2, Luma([200u8])));
    let gray_a = DynamicImage::ImageLumaA8(ImageBuffer::from_pixel(3, 2, LumaA([50u8, 10])));
    let rgba = DynamicImage::ImageRgba8(ImageBuffer::from_pixel(3, 2, Rgba([1u8, 2, 3, 0])));
    let rgb16 = DynamicImage::ImageRgb16(ImageBuffer::from_pixel(3, 2, Rgb([65535u16, 0, 257])));
    for (img, px) in [
        (gray, [200, 200, 200]),
        (gray_a, [50, 50, 50]),
        (rgba, [1, 2, 3]),
        (rgb16, [255, 0, 1]),
    ] {
        let out = decode(&images::encode(&img, Fmt::Png), &limits()).unwrap();
        assert_eq!(&out.pixels()[..3], &px);
        assert_eq!(out.pixels().len(), 18);
    }
    let gray_jpeg = images::encode(
        &DynamicImage::ImageLuma8(ImageBuffer::from_pixel(8, 8, Luma([128u8]))),
        Fmt::Jpeg,
    );
    let out = decode(&gray_jpeg, &limits()).unwrap();
    assert_eq!(out.pixels().len(), 8 * 8 * 3);
    assert!(out.pixels().iter().all(|&v| (120..=136).contains(&v)));
}

fn assert_415(bytes: &[u8], what: &str) {
    let err = decode(bytes, &limits()).expect_err(what);
    assert_eq!(err.http_status(), 415, "{what}: {err}");
}

#[test]
fn non_images_and_broken_images_are_415() {
    assert!(matches!(decode(b"", &limits()), Err(Error::Empty)));
    assert_415(b"", "empty");
    assert_415(&images::svg(), "svg");
    assert_415(b"<html><body>not found</body></html>", "html");
    assert_415(&[0u8; 4096], "zeros");
    assert_415(b"GIF89a", "gif magic only");
    // A zero-sized first frame: Pillow refuses it ("tile cannot extend outside image").
    assert_415(
        &images::gif_raw((4, 4), (1, 1, 0, 2), &[0x44, 0x01]),
        "zero-width gif frame",
    );
    assert_415(b"\x89PNG\r\n\x1a\n", "png magic only");
    assert_415(b"\xff\xd8\xff", "jpeg magic only");
    for bytes in [
        images::png(64, 64, 1),
        images::jpeg(64, 64, 1),
        images::webp(64, 64, 1),
        images::gif(64, 64, 1),
    ] {
        let fmt = sniff(&bytes).unwrap();
        assert_415(&bytes[..bytes.len() / 2], &format!("truncated {fmt:?}"));
        let mut garbled = bytes.clone();
        for b in garbled.iter_mut().skip(20).step_by(3) {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        if let Err(e) = decode(&garbled, &limits()) {
            assert_eq!(e.http_status(), 415, "garbled {fmt:?}: {e}");
        }
    }
}

#[test]
fn huge_dimensions_are_refused_from_the_header() {
    let bomb = images::png_header_claiming(20_000, 20_000);
    assert!(bomb.len() < 100);
    let err = decode(&bomb, &limits()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooManyPixels {
                width: 20_000,
                height: 20_000,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.http_status(), 413);
    assert!(err.is_too_large());

    let small = images::png(100, 100, 1);
    let err = decode(&small, &DecodeLimits::with_max_pixels(9_999)).unwrap_err();
    assert_eq!(err.http_status(), 413);
    assert!(decode(&small, &DecodeLimits::with_max_pixels(10_000)).is_ok());
}

#[test]
fn deterministic_fuzz_never_panics() {
    // A bounded, seeded mutation sweep over every format: errors are fine, panics are not.
    let seeds = [
        images::png(16, 16, 2),
        images::jpeg(16, 16, 2),
        images::webp(16, 16, 2),
        images::gif(16, 16, 2),
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for round in 0..400 {
        let mut bytes = seeds[round % seeds.len()].clone();
        for _ in 0..1 + round % 8 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state as usize) % bytes.len();
            bytes[i] = (state >> 32) as u8;
        }
        if round % 5 == 0 {
            bytes.truncate((state as usize) % bytes.len());
        }
        if let Err(e) = decode(&bytes, &limits()) {
            assert!(matches!(e.http_status(), 413 | 415));
        }
    }
}

#[test]
fn a_progressive_jpeg_with_a_component_never_coded_is_truncated() {
    // SOF2 (progressive) with three components, then one DC scan of the first component only.
    let real = images::jpeg(64, 64, 1);
    let (sof, _) = real
        .windows(2)
        .enumerate()
        .find(|(_, w)| *w == [0xff, 0xc0])
        .expect("SOF0");
    let mut progressive = real.clone();
    progressive[sof + 1] = 0xc2;
    // Rewrite the scan header to name only component 1 with Ss=0, Se=0 (a DC scan).
    let sos = progressive
        .windows(2)
        .position(|w| w == [0xff, 0xda])
        .expect("SOS");
    let data_start = sos
        + 2
        + usize::from(u16::from_be_bytes([
            progressive[sos + 2],
            progressive[sos + 3],
        ]));
    let mut out = progressive[..sos].to_vec();
    out.extend_from_slice(&[
        0xff,
        0xda,
        0x00,
        0x08,
        0x01,
        progressive[sos + 5],
        0x00,
        0x00,
        0x00,
        0x00,
    ]);
    out.extend_from_slice(&progressive[data_start..]);
    let err = decode(&out, &limits()).unwrap_err();
    assert!(err.to_string().contains("never coded"), "{err}");
}

#[test]
fn the_progressive_scan_limit_is_the_probes_own() {
    use mmcache_decode::{JpegDecoder, JpegDecoderChoice, select_jpeg_decoder};
    let turbo = select_jpeg_decoder(JpegDecoderChoice::LibjpegTurbo, None).is_ok();
    // libjpeg-turbo's limit is 500 scans (TJFLAG_LIMITSCANS, ignored before 2.1), the
    // pure-Rust decoder's (zune-jpeg) 100: the most each lets through decodes, one more is
    // refused by the probe itself, before any decode memory is reserved.
    for (decoder, most) in [
        (JpegDecoder::LibjpegTurbo, 500),
        (JpegDecoder::PureRust, 100),
    ] {
        if decoder == JpegDecoder::LibjpegTurbo && !turbo {
            continue; // not installed here: the pure-Rust case still runs
        }
        let limits = DecodeLimits::default().with_jpeg_decoder(decoder);
        let ok = images::jpeg_progressive_scans(most);
        let probe = mmcache_decode::probe(&ok, &limits)
            .unwrap_or_else(|e| panic!("{most} scans pass the probe with {decoder:?}: {e}"));
        let image = mmcache_decode::decode_probed(&ok, &probe, &limits)
            .unwrap_or_else(|e| panic!("{most} scans decode with {decoder:?}: {e}"));
        assert_eq!((image.width(), image.height()), (8, 8));
        assert!(image.pixels().iter().all(|&p| p == 128), "mid grey");

        let bomb = images::jpeg_progressive_scans(most + 1);
        let err = match mmcache_decode::probe(&bomb, &limits) {
            Ok(_) => panic!("{} scans passed the probe with {decoder:?}", most + 1),
            Err(e) => e,
        };
        assert_eq!(err.http_status(), 415, "{err}");
        assert!(err.to_string().contains("scans"), "{err}");
    }
}

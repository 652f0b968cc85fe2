//! Generated test images in every format the decoder supports, plus hostile ones.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, Rgb, RgbImage};

/// A deterministic RGB pattern; `seed` makes images of the same size differ.
pub fn pattern(width: u32, height: u32, seed: u32) -> RgbImage {
    RgbImage::from_fn(width, height, |x, y| {
        let v = x.wrapping_mul(7) ^ y.wrapping_mul(13) ^ seed.wrapping_mul(0x9e37_79b9);
        Rgb([
            (v & 0xff) as u8,
            ((v >> 8) & 0xff) as u8 ^ (x as u8),
            (seed as u8) ^ (y as u8),
        ])
    })
}

/// Encodes `img` in `format`; panics only on an encoder bug (test data).
pub fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).expect("encode test image");
    out.into_inner()
}

/// A PNG of the pattern.
pub fn png(width: u32, height: u32, seed: u32) -> Vec<u8> {
    encode(
        &DynamicImage::ImageRgb8(pattern(width, height, seed)),
        ImageFormat::Png,
    )
}

/// A JPEG of the pattern (quality 85).
pub fn jpeg(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let img = pattern(width, height, seed);
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85)
        .encode_image(&img)
        .expect("encode test jpeg");
    out
}

/// A lossless WebP of the pattern.
pub fn webp(width: u32, height: u32, seed: u32) -> Vec<u8> {
    encode(
        &DynamicImage::ImageRgb8(pattern(width, height, seed)),
        ImageFormat::WebP,
    )
}

/// A GIF of the pattern.
pub fn gif(width: u32, height: u32, seed: u32) -> Vec<u8> {
    encode(
        &DynamicImage::ImageRgba8(DynamicImage::ImageRgb8(pattern(width, height, seed)).to_rgba8()),
        ImageFormat::Gif,
    )
}

/// A PNG whose header claims `width`×`height` but whose data is a few bytes: a decompression
/// bomb stand-in that must be rejected from the header alone.
pub fn png_header_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
    push_chunk(&mut out, b"IHDR", &ihdr);
    push_chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    push_chunk(&mut out, b"IEND", &[]);
    out
}

fn push_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
}

/// A small SVG document (not a raster format: must be rejected).
pub fn svg() -> Vec<u8> {
    br#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>"#.to_vec()
}

/// A PNG of pseudo-random pixels: it barely compresses, so its size is about `w * h * 3`
/// bytes (for tests of size buckets and benchmarks of large values).
pub fn noise_png(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let img = RgbImage::from_fn(width, height, |_, _| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Rgb([state as u8, (state >> 8) as u8, (state >> 16) as u8])
    });
    encode(&DynamicImage::ImageRgb8(img), ImageFormat::Png)
}

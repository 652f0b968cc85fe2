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

/// A photo-like image: smooth gradients and a ring with mild noise. It compresses like a
/// photograph, unlike [`pattern`], whose high-frequency detail makes a JPEG mostly entropy
/// coding.
pub fn photo(width: u32, height: u32, seed: u32) -> RgbImage {
    let mut state = u64::from(seed) | 1;
    let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
    RgbImage::from_fn(width, height, |x, y| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let noise = (state % 13) as f64 - 6.0;
        let (fx, fy) = (f64::from(x) / w, f64::from(y) / h);
        let ring = (((fx - 0.5).hypot(fy - 0.5) * 24.0).sin() + 1.0) * 60.0;
        let c = |v: f64| (v + noise).clamp(0.0, 255.0) as u8;
        Rgb([
            c(fx * 200.0 + ring / 4.0),
            c(fy * 180.0 + 30.0),
            c(ring + 40.0),
        ])
    })
}

/// A JPEG (quality 90) of [`photo`].
pub fn photo_jpeg(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(&photo(width, height, seed))
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

/// A GIF with a `screen` (width, height) and one frame at `(left, top, width, height)` whose
/// image data is `lzw` as is (sub-blocks added): for frames that reach past the screen or
/// that a few bytes cannot fill. Four-colour global palette, LZW minimum code size 2.
pub fn gif_raw(screen: (u16, u16), frame: (u16, u16, u16, u16), lzw: &[u8]) -> Vec<u8> {
    let mut out = b"GIF89a".to_vec();
    out.extend_from_slice(&screen.0.to_le_bytes());
    out.extend_from_slice(&screen.1.to_le_bytes());
    out.extend_from_slice(&[0x81, 0, 0]); // global table of 4 entries
    out.extend_from_slice(&[0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255]);
    out.push(0x2c);
    for v in [frame.0, frame.1, frame.2, frame.3] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&[0, 2]); // no local table; minimum code size 2
    for block in lzw.chunks(255) {
        out.push(block.len() as u8);
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&[0, b';']);
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

/// A zlib stream that inflates to `len` zero bytes: one literal, then back-references of 258
/// bytes at distance 1 in fixed-Huffman blocks (13 bits each, about 1:160). The stuff of
/// decompression bombs, small to store and costly to inflate.
pub fn zlib_zeros(len: u64) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        // Deflate packs values LSB first; Huffman codes go MSB first, so they are reversed.
        fn put(&mut self, value: u64, count: u32) {
            self.acc |= value << self.n;
            self.n += count;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        fn code(&mut self, code: u64, count: u32) {
            let reversed = code.reverse_bits() >> (64 - count);
            self.put(reversed, count);
        }
    }
    assert!(len >= 1);
    let mut b = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // final block
    b.put(1, 2); // fixed Huffman
    b.code(0b0011_0000, 8); // literal 0
    let mut left = len - 1;
    while left > 0 {
        // A match takes 3..=258 bytes; split the tail so no piece is under 3.
        let take = if left > 258 && left < 261 {
            left - 3
        } else {
            left.min(258)
        };
        if take < 3 {
            for _ in 0..take {
                b.code(0b0011_0000, 8);
            }
        } else {
            put_length(&mut b, take);
            b.code(0, 5); // distance code 0: distance 1
        }
        left -= take;
    }
    b.code(0, 7); // end of block (symbol 256)
    if b.n > 0 {
        b.put(0, 8 - b.n);
    }
    // Adler-32 of `len` zeros: a = 1, b = len mod 65521.
    let adler = ((len % 65521) << 16) | 1;
    b.out.extend_from_slice(&(adler as u32).to_be_bytes());
    return b.out;

    fn put_length(b: &mut Bits, len: u64) {
        // Length symbols 257..=285 with their base lengths and extra bits (RFC 1951 3.2.5).
        const BASE: [u64; 29] = [
            3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99,
            115, 131, 163, 195, 227, 258,
        ];
        const EXTRA: [u32; 29] = [
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
        ];
        let i = BASE
            .iter()
            .rposition(|&base| base <= len)
            .expect("len >= 3");
        let symbol = 257 + i as u64;
        // Fixed codes: 256..=279 are 7 bits from 0; 280..=287 are 8 bits from 0b1100_0000.
        if symbol <= 279 {
            b.code(symbol - 256, 7);
        } else {
            b.code(0b1100_0000 + (symbol - 280), 8);
        }
        b.put(len - BASE[i], EXTRA[i]);
    }
}

/// A PNG whose rows are all zero, with IDAT a [`zlib_zeros`] stream: a real image of any
/// declared size in a file about 160 times smaller than its rows. `depth` 8 or 16,
/// `color` a PNG colour type (2 RGB, 6 RGBA, ...). `extra` chunks go before IDAT.
pub fn zero_png(
    width: u32,
    height: u32,
    depth: u8,
    color: u8,
    extra: &[(&[u8; 4], Vec<u8>)],
) -> Vec<u8> {
    let channels: u64 = match color {
        0 | 3 => 1,
        4 => 2,
        2 => 3,
        _ => 4,
    };
    let row = 1 + (u64::from(width) * channels * u64::from(depth)).div_ceil(8);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    push_chunk(&mut out, b"IHDR", &ihdr);
    for (kind, data) in extra {
        push_chunk(&mut out, kind, data);
    }
    push_chunk(&mut out, b"IDAT", &zlib_zeros(row * u64::from(height)));
    push_chunk(&mut out, b"IEND", &[]);
    out
}

/// An iCCP chunk body whose profile inflates to `len` bytes of zeros.
pub fn iccp_bomb(len: u64) -> Vec<u8> {
    let mut data = b"bomb\0\0".to_vec(); // name, NUL, compression method 0
    data.extend_from_slice(&zlib_zeros(len));
    data
}

/// A zTXt chunk body whose text inflates to `len` bytes.
pub fn ztxt_bomb(len: u64) -> Vec<u8> {
    let mut data = b"Comment\0\0".to_vec();
    data.extend_from_slice(&zlib_zeros(len));
    data
}

/// A baseline JPEG declaring `width`×`height` (one grey component) whose scan holds no data:
/// a few hundred bytes that a lenient decoder turns into a full-size grey image.
pub fn jpeg_empty_scan(width: u16, height: u16) -> Vec<u8> {
    let mut b = vec![0xff, 0xd8];
    b.extend_from_slice(&[0xff, 0xdb, 0x00, 0x43, 0x00]); // DQT: one table of ones
    b.extend_from_slice(&[1u8; 64]);
    b.extend_from_slice(&[0xff, 0xc0, 0x00, 0x0b, 0x08]); // SOF0, 8-bit
    b.extend_from_slice(&height.to_be_bytes());
    b.extend_from_slice(&width.to_be_bytes());
    b.extend_from_slice(&[0x01, 0x01, 0x11, 0x00]); // one component, 1x1, table 0
    for class in [0x00, 0x10] {
        // DHT: one 1-bit code for symbol 0 (DC table 0, then AC table 0).
        b.extend_from_slice(&[0xff, 0xc4, 0x00, 0x14, class, 1]);
        b.extend_from_slice(&[0u8; 15]);
        b.push(0);
    }
    b.extend_from_slice(&[0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00]);
    b.extend_from_slice(&[0xff, 0xd9]);
    b
}

/// A valid 8x8 grey progressive JPEG (all coefficients zero: mid grey) with exactly `scans`
/// scans, 64 to 896: a DC first scan and its refinements, then single-coefficient AC bands,
/// each a first scan and refinements down to bit 0 (successive approximation). Every scan
/// codes one block with one 1-bit Huffman code (or one raw bit), so each is a single byte.
pub fn jpeg_progressive_scans(scans: usize) -> Vec<u8> {
    assert!((64..=896).contains(&scans), "64 to 896 scans");
    let mut b = vec![0xff, 0xd8];
    b.extend_from_slice(&[0xff, 0xdb, 0x00, 0x43, 0x00]); // DQT: one table of ones
    b.extend_from_slice(&[1u8; 64]);
    b.extend_from_slice(&[0xff, 0xc2, 0x00, 0x0b, 0x08, 0x00, 0x08, 0x00, 0x08]); // SOF2 8x8
    b.extend_from_slice(&[0x01, 0x01, 0x11, 0x00]); // one component, 1x1, table 0
    for class in [0x00, 0x10] {
        // DHT: one 1-bit code for symbol 0 (DC: difference 0; AC: end of band).
        b.extend_from_slice(&[0xff, 0xc4, 0x00, 0x14, class, 1]);
        b.extend_from_slice(&[0u8; 15]);
        b.push(0);
    }
    let mut sos = |ss: u8, se: u8, ah: u8, al: u8| {
        b.extend_from_slice(&[0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, ss, se]);
        b.push((ah << 4) | al);
        b.push(0x7f); // the bit 0, padded with ones
    };
    // Point transforms of at most 13 bits: up to 14 scans per band (first + 13 refinements).
    // Spread the count over the DC band and the 63 AC bands, the first bands taking more.
    let bands = 64usize;
    let mut per_band = vec![scans / bands; bands];
    for n in per_band.iter_mut().take(scans % bands) {
        *n += 1;
    }
    for (band, &n) in per_band.iter().enumerate() {
        let n = n as u8; // 1..=14
        let k = band as u8;
        sos(k, k, 0, n - 1);
        for al in (0..n - 1).rev() {
            sos(k, k, al + 1, al);
        }
    }
    b.extend_from_slice(&[0xff, 0xd9]);
    b
}

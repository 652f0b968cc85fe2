//! Fuzz target: `probe` then `decode_probed` of arbitrary bytes (JPEG, PNG, WebP, GIF, or
//! anything else), a JPEG through both decoders (pure Rust always, libjpeg-turbo when it loads).
//!
//! For every input: no panic, a typed error with a 413/415 status, an image of exactly the
//! probed size, and a decode whose Rust allocations peak within the probe's memory estimate
//! (what the loader reserves in its decode budget).

use mmcache_decode::{
    DecodeLimits, ImageFormat, JpegDecoder, JpegDecoderChoice, decode_probed, probe,
    select_jpeg_decoder, sniff,
};
use mmcache_fuzz::alloc::{Counting, peak_during};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The pixel limit of the fuzz runs: a decode at it stays within milliseconds under
/// instrumentation, so a slow input is a real hang. The limit's code is the same at any value.
const MAX_PIXELS: u64 = 1 << 20;

fn main() {
    // Loaded once, before AFL++'s fork server starts, so every child has it.
    let turbo = select_jpeg_decoder(JpegDecoderChoice::Auto, None)
        .is_ok_and(|s| s.decoder == JpegDecoder::LibjpegTurbo);
    afl::fuzz!(|data: &[u8]| {
        let limits = DecodeLimits::with_max_pixels(MAX_PIXELS);
        check(data, &limits.with_jpeg_decoder(JpegDecoder::PureRust));
        if turbo && sniff(data) == Some(ImageFormat::Jpeg) {
            check(data, &limits.with_jpeg_decoder(JpegDecoder::LibjpegTurbo));
        }
    });
}

fn check(data: &[u8], limits: &DecodeLimits) {
    let p = match probe(data, limits) {
        Ok(p) => p,
        Err(e) => return check_error(&e),
    };
    let pixels = u64::from(p.width) * u64::from(p.height);
    assert!(
        pixels > 0 && pixels <= limits.max_pixels,
        "probe passed {}x{}",
        p.width,
        p.height
    );
    let (result, peak) = peak_during(|| decode_probed(data, &p, limits));
    match result {
        Ok(image) => {
            assert_eq!((image.width(), image.height()), (p.width, p.height));
            assert_eq!(image.pixels().len() as u64, pixels * 3);
            assert_eq!(image.format(), sniff(data));
        }
        Err(e) => check_error(&e),
    }
    assert!(
        peak as u64 <= p.memory_bytes,
        "{:?} {}x{} ({:?}): decode allocated {peak} bytes, probe estimated {}",
        p.format,
        p.width,
        p.height,
        limits.jpeg,
        p.memory_bytes
    );
}

fn check_error(e: &mmcache_decode::Error) {
    let status = e.http_status();
    assert!(status == 413 || status == 415, "{e} has status {status}");
    // A refusal names what was wrong; an empty message helps no one reading a log.
    assert!(!e.to_string().is_empty());
}

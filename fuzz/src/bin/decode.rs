//! Fuzz target: `probe` then `decode_probed` of arbitrary bytes (JPEG, PNG, WebP, GIF, or
//! anything else), a JPEG through both decoders (pure Rust always, libjpeg-turbo when it loads).
//!
//! For every input: no panic, a typed error with a 413/415 status, an image of exactly the
//! probed size, and a decode whose Rust allocations peak within the probe's memory estimate
//! (what the loader reserves in its decode budget).

use bytes::Bytes;
use mmcache_decode::{
    DecodeLimits, DecodeProfile, ImageFormat, JpegDecoder, JpegDecoderChoice, Mode, decode_as,
    decode_probed, memory_for, probe, select_jpeg_decoder, sniff,
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
        // The engines' profiles: vLLM's composite and orientation, the original modes.
        let limits = limits.with_jpeg_decoder(if turbo {
            JpegDecoder::LibjpegTurbo
        } else {
            JpegDecoder::PureRust
        });
        let bytes = Bytes::copy_from_slice(data);
        for profile in [
            DecodeProfile::vllm_rgb([0, 128, 255]),
            DecodeProfile::vllm_original(),
            DecodeProfile::sglang(),
        ] {
            check_profile(&bytes, &limits, &profile);
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

/// A profiled decode: no panic, a typed error, an image whose pixels fill its mode's size
/// (or bytes handed back whole), within the memory `memory_for` reserves.
fn check_profile(data: &Bytes, limits: &DecodeLimits, profile: &DecodeProfile) {
    let limits = limits.with_layout(profile.layout);
    let Ok(p) = probe(data, &limits) else {
        return;
    };
    let (result, peak) = peak_during(|| decode_as(data, &p, &limits, profile));
    match result {
        Ok(image) if image.mode() == Mode::Undecoded => {
            assert_eq!(image.source().map(|s| s.len()), Some(data.len()));
        }
        Ok(image) => {
            let bpp = image.mode().bytes_per_pixel(image.layout()) as u64;
            let (w, h) = (u64::from(image.width()), u64::from(image.height()));
            assert_eq!(w * h, u64::from(p.width) * u64::from(p.height));
            assert_eq!(image.pixels().len() as u64, w * h * bpp, "{:?}", image.mode());
        }
        Err(e) => check_error(&e),
    }
    let reserved = memory_for(&p, profile);
    assert!(
        peak as u64 <= reserved,
        "{:?} {}x{} in {profile:?}: decode allocated {peak} bytes, reserved {reserved}",
        p.format,
        p.width,
        p.height,
    );
}

fn check_error(e: &mmcache_decode::Error) {
    let status = e.http_status();
    assert!(status == 413 || status == 415, "{e} has status {status}");
    // A refusal names what was wrong; an empty message helps no one reading a log.
    assert!(!e.to_string().is_empty());
}

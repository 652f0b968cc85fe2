use super::*;
use crate::{DecodeProfile, decode_as, probe};

/// A 3 x 2 palette PNG with a transparent entry, decoded in its original mode (SGLang's
/// profile): palette, transparency and mode all go through the entry.
fn palette_png() -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, 3, 2);
    enc.set_color(png::ColorType::Indexed);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_palette(vec![255, 0, 0, 0, 255, 0, 0, 0, 255]);
    enc.set_trns(vec![0]);
    let mut w = enc.write_header().expect("header");
    w.write_image_data(&[0, 1, 2, 2, 1, 0]).expect("data");
    drop(w);
    out
}

fn rgb_png(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let data: Vec<u8> = (0..width * height * 3).map(|i| (i * 7) as u8).collect();
    enc.write_header()
        .expect("header")
        .write_image_data(&data)
        .expect("data");
    out
}

fn decoded(bytes: &[u8], profile: &DecodeProfile) -> DecodedImage {
    let limits = DecodeLimits::default().with_layout(profile.layout);
    let p = probe(bytes, &limits).expect("probe");
    decode_as(&Bytes::copy_from_slice(bytes), &p, &limits, profile).expect("decode")
}

fn joined(parts: &[Bytes]) -> Bytes {
    Bytes::from(
        parts
            .iter()
            .flat_map(|p| p.iter().copied())
            .collect::<Vec<u8>>(),
    )
}

const KEY: [u8; 32] = [7; 32];
const MAPPED: EntryRead = EntryRead::Mapped;
const CHECK: Verify = Verify::Checksum;

/// `entry` with its checksum made right again: what a writer of a lying header would do.
fn resum(entry: &mut [u8]) {
    let header_len = le32(entry, 12) as usize;
    if entry.len() < CHECKSUM_AT + 8 || header_len > entry.len() || header_len < CHECKSUM_AT + 8 {
        return;
    }
    let mut zeroed = entry[..header_len].to_vec();
    zeroed[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
    let pixels_len = usize::try_from(le64(entry, 112)).unwrap_or(usize::MAX);
    let split = header_len.saturating_add(pixels_len).min(entry.len());
    let sum = checksum(&zeroed, &entry[header_len..split], &entry[split..]);
    entry[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
}

#[test]
fn an_entry_gives_back_the_same_image_with_its_pixels_on_a_page_boundary() {
    for (bytes, profile) in [
        (rgb_png(5, 3), DecodeProfile::rgb(PixelLayout::Rgb)),
        (rgb_png(5, 3), DecodeProfile::rgb(PixelLayout::Rgbx)),
        (palette_png(), DecodeProfile::sglang()),
        (palette_png(), DecodeProfile::vllm_rgb([1, 2, 3])),
    ] {
        let image = decoded(&bytes, &profile);
        let parts = to_entry(&image, &KEY).expect("an entry");
        assert_eq!(parts[0].len() % ENTRY_ALIGN, 0);
        let entry = joined(&parts);
        let limits = DecodeLimits::default();
        let back =
            from_entry(entry.clone(), &KEY, profile.layout, &limits, MAPPED, CHECK).expect("read");
        assert_eq!(back, image);
        assert!(back.is_mapped());
        assert_eq!(back.mode(), image.mode());
        assert_eq!(back.opened(), image.opened());
        assert_eq!(back.palette(), image.palette());
        assert_eq!(back.transparency(), image.transparency());
        assert_eq!(back.content_key(), image.content_key());
        assert_eq!(back.encoded_len(), image.encoded_len());
        assert_eq!(back.source(), image.source());
        assert_eq!(back.private_len(), back.memory_len() - back.mapped_len());
        assert_eq!(back.mapped_len(), entry.len(), "the whole entry is mapped");
        assert_eq!(image.mapped_len(), 0);
        let copied = from_entry(
            entry.clone(),
            &KEY,
            profile.layout,
            &limits,
            EntryRead::Copied,
            CHECK,
        )
        .expect("read");
        assert!(!copied.is_mapped());
        assert_eq!(copied.private_len(), image.private_len());
        // The pixels view the entry: no copy.
        let at = back.pixels().as_ptr() as usize - entry.as_ptr() as usize;
        assert_eq!(at, parts[0].len());
    }
}

#[test]
fn a_damaged_truncated_or_foreign_entry_is_refused_never_read() {
    let image = decoded(&rgb_png(40, 30), &DecodeProfile::rgb(PixelLayout::Rgbx));
    let entry = joined(&to_entry(&image, &KEY).expect("entry")).to_vec();
    let limits = DecodeLimits::default();
    let read = |bytes: Vec<u8>| {
        from_entry(
            Bytes::from(bytes),
            &KEY,
            PixelLayout::Rgbx,
            &limits,
            MAPPED,
            CHECK,
        )
    };
    assert!(read(entry.clone()).is_ok());
    // One pixel byte changed, anywhere.
    for at in [ENTRY_ALIGN, entry.len() / 2, entry.len() - 1] {
        let mut e = entry.clone();
        e[at] ^= 1;
        assert_eq!(read(e).unwrap_err(), EntryError::Checksum, "byte {at}");
    }
    // A header field changed (the width), within what the checks allow: the checksum.
    let mut e = entry.clone();
    e[FIXED_LEN - 1] ^= 0x80; // padding after the fixed fields is covered too
    assert_eq!(read(e).unwrap_err(), EntryError::Checksum);
    // Truncated, extended.
    assert!(matches!(
        read(entry[..entry.len() - 1].to_vec()),
        Err(EntryError::Length { .. })
    ));
    let mut longer = entry.clone();
    longer.push(0);
    assert!(matches!(read(longer), Err(EntryError::Length { .. })));
    // Another format, another version, another key.
    assert_eq!(
        read(b"\x89PNG\r\n\x1a\n".repeat(40)).unwrap_err(),
        EntryError::Foreign
    );
    let mut e = entry.clone();
    e[8] = 2;
    assert_eq!(read(e).unwrap_err(), EntryError::Foreign);
    let other = from_entry(
        Bytes::from(entry.clone()),
        &[8; 32],
        PixelLayout::Rgbx,
        &limits,
        MAPPED,
        CHECK,
    );
    assert_eq!(other.unwrap_err(), EntryError::WrongKey);
    // Another layout than the reader's profile.
    let rgb = from_entry(
        Bytes::from(entry.clone()),
        &KEY,
        PixelLayout::Rgb,
        &limits,
        MAPPED,
        CHECK,
    );
    assert!(matches!(rgb, Err(EntryError::Invalid(_))));
    // Every failure but the limits' is damage.
    assert!(EntryError::Checksum.is_damaged() && !EntryError::Refused("x").is_damaged());
}

#[test]
fn this_process_limits_apply_to_an_entry_another_process_wrote() {
    let image = decoded(&rgb_png(40, 30), &DecodeProfile::rgb(PixelLayout::Rgb));
    let entry = joined(&to_entry(&image, &KEY).expect("entry"));
    let small = DecodeLimits::with_max_pixels(40 * 30 - 1);
    let refused = from_entry(entry.clone(), &KEY, PixelLayout::Rgb, &small, MAPPED, CHECK);
    assert!(matches!(refused, Err(EntryError::Refused(_))));
    let jpeg_only = DecodeLimits::default().with_formats([ImageFormat::Jpeg].into_iter().collect());
    let refused = from_entry(entry, &KEY, PixelLayout::Rgb, &jpeg_only, MAPPED, CHECK);
    assert!(matches!(refused, Err(EntryError::Refused(_))));
}

#[test]
fn any_bytes_are_an_error_or_an_image_never_a_panic() {
    let image = decoded(&palette_png(), &DecodeProfile::sglang());
    let entry = joined(&to_entry(&image, &KEY).expect("entry")).to_vec();
    let limits = DecodeLimits::default();
    // A small xorshift: header bytes and whole fields (each u32 and u64 of the fixed part, a
    // pair of them at once: width and height) set to random and extreme values, the checksum
    // made right again most of the time (a lying writer), and random cuts.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let extreme = [0, 1, u64::from(u32::MAX), u64::MAX, 1 << 31, (1 << 31) + 1];
    for round in 0..40_000 {
        let mut e = entry.clone();
        match round % 4 {
            0 => {
                let at = (next() as usize) % FIXED_LEN;
                e[at] = next() as u8;
            }
            1 => {
                let at = ((next() as usize) % (FIXED_LEN / 4)) * 4;
                let v = extreme[(next() as usize) % extreme.len()] as u32;
                e[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            2 => {
                let v = extreme[(next() as usize) % extreme.len()];
                let at = [104, 112, 120][(next() as usize) % 3];
                e[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => {
                // Width and height both huge, with a 4-byte mode: the pixel count's product.
                let v = extreme[(next() as usize) % extreme.len()] as u32;
                e[56..60].copy_from_slice(&v.to_le_bytes());
                e[60..64].copy_from_slice(&v.to_le_bytes());
                e[66] = 6;
            }
        }
        if next() % 4 != 0 {
            resum(&mut e);
        }
        if round % 7 == 0 {
            let cut = (next() as usize) % (e.len() + 1);
            e.truncate(cut);
        }
        let read = from_entry(
            Bytes::from(e),
            &KEY,
            PixelLayout::Rgbx,
            &limits,
            MAPPED,
            CHECK,
        );
        if let Ok(back) = read {
            assert_eq!(
                back.pixels(),
                image.pixels(),
                "a changed entry read as other pixels"
            );
        }
    }
}

#[test]
fn the_write_back_of_a_known_file_skips_only_the_checksum() {
    let image = decoded(&rgb_png(8, 8), &DecodeProfile::rgb(PixelLayout::Rgb));
    let mut entry = joined(&to_entry(&image, &KEY).expect("entry")).to_vec();
    let limits = DecodeLimits::default();
    let last = entry.len() - 1;
    entry[last] ^= 1;
    let read = |verify| {
        from_entry(
            Bytes::from(entry.clone()),
            &KEY,
            PixelLayout::Rgb,
            &limits,
            MAPPED,
            verify,
        )
    };
    assert_eq!(read(CHECK).unwrap_err(), EntryError::Checksum);
    assert!(
        read(Verify::WrittenHere).is_ok(),
        "the checksum alone is skipped"
    );
    let wrong_key = from_entry(
        Bytes::from(entry.clone()),
        &[1; 32],
        PixelLayout::Rgb,
        &limits,
        MAPPED,
        Verify::WrittenHere,
    );
    assert_eq!(
        wrong_key.unwrap_err(),
        EntryError::WrongKey,
        "the other checks still run"
    );
}

#[test]
fn keys_differ_by_identity_scope_and_profile() {
    let limits = DecodeLimits::default();
    let a = CacheIdentity::unscoped("https://example.com/a.png");
    let b = CacheIdentity::unscoped("https://example.com/b.png");
    let rgb = DecodeProfile::rgb(PixelLayout::Rgbx);
    let keys = [
        host_entry_key(&a, &rgb, &limits),
        host_entry_key(&b, &rgb, &limits),
        host_entry_key(&a, &DecodeProfile::rgb(PixelLayout::Rgb), &limits),
        host_entry_key(&a, &DecodeProfile::sglang(), &limits),
        host_entry_key(&a, &DecodeProfile::vllm_rgb([255; 3]), &limits),
        host_entry_key(&a, &rgb, &limits.with_jpeg_decoder(JpegDecoder::PureRust)),
    ];
    for (i, k) in keys.iter().enumerate() {
        for other in &keys[i + 1..] {
            assert_ne!(k, other);
        }
    }
    assert_eq!(keys[0], host_entry_key(&a, &rgb, &limits), "stable");
}

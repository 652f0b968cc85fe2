//! The content key a decoded image keeps: blake3 of the encoded bytes, for every format.

use mmcache_decode::{DecodeLimits, decode, probe};
use mmcache_scope::{ContentKey, EmbeddingKey, EmbeddingKeyInput};
use mmcache_test_support::images;

#[test]
fn every_format_keeps_the_digest_of_its_encoded_bytes() {
    let limits = DecodeLimits::default();
    for bytes in [
        images::png(9, 7, 1),
        images::jpeg(9, 7, 1),
        images::webp(9, 7, 1),
        images::gif(9, 7, 1),
    ] {
        let image = decode(&bytes, &limits).unwrap();
        assert_eq!(image.content_key(), ContentKey::of(&bytes));
        assert_eq!(
            probe(&bytes, &limits).unwrap().content_key,
            image.content_key()
        );
        assert_eq!(
            image.content_key().to_string(),
            blake3::hash(&bytes).to_hex().as_str()
        );
    }
}

#[test]
fn keys_name_bytes_not_pixels() {
    let limits = DecodeLimits::default();
    // The same pixels in two files (bytes after IEND are ignored): two content keys.
    let png = images::png(8, 8, 3);
    let mut padded = png.clone();
    padded.extend_from_slice(b"trailing");
    let a = decode(&png, &limits).unwrap();
    let padded = decode(&padded, &limits).unwrap();
    assert_eq!(a.pixels(), padded.pixels());
    assert_ne!(a.content_key(), padded.content_key());
    // A different image: a different key.
    let b = decode(&images::png(8, 8, 4), &limits).unwrap();
    assert_ne!(a.content_key(), b.content_key());
}

#[test]
fn an_embedding_key_from_the_image_is_the_one_from_its_digest() {
    let bytes = images::png(5, 5, 2);
    let image = decode(&bytes, &DecodeLimits::default()).unwrap();
    let digest = *blake3::hash(&bytes).as_bytes();
    assert_eq!(
        EmbeddingKey::unscoped(&EmbeddingKeyInput::content(&image), "m"),
        EmbeddingKey::unscoped(&EmbeddingKeyInput::content(digest), "m")
    );
    assert_eq!(
        EmbeddingKeyInput::content(image.content_key()),
        EmbeddingKeyInput::content(digest)
    );
}

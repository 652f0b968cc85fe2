//! `DecodedImage::vllm_hash` against digests from vLLM's own `MultiModalHasher`
//! (tests/vllm/make_vllm_hashes.py wrote the vectors).

use mmcache_decode::{DecodeLimits, decode};

#[test]
fn matches_vllm_multimodal_hasher() {
    let vectors = include_str!("../vllm_hashes.tsv");
    let mut checked = 0;
    for line in vectors.lines().filter(|l| !l.starts_with('#')) {
        let (png, expected) = line.split_once('\t').unwrap();
        let png: Vec<u8> = (0..png.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&png[i..i + 2], 16).unwrap())
            .collect();
        let image = decode(&png, &DecodeLimits::default()).unwrap();
        let ours: String = image
            .vllm_hash()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours, expected, "{}x{}", image.width(), image.height());
        // Memoised: the same value again.
        assert_eq!(image.vllm_hash(), image.vllm_hash());
        checked += 1;
    }
    assert_eq!(checked, 6);
}

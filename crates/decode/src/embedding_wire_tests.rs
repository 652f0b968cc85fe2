use super::*;
use mmcache_scope::EmbeddingKeyInput;

const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";
const CAP: u64 = DEFAULT_EMBEDDING_MAX_VALUE_BYTES;

fn key(s: &str) -> EmbeddingKey {
    EmbeddingKey::unscoped(&EmbeddingKeyInput::caller(s), MODEL)
}

fn sample() -> Embedding {
    let data: Vec<f32> = (0..24).map(|i| i as f32 * 0.5).collect();
    Embedding::from_f32(vec![2, 3, 4], data)
        .unwrap()
        .with_metadata(Bytes::from_static(b"{\"grid\":[1,2,3]}"))
        .unwrap()
}

/// A value read back as a tier would give it: in an aligned buffer.
fn aligned(v: &[u8]) -> Bytes {
    let mut buf = ValueBuf::zeroed(v.len());
    buf.as_mut_bytes().copy_from_slice(v);
    buf.freeze()
}

#[test]
fn round_trips_every_dtype_with_and_without_metadata() {
    let k = key("a");
    let e = sample();
    let v = encode_value(&k, MODEL, &e).unwrap();
    let back = decode_value(&aligned(&v), &k, MODEL, CAP).unwrap();
    assert_eq!(back, e);
    for dtype in [DType::F16, DType::BF16] {
        let e = Embedding::from_u16_bits(dtype, vec![5], vec![1, 2, 3, 4, 5]).unwrap();
        let v = encode_value(&k, MODEL, &e).unwrap();
        let back = decode_value(&aligned(&v), &k, MODEL, CAP).unwrap();
        assert_eq!((back.dtype(), back.metadata()), (dtype, None));
        assert_eq!(back, e);
    }
    // An unaligned buffer is copied, not refused.
    let mut odd = vec![0u8];
    odd.extend_from_slice(&v);
    let odd = Bytes::from(odd).slice(1..);
    assert_eq!(decode_value(&odd, &k, MODEL, CAP).unwrap(), e);
}

#[test]
fn aligned_value_is_used_in_place() {
    let k = key("a");
    let v = aligned(&encode_value(&k, MODEL, &sample()).unwrap());
    let back = decode_value(&v, &k, MODEL, CAP).unwrap();
    let (start, end) = (v.as_ptr() as usize, v.as_ptr() as usize + v.len());
    let at = back.bytes().as_ptr() as usize;
    assert!(
        at >= start && at < end,
        "tensor was copied out of the buffer"
    );
    assert!(back.as_f32().is_some());
}

#[test]
fn every_truncation_is_detected() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    for len in 0..v.len() {
        let e = decode_value(&aligned(&v[..len]), &k, MODEL, CAP).unwrap_err();
        assert!(
            matches!(e.kind(), "truncated" | "corrupt" | "foreign"),
            "{len}: {e}"
        );
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    for i in 0..v.len() {
        for bit in [0, 3, 7] {
            let mut bad = v.clone();
            bad[i] ^= 1 << bit;
            let r = decode_value(&aligned(&bad), &k, MODEL, CAP);
            assert!(r.is_err(), "byte {i} bit {bit} went unnoticed");
        }
    }
}

#[test]
fn foreign_and_other_key_or_model_are_refused() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    let e = decode_value(&aligned(&v), &key("b"), MODEL, CAP).unwrap_err();
    assert_eq!(e, WireError::OtherKey { what: "key" });
    let e = decode_value(&aligned(&v), &k, "other-model", CAP).unwrap_err();
    assert_eq!(e, WireError::OtherKey { what: "model" });
    // A PNG, a Dynamo image entry, or anything else.
    let e = decode_value(
        &Bytes::from_static(b"\x89PNG\r\n\x1a\n...."),
        &k,
        MODEL,
        CAP,
    );
    assert_eq!(e.unwrap_err(), WireError::Foreign { version: 0 });
    let mut future = v.clone();
    future[4] = 2;
    let e = decode_value(&aligned(&future), &k, MODEL, CAP).unwrap_err();
    assert_eq!(e, WireError::Foreign { version: 2 });
    // A newer build's value may suit its readers: not bad for everyone. Not ours at all is.
    assert!(e.may_suit_others());
    assert!(!WireError::Foreign { version: 0 }.may_suit_others());
}

#[test]
fn only_a_readers_own_limits_may_suit_others() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    let over = decode_value(&aligned(&v), &k, MODEL, 10).unwrap_err();
    assert!(over.may_suit_others());
    let mut flipped = v.clone();
    flipped[60] ^= 1;
    for bad in [
        decode_value(&aligned(&flipped), &k, MODEL, CAP).unwrap_err(),
        decode_value(&aligned(&v[..v.len() - 1]), &k, MODEL, CAP).unwrap_err(),
        decode_value(&aligned(&v), &key("b"), MODEL, CAP).unwrap_err(),
    ] {
        assert!(!bad.may_suit_others(), "{bad}");
    }
    // A manifest of a newer format (perhaps of another length) is that version's.
    let m = Manifest::of(&v, 40, 7).unwrap().encode(&k);
    let mut future = m.to_vec();
    future[4] = 3;
    future.extend_from_slice(&[0; 32]);
    let e = Manifest::decode(&future, &k, CAP, 40).unwrap_err();
    assert_eq!(e, WireError::Foreign { version: 3 });
    assert!(e.may_suit_others());
}

#[test]
fn encoded_len_is_the_length_encode_value_gives() {
    let k = key("a");
    let cases = [
        sample(),
        Embedding::from_f32(vec![7], vec![1.0; 7]).unwrap(),
        Embedding::from_u16_bits(DType::BF16, vec![3, 1, 1], vec![1, 2, 3]).unwrap(),
    ];
    for e in cases {
        for model in ["", "m", MODEL] {
            let v = encode_value(&k, model, &e).unwrap();
            assert_eq!(
                encoded_len(model, &e),
                Ok(v.len()),
                "{model} {:?}",
                e.shape()
            );
        }
    }
}

#[test]
fn oversized_is_refused_before_reading() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    let e = decode_value(&aligned(&v), &k, MODEL, v.len() as u64 - 1).unwrap_err();
    assert_eq!(e.kind(), "oversized");
    assert!(decode_value(&aligned(&v), &k, MODEL, v.len() as u64).is_ok());
}

/// Re-seals a hand-edited body with a valid checksum: what a hostile writer can do.
fn resealed(mut body: Vec<u8>) -> Bytes {
    body.truncate(body.len() - 32);
    let sum = blake3::hash(&body);
    body.extend_from_slice(sum.as_bytes());
    aligned(&body)
}

#[test]
fn a_hostile_value_with_a_valid_checksum_is_still_refused() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    let cases: [(usize, &[u8], &str); 5] = [
        (6, &[9], "dtype"),
        (7, &[200], "dimensions"),
        // metadata length far past the value
        (42, &[0xff, 0xff, 0xff, 0x7f], "metadata"),
        // tensor length of 2^63
        (46, &[0, 0, 0, 0, 0, 0, 0, 0x80], "length"),
        // first dimension doubled: the tensor no longer matches the shape
        (54, &[4], "shape"),
    ];
    for (at, patch, what) in cases {
        let mut bad = v.clone();
        bad[at..at + patch.len()].copy_from_slice(patch);
        let r = decode_value(&resealed(bad), &k, MODEL, CAP);
        assert!(r.is_err(), "{what} accepted");
    }
}

#[test]
fn manifest_round_trips_and_refuses_corruption() {
    let k = key("a");
    let v = encode_value(&k, MODEL, &sample()).unwrap();
    let m = Manifest::of(&v, 40, 7).unwrap();
    assert_eq!(m.count as usize, v.len().div_ceil(40));
    assert_eq!(m.chunk_range(m.count - 1).end, v.len());
    let bytes = m.encode(&k);
    assert!(Manifest::looks_like(&bytes));
    assert_eq!(Manifest::decode(&bytes, &k, CAP, 40).unwrap(), m);
    assert_eq!(
        Manifest::decode(&bytes, &key("b"), CAP, 40).unwrap_err(),
        WireError::OtherKey { what: "key" }
    );
    assert_eq!(
        Manifest::decode(&bytes, &k, 10, 40).unwrap_err().kind(),
        "oversized"
    );
    assert!(Manifest::decode(&bytes, &k, CAP, 39).is_err()); // chunks over our cap
    for len in 0..MANIFEST_BYTES {
        assert!(Manifest::decode(&bytes[..len], &k, CAP, 40).is_err());
    }
    for i in 0..MANIFEST_BYTES {
        let mut bad = bytes;
        bad[i] ^= 0x10;
        assert!(Manifest::decode(&bad, &k, CAP, 40).is_err(), "byte {i}");
    }
    assert!(Manifest::of(&v, 0, 1).is_err());
}

#[test]
fn unencodable_embeddings_are_typed_errors() {
    let k = key("a");
    let e = Embedding::from_f32(vec![1; 9], vec![0.0]).unwrap();
    assert_eq!(
        encode_value(&k, MODEL, &e).unwrap_err().kind(),
        "unencodable"
    );
    let long = "m".repeat(70_000);
    let e = Embedding::from_f32(vec![1], vec![0.0]).unwrap();
    assert_eq!(
        encode_value(&k, &long, &e).unwrap_err().kind(),
        "unencodable"
    );
}

#[test]
fn a_manifest_of_too_many_chunks_is_refused_before_any_read() {
    // A forged manifest, well formed and checksummed: 64 MiB in 1-byte chunks.
    let k = key("a");
    let m = Manifest {
        total_len: 64 << 20,
        chunk_bytes: 1,
        count: 64 << 20,
        generation: 1,
        value_sum: [0; 32],
    };
    let bytes = m.encode(&k);
    assert_eq!(
        Manifest::decode(&bytes, &k, 64 << 20, 64 << 20)
            .unwrap_err()
            .kind(),
        "corrupt"
    );
    // The most chunks allowed still decode.
    let m = Manifest {
        total_len: u64::from(MAX_EMBEDDING_CHUNKS) * 64,
        chunk_bytes: 64,
        count: MAX_EMBEDDING_CHUNKS,
        ..m
    };
    assert!(Manifest::decode(&m.encode(&k), &k, 64 << 20, 64 << 20).is_ok());
}

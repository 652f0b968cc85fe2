//! `data:` URL inputs that `cargo xtask fuzz` found (tests/fuzz/: a first line with the byte
//! cap, then the URL), replayed: a payload within the cap decodes, whatever its padding. The
//! parser is `mmcache_origin::data_url`'s; the loader's loads of `data:` URLs use it.

use base64::Engine as _;
use mmcache_loader::DataUrlError;
use mmcache_origin::data_url::decode_payload;

#[test]
fn payloads_within_the_cap_are_accepted() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/fuzz") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let (cap, url) = text.split_once('\n').expect("cap line");
        let max: u64 = cap.trim().parse().expect("cap");
        let payload = url.split_once(',').expect("payload").1;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(payload)
            .expect("the inputs are valid base64");
        let got = decode_payload(url, max);
        if bytes.len() as u64 <= max {
            assert_eq!(got, Ok(bytes), "{}", path.display());
        } else {
            assert_eq!(got, Err(DataUrlError::TooLarge { limit: max }));
        }
        n += 1;
    }
    assert!(n > 0, "no inputs in {}", dir.display());
    // The boundary, each padding: 1, 2 and 3 bytes at a cap of exactly that size.
    for (payload, len) in [("AA==", 1u64), ("AAA=", 2), ("AAAA", 3)] {
        let url = format!("data:image/png;base64,{payload}");
        assert_eq!(decode_payload(&url, len).map(|b| b.len() as u64), Ok(len));
        assert_eq!(
            decode_payload(&url, len - 1),
            Err(DataUrlError::TooLarge { limit: len - 1 })
        );
    }
}

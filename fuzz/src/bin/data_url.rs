//! Fuzz target: the `data:` URL parsing the loader uses (crates/origin/src/data_url.rs).
//!
//! Input: a first line holding the byte cap in decimal (so the cap's boundary is reachable),
//! then the URL. For every input: no panic; a payload is returned only for an `image/*;base64`
//! URL whose payload is the canonical base64 of the bytes returned and fits the cap; a
//! refusal is the right one.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mmcache_fuzz::first_line;
use mmcache_origin::data_url::{DataUrlError, decode_payload, is_data_url};

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let (cap, url) = first_line(data);
        let Some(max) = std::str::from_utf8(cap)
            .ok()
            .and_then(|c| c.trim().parse::<u64>().ok())
        else {
            return;
        };
        let Ok(url) = std::str::from_utf8(url) else {
            return;
        };
        check(url, max);
    });
}

fn check(url: &str, max: u64) {
    let is_data = url
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"));
    if !is_data_url(url) {
        assert!(!is_data, "a data: URL was not recognised");
        assert_eq!(decode_payload(url, max), Err(DataUrlError::Malformed));
        return;
    }
    assert!(is_data, "not a data: URL, yet taken for one");
    let result = decode_payload(url, max);
    let Some((header, payload)) = url[5..].split_once(',') else {
        assert_eq!(result, Err(DataUrlError::Malformed));
        return;
    };
    let strict = STANDARD.decode(payload);
    match result {
        Ok(bytes) => {
            assert!(
                bytes.len() as u64 <= max,
                "{} bytes over a {max} cap",
                bytes.len()
            );
            assert_eq!(STANDARD.encode(&bytes), payload, "payload is not canonical");
            let media = header.split(';').next().unwrap_or_default().trim();
            assert!(media.len() > 6 && media[..6].eq_ignore_ascii_case("image/"));
        }
        Err(DataUrlError::BadBase64) => assert!(strict.is_err(), "valid base64 refused"),
        Err(DataUrlError::TooLarge { limit }) => {
            assert_eq!(limit, max);
            if let Ok(bytes) = strict {
                assert!(
                    bytes.len() as u64 > max,
                    "{} bytes refused as over the {max}-byte cap",
                    bytes.len()
                );
            }
        }
        Err(DataUrlError::NotImage | DataUrlError::NotBase64) => {}
        Err(e) => panic!("{e} for a URL with a payload"),
    }
}

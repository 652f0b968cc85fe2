//! `data:` URLs: `data:image/<subtype>[;params];base64,<strict base64>`. Never cached.

use base64::Engine as _;

use crate::error::DataUrlError;

/// True when `url` has the `data:` scheme (case-insensitive).
pub(crate) fn is_data_url(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
}

/// Decodes the payload of a `data:` URL, refusing non-images, non-base64 and oversize payloads
/// before decoding (the decoded size is known from the encoded length).
pub(crate) fn decode_payload(url: &str, max_bytes: u64) -> Result<Vec<u8>, DataUrlError> {
    let rest = &url[5..];
    let (header, payload) = rest.split_once(',').ok_or(DataUrlError::Malformed)?;
    let mut parts = header.split(';');
    let media_type = parts.next().unwrap_or_default().trim();
    let is_image = media_type
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("image/"))
        && media_type.len() > 6;
    if !is_image {
        return Err(DataUrlError::NotImage);
    }
    if !parts.any(|p| p.trim().eq_ignore_ascii_case("base64")) {
        return Err(DataUrlError::NotBase64);
    }
    // Strict base64 ends in at most two `=`, each one byte fewer: the exact decoded size.
    let padding = payload
        .bytes()
        .rev()
        .take(2)
        .take_while(|&b| b == b'=')
        .count() as u64;
    if ((payload.len() as u64 / 4) * 3).saturating_sub(padding) > max_bytes {
        return Err(DataUrlError::TooLarge { limit: max_bytes });
    }
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|_| DataUrlError::BadBase64)
}

/// The loader's handling of `url` as a `data:` URL, for the fuzz target (fuzz/): `None` when
/// it is not one, else what [`decode_payload`] gives. Not a supported API: only with the
/// feature `test-seams`.
#[cfg(feature = "test-seams")]
pub fn fuzz_payload(url: &str, max_bytes: u64) -> Option<Result<Vec<u8>, DataUrlError>> {
    is_data_url(url).then(|| decode_payload(url, max_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_strictly() {
        assert!(is_data_url("DATA:image/png;base64,AA=="));
        assert!(!is_data_url("dat"));
        assert_eq!(
            decode_payload("data:image/png;base64,aGk=", 100),
            Ok(b"hi".to_vec())
        );
        assert_eq!(
            decode_payload("data:IMAGE/PNG;charset=x;BASE64,aGk=", 100),
            Ok(b"hi".to_vec())
        );
        assert_eq!(
            decode_payload("data:image/png;base64", 100),
            Err(DataUrlError::Malformed)
        );
        assert_eq!(
            decode_payload("data:text/plain;base64,aGk=", 100),
            Err(DataUrlError::NotImage)
        );
        assert_eq!(
            decode_payload("data:;base64,aGk=", 100),
            Err(DataUrlError::NotImage)
        );
        assert_eq!(
            decode_payload("data:image/;base64,aGk=", 100),
            Err(DataUrlError::NotImage)
        );
        assert_eq!(
            decode_payload("data:image/png,hi", 100),
            Err(DataUrlError::NotBase64)
        );
        for bad in ["aGk", "a Gk=", "aGk=\n", "aG!k", "aGk==", "aGl="] {
            assert_eq!(
                decode_payload(&format!("data:image/png;base64,{bad}"), 100),
                Err(DataUrlError::BadBase64),
                "{bad:?}"
            );
        }
        assert_eq!(
            decode_payload(&format!("data:image/png;base64,{}", "A".repeat(400)), 100),
            Err(DataUrlError::TooLarge { limit: 100 })
        );
    }
}

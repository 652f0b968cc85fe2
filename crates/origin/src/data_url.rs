//! `data:` URLs, whose bytes are their own origin:
//! `data:image/<subtype>[;params];base64,<strict base64>`. The loader never caches them.
//!
//! ```
//! use mmcache_origin::data_url::{DataUrlError, decode_payload, is_data_url};
//!
//! let url = "data:image/png;base64,aGk=";
//! assert!(is_data_url(url));
//! assert_eq!(decode_payload(url, 1024), Ok(b"hi".to_vec()));
//! assert_eq!(decode_payload(url, 1), Err(DataUrlError::TooLarge { limit: 1 }));
//! ```

use base64::Engine as _;

/// Why a `data:` URL was refused.
///
/// Exhaustive on purpose: a new refusal is a breaking change callers must map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataUrlError {
    /// Not a `data:` URL, or no comma between its header and its payload.
    #[error("not a data URL with a payload (`data:<header>,<payload>`)")]
    Malformed,
    /// The media type is not `image/*`.
    #[error("data URL media type is not an image")]
    NotImage,
    /// The `;base64` marker is missing.
    #[error("data URL is not base64-encoded")]
    NotBase64,
    /// The payload is not strict base64.
    #[error("data URL payload is not valid base64")]
    BadBase64,
    /// The payload decodes to more bytes than the size cap.
    #[error("data URL payload exceeds the {limit}-byte limit")]
    TooLarge {
        /// The cap in bytes.
        limit: u64,
    },
}

/// True when `url` has the `data:` scheme (case-insensitive).
pub fn is_data_url(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
}

/// Decodes the payload of a `data:` URL (one [`is_data_url`] accepts; anything else is
/// [`DataUrlError::Malformed`]), refusing non-images, non-base64 and payloads over
/// `max_bytes` before decoding (the decoded size is known from the encoded length).
pub fn decode_payload(url: &str, max_bytes: u64) -> Result<Vec<u8>, DataUrlError> {
    let rest = url
        .get(5..)
        .filter(|_| is_data_url(url))
        .ok_or(DataUrlError::Malformed)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_strictly() {
        assert!(is_data_url("DATA:image/png;base64,AA=="));
        assert!(!is_data_url("dat"));
        for not_data in ["", "dat", "https://a/b.png", "dätä:image/png;base64,aGk="] {
            assert_eq!(decode_payload(not_data, 100), Err(DataUrlError::Malformed));
        }
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

//! Content keys: which encoded bytes an image came from, whatever URL named them.

use std::fmt;

/// The blake3 digest of an image's encoded bytes (the file as fetched, before decoding).
///
/// Computed once when the bytes arrive from any tier and kept with the decoded image. Two URLs
/// of the same bytes (cache-busting query strings, presigned URLs) have the same content key;
/// it names bytes, not pixels, so a re-encoded copy of an image has another one. blake3 runs
/// at GB/s on one core, far below the cost of the decode it sits beside.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentKey([u8; 32]);

impl ContentKey {
    /// The content key of `encoded` bytes.
    pub fn of(encoded: &[u8]) -> Self {
        Self(*blake3::hash(encoded).as_bytes())
    }

    /// A content key from its 32 digest bytes (e.g. one computed elsewhere with blake3).
    pub fn from_bytes(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl From<[u8; 32]> for ContentKey {
    fn from(digest: [u8; 32]) -> Self {
        Self(digest)
    }
}

impl fmt::Display for ContentKey {
    /// Lowercase hex, 64 characters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::digest::digest_hex(&self.0))
    }
}

impl fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentKey({})", &self.to_string()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_blake3_of_the_bytes_in_hex() {
        let k = ContentKey::of(b"abc");
        // blake3("abc"), from the BLAKE3 reference test vectors.
        assert_eq!(
            k.to_string(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert_eq!(ContentKey::from(*k.as_bytes()), k);
        assert_ne!(ContentKey::of(b"abd"), k);
        assert_eq!(format!("{k:?}"), "ContentKey(6437b3ac38465133)");
    }
}

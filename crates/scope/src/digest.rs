//! The one spelling of digests in keys and file names.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    digest_hex(&Sha256::digest(data).into())
}

/// Lowercase hex (64 characters) of a 32-byte digest: the one spelling of digests in keys
/// and file names.
pub fn digest_hex(digest: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*digest).to_hex().to_string()
}

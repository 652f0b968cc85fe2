//! Embedding keys: which entry of the embedding caches a `get_or_compute` uses.

use std::fmt;

use crate::content_key::ContentKey;
use crate::session::Scope;

/// What names an embedding's input, before the model and the scope are added.
#[derive(Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EmbeddingKeyInput {
    /// A digest of the image's encoded bytes (blake3, computed when the bytes arrive). Within
    /// a scope, two URLs of the same bytes share one entry; content dedup never crosses scopes.
    Content([u8; 32]),
    /// The caller's own key for the input, e.g. vLLM's `multi_modal_uuids`. Opaque to us.
    Caller(String),
}

impl EmbeddingKeyInput {
    /// The caller's own key.
    pub fn caller(key: impl Into<String>) -> Self {
        Self::Caller(key.into())
    }

    /// A content key: a [`ContentKey`], a decoded image (`mmcache_decode::DecodedImage`
    /// converts into its own), or a raw 32-byte blake3 digest of the encoded bytes.
    pub fn content(key: impl Into<ContentKey>) -> Self {
        Self::Content(*key.into().as_bytes())
    }
}

impl fmt::Debug for EmbeddingKeyInput {
    // A caller key may be derived from a URL or user data: do not print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Content(_) => f.write_str("Content(..)"),
            Self::Caller(k) => write!(f, "Caller({} bytes)", k.len()),
        }
    }
}

/// The blake3 key-derivation context of embedding keys. Image identities are hashed with plain
/// blake3 of their string, never in this mode, so an embedding key cannot equal an image key.
const CONTEXT: &str = "mmcache 2026-12 embedding key v1";

/// The key of one embedding in every embedding cache: (input key, model id) within a scope,
/// hashed once with blake3.
///
/// The model id must name everything that changes the embedding for a given input: the model
/// and revision, and the processor settings (e.g. `max_pixels`, `min_pixels`, dtype), so that
/// differently configured workers never share an entry.
///
/// Encoding (hashed in blake3's key-derivation mode under a context of our own): a mode byte
/// (`0` unscoped, `1` scoped, then the 64-byte hex scope digest); a kind byte (`0` content, then
/// its 32 bytes; `1` caller, then the key's length as u64 LE and its bytes); the model id's
/// length as u64 LE and its bytes. Every variable part is length-prefixed or fixed-size, so
/// two different tuples never encode the same.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EmbeddingKey([u8; 32]);

impl EmbeddingKey {
    /// The key outside session scoping.
    pub fn unscoped(input: &EmbeddingKeyInput, model: &str) -> Self {
        Self::build(None, input, model)
    }

    /// The key within `scope`: the scope digest is part of it.
    pub fn scoped(scope: &Scope, input: &EmbeddingKeyInput, model: &str) -> Self {
        Self::build(Some(scope), input, model)
    }

    /// The key a `get_or_compute` uses, or `None` when it must bypass every cache and join
    /// (session scoping on and no usable scope). With scoping off the scope is ignored, as for
    /// [`crate::CacheIdentity::resolve`].
    pub fn resolve(
        session_scoped: bool,
        input: &EmbeddingKeyInput,
        model: &str,
        scope: Option<&Scope>,
    ) -> Option<Self> {
        match (session_scoped, scope) {
            (false, _) => Some(Self::unscoped(input, model)),
            (true, Some(scope)) => Some(Self::scoped(scope, input, model)),
            (true, None) => None,
        }
    }

    fn build(scope: Option<&Scope>, input: &EmbeddingKeyInput, model: &str) -> Self {
        let mut h = blake3::Hasher::new_derive_key(CONTEXT);
        match scope {
            None => {
                h.update(&[0]);
            }
            Some(scope) => {
                h.update(&[1]);
                h.update(scope.digest().as_str().as_bytes());
            }
        }
        match input {
            EmbeddingKeyInput::Content(digest) => {
                h.update(&[0]);
                h.update(digest);
            }
            EmbeddingKeyInput::Caller(key) => {
                h.update(&[1]);
                h.update(&(key.len() as u64).to_le_bytes());
                h.update(key.as_bytes());
            }
        }
        h.update(&(model.len() as u64).to_le_bytes());
        h.update(model.as_bytes());
        Self(*h.finalize().as_bytes())
    }

    /// The 32-byte digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest in lowercase hex (64 characters), for keys of later tiers.
    pub fn to_hex(&self) -> String {
        crate::digest::digest_hex(&self.0)
    }
}

impl fmt::Debug for EmbeddingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EmbeddingKey({})", &self.to_hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::CacheIdentity;

    fn caller(k: &str) -> EmbeddingKeyInput {
        EmbeddingKeyInput::caller(k)
    }

    #[test]
    fn every_part_counts_and_boundaries_are_unambiguous() {
        let a = Scope::new("a").unwrap();
        let b = Scope::new("b").unwrap();
        let base = EmbeddingKey::scoped(&a, &caller("img"), "m");
        assert_ne!(base, EmbeddingKey::scoped(&b, &caller("img"), "m"));
        assert_ne!(base, EmbeddingKey::unscoped(&caller("img"), "m"));
        assert_ne!(base, EmbeddingKey::scoped(&a, &caller("img"), "m2"));
        assert_ne!(base, EmbeddingKey::scoped(&a, &caller("img2"), "m"));
        // ("ab", "c") and ("a", "bc") differ.
        assert_ne!(
            EmbeddingKey::unscoped(&caller("ab"), "c"),
            EmbeddingKey::unscoped(&caller("a"), "bc")
        );
        // A caller key spelling a digest is not that content key.
        let d = [7u8; 32];
        let as_text = String::from_utf8_lossy(&d).into_owned();
        assert_ne!(
            EmbeddingKey::unscoped(&EmbeddingKeyInput::content(d), "m"),
            EmbeddingKey::unscoped(&caller(&as_text), "m")
        );
        assert_eq!(base, EmbeddingKey::scoped(&a, &caller("img"), "m"));
    }

    #[test]
    fn resolve_follows_the_image_scope_rule() {
        let s = Scope::new("s").unwrap();
        let input = caller("k");
        assert!(EmbeddingKey::resolve(true, &input, "m", None).is_none());
        assert_eq!(
            EmbeddingKey::resolve(true, &input, "m", Some(&s)),
            Some(EmbeddingKey::scoped(&s, &input, "m"))
        );
        assert_eq!(
            EmbeddingKey::resolve(false, &input, "m", Some(&s)),
            Some(EmbeddingKey::unscoped(&input, "m"))
        );
    }

    #[test]
    fn never_equals_an_image_key() {
        // The memory caches key images by blake3(identity); embeddings use derive-key mode.
        let url = "https://e.com/a.png";
        let image = *blake3::hash(CacheIdentity::unscoped(url).as_str().as_bytes()).as_bytes();
        assert_ne!(EmbeddingKey::unscoped(&caller(url), "").as_bytes(), &image);
        let k = EmbeddingKey::unscoped(&caller(url), "m");
        assert_eq!(k.to_hex().len(), 64);
        assert!(!format!("{k:?}").contains("e.com"));
        assert!(!format!("{:?}", caller(url)).contains("e.com"));
    }
}

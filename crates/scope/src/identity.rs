//! [`CacheIdentity`]: the key of one image in every cache.

use std::fmt;
#[cfg(feature = "test-seams")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::digest::sha256_hex;
use crate::session::Scope;
use crate::url_key::dynamo_url_key;

/// The key of one image in every cache (memory, in flight, disk, shared): the URL keyed as
/// ai-dynamo 1.6.1 keys it ([`dynamo_url_key`]: scheme and host lowercased, fragment dropped,
/// the rest as given), prefixed by the scope digest and `:` in scoped mode. The download still
/// uses the URL as given.
///
/// Its digests are computed once, on first use, and shared by its clones: every tier of a
/// load derives its keys and names from the same two hashes.
#[derive(Clone)]
pub struct CacheIdentity(Arc<Key>);

struct Key {
    key: String,
    /// Built by [`CacheIdentity::scoped`]: `key` starts with the 64-character scope digest.
    scoped: bool,
    sha256_hex: OnceLock<String>,
    blake3: OnceLock<[u8; 32]>,
}

impl CacheIdentity {
    /// The identity of `url` outside session scoping: `dynamo_url_key(url)`.
    pub fn unscoped(url: &str) -> Self {
        Self::new(dynamo_url_key(url), false)
    }

    /// The identity of `url` within `scope`: `sha256hex(scope) + ":" + dynamo_url_key(url)`.
    pub fn scoped(scope: &Scope, url: &str) -> Self {
        let digest = scope.digest();
        let key = dynamo_url_key(url);
        let mut s = String::with_capacity(digest.as_str().len() + 1 + key.len());
        s.push_str(digest.as_str());
        s.push(':');
        s.push_str(&key);
        Self::new(s, true)
    }

    fn new(key: String, scoped: bool) -> Self {
        Self(Arc::new(Key {
            key,
            scoped,
            sha256_hex: OnceLock::new(),
            blake3: OnceLock::new(),
        }))
    }

    /// The identity a load uses, or `None` when the load must bypass every cache layer
    /// (session scoping on and no usable scope). With scoping off the scope is ignored.
    pub fn resolve(session_scoped: bool, url: &str, scope: Option<&Scope>) -> Option<Self> {
        match (session_scoped, scope) {
            (false, _) => Some(Self::unscoped(url)),
            (true, Some(scope)) => Some(Self::scoped(scope, url)),
            (true, None) => None,
        }
    }

    /// The identity string.
    pub fn as_str(&self) -> &str {
        &self.0.key
    }

    /// The scope digest this identity was built in (scoped mode), or `None` for an unscoped
    /// identity. It partitions the decoded cache's content index, so content dedup never
    /// crosses scopes.
    pub fn scope_digest(&self) -> Option<&str> {
        self.0.scoped.then(|| &self.0.key[..64])
    }

    /// Lowercase hex SHA-256 of the identity: the hash tag of the shared-cache keys and the
    /// name of the disk tier's entry and lock.
    pub fn sha256_hex(&self) -> &str {
        self.0.sha256_hex.get_or_init(|| {
            count_digest();
            sha256_hex(self.0.key.as_bytes())
        })
    }

    /// The blake3 digest of the identity: the key of the in-process maps (decoded cache,
    /// loads in flight, disk fill locks).
    pub fn digest(&self) -> [u8; 32] {
        *self.0.blake3.get_or_init(|| {
            count_digest();
            *blake3::hash(self.0.key.as_bytes()).as_bytes()
        })
    }

    /// How many identity digests (SHA-256 or blake3) this process has computed since the
    /// first call of this function, which starts the count: what tests count to hold a load
    /// to hashing its identity once per digest. A test seam: only with the feature
    /// `test-seams`.
    #[cfg(feature = "test-seams")]
    pub fn digests_computed() -> u64 {
        COUNTING.store(true, Ordering::Relaxed);
        DIGESTS_COMPUTED.load(Ordering::Relaxed)
    }
}

/// Whether digests are counted: off until a test asks, so a memory hit (one digest each)
/// never writes a process-wide cache line that every core's hits would contend for.
#[cfg(feature = "test-seams")]
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Identity digests computed while counting (see [`CacheIdentity::digests_computed`]).
#[cfg(feature = "test-seams")]
static DIGESTS_COMPUTED: AtomicU64 = AtomicU64::new(0);

/// Counts a digest while a test counts; compiled out of a default build.
fn count_digest() {
    #[cfg(feature = "test-seams")]
    if COUNTING.load(Ordering::Relaxed) {
        DIGESTS_COMPUTED.fetch_add(1, Ordering::Relaxed);
    }
}

// Compared and hashed as the identity string and its mode: the digests follow from them.
impl PartialEq for CacheIdentity {
    fn eq(&self, other: &Self) -> bool {
        (&self.0.key, self.0.scoped) == (&other.0.key, other.0.scoped)
    }
}

impl Eq for CacheIdentity {}

impl std::hash::Hash for CacheIdentity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.0.key, self.0.scoped).hash(state);
    }
}

impl fmt::Debug for CacheIdentity {
    // Identities hold URLs that may carry signed query strings: do not print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheIdentity({} bytes)", self.0.key.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://example.com/img.png";

    #[test]
    fn design_test_vectors() {
        assert_eq!(
            CacheIdentity::unscoped(URL).sha256_hex(),
            "48af8a9eb0210270d41f09ff164d1314c0e3f35027d980ac92abb4320c80f2a0"
        );
        let scope = Scope::new("session-a").unwrap();
        assert_eq!(
            scope.digest().as_str(),
            "fa57a52dbf08190218529730a3e99db6946c6c29220fb6e0551e21598b0b05db"
        );
        let id = CacheIdentity::scoped(&scope, URL);
        assert_eq!(
            id.as_str(),
            format!("fa57a52dbf08190218529730a3e99db6946c6c29220fb6e0551e21598b0b05db:{URL}")
        );
        assert_eq!(
            id.sha256_hex(),
            "0895b8e0928cf6a3a67afb3c3b31407b6ff56e8130ad550729782f8465e15fc0"
        );
    }

    #[test]
    fn resolve_modes() {
        let s = Scope::new("s").unwrap();
        assert_eq!(
            CacheIdentity::resolve(false, URL, Some(&s))
                .unwrap()
                .as_str(),
            URL
        );
        assert_eq!(
            CacheIdentity::resolve(false, URL, None).unwrap().as_str(),
            URL
        );
        assert!(CacheIdentity::resolve(true, URL, None).is_none());
        // Case and query are part of the identity.
        let a = CacheIdentity::unscoped("https://e.com/A.png?x=1");
        let b = CacheIdentity::unscoped("https://e.com/a.png?x=1");
        assert_ne!(a, b);
    }

    #[test]
    fn digests_are_computed_once_and_shared_by_clones() {
        let id = CacheIdentity::unscoped(URL);
        let copy = id.clone();
        assert!(std::ptr::eq(id.sha256_hex(), copy.sha256_hex()));
        assert_eq!(id.digest(), *blake3::hash(URL.as_bytes()).as_bytes());
        assert_eq!(copy.digest(), id.digest());
        // Equality and hashing are the string's and the mode's.
        let again = CacheIdentity::unscoped(URL);
        assert_eq!(again, id);
        let hash = |i: &CacheIdentity| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(i)
        };
        assert_eq!(hash(&again), hash(&id));
    }
}

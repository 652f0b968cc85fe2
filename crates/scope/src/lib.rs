//! Session scopes and cache identities for mmcache: which partition of every cache a load uses.
//!
//! A *scope* is the session id a client sends in a request header. With session scoping on,
//! every cache layer is partitioned by the SHA-256 of the scope, so one session never sees
//! another's entries. This crate does no I/O and knows nothing of HTTP clients or Redis.
//!
//! # Examples
//!
//! ```
//! use mmcache_scope::{CacheIdentity, Scope, scope_from_pairs};
//!
//! let scope = scope_from_pairs([("X-Dynamo-Session-Id", "  session-a ")]).unwrap();
//! assert_eq!(scope.as_str(), "session-a");
//! assert_eq!(
//!     scope.digest().as_str(),
//!     "fa57a52dbf08190218529730a3e99db6946c6c29220fb6e0551e21598b0b05db"
//! );
//!
//! // Scoped mode: the identity is `digest:url`; without a usable scope the caches are bypassed.
//! let id = CacheIdentity::resolve(true, "https://example.com/img.png", Some(&scope)).unwrap();
//! assert!(id.as_str().starts_with("fa57a52d"));
//! assert!(CacheIdentity::resolve(true, "https://example.com/img.png", None).is_none());
//!
//! // Unscoped mode: the URL as ai-dynamo 1.6.1 keys it (scheme and host lowercased, no fragment).
//! let id = CacheIdentity::resolve(false, "HTTPS://Example.com/img.png#x", Some(&scope)).unwrap();
//! assert_eq!(id.as_str(), "https://example.com/img.png");
//! ```
//!
//! # Rules
//!
//! - Headers, in order: `x-dynamo-session-id`; `x-claude-code-session-id` (replaced by a usable
//!   `x-claude-code-agent-id`: a child agent is its own scope); `thread-id` (Codex);
//!   `x-deepseek-harness-session-id` (DeepSeek harness); `x-session-id` (OpenCode), as Dynamo's
//!   `lib/llm/src/protocols/agents.rs` reads them.
//! - Names match case-insensitively; the first value of a header is used; the value is trimmed.
//! - A value that is absent, blank, longer than [`MAX_SCOPE_LEN`] bytes, or holds anything but
//!   printable ASCII (`0x20..=0x7E`) is unusable and falls through to the next header.
//! - Scoping partitions caches; it is **not** authentication.
//! - The URL part of an identity is ai-dynamo 1.6.1's key of the URL ([`dynamo_url_key`]), so
//!   Python and Rust workers of one fleet share entries.

mod content_key;
mod digest;
mod embedding_key;
mod identity;
mod session;
mod url_key;

pub use content_key::ContentKey;
pub use digest::{digest_hex, sha256_hex};
pub use embedding_key::{EmbeddingKey, EmbeddingKeyInput};
pub use identity::CacheIdentity;
pub use session::{
    CLAUDE_CODE_AGENT_HEADER, MAX_SCOPE_LEN, SESSION_HEADERS, Scope, ScopeDigest,
    scope_from_headers, scope_from_pairs,
};
pub use url_key::dynamo_url_key;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_spelled_in_lowercase_hex() {
        // FIPS 180-2's SHA-256 test vector.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        let mut digest = [0u8; 32];
        digest[0] = 0xab;
        digest[31] = 0x0f;
        assert_eq!(&digest_hex(&digest)[..4], "ab00");
        assert_eq!(&digest_hex(&digest)[60..], "000f");
    }

    #[test]
    fn digest_is_of_the_trimmed_scope() {
        let a = Scope::new("\t session-a  ").unwrap();
        assert_eq!(a.as_str(), "session-a");
        assert_eq!(a.digest(), Scope::new("session-a").unwrap().digest());
    }

    #[test]
    fn unusable_values() {
        for bad in ["", "   ", "\t", "caf\u{e9}", "a\u{7f}b", "a\nb", "a\0b"] {
            assert!(Scope::new(bad).is_none(), "{bad:?} must be unusable");
        }
        assert!(Scope::from_bytes(&[0xff, 0x41]).is_none());
        assert!(Scope::new(&"a".repeat(MAX_SCOPE_LEN)).is_some());
        assert!(Scope::new(&"a".repeat(MAX_SCOPE_LEN + 1)).is_none());
        // Interior spaces are printable ASCII and kept.
        assert_eq!(Scope::new(" a b ").unwrap().as_str(), "a b");
    }

    #[test]
    fn precedence() {
        let pick = |pairs: &[(&str, &str)]| {
            scope_from_pairs(pairs.iter().copied()).map(|s| s.as_str().to_owned())
        };
        assert_eq!(pick(&[]), None);
        assert_eq!(
            pick(&[
                ("x-session-id", "o"),
                ("thread-id", "t"),
                ("X-Dynamo-Session-Id", "d")
            ]),
            Some("d".into())
        );
        assert_eq!(
            pick(&[("x-session-id", "o"), ("thread-id", "t")]),
            Some("t".into())
        );
        assert_eq!(pick(&[("x-session-id", "o")]), Some("o".into()));
        // Blank dynamo id falls through.
        assert_eq!(
            pick(&[("x-dynamo-session-id", "  "), ("x-session-id", "o")]),
            Some("o".into())
        );
        // Claude Code: agent id replaces the session id, only when non-blank.
        assert_eq!(
            pick(&[("x-claude-code-session-id", "cc"), ("thread-id", "t")]),
            Some("cc".into())
        );
        assert_eq!(
            pick(&[
                ("x-claude-code-agent-id", "agent"),
                ("x-claude-code-session-id", "cc")
            ]),
            Some("agent".into())
        );
        assert_eq!(
            pick(&[
                ("x-claude-code-agent-id", " "),
                ("x-claude-code-session-id", "cc")
            ]),
            Some("cc".into())
        );
        // An agent id alone is not a session.
        assert_eq!(
            pick(&[("x-claude-code-agent-id", "agent"), ("thread-id", "t")]),
            Some("t".into())
        );
        // Dynamo wins over Claude Code.
        assert_eq!(
            pick(&[
                ("x-claude-code-agent-id", "agent"),
                ("x-claude-code-session-id", "cc"),
                ("x-dynamo-session-id", "d")
            ]),
            Some("d".into())
        );
        // First value of a repeated header wins, even when the second is usable.
        assert_eq!(
            pick(&[
                ("thread-id", " "),
                ("THREAD-ID", "t2"),
                ("x-session-id", "o")
            ]),
            Some("o".into())
        );
    }

    #[test]
    fn deepseek_harness_header_between_codex_and_opencode() {
        // Dynamo main's agents.rs: ... thread-id, x-deepseek-harness-session-id, x-session-id.
        let pick = |pairs: &[(&str, &str)]| {
            scope_from_pairs(pairs.iter().copied()).map(|s| s.as_str().to_owned())
        };
        let deepseek = "x-deepseek-harness-session-id";
        assert_eq!(pick(&[(deepseek, " ds ")]), Some("ds".into()));
        assert_eq!(
            pick(&[
                ("x-session-id", "o"),
                ("X-DeepSeek-Harness-Session-Id", "ds")
            ]),
            Some("ds".into())
        );
        assert_eq!(
            pick(&[(deepseek, "ds"), ("thread-id", "t")]),
            Some("t".into())
        );
        // Blank or non-ASCII falls through to OpenCode's header.
        assert_eq!(
            pick(&[(deepseek, "  "), ("x-session-id", "o")]),
            Some("o".into())
        );
        let mut map = http::HeaderMap::new();
        map.append("x-session-id", http::HeaderValue::from_static("o"));
        map.append(deepseek, http::HeaderValue::from_static("ds"));
        assert_eq!(scope_from_headers(&map).unwrap().as_str(), "ds");
        map.append("thread-id", http::HeaderValue::from_static("t"));
        assert_eq!(scope_from_headers(&map).unwrap().as_str(), "t");
    }

    #[test]
    fn header_map_matches_pairs() {
        let mut map = http::HeaderMap::new();
        map.append("Thread-Id", http::HeaderValue::from_static("t"));
        map.append(
            "x-claude-code-session-id",
            http::HeaderValue::from_static("cc"),
        );
        map.append(
            "X-Claude-Code-Agent-Id",
            http::HeaderValue::from_static("child"),
        );
        assert_eq!(scope_from_headers(&map).unwrap().as_str(), "child");

        let mut map = http::HeaderMap::new();
        map.append(
            "x-dynamo-session-id",
            http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        map.append("x-session-id", http::HeaderValue::from_static("ok"));
        assert_eq!(scope_from_headers(&map).unwrap().as_str(), "ok");
    }

    #[test]
    fn hostile_headers_are_cheap_and_unusable() {
        let huge = "s".repeat(1 << 20);
        let many: Vec<(String, String)> = (0..10_000)
            .map(|i| (format!("x-junk-{i}"), "v".to_owned()))
            .chain([("x-dynamo-session-id".to_owned(), huge)])
            .collect();
        assert!(scope_from_pairs(many.iter().map(|(n, v)| (n.as_str(), v.as_str()))).is_none());
    }

    #[test]
    fn property_order_of_unrelated_headers_and_case_do_not_matter() {
        // Seeded random header sets: the pick depends only on the first value of each session
        // header, never on unrelated headers, their order, or the case of names.
        let names = [
            "x-dynamo-session-id",
            "x-claude-code-session-id",
            "x-claude-code-agent-id",
            "thread-id",
            "x-deepseek-harness-session-id",
            "x-session-id",
        ];
        let values = ["", "  ", "a", " b ", "caf\u{e9}", "c d", "z"];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for _ in 0..2000 {
            let mut pairs: Vec<(String, String)> = Vec::new();
            for _ in 0..next(8) {
                let name = names[next(names.len())];
                let name = if next(2) == 0 {
                    name.to_ascii_uppercase()
                } else {
                    name.to_owned()
                };
                pairs.push((name, values[next(values.len())].to_owned()));
                if next(3) == 0 {
                    pairs.push((format!("x-other-{}", next(100)), "noise".to_owned()));
                }
            }
            let picked = scope_from_pairs(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            // The same headers, unrelated ones moved to the front, names lowercased.
            let mut reordered: Vec<(String, String)> = pairs
                .iter()
                .filter(|(n, _)| n.starts_with("x-other"))
                .cloned()
                .collect();
            reordered.extend(
                pairs
                    .iter()
                    .filter(|(n, _)| !n.starts_with("x-other"))
                    .map(|(n, v)| (n.to_ascii_lowercase(), v.clone())),
            );
            let again = scope_from_pairs(reordered.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            assert_eq!(picked, again, "{pairs:?}");
            // Same answer through an http::HeaderMap.
            let mut map = http::HeaderMap::new();
            for (n, v) in &pairs {
                let name = http::HeaderName::from_bytes(n.as_bytes()).unwrap();
                map.append(name, http::HeaderValue::from_bytes(v.as_bytes()).unwrap());
            }
            assert_eq!(scope_from_headers(&map), picked, "{pairs:?}");
            if let Some(scope) = &picked {
                assert!(!scope.as_str().is_empty() && scope.as_str() == scope.as_str().trim());
            }
        }
    }

    #[test]
    fn debug_hides_secrets() {
        let s = Scope::new("secret-session").unwrap();
        assert!(!format!("{s:?}").contains("secret"));
        let id = CacheIdentity::unscoped("https://e.com/?token=secret");
        assert!(!format!("{id:?}").contains("secret"));
    }
}

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

//! Session scopes: the session id a request's headers carry, validated, and its digest.

use std::fmt;
use std::sync::Arc;

use crate::digest::sha256_hex;

/// Longest usable scope, in bytes after trimming. Longer values are treated as absent, so a
/// hostile header costs one length check.
pub const MAX_SCOPE_LEN: usize = 256;

/// Session headers in precedence order (lowercase). The Claude Code agent id is handled
/// together with the Claude Code session id; see [`CLAUDE_CODE_AGENT_HEADER`].
pub const SESSION_HEADERS: [&str; 5] = [
    "x-dynamo-session-id",
    "x-claude-code-session-id",
    "thread-id",
    "x-deepseek-harness-session-id",
    "x-session-id",
];

/// The Claude Code sub-agent header: when usable, it replaces a usable
/// `x-claude-code-session-id` (a child agent is its own scope).
pub const CLAUDE_CODE_AGENT_HEADER: &str = "x-claude-code-agent-id";

const CLAUDE_CODE_SESSION_HEADER: &str = "x-claude-code-session-id";

/// A validated session scope: trimmed, non-blank, printable ASCII, at most [`MAX_SCOPE_LEN`] bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Scope(Arc<str>);

impl Scope {
    /// Validates a raw header value: trims it and returns `None` when it is unusable.
    pub fn new(raw: &str) -> Option<Self> {
        Self::from_bytes(raw.as_bytes())
    }

    /// Like [`Scope::new`], from raw header bytes (non-ASCII bytes make it unusable).
    pub fn from_bytes(raw: &[u8]) -> Option<Self> {
        let trimmed = raw.trim_ascii();
        if trimmed.is_empty()
            || trimmed.len() > MAX_SCOPE_LEN
            || !trimmed.iter().all(|b| (0x20..=0x7e).contains(b))
        {
            return None;
        }
        // All bytes are ASCII, so this cannot fail.
        std::str::from_utf8(trimmed)
            .ok()
            .map(|s| Self(Arc::from(s)))
    }

    /// The trimmed scope.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Lowercase hex SHA-256 of the trimmed scope (compatible with the Python implementation).
    pub fn digest(&self) -> ScopeDigest {
        ScopeDigest(sha256_hex(self.0.as_bytes()))
    }
}

impl fmt::Debug for Scope {
    // A scope may be a secret-ish session id: keep it out of debug output and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scope(<redacted>)")
    }
}

/// The lowercase hex SHA-256 of a scope: what partitions the caches.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ScopeDigest(String);

impl ScopeDigest {
    /// The 64 hex characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScopeDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Picks the session scope from `(name, value)` header pairs.
///
/// For each header name the first pair with that name (case-insensitive) is its value.
pub fn scope_from_pairs<I, N, V>(headers: I) -> Option<Scope>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut firsts: [Option<V>; SESSION_HEADERS.len() + 1] = std::array::from_fn(|_| None);
    for (name, value) in headers {
        if let Some(i) = header_slot(name.as_ref(), true) {
            firsts[i].get_or_insert(value);
        }
    }
    pick(|name| {
        let i = header_slot(name, false)?;
        firsts[i].as_ref().map(AsRef::as_ref)
    })
}

/// Index of a session-relevant header in `SESSION_HEADERS` + the agent header.
fn header_slot(name: &str, ignore_case: bool) -> Option<usize> {
    SESSION_HEADERS
        .iter()
        .chain(std::iter::once(&CLAUDE_CODE_AGENT_HEADER))
        .position(|h| {
            if ignore_case {
                h.eq_ignore_ascii_case(name)
            } else {
                *h == name
            }
        })
}

/// Picks the session scope from an [`http::HeaderMap`].
pub fn scope_from_headers(headers: &http::HeaderMap) -> Option<Scope> {
    // HeaderMap names are already lowercase; `get` returns the first value.
    pick(|name| headers.get(name).map(|v| v.as_bytes()))
}

/// The precedence rules, over a lookup of a header's first value by lowercase name.
fn pick<'v>(first_value: impl Fn(&str) -> Option<&'v [u8]>) -> Option<Scope> {
    for name in SESSION_HEADERS {
        let Some(scope) = first_value(name).and_then(Scope::from_bytes) else {
            continue;
        };
        if name == CLAUDE_CODE_SESSION_HEADER
            && let Some(agent) = first_value(CLAUDE_CODE_AGENT_HEADER).and_then(Scope::from_bytes)
        {
            return Some(agent);
        }
        return Some(scope);
    }
    None
}

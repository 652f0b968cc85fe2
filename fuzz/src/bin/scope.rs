//! Fuzz target: session-scope headers (`scope_from_pairs`, `scope_from_headers`) and the cache
//! identity built from the scope.
//!
//! Input: header lines `name:value` (`\n`-separated; the name is read as UTF-8, lossily, the
//! value as raw bytes); a line without `:` is the URL. For every input: no panic; the pick
//! equals a plain model of the documented rules (precedence of `SESSION_HEADERS`, the Claude
//! Code agent id replacing its session id, names matched case-insensitively, first value of a
//! name, trimmed, non-blank, printable ASCII, at most `MAX_SCOPE_LEN` bytes); an
//! `http::HeaderMap` of the same headers picks the same scope; the scoped identity is
//! `sha256hex(scope) + ":" + dynamo_url_key(url)` and differs from the unscoped one.

use mmcache_scope::{
    CLAUDE_CODE_AGENT_HEADER, CacheIdentity, MAX_SCOPE_LEN, SESSION_HEADERS, Scope,
    scope_from_headers, scope_from_pairs, sha256_hex,
};

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let mut pairs: Vec<(String, &[u8])> = Vec::new();
        let mut url = "https://example.com/a.png".to_owned();
        for line in data.split(|&b| b == b'\n') {
            match line.iter().position(|&b| b == b':') {
                Some(i) => pairs.push((
                    String::from_utf8_lossy(&line[..i]).into_owned(),
                    &line[i + 1..],
                )),
                None => url = String::from_utf8_lossy(line).into_owned(),
            }
        }
        check(&pairs, &url);
    });
}

/// The rules as the docs state them, written out plainly.
fn model(pairs: &[(String, &[u8])]) -> Option<String> {
    let first = |name: &str| {
        pairs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    let usable = |v: &[u8]| {
        let t = v.trim_ascii();
        let ok =
            !t.is_empty() && t.len() <= MAX_SCOPE_LEN && t.iter().all(|b| (0x20..0x7f).contains(b));
        ok.then(|| String::from_utf8(t.to_vec()).expect("ASCII"))
    };
    for name in SESSION_HEADERS {
        let Some(scope) = first(name).and_then(usable) else {
            continue;
        };
        if name == "x-claude-code-session-id"
            && let Some(agent) = first(CLAUDE_CODE_AGENT_HEADER).and_then(usable)
        {
            return Some(agent);
        }
        return Some(scope);
    }
    None
}

fn check(pairs: &[(String, &[u8])], url: &str) {
    let picked = scope_from_pairs(pairs.iter().map(|(n, v)| (n.as_str(), *v)));
    let expected = model(pairs);
    assert_eq!(picked.as_ref().map(Scope::as_str), expected.as_deref());

    // The same headers in a HeaderMap, when every one is a valid header there.
    let mut map = http::HeaderMap::new();
    let mut all_valid = true;
    for (n, v) in pairs {
        match (
            http::HeaderName::from_bytes(n.as_bytes()),
            http::HeaderValue::from_bytes(v),
        ) {
            (Ok(n), Ok(v)) => {
                map.append(n, v);
            }
            _ => all_valid = false,
        }
    }
    if all_valid {
        let from_map = scope_from_headers(&map);
        assert_eq!(from_map.as_ref().map(Scope::as_str), expected.as_deref());
    }

    let Some(scope) = picked else {
        assert!(CacheIdentity::resolve(true, url, None).is_none());
        return;
    };
    assert_eq!(Scope::new(scope.as_str()).as_ref(), Some(&scope));
    let digest = scope.digest();
    assert_eq!(digest.as_str(), sha256_hex(scope.as_str().as_bytes()));
    assert!(
        digest.as_str().len() == 64
            && digest
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let id = CacheIdentity::resolve(true, url, Some(&scope)).expect("a scope gives an identity");
    assert_eq!(
        id.as_str(),
        format!("{digest}:{}", mmcache_scope::dynamo_url_key(url))
    );
    assert_eq!(id, CacheIdentity::scoped(&scope, url));
    assert_ne!(id, CacheIdentity::unscoped(url));
    assert_eq!(
        CacheIdentity::resolve(false, url, Some(&scope)),
        Some(CacheIdentity::unscoped(url))
    );
}

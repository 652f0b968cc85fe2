//! The cache key ai-dynamo 1.6.1 gives a URL, so a mixed fleet shares entries.
//!
//! Dynamo keys an http(s) URL by `_normalize_http_url_key(validate_media_url(url))`
//! (`dynamo/common/multimodal/image_loader.py`); `validate_media_url` returns such a URL
//! unchanged. That function is Python's `urlsplit`, the scheme and the host lowercased (an IPv6
//! zone id keeps its case), the fragment emptied, and `geturl()`. This module reproduces those
//! steps on the string, as CPython 3.11 does them; it never parses the URL into anything else (a
//! URL parser would add `/` to an empty path, drop default ports, resolve `..` and
//! percent-encode, each of which would change keys the fleet already holds).
//!
//! One deliberate difference: a backslash after the host, in a URL Dynamo cannot fetch (see
//! `push_netloc`). Where Python raises instead (an unbalanced or invalid `[...]` host, a host
//! whose NFKC form holds `/?#@:`), Dynamo refuses the URL before keying it; here the same steps
//! run without the check, so any string gives a key. The vectors in `tests/dynamo_url_keys.tsv`
//! come from Dynamo's own function (`tests/dynamo/make_url_keys.py`).

use std::borrow::Cow;

/// Characters `urlsplit` strips from the start of a URL (C0 controls and space).
fn is_c0_or_space(c: char) -> bool {
    c <= ' '
}

/// Schemes for which `urlunsplit` writes `//` even when the host is empty (CPython 3.11's
/// `uses_netloc`). Dynamo keys only URLs with a host, where this list does not matter.
const USES_NETLOC: [&str; 25] = [
    "ftp", "http", "gopher", "nntp", "telnet", "imap", "wais", "file", "mms", "https", "shttp",
    "snews", "prospero", "rtsp", "rtspu", "rtsps", "rsync", "svn", "svn+ssh", "sftp", "nfs", "git",
    "git+ssh", "ws", "wss",
];

/// The key ai-dynamo 1.6.1 gives `url` (its `_normalize_http_url_key`): scheme and host
/// lowercased, an IPv6 zone id kept as is, the fragment dropped, an empty query dropped, and
/// everything else (userinfo, port, path, query, percent-escapes, `..`) as given. Leading
/// control characters and spaces, and every tab, CR and LF, go first, as in `urlsplit`.
///
/// Total: any string gives a key, without panicking.
///
/// ```
/// use mmcache_scope::dynamo_url_key;
///
/// assert_eq!(dynamo_url_key("HTTPS://Example.COM/A.png?Q=1#top"), "https://example.com/A.png?Q=1");
/// assert_eq!(dynamo_url_key("http://[FE80::1%25Eth0]:80/a?#"), "http://[fe80::1%25Eth0]:80/a");
/// assert_eq!(dynamo_url_key("https://example.com"), "https://example.com");
/// ```
pub fn dynamo_url_key(url: &str) -> String {
    let url = url.trim_start_matches(is_c0_or_space);
    // urlsplit removes tab, CR and LF wherever they are (WHATWG's "unsafe bytes").
    let url: Cow<'_, str> = if url.contains(['\t', '\r', '\n']) {
        Cow::Owned(url.replace(['\t', '\r', '\n'], ""))
    } else {
        Cow::Borrowed(url)
    };
    let (scheme, rest) = split_scheme(&url);
    let (netloc, rest) = match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find(['/', '?', '#']).unwrap_or(after.len());
            (Some(&after[..end]), &after[end..])
        }
        None => (None, rest),
    };
    // The fragment goes first (it may hold `?`), then the query; both lose their delimiter.
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let netloc = netloc.unwrap_or("");

    // urlunsplit, with the scheme lowercased, the host normalised and no fragment.
    let mut out = String::with_capacity(url.len());
    if !scheme.is_empty() {
        out.push_str(&scheme);
        out.push(':');
    }
    if !netloc.is_empty() || (USES_NETLOC.contains(&&*scheme) && !path.starts_with("//")) {
        out.push_str("//");
        push_netloc(&mut out, netloc);
        if !path.is_empty() && !path.starts_with('/') {
            out.push('/');
        }
    }
    out.push_str(path);
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// `urlsplit`'s scheme: the text before the first `:` when it starts with an ASCII letter and
/// holds only letters, digits, `+`, `-` and `.`; lowercased.
fn split_scheme(url: &str) -> (Cow<'_, str>, &str) {
    if let Some(i) = url.find(':')
        && i > 0
        && url.as_bytes()[0].is_ascii_alphabetic()
        && url.as_bytes()[..i]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        let scheme = &url[..i];
        let scheme = if scheme.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(scheme.to_ascii_lowercase())
        } else {
            Cow::Borrowed(scheme)
        };
        return (scheme, &url[i + 1..]);
    }
    (Cow::Borrowed(""), url)
}

/// Dynamo's netloc rule: userinfo (up to the last `@`) as given; a `[...]` host lowercased up
/// to its `%` zone id, the port after `]` as given; any other host-and-port lowercased.
///
/// One deliberate difference: a backslash ends the authority for our downloader (as for
/// browsers), not for `urlsplit`. Python would lowercase what follows it, so
/// `https://h\A.png` and `https://h\a.png`, two paths for us, would share a key. Dynamo never
/// caches such a URL (its host would be `h\a.png`, which does not resolve), so there is no key
/// to share: the rule applies up to the first backslash and the rest stays as given.
fn push_netloc(out: &mut String, netloc: &str) {
    let (netloc, after_backslash) = netloc.split_at(netloc.find('\\').unwrap_or(netloc.len()));
    push_authority(out, netloc);
    out.push_str(after_backslash);
}

fn push_authority(out: &mut String, netloc: &str) {
    let (userinfo, hostport) = match netloc.rfind('@') {
        Some(at) => netloc.split_at(at + 1),
        None => ("", netloc),
    };
    out.push_str(userinfo);
    if hostport.starts_with('[')
        && let Some(close) = hostport.find(']')
    {
        let (host, port) = hostport.split_at(close + 1);
        match host.find('%') {
            Some(zone) => {
                push_lower(out, &host[..zone]);
                out.push_str(&host[zone..]);
            }
            None => push_lower(out, host),
        }
        out.push_str(port);
    } else {
        push_lower(out, hostport);
    }
}

/// Python's `str.lower()`: full Unicode lowercase mapping (`İ` → `i̇`, final sigma in context),
/// which Rust's `to_lowercase` implements too.
fn push_lower(out: &mut String, s: &str) {
    if s.is_ascii() {
        out.extend(s.chars().map(|c| c.to_ascii_lowercase()));
    } else {
        out.push_str(&s.to_lowercase());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_when_already_a_key() {
        for url in [
            "https://example.com/img.png",
            "https://example.com",
            "https://example.com/a/../b?X=1",
            "http://example.com:80/a",
        ] {
            assert_eq!(dynamo_url_key(url), url);
        }
    }

    #[test]
    fn scheme_rules() {
        assert_eq!(dynamo_url_key("HTTP://A/b"), "http://a/b");
        // Not a scheme: starts with a digit, or holds a character outside the scheme set.
        assert_eq!(dynamo_url_key("1HTTP://A/b"), "1HTTP://A/b");
        assert_eq!(dynamo_url_key("HT_TP://A/b"), "HT_TP://A/b");
        assert_eq!(dynamo_url_key(":x"), ":x");
        // Empty host: `//` written back for http(s), as urlunsplit does.
        assert_eq!(dynamo_url_key("HTTPS:a"), "https:///a");
        assert_eq!(dynamo_url_key("mailto:X@Y"), "mailto:X@Y");
    }

    #[test]
    fn netloc_rules() {
        assert_eq!(
            dynamo_url_key("http://U@[FE80::A%25X]:8/p"),
            "http://U@[fe80::a%25X]:8/p"
        );
        assert_eq!(dynamo_url_key("http://[FE80::A/p"), "http://[fe80::a/p");
        assert_eq!(dynamo_url_key("http://A@B@C/p"), "http://A@B@c/p");
        assert_eq!(dynamo_url_key("http://Ü.de?#"), "http://ü.de");
        // A backslash ends the host for the downloader: what follows keeps its case.
        assert_eq!(
            dynamo_url_key("https://U@Ex.com\\A@B/C"),
            "https://U@ex.com\\A@B/C"
        );
        assert_ne!(
            dynamo_url_key("https://h\\A.png"),
            dynamo_url_key("https://h\\a.png")
        );
    }
}

//! Fuzz target: the origin's URL policy (`policy::check_url`, `DomainAllowlist`) on an
//! arbitrary URL string.
//!
//! Input: the URL on the first line; each further line is an allowed-media-domains entry.
//! For every input: no panic; a URL that passes without internal access is `https`, carries no
//! credentials, has a host, and that host is a name (checked after resolution) or a public
//! address; anything that passes without internal access passes with it; the URL the policy
//! returns re-parses to itself with the same verdict (what the HTTP client is handed is what
//! was checked); an allowlist holding exactly the URL's host allows it, and
//! `*.` plus that host does not.

use mmcache_fuzz::first_line;
use mmcache_origin::DomainAllowlist;
use mmcache_origin::policy::{check_url, is_internal};
use url::Host;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let (raw, entries) = first_line(data);
        let Ok(raw) = std::str::from_utf8(raw) else {
            return;
        };
        check(raw);
        if let Ok(entries) = std::str::from_utf8(entries) {
            check_allowlist(raw, entries);
        }
    });
}

fn check(raw: &str) {
    let public = check_url(raw, false);
    let internal = check_url(raw, true);
    if let Ok(url) = &public {
        assert_eq!(url.scheme(), "https");
        assert!(url.username().is_empty() && url.password().is_none());
        match url.host() {
            None => panic!("a URL without a host passed"),
            Some(Host::Domain(d)) => assert!(d.parse::<std::net::IpAddr>().is_err()),
            Some(Host::Ipv4(ip)) => assert!(!is_internal(ip.into()), "{ip} passed"),
            Some(Host::Ipv6(ip)) => assert!(!is_internal(ip.into()), "{ip} passed"),
        }
        assert!(internal.is_ok(), "allowing internal access refused {raw:?}");
    }
    for (allow, verdict) in [(false, &public), (true, &internal)] {
        if let Ok(url) = verdict {
            let again = check_url(url.as_str(), allow).expect("the checked URL re-parses");
            assert_eq!(again.as_str(), url.as_str(), "serialisation is not stable");
        }
    }
}

fn check_allowlist(raw: &str, entries: &str) {
    let Ok(url) = check_url(raw, true) else {
        return;
    };
    let lines: Vec<&str> = entries.lines().collect();
    if let Ok(list) = DomainAllowlist::new(&lines) {
        // Deciding twice gives the same answer (no hidden state).
        assert_eq!(list.allows(&url), list.allows(&url));
    }
    let Some(host) = url.host_str() else {
        return;
    };
    // An entry may refuse a host the URL parser accepts (`a*b.example`): a start-up error
    // for the operator, never a wider allowlist.
    if let Ok(exact) = DomainAllowlist::new(&[host]) {
        assert!(
            exact.allows(&url),
            "an allowlist of {host:?} refused its own URL"
        );
    }
    if let (Some(Host::Domain(_)), Ok(sub)) =
        (url.host(), DomainAllowlist::new(&[format!("*.{host}")]))
    {
        assert!(!sub.allows(&url), "*.{host} allowed {host} itself");
    }
}

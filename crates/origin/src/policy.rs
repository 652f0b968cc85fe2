//! The URL policy: which URLs and addresses a worker may fetch.
//!
//! Without internal access only `https` URLs to public addresses pass. IP literals are checked
//! here; hostnames are checked after DNS resolution by the client's resolver (see
//! [`crate::Origin`]), which hands the checked addresses to the connector, so a second DNS answer
//! cannot swap in an internal address (no DNS-rebinding gap).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

use crate::error::PolicyViolation;

/// Parses `raw` and checks scheme, credentials and literal addresses.
///
/// # Errors
///
/// A [`PolicyViolation`] saying what was refused.
pub fn check_url(raw: &str, allow_internal: bool) -> Result<Url, PolicyViolation> {
    let url = parse(raw)?;
    check_parsed(&url, allow_internal)?;
    Ok(url)
}

/// Parses `raw`; a bare path ("/etc/passwd", "img.png") has no scheme and counts as a local
/// file.
///
/// # Errors
///
/// [`PolicyViolation::LocalFile`] or [`PolicyViolation::InvalidUrl`].
pub fn parse(raw: &str) -> Result<Url, PolicyViolation> {
    Url::parse(raw).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => PolicyViolation::LocalFile,
        e => PolicyViolation::InvalidUrl(e.to_string()),
    })
}

/// Checks an already parsed URL (used for every redirect hop).
///
/// # Errors
///
/// A [`PolicyViolation`] saying what was refused.
pub fn check_parsed(url: &Url, allow_internal: bool) -> Result<(), PolicyViolation> {
    check_parsed_with(
        url,
        allow_internal,
        false,
        false,
        &DomainAllowlist::default(),
    )
}

/// Hosts an operator allows images from (`MMCACHE_ALLOWED_MEDIA_DOMAINS`, like vLLM's
/// `--allowed-media-domains`). Empty: every host.
///
/// Matching rules: an entry `example.com` allows exactly that host; `*.example.com` allows
/// every subdomain at any depth (`a.example.com`, `a.b.example.com`) but not `example.com`
/// itself, which needs an entry of its own. Entries are read by the URL parser's host parser,
/// as URL hosts are, so an entry matches the hosts spelled like it. Case and one trailing dot
/// (the root label) do not matter; a name with more trailing dots (`a.example..`) is a name of
/// its own, as the URL parser keeps it;
/// internationalised names match in either spelling (entries are IDNA-encoded like URL hosts).
/// An IP address entry allows that address as a URL host. The list is checked on every
/// redirect hop and before any cache layer answers; internal addresses stay refused unless
/// internal access is allowed too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainAllowlist {
    exact: Vec<String>,
    /// `.example.com` for `*.example.com`.
    suffixes: Vec<String>,
    ips: Vec<IpAddr>,
}

impl DomainAllowlist {
    /// Parses entries (as given to the setting, already split).
    ///
    /// # Errors
    ///
    /// The first entry that is not a host name, `*.` plus a host name, or an IP address.
    pub fn new<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut list = Self::default();
        for raw in entries {
            let entry = raw.as_ref().trim();
            let bad = || format!("`{entry}` is not a host name, *.host name or IP address");
            if entry.is_empty() {
                continue;
            }
            let (wild, name) = match entry.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, entry),
            };
            if name.is_empty() || name.contains(['*', '/', '@', '?', '#']) {
                return Err(bad());
            }
            let bracketless = name.trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = bracketless.parse::<IpAddr>() {
                if wild {
                    return Err(bad());
                }
                list.ips.push(ip);
                continue;
            }
            match Host::parse(name).map_err(|_| bad())? {
                Host::Domain(d) => {
                    let d = root_label_dropped(&d);
                    if d.is_empty() {
                        return Err(bad());
                    }
                    if wild {
                        list.suffixes.push(format!(".{d}"));
                    } else {
                        list.exact.push(d.to_owned());
                    }
                }
                // `10.0.0.1.`: the parser reads an address, as it would in a URL.
                Host::Ipv4(v4) if !wild => list.ips.push(IpAddr::V4(v4)),
                Host::Ipv6(v6) if !wild => list.ips.push(IpAddr::V6(v6)),
                _ => return Err(bad()),
            }
        }
        Ok(list)
    }

    /// True when no entry is set (every host allowed).
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.suffixes.is_empty() && self.ips.is_empty()
    }

    /// Whether `url`'s host is allowed.
    pub fn allows(&self, url: &Url) -> bool {
        if self.is_empty() {
            return true;
        }
        match url.host() {
            Some(Host::Domain(d)) => {
                let d = root_label_dropped(d).to_ascii_lowercase();
                self.exact.contains(&d) || self.suffixes.iter().any(|s| d.ends_with(s.as_str()))
            }
            Some(Host::Ipv4(v4)) => self.ips.contains(&IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.ips.contains(&IpAddr::V6(v6)),
            None => false,
        }
    }
}

/// A parsed name without its one trailing dot (the root label), if it has one.
fn root_label_dropped(d: &str) -> &str {
    d.strip_suffix('.').unwrap_or(d)
}

/// [`check_parsed`] where `allow_http` allows `http` to public addresses, `loopback_is_public`
/// treats 127.0.0.0/8 as public and allows `http` (for tests of the internal-address refusals,
/// which need a reachable first hop), and the allowed media domains apply.
pub(crate) fn check_parsed_with(
    url: &Url,
    allow_internal: bool,
    allow_http: bool,
    loopback_is_public: bool,
    allowlist: &DomainAllowlist,
) -> Result<(), PolicyViolation> {
    match url.scheme() {
        "https" => {}
        "http" if allow_internal || allow_http || loopback_is_public => {}
        "file" => return Err(PolicyViolation::LocalFile),
        other => return Err(PolicyViolation::Scheme(other.to_owned())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(PolicyViolation::Userinfo);
    }
    if !allowlist.allows(url) {
        let host = url.host_str().unwrap_or_default().to_owned();
        return Err(PolicyViolation::DomainNotAllowed(host));
    }
    let ip = match url.host() {
        None => return Err(PolicyViolation::NoHost),
        Some(Host::Domain(_)) => return Ok(()), // checked after resolution
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
    };
    check_ip_with(ip, allow_internal, loopback_is_public)
}

/// Refuses an internal address unless internal access is allowed.
///
/// # Errors
///
/// [`PolicyViolation::InternalAddress`] for an internal `ip` without internal access.
pub fn check_ip(ip: IpAddr, allow_internal: bool) -> Result<(), PolicyViolation> {
    check_ip_with(ip, allow_internal, false)
}

pub(crate) fn check_ip_with(
    ip: IpAddr,
    allow_internal: bool,
    loopback_is_public: bool,
) -> Result<(), PolicyViolation> {
    if loopback_is_public && ip.is_loopback() {
        return Ok(());
    }
    if !allow_internal && is_internal(ip) {
        return Err(PolicyViolation::InternalAddress(ip));
    }
    Ok(())
}

/// True for addresses a public fetch must never reach: unspecified, loopback, private,
/// CGNAT, link-local (cloud metadata), benchmarking, documentation, multicast and reserved
/// IPv4; and for IPv6 the same plus ULA (AWS's `fd00:ec2::254` metadata), site-local,
/// Teredo, and any IPv4-mapped, IPv4-compatible, NAT64 or 6to4 address whose embedded IPv4
/// address is internal.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0                                  // "this network"
        || a == 10                          // private
        || (a == 100 && (64..128).contains(&b)) // CGNAT (Alibaba metadata 100.100.100.200)
        || a == 127                         // loopback
        || (a == 169 && b == 254)           // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0)   // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)   // TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 192 && b == 168)           // private
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224 // multicast, reserved, broadcast
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() {
        return true;
    }
    // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d
    if seg[..5] == [0; 5] && (seg[5] == 0xffff || seg[5] == 0) {
        return is_internal_v4(embedded_v4(seg[6], seg[7]));
    }
    // NAT64: 64:ff9b::/96 (well-known) and 64:ff9b:1::/48 (local use, always internal)
    if seg[0] == 0x64 && seg[1] == 0xff9b {
        return seg[2] == 1 || is_internal_v4(embedded_v4(seg[6], seg[7]));
    }
    // 6to4: 2002:AABB:CCDD::/48 embeds AA.BB.CC.DD
    if seg[0] == 0x2002 {
        return is_internal_v4(embedded_v4(seg[1], seg[2]));
    }
    (seg[0] & 0xfe00) == 0xfc00            // ULA fc00::/7
        || (seg[0] & 0xffc0) == 0xfe80     // link-local fe80::/10
        || (seg[0] & 0xffc0) == 0xfec0     // site-local fec0::/10
        || (seg[0] & 0xff00) == 0xff00     // multicast
        || (seg[0] == 0x2001 && seg[1] == 0) // Teredo: hides an IPv4 peer
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || (seg[0] == 0x0100 && seg[1..4] == [0, 0, 0]) // discard-only 100::/64
}

fn embedded_v4(hi: u16, lo: u16) -> Ipv4Addr {
    let [a, b] = hi.to_be_bytes();
    let [c, d] = lo.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn internal(s: &str) -> bool {
        is_internal(s.parse().unwrap())
    }

    #[test]
    fn internal_ranges() {
        for ip in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "100.100.100.200",
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.0.192",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378::1",
            "2001:db8::1",
        ] {
            assert!(internal(ip), "{ip} must be internal");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
        ] {
            assert!(!internal(ip), "{ip} must be public");
        }
    }

    #[test]
    fn schemes_and_forms() {
        assert_eq!(
            check_url("file:///etc/passwd", true),
            Err(PolicyViolation::LocalFile)
        );
        assert_eq!(
            check_url("/etc/passwd", true),
            Err(PolicyViolation::LocalFile)
        );
        assert_eq!(check_url("img.png", false), Err(PolicyViolation::LocalFile));
        assert_eq!(
            check_url("ftp://example.com/a.png", true),
            Err(PolicyViolation::Scheme("ftp".into()))
        );
        assert_eq!(
            check_url("gopher://x/", false),
            Err(PolicyViolation::Scheme("gopher".into()))
        );
        assert_eq!(
            check_url("http://example.com/a.png", false),
            Err(PolicyViolation::Scheme("http".into()))
        );
        assert!(check_url("http://example.com/a.png", true).is_ok());
        assert!(check_url("https://example.com/a.png", false).is_ok());
        assert_eq!(
            check_url("https://user:pw@example.com/", false),
            Err(PolicyViolation::Userinfo)
        );
        assert_eq!(
            check_url("https://user@example.com/", true),
            Err(PolicyViolation::Userinfo)
        );
        assert!(matches!(
            check_url("https://exa mple.com/", false),
            Err(PolicyViolation::InvalidUrl(_))
        ));
        assert!(matches!(
            check_url("https://[::1/", false),
            Err(PolicyViolation::InvalidUrl(_))
        ));
    }

    #[test]
    fn ip_literals_in_every_spelling() {
        for url in [
            "https://127.0.0.1/",
            "https://0x7f.1/",
            "https://2130706433/",
            "https://0177.0.0.1/",
            "https://[::1]/",
            "https://[::ffff:7f00:1]/",
            "https://169.254.169.254/latest/meta-data",
            "https://[fd00:ec2::254]/",
            "https://0/",
        ] {
            assert!(
                matches!(
                    check_url(url, false),
                    Err(PolicyViolation::InternalAddress(_))
                ),
                "{url} must be refused"
            );
            assert!(
                check_url(url, true).is_ok(),
                "{url} allowed with internal access"
            );
        }
        assert!(check_url("https://8.8.8.8/x.png", false).is_ok());
    }

    #[test]
    fn statuses() {
        assert_eq!(PolicyViolation::LocalFile.http_status(), 400);
        assert_eq!(
            PolicyViolation::InternalAddress("10.0.0.1".parse().unwrap()).http_status(),
            403
        );
    }

    #[test]
    fn allowed_media_domains() {
        let list = DomainAllowlist::new(&[
            "images.example.com",
            "*.cdn.example.net",
            "Mixed.Case.ORG.",
            "203.0.113.7",
            "[2001:db8::1]",
            "*.bücher.de",
        ])
        .unwrap();
        let allows = |u: &str| list.allows(&Url::parse(u).unwrap());
        assert!(allows("https://images.example.com/a.png"));
        assert!(allows("https://IMAGES.example.com./a.png"));
        assert!(!allows("https://example.com/a.png"));
        assert!(!allows("https://evil-images.example.com/a.png"));
        assert!(!allows("https://images.example.com.evil.io/a.png"));
        assert!(allows("https://a.cdn.example.net/x"));
        assert!(allows("https://a.b.cdn.example.net/x"));
        assert!(
            !allows("https://cdn.example.net/x"),
            "a wildcard is subdomains only"
        );
        assert!(!allows("https://xcdn.example.net/x"));
        assert!(allows("https://mixed.case.org/x"));
        assert!(allows("https://203.0.113.7/x"));
        assert!(!allows("https://203.0.113.8/x"));
        assert!(allows("https://[2001:db8::1]/x"));
        assert!(allows("https://shop.xn--bcher-kva.de/x"));
        assert!(allows("https://shop.bücher.de/x"));
        for bad in ["*", "*.", "a/b", "*.1.2.3.4", "user@host", "a*b.com"] {
            assert!(DomainAllowlist::new(&[bad]).is_err(), "{bad}");
        }
        assert!(
            DomainAllowlist::new::<&str>(&[])
                .unwrap()
                .allows(&Url::parse("https://x.io/").unwrap())
        );
        // Refused with 403 by the policy, naming the host.
        let url = Url::parse("https://other.example.org/a.png").unwrap();
        let err = check_parsed_with(&url, false, false, false, &list).unwrap_err();
        assert_eq!(err.http_status(), 403);
        assert!(err.to_string().contains("other.example.org"));
    }
}

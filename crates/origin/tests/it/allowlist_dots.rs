//! The allowlist reads trailing dots as the URL parser does (the fuzz target `url_policy` found
//! `127.27.0.0......` refused by an allowlist naming it: the entry's dots were all trimmed, so
//! it became an address while the URL's host stayed a name).

use mmcache_origin::DomainAllowlist;
use url::Url;

#[test]
fn an_allowlist_of_a_host_allows_its_own_url_whatever_its_trailing_dots() {
    for host in ["127.27.0.0......", "example.com..", "example.com."] {
        let url = Url::parse(&format!("https://{host}/a.png")).unwrap();
        let list = DomainAllowlist::new(&[url.host_str().unwrap()]).unwrap();
        assert!(
            list.allows(&url),
            "an allowlist of {host:?} refused its own URL"
        );
    }
}

#[test]
fn one_trailing_dot_does_not_matter_and_more_make_another_name() {
    let list = DomainAllowlist::new(&["example.com.", "*.example.org.", "10.0.0.1."]).unwrap();
    for ok in [
        "https://example.com/",
        "https://example.com./",
        "https://a.example.org./",
        "https://10.0.0.1/",
    ] {
        assert!(list.allows(&Url::parse(ok).unwrap()), "{ok} refused");
    }
    for refused in ["https://example.org/", "https://example.com../"] {
        assert!(
            !list.allows(&Url::parse(refused).unwrap()),
            "{refused} allowed"
        );
    }
}

//! The origin client against a real HTTP server on 127.0.0.1.

use std::time::{Duration, Instant};

use mmcache_origin::{Error, Origin, OriginConfig, PolicyViolation};
use mmcache_test_support::origin::{Route, TestOrigin};

fn config() -> OriginConfig {
    let mut c = OriginConfig::default();
    c.allow_internal = true;
    c.max_body_bytes = 1000;
    c.timeout = Duration::from_secs(5);
    c
}

fn origin(c: OriginConfig) -> Origin {
    Origin::new(c).expect("client")
}

#[tokio::test]
async fn downloads_exact_bytes() {
    let server = TestOrigin::start();
    let body: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    server.set("/img?sig=AbC", Route::ok(body.clone()));
    let got = origin(config())
        .fetch(&server.url("/img?sig=AbC"))
        .await
        .unwrap();
    assert_eq!(&got.bytes[..], &body[..]); // exactly at the cap is fine
    assert_eq!(server.hits("/img?sig=AbC"), 1);
}

#[tokio::test]
async fn origin_status_is_kept() {
    let server = TestOrigin::start();
    for status in [404u16, 403, 500, 503] {
        let path = format!("/s{status}");
        server.set(&path, Route::status(status));
        let err = origin(config())
            .fetch(&server.url(&path))
            .await
            .unwrap_err();
        assert_eq!(err.origin_status(), Some(status));
        assert_eq!(err.http_status(), status);
    }
    // Unknown path: the server's own 404.
    let err = origin(config())
        .fetch(&server.url("/nope"))
        .await
        .unwrap_err();
    assert_eq!(err.http_status(), 404);
}

#[tokio::test]
async fn hang_is_a_timeout_408() {
    let server = TestOrigin::start();
    server.set("/hang", Route::Hang);
    let mut c = config();
    c.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = origin(c).fetch(&server.url("/hang")).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.http_status(), 408);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn slow_trickle_past_the_deadline_is_408() {
    let server = TestOrigin::start();
    server.set(
        "/trickle",
        Route::Trickle {
            chunk: 1,
            every: Duration::from_millis(20),
        },
    );
    let mut c = config();
    c.timeout = Duration::from_millis(400);
    let err = origin(c).fetch(&server.url("/trickle")).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
}

#[tokio::test]
async fn refused_connection_is_400() {
    let port = mmcache_test_support::closed_port();
    let err = origin(config())
        .fetch(&format!("http://127.0.0.1:{port}/x.png"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err}");
    assert_eq!(err.http_status(), 400);
}

#[tokio::test]
async fn size_cap_with_and_without_length() {
    let server = TestOrigin::start();
    server.set("/big", Route::ok(vec![1; 1001]));
    server.set("/big-nolen", Route::NoLength(vec![1; 5000].into()));
    server.set("/small-nolen", Route::NoLength(vec![1; 999].into()));
    for path in ["/big", "/big-nolen"] {
        let err = origin(config()).fetch(&server.url(path)).await.unwrap_err();
        assert!(err.is_too_large(), "{path}: {err}");
        assert_eq!(err.http_status(), 413);
    }
    let ok = origin(config())
        .fetch(&server.url("/small-nolen"))
        .await
        .unwrap();
    assert_eq!(ok.bytes.len(), 999);
}

#[tokio::test]
async fn lying_content_length_never_gets_past_the_cap() {
    let server = TestOrigin::start();
    // Claims more than the cap: refused before reading.
    server.set(
        "/claims-huge",
        Route::LyingLength {
            claimed: 1 << 40,
            body: vec![1; 10].into(),
        },
    );
    let err = origin(config())
        .fetch(&server.url("/claims-huge"))
        .await
        .unwrap_err();
    assert!(err.is_too_large());
    // Claims little, sends a lot: the client stops at the claimed length.
    server.set(
        "/claims-small",
        Route::LyingLength {
            claimed: 10,
            body: vec![1; 50_000].into(),
        },
    );
    match origin(config()).fetch(&server.url("/claims-small")).await {
        Ok(f) => assert!(f.bytes.len() <= 1000),
        Err(e) => assert_eq!(e.http_status(), 413),
    }
    // Claims more than it sends, then closes: an incomplete body is an error, not an image.
    server.set(
        "/claims-more",
        Route::LyingLength {
            claimed: 900,
            body: vec![1; 10].into(),
        },
    );
    let err = origin(config())
        .fetch(&server.url("/claims-more"))
        .await
        .unwrap_err();
    // 400 when the name server says so; 408 if it does not answer within the connect timeout.
    assert!(matches!(err.http_status(), 400 | 408), "{err}");
}

#[tokio::test]
async fn empty_body_is_an_error() {
    let server = TestOrigin::start();
    server.set("/empty", Route::ok(Vec::new()));
    let err = origin(config())
        .fetch(&server.url("/empty"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::EmptyBody), "{err}");
}

#[tokio::test]
async fn redirects_are_followed_up_to_three() {
    let server = TestOrigin::start();
    server.set("/r1", Route::redirect("/r2"));
    server.set(
        "/r2",
        Route::Redirect {
            status: 301,
            location: server.url("/r3"),
        },
    );
    server.set(
        "/r3",
        Route::Redirect {
            status: 308,
            location: "r4".into(),
        },
    );
    server.set("/r4", Route::ok(b"img".to_vec()));
    let got = origin(config()).fetch(&server.url("/r1")).await.unwrap();
    assert_eq!((&got.bytes[..], got.redirects), (&b"img"[..], 3));

    server.set("/r0", Route::redirect("/r1"));
    let err = origin(config())
        .fetch(&server.url("/r0"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooManyRedirects(3)), "{err}");
    assert_eq!(server.hits("/r4"), 1, "the fourth hop is never requested");
}

#[tokio::test]
async fn redirect_loops_and_bad_locations() {
    let server = TestOrigin::start();
    server.set("/a", Route::redirect("/b"));
    server.set("/b", Route::redirect("/a"));
    server.set("/self", Route::redirect("/self"));
    server.set(
        "/noloc",
        Route::Body {
            status: 302,
            content_type: "text/plain".into(),
            body: vec![1].into(),
        },
    );
    for path in ["/a", "/self"] {
        let err = origin(config()).fetch(&server.url(path)).await.unwrap_err();
        assert!(matches!(err, Error::RedirectLoop), "{path}: {err}");
    }
    let err = origin(config())
        .fetch(&server.url("/noloc"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRedirect), "{err}");
}

#[tokio::test]
async fn redirect_to_internal_or_local_targets_is_refused_per_hop() {
    let server = TestOrigin::start();
    let mut c = config();
    c.allow_internal = false;
    c.loopback_is_public = true; // first hop reachable; every other internal range refused
    let cases = [
        (
            "/to-metadata",
            "http://169.254.169.254/latest/meta-data/",
            403,
        ),
        ("/to-private", "http://10.0.0.1/x.png", 403),
        ("/to-mapped", "http://[::ffff:192.168.0.1]/x.png", 403),
        ("/to-file", "file:///etc/passwd", 400),
        ("/to-ftp", "ftp://example.com/x.png", 400),
    ];
    for (path, target, status) in cases {
        server.set(path, Route::redirect(target));
        let err = origin(c.clone())
            .fetch(&server.url(path))
            .await
            .unwrap_err();
        assert!(err.is_policy(), "{path}: {err}");
        assert_eq!(err.http_status(), status, "{path}: {err}");
    }
}

#[tokio::test]
async fn strict_policy_refuses_before_any_request() {
    let server = TestOrigin::start();
    server.set("/x", Route::ok(b"x".to_vec()));
    let strict = origin(OriginConfig::default());
    // http is refused outright
    let err = strict.fetch(&server.url("/x")).await.unwrap_err();
    assert_eq!(err.http_status(), 400);
    // an https IP literal on loopback is refused as internal
    let port = server.addr().port();
    let err = strict
        .fetch(&format!("https://127.0.0.1:{port}/x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Policy(PolicyViolation::InternalAddress(_))),
        "{err}"
    );
    // a hostname that resolves to loopback is refused after DNS resolution
    let err = strict
        .fetch(&format!("https://localhost:{port}/x"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Policy(PolicyViolation::InternalAddress(_))),
        "{err}"
    );
    assert_eq!(err.http_status(), 403);
    for bad in [
        "file:///etc/passwd",
        "/etc/passwd",
        "https://u:p@example.com/x",
    ] {
        assert!(strict.fetch(bad).await.unwrap_err().is_policy(), "{bad}");
    }
    assert_eq!(server.total_hits(), 0);
}

#[tokio::test]
async fn allowed_media_domains_apply_to_every_hop() {
    let server = TestOrigin::start();
    server.set("/a", Route::ok(b"img".to_vec()));
    let by_name = server.url("/a").replace("127.0.0.1", "localhost");
    let mut c = config();
    c.allowed_domains = mmcache_origin::DomainAllowlist::new(&["localhost"]).unwrap();
    let o = origin(c);
    assert_eq!(&o.fetch(&by_name).await.unwrap().bytes[..], b"img");
    // The same server by address is another host: refused before any request.
    let err = o.fetch(&server.url("/a")).await.unwrap_err();
    assert!(
        matches!(err, Error::Policy(PolicyViolation::DomainNotAllowed(ref h)) if h == "127.0.0.1"),
        "{err}"
    );
    assert_eq!(err.http_status(), 403);
    // A redirect from an allowed host to another host is refused on the hop.
    server.set("/jump", Route::redirect(server.url("/b")));
    server.set("/b", Route::ok(b"other".to_vec()));
    let jump = server.url("/jump").replace("127.0.0.1", "localhost");
    let err = o.fetch(&jump).await.unwrap_err();
    assert!(err.is_policy(), "{err}");
    assert_eq!(server.hits("/b"), 0);
    assert_eq!(server.hits("/a"), 1);
}

#[tokio::test]
async fn check_resolved_applies_the_policy_after_dns() {
    // `localhost` is a public-looking name for an internal address: refused once resolved,
    // with no request sent anywhere.
    let strict = origin(OriginConfig::default());
    let err = strict
        .check_resolved("https://localhost:1/x.png")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Policy(PolicyViolation::InternalAddress(ip)) if ip.is_loopback()),
        "{err}"
    );
    assert_eq!(err.http_status(), 403);
    // With internal access it passes; a name that does not resolve is a 400.
    let open = origin(config());
    open.check_resolved("http://localhost:1/x.png")
        .await
        .unwrap();
    let err = open
        .check_resolved("https://no-such-host.invalid/x.png")
        .await
        .unwrap_err();
    // 400 when the name server says so; 408 if it does not answer within the connect timeout.
    assert!(matches!(err.http_status(), 400 | 408), "{err}");
}

#[tokio::test]
async fn an_admitted_url_carries_its_checked_addresses_and_is_fetched_as_is() {
    let server = TestOrigin::start();
    server.set("/a", Route::ok(b"admitted".to_vec()));
    let o = origin(config());
    // A name: its resolution, every address checked; an IP literal: the literal.
    let named = server.url("/a").replace("127.0.0.1", "localhost");
    let admitted = o.check_resolved(&named).await.unwrap();
    assert!(!admitted.addrs().is_empty());
    assert!(
        admitted.addrs().iter().all(|ip| ip.is_loopback()),
        "{admitted:?}"
    );
    assert_eq!(
        &o.fetch_admitted(&admitted).await.unwrap().bytes[..],
        b"admitted"
    );
    let literal = o.check_resolved(&server.url("/a")).await.unwrap();
    assert_eq!(
        literal.addrs(),
        &["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    // Debug output keeps the URL (and any signed query) out.
    let signed = o
        .check_resolved(&server.url("/a?sig=SECRET"))
        .await
        .unwrap();
    assert!(!format!("{signed:?}").contains("SECRET"));

    // Redirect hops are still checked one by one: a hop to a host off the allowlist is
    // refused before it is requested.
    let mut c = config();
    c.allowed_domains = mmcache_origin::DomainAllowlist::new(&["localhost"]).unwrap();
    let o = origin(c);
    server.set("/jump", Route::redirect(server.url("/b")));
    server.set("/b", Route::ok(b"other".to_vec()));
    let jump = server.url("/jump").replace("127.0.0.1", "localhost");
    let admitted = o.check_resolved(&jump).await.unwrap();
    let err = o.fetch_admitted(&admitted).await.unwrap_err();
    assert!(err.is_policy(), "{err}");
    assert_eq!(server.hits("/b"), 0);
}

//! Bounded, policy-checked HTTP(S) downloads of images from their origin.
//!
//! [`Origin::fetch`] applies the URL policy (see [`policy`]) to the URL and to every redirect
//! hop, resolves hostnames through a resolver that refuses internal addresses and pins the
//! connection to the addresses it checked, follows at most [`OriginConfig::max_redirects`]
//! redirects by hand, and streams the body with a hard size cap. It does not serve `data:`
//! URLs, whose bytes are in the URL: callers decode them with [`data_url::decode_payload`].
//! It knows nothing of Redis or pixels.
//!
//! # Examples
//!
//! ```
//! use mmcache_origin::{Origin, OriginConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), mmcache_origin::Error> {
//! let url = serve_once(b"hello"); // a one-request HTTP server on 127.0.0.1 (below)
//!
//! // Without internal access, http and loopback are refused before any request.
//! let strict = Origin::new(OriginConfig::default())?;
//! assert_eq!(strict.fetch(&url).await.unwrap_err().http_status(), 400);
//!
//! let mut config = OriginConfig::default();
//! config.allow_internal = true; // http and 127.0.0.1 allowed: for tests only
//! let origin = Origin::new(config)?;
//! let fetched = origin.fetch(&url).await?;
//! assert_eq!(&fetched.bytes[..], b"hello");
//! # Ok(())
//! # }
//!
//! /// Answers one HTTP request with `body`; returns the URL to fetch.
//! fn serve_once(body: &'static [u8]) -> String {
//!     use std::io::{Read, Write};
//!     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//!     let url = format!("http://{}/a.bin", listener.local_addr().unwrap());
//!     std::thread::spawn(move || {
//!         let (mut stream, _) = listener.accept().unwrap();
//!         let mut request = [0; 4096];
//!         let _ = stream.read(&mut request); // a GET fits in one read on loopback
//!         let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
//!         stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).unwrap();
//!     });
//!     url
//! }
//! ```
//!
//! # Errors
//!
//! Every failure is an [`Error`] with [`Error::http_status`]: origin status as is, timeout 408,
//! connection failure 400, URL policy 400/403, too large 413.

mod budget;
pub mod data_url;
mod dns;
mod error;
pub mod policy;
mod resolve;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{ACCEPT, LOCATION};
use url::Url;

pub use budget::{DownloadBudget, Reservation};
pub use data_url::DataUrlError;
pub use error::{Error, PolicyViolation, Result};
pub use policy::DomainAllowlist;
pub use resolve::{DEFAULT_DNS_CACHE_TTL, DEFAULT_DNS_STALE_FOR, NEGATIVE_TTL};

/// Default cap on a body: 64 MiB (`DYN_MM_MAX_FILE_SIZE_MB`).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// Default TCP (and TLS) connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default overall deadline of one fetch: every redirect hop and the whole body.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Default (and recommended) redirect limit.
pub const DEFAULT_MAX_REDIRECTS: u8 = 3;

/// Settings of the origin client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OriginConfig {
    /// Allow `http://` and internal addresses (`DYN_MM_ALLOW_INTERNAL=1`). Default false.
    pub allow_internal: bool,
    /// Allow `http://` to public addresses (`MMCACHE_ALLOW_HTTP=1`); internal ones stay
    /// refused unless [`OriginConfig::allow_internal`]. Default false.
    pub allow_http: bool,
    /// Hard cap on a body in bytes. Default [`DEFAULT_MAX_BODY_BYTES`].
    pub max_body_bytes: u64,
    /// Connect timeout. Default [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// Overall deadline of one fetch. Default [`DEFAULT_FETCH_TIMEOUT`].
    pub timeout: Duration,
    /// Redirects followed at most. Default [`DEFAULT_MAX_REDIRECTS`].
    pub max_redirects: u8,
    /// Hosts images may come from; empty allows every host. See [`DomainAllowlist`].
    pub allowed_domains: DomainAllowlist,
    /// How long a DNS answer is reused. Default [`DEFAULT_DNS_CACHE_TTL`].
    pub dns_cache_ttl: Duration,
    /// Bytes all bodies being read (and held after) may take together, shared by every
    /// client given a clone of it. Default `None`: no bound but the size cap of each body.
    pub download_budget: Option<DownloadBudget>,
    /// How long past [`OriginConfig::dns_cache_ttl`] a good DNS answer is still served while
    /// refreshes get no answer (timeouts, server failures); a definitive answer (no such name)
    /// replaces it at once. Default [`DEFAULT_DNS_STALE_FOR`].
    pub dns_stale_for: Duration,
    /// Test seam: treat 127.0.0.0/8 as public (and allow `http`) while every other internal
    /// range stays refused, so tests on loopback can exercise the refusals. Never set it in
    /// production: it exists only with the feature `test-seams`.
    #[cfg(feature = "test-seams")]
    pub loopback_is_public: bool,
}

impl Default for OriginConfig {
    fn default() -> Self {
        Self {
            allow_internal: false,
            allow_http: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_FETCH_TIMEOUT,
            max_redirects: DEFAULT_MAX_REDIRECTS,
            allowed_domains: DomainAllowlist::default(),
            dns_cache_ttl: DEFAULT_DNS_CACHE_TTL,
            download_budget: None,
            dns_stale_for: DEFAULT_DNS_STALE_FOR,
            #[cfg(feature = "test-seams")]
            loopback_is_public: false,
        }
    }
}

impl OriginConfig {
    /// Whether 127.0.0.0/8 counts as public: only ever with the test seam (feature
    /// `test-seams`).
    #[cfg(feature = "test-seams")]
    fn loopback_is_public(&self) -> bool {
        self.loopback_is_public
    }

    /// Whether 127.0.0.0/8 counts as public: never without the test seam.
    #[cfg(not(feature = "test-seams"))]
    fn loopback_is_public(&self) -> bool {
        false
    }
}

/// A downloaded body.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Fetched {
    /// The exact bytes the origin sent (no decompression).
    pub bytes: Bytes,
    /// Redirects followed.
    pub redirects: u8,
    /// Time from the first request to the last byte.
    pub elapsed: Duration,
}

/// A URL the whole policy admitted ([`Origin::check_resolved`]): parsed once, checked, its
/// host resolved and every address checked. [`Origin::fetch_admitted`] downloads it without
/// parsing or checking it again; the connection is still pinned to the addresses the
/// client's resolver checks, and every redirect hop is checked as it comes.
#[derive(Clone)]
pub struct Admitted {
    url: Url,
    addrs: Arc<[IpAddr]>,
}

impl Admitted {
    /// The checked addresses of the URL's host: its resolution, or the IP literal itself.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }
}

impl std::fmt::Debug for Admitted {
    // The URL may carry a signed query string: keep it out of debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

/// An HTTP(S) client that enforces the URL policy and the size cap. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Origin {
    client: reqwest::Client,
    config: Arc<OriginConfig>,
    resolver: resolve::Resolver,
}

impl Origin {
    /// Builds the client. Installs the `ring` rustls provider as the process default when no
    /// provider is installed yet.
    ///
    /// # Errors
    ///
    /// [`Error::Client`] when the TLS client cannot be built.
    pub fn new(config: OriginConfig) -> Result<Self> {
        install_crypto_provider();
        let resolver = resolve::Resolver::new(
            config.dns_cache_ttl,
            config.dns_stale_for,
            config.connect_timeout,
        );
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none()) // followed by hand, hop by hop
            .retry(reqwest::retry::never()) // one fetch, one request: origin counts stay exact
            .no_proxy() // a proxy from the environment would bypass the address checks
            .connect_timeout(config.connect_timeout)
            .dns_resolver(PolicyResolver {
                allow_internal: config.allow_internal,
                loopback_is_public: config.loopback_is_public(),
                resolver: resolver.clone(),
            })
            .user_agent(concat!("mmcache/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Client(e.to_string()))?;
        Ok(Self {
            client,
            config: Arc::new(config),
            resolver,
        })
    }

    /// The settings this client enforces.
    pub fn config(&self) -> &OriginConfig {
        &self.config
    }

    /// Downloads `url` within the policy, the redirect limit, the size cap and the deadline.
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub async fn fetch(&self, url: &str) -> Result<Fetched> {
        let url = policy::parse(url)?;
        self.check_parsed(&url)?;
        self.fetch_checked(url).await
    }

    /// Downloads a URL [`Origin::check_resolved`] admitted, as [`Origin::fetch`] does, without
    /// parsing or checking it again (its host is resolved once more through the cache, and
    /// the connection pinned to the addresses checked then).
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub async fn fetch_admitted(&self, admitted: &Admitted) -> Result<Fetched> {
        self.fetch_checked(admitted.url.clone()).await
    }

    /// Follows a checked URL's hops within the deadline.
    async fn fetch_checked(&self, url: Url) -> Result<Fetched> {
        let started = Instant::now();
        let (bytes, redirects) = tokio::time::timeout(self.config.timeout, self.follow(url))
            .await
            .map_err(|_| Error::Timeout)??;
        Ok(Fetched {
            bytes,
            redirects,
            elapsed: started.elapsed(),
        })
    }

    /// Applies the URL policy to `url` without any network I/O (no DNS either: hostnames are
    /// checked when a fetch resolves them).
    ///
    /// # Errors
    ///
    /// [`Error::Policy`].
    pub fn check(&self, url: &str) -> Result<()> {
        let url = policy::parse(url)?;
        Ok(self.check_parsed(&url)?)
    }

    /// Applies the whole URL policy, hostname resolution included, without fetching: what a
    /// cache layer must ask before it answers for `url` (a worker with internal access may have
    /// cached it). Resolutions are cached for [`OriginConfig::dns_cache_ttl`], so this costs a
    /// map lookup on a warm host. The URL it admits is what [`Origin::fetch_admitted`] takes.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`], or [`Error::Connect`] when the host does not resolve.
    pub async fn check_resolved(&self, url: &str) -> Result<Admitted> {
        let url = policy::parse(url)?;
        self.check_parsed(&url)?;
        let addrs = match url.host() {
            Some(url::Host::Domain(host)) => {
                let c = &self.config;
                let ips = self.resolver.resolve(host).await?;
                for ip in ips.iter() {
                    policy::check_ip_with(*ip, c.allow_internal, c.loopback_is_public())?;
                }
                ips
            }
            // IP literals were checked with the URL.
            Some(url::Host::Ipv4(ip)) => Arc::from([IpAddr::V4(ip)]),
            Some(url::Host::Ipv6(ip)) => Arc::from([IpAddr::V6(ip)]),
            None => Arc::from([]),
        };
        Ok(Admitted { url, addrs })
    }

    fn check_parsed(&self, url: &Url) -> Result<(), PolicyViolation> {
        let c = &self.config;
        policy::check_parsed_with(
            url,
            c.allow_internal,
            c.allow_http,
            c.loopback_is_public(),
            &c.allowed_domains,
        )
    }

    async fn follow(&self, mut url: Url) -> Result<(Bytes, u8)> {
        let mut visited = vec![url.clone()];
        let mut redirects = 0u8;
        loop {
            let response = self
                .client
                .get(url.clone())
                .header(ACCEPT, "image/*,*/*;q=0.8")
                .send()
                .await
                .map_err(map_client_error)?;
            let status = response.status();
            if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
                if redirects >= self.config.max_redirects {
                    return Err(Error::TooManyRedirects(self.config.max_redirects));
                }
                let next = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|loc| url.join(loc).ok())
                    .ok_or(Error::BadRedirect)?;
                self.check_parsed(&next)?;
                if visited.contains(&next) {
                    return Err(Error::RedirectLoop);
                }
                visited.push(next.clone());
                redirects += 1;
                url = next;
                continue;
            }
            if !status.is_success() {
                return Err(Error::Status(status.as_u16()));
            }
            let budget = self.config.download_budget.as_ref();
            return Ok((
                read_capped(response, self.config.max_body_bytes, budget).await?,
                redirects,
            ));
        }
    }
}

/// A body without a `Content-Length` is read within a first reservation of this size; past
/// it, it reserves what it may still grow to (the cap, or what the budget's growth pool
/// allows if smaller) at once.
const FIRST_STEP: u64 = 1 << 20;

/// Streams the body, refusing early on an announced length over the cap and stopping as soon
/// as the counted bytes pass it (a lying or absent length does not help).
///
/// With a download budget, the buffer's bytes are reserved before they are read: the announced
/// length (the client delivers exactly that many bytes or fails), else a first step and then,
/// past it, the rest of what the body may grow to. The buffer is sized to its reservation, so
/// it never reallocates by doubling, and the reservation lives as long as the bytes do.
async fn read_capped(
    mut response: reqwest::Response,
    limit: u64,
    budget: Option<&DownloadBudget>,
) -> Result<Bytes> {
    let announced = response.content_length();
    if announced.is_some_and(|n| n > limit) {
        return Err(Error::TooLarge { limit });
    }
    let Some(budget) = budget else {
        return read_unbudgeted(response, limit, announced).await;
    };
    let first = announced.unwrap_or(FIRST_STEP.min(limit));
    let mut reservation = budget.reserve(first).await?;
    let mut body: Vec<u8> = Vec::with_capacity(usize::try_from(first).unwrap_or(usize::MAX));
    // Where a body without a length may grow to: the cap, or what the growth pool allows.
    let ceiling = limit.min(reservation.bytes() + budget.max_growth());
    while let Some(chunk) = response.chunk().await.map_err(map_client_error)? {
        let len = (body.len() + chunk.len()) as u64;
        if len > limit {
            return Err(Error::TooLarge { limit });
        }
        if len > body.capacity() as u64 {
            if len > ceiling {
                return Err(Error::OverDownloadBudget {
                    needed: len,
                    budget: budget.capacity(),
                });
            }
            // Once per body at most: reserve up to the ceiling, and size the buffer to it (only
            // the pages written become resident).
            let more = ceiling.saturating_sub(reservation.bytes());
            budget.grow(&mut reservation, more).await?;
            body.reserve_exact(usize::try_from(ceiling).unwrap_or(usize::MAX) - body.len());
        }
        body.extend_from_slice(&chunk);
    }
    if body.is_empty() {
        return Err(Error::EmptyBody);
    }
    if body.capacity() > body.len() && announced.is_none() {
        // Sized to what the body might have grown to: keep only what it holds (and `hold`
        // trims the reservation to it).
        body.shrink_to_fit();
    }
    Ok(reservation.hold(body))
}

/// [`read_capped`] without a budget: the announced length is trusted for the first
/// allocation only up to 1 MiB (a lying length must not buy a large buffer), then it grows.
async fn read_unbudgeted(
    mut response: reqwest::Response,
    limit: u64,
    announced: Option<u64>,
) -> Result<Bytes> {
    let hint = announced.unwrap_or(0).min(1 << 20) as usize;
    let mut body = BytesMut::with_capacity(hint);
    while let Some(chunk) = response.chunk().await.map_err(map_client_error)? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(Error::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    if body.is_empty() {
        return Err(Error::EmptyBody);
    }
    Ok(body.freeze())
}

fn map_client_error(e: reqwest::Error) -> Error {
    // The resolver's policy refusal travels inside the client error: find it.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(violation) = err.downcast_ref::<PolicyViolation>() {
            return Error::Policy(violation.clone());
        }
        // A name server that did not answer in time is a timeout (408), as in `check_resolved`.
        if let Some(Error::Timeout) = err.downcast_ref::<Error>() {
            return Error::Timeout;
        }
        source = err.source();
    }
    if e.is_timeout() {
        return Error::Timeout;
    }
    // The URL may carry signed query strings: keep it out of messages.
    let e = e.without_url();
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(err) = source {
        msg.push_str(": ");
        msg.push_str(&err.to_string());
        source = err.source();
    }
    Error::Connect(msg)
}

/// Resolves through the bounded, caching resolver and refuses the name when any address is
/// internal. The connector then dials exactly these addresses.
struct PolicyResolver {
    allow_internal: bool,
    loopback_is_public: bool,
    resolver: resolve::Resolver,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let (allow_internal, loopback_is_public) = (self.allow_internal, self.loopback_is_public);
        let resolver = self.resolver.clone();
        Box::pin(async move {
            let ips = resolver.resolve(name.as_str()).await?;
            for ip in ips.iter() {
                // `?` boxes the violation itself, so `map_client_error` can downcast to it.
                policy::check_ip_with(*ip, allow_internal, loopback_is_public)?;
            }
            let addrs: Vec<std::net::SocketAddr> = ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, 0))
                .collect();
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Installs `ring` as the process-wide rustls provider unless one is installed already.
/// Shared by the origin and shared-cache clients; calling it again is harmless.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

//! The system's stub resolver, asynchronous: hickory over `/etc/resolv.conf` (name servers,
//! `search`, `ndots`, `timeout`, `attempts`) and `/etc/hosts`, as glibc reads them (both read
//! once, at the first lookup of an [`crate::Origin`]). `localhost` names resolve to loopback
//! without a query (RFC 6761). No DNS-over-TLS/HTTPS: the system's servers, as configured.
//! It also defines what a lookup is ([`Lookup`], [`LookupError`]), which the caching resolver
//! (`resolve`) is built over.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::lookup_ip::LookupIp;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;

use crate::error::Error;

/// Why a lookup gave no address.
#[derive(Debug, Clone)]
pub(crate) enum LookupError {
    /// The name server did not answer in time.
    Timeout,
    /// No usable answer (server failure, refusal, transport error): says nothing of the name.
    Unavailable(String),
    /// The name server said the name has no address (NXDOMAIN, or no A/AAAA records).
    NotFound(String),
}

impl LookupError {
    /// A failure that says nothing about the name: a good answer may still be served.
    pub(crate) fn is_transient(&self) -> bool {
        !matches!(self, Self::NotFound(_))
    }

    pub(crate) fn into_error(self, host: &str) -> Error {
        match self {
            // A slow name server is not the client's fault: a timeout, like a slow origin.
            Self::Timeout => Error::Timeout,
            Self::Unavailable(reason) | Self::NotFound(reason) => {
                Error::Connect(format!("DNS lookup of {host} failed: {reason}"))
            }
        }
    }
}

/// One lookup of a host's addresses.
pub(crate) type LookupFuture =
    Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, LookupError>> + Send>>;
/// A lookup function: [`system_lookup`], or a scripted one in tests of the resolver's bounds.
pub(crate) type Lookup = dyn Fn(&str) -> LookupFuture + Send + Sync;

/// Once one address family has answered, how long the other may still take (RFC 8305's
/// resolution delay): a name server that drops AAAA queries costs this, not a timeout.
const RESOLUTION_DELAY: Duration = Duration::from_millis(50);

/// A lookup function over the system configuration, built on first use (inside the runtime).
pub(crate) fn system_lookup() -> Arc<Lookup> {
    let resolver: Arc<OnceLock<Arc<TokioResolver>>> = Arc::new(OnceLock::new());
    Arc::new(move |host: &str| {
        let resolver = resolver.get_or_init(build).clone();
        let host = host.to_owned();
        Box::pin(async move { dual_stack(&resolver, &host).await })
    })
}

fn build() -> Arc<TokioResolver> {
    let builder = TokioResolver::builder_tokio().unwrap_or_else(|e| {
        // glibc's behaviour without a usable resolv.conf: a server on this host.
        tracing::warn!(error = %e, "cannot read /etc/resolv.conf; using 127.0.0.1 as name server");
        let config = ResolverConfig::from_name_servers(vec![NameServerConfig::udp_and_tcp(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )]);
        TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(ResolverOpts::default())
    });
    let mut builder = builder;
    let opts = builder.options_mut();
    // The origin's resolver caches (its TTL, stale answers, single flight): no second cache.
    opts.cache_size = 0;
    opts.use_hosts_file = ResolveHosts::Always;
    let resolver = builder.build().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "DNS resolver from the system configuration failed; using defaults");
        TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(vec![NameServerConfig::udp_and_tcp(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
            )]),
            TokioRuntimeProvider::default(),
        )
        .build()
        .expect("a resolver with one name server and default options builds")
    });
    Arc::new(resolver)
}

/// A and AAAA in parallel, like `getaddrinfo` with `AF_UNSPEC`; once one family has
/// addresses, the other gets [`RESOLUTION_DELAY`] more.
async fn dual_stack(resolver: &TokioResolver, host: &str) -> Result<Vec<IpAddr>, LookupError> {
    let v4 = async { resolver.ipv4_lookup(host).await.map(addrs) };
    let v6 = async { resolver.ipv6_lookup(host).await.map(addrs) };
    let (mut v4, mut v6) = (std::pin::pin!(v4), std::pin::pin!(v6));
    let (first, first_is_v4) = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = v4.as_mut().poll(cx) {
            return Poll::Ready((r, true));
        }
        if let Poll::Ready(r) = v6.as_mut().poll(cx) {
            return Poll::Ready((r, false));
        }
        Poll::Pending
    })
    .await;
    let other = async {
        if first_is_v4 {
            v6.as_mut().await
        } else {
            v4.as_mut().await
        }
    };
    let second = match &first {
        Ok(a) if !a.is_empty() => tokio::time::timeout(RESOLUTION_DELAY, other)
            .await
            .unwrap_or(Err(NetError::Timeout)),
        _ => other.await,
    };
    let (v4, v6) = if first_is_v4 {
        (first, second)
    } else {
        (second, first)
    };
    match (v4, v6) {
        (Ok(mut a), Ok(b)) => {
            a.extend(b);
            Ok(a)
        }
        (Ok(a), Err(_)) | (Err(_), Ok(a)) if !a.is_empty() => Ok(a),
        (Ok(_), Err(e)) | (Err(e), Ok(_)) => Err(classify(&e)),
        (Err(a), Err(b)) => Err(merge(classify(&a), classify(&b))),
    }
}

fn addrs(lookup: hickory_resolver::lookup::Lookup) -> Vec<IpAddr> {
    LookupIp::from(lookup).iter().collect()
}

/// Which failures say something about the name.
fn classify(e: &NetError) -> LookupError {
    match e {
        NetError::Timeout => LookupError::Timeout,
        NetError::Dns(DnsError::NoRecordsFound(n))
            if matches!(
                n.response_code,
                ResponseCode::NXDomain | ResponseCode::NoError
            ) =>
        {
            LookupError::NotFound(no_address(n.response_code))
        }
        other => LookupError::Unavailable(other.to_string()),
    }
}

fn no_address(code: ResponseCode) -> String {
    match code {
        ResponseCode::NXDomain => "no such name".into(),
        _ => "no address".into(),
    }
}

/// Both families failed: the name is gone when either says so (NXDOMAIN names the whole
/// name) or both found nothing; otherwise the lookup failed for want of an answer.
fn merge(a: LookupError, b: LookupError) -> LookupError {
    match (a, b) {
        (LookupError::NotFound(r), LookupError::NotFound(_)) => LookupError::NotFound(r),
        (LookupError::NotFound(r), _) | (_, LookupError::NotFound(r)) if r == "no such name" => {
            LookupError::NotFound(r)
        }
        (LookupError::Timeout, _) | (_, LookupError::Timeout) => LookupError::Timeout,
        (a, _) => a,
    }
}

//! Hostname resolution for the URL policy and the HTTP client: asynchronous, per host, with
//! stale answers outliving failed refreshes.
//!
//! `getaddrinfo` blocks a thread for as long as a name server takes (10–30 s for one that
//! never answers), so any bounded pool of lookup threads is one that a few slow names can
//! fill, and then every host waits. Here:
//! - lookups are asynchronous (hickory's stub resolver over `/etc/resolv.conf` and
//!   `/etc/hosts`, see [`crate::dns`]): a pending lookup is a task and a socket, not a thread,
//!   and there is no pool or global limit for slow names to exhaust;
//! - one lookup per host at a time: concurrent callers for a host share it; a caller waits at
//!   most the connect timeout (then a 408), and the lookup itself is cut at the same timeout,
//!   so a silent name server holds nothing for longer;
//! - answers are reused for the TTL ([`DEFAULT_DNS_CACHE_TTL`]), then served while a refresh
//!   runs; a refresh that gets no answer (timeout, SERVFAIL, unreachable server) keeps the good
//!   answer until it is TTL + stale bound old ([`DEFAULT_DNS_STALE_FOR`]), retrying at most every
//!   [`NEGATIVE_TTL`]; a definitive answer (NXDOMAIN, no address) replaces it at once;
//! - failures are remembered for [`NEGATIVE_TTL`], and the cache is bounded, its good answers
//!   kept over failures, so the policy check that precedes the disk and shared tiers costs a
//!   map lookup.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::dns::{self, Lookup, LookupError};
use crate::error::Error;

/// How long a resolution is reused. Default of [`crate::OriginConfig::dns_cache_ttl`].
pub const DEFAULT_DNS_CACHE_TTL: Duration = Duration::from_secs(5);
/// How long past its TTL a good answer is still served while refreshes get no answer.
/// Default of [`crate::OriginConfig::dns_stale_for`].
pub const DEFAULT_DNS_STALE_FOR: Duration = Duration::from_secs(300);
/// How long a failed resolution is remembered (and how often a failing refresh is retried).
pub const NEGATIVE_TTL: Duration = Duration::from_secs(2);
/// Names kept at most.
const MAX_CACHED: usize = 4096;

/// The outcome of one lookup: addresses, or why there are none.
type Answer = Result<Arc<[IpAddr]>, LookupError>;

#[derive(Debug, Clone)]
struct Cached {
    /// When `answer` was obtained.
    at: Instant,
    answer: Answer,
    /// No refresh before this (a refresh that just failed is not retried at once).
    retry_at: Instant,
}

#[derive(Default)]
struct State {
    cache: HashMap<String, Cached>,
    /// Lookups in progress, one per host; callers subscribe to its answer.
    inflight: HashMap<String, watch::Receiver<Option<Answer>>>,
}

/// A caching resolver with per-host single flight. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Resolver {
    lookup: Arc<Lookup>,
    state: Arc<Mutex<State>>,
    ttl: Duration,
    stale_for: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("ttl", &self.ttl)
            .field("stale_for", &self.stale_for)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// A resolver over the system configuration.
    pub(crate) fn new(ttl: Duration, stale_for: Duration, timeout: Duration) -> Self {
        Self::with_lookup(ttl, stale_for, timeout, dns::system_lookup())
    }

    /// A resolver over another lookup function (tests of the bounds).
    pub(crate) fn with_lookup(
        ttl: Duration,
        stale_for: Duration,
        timeout: Duration,
        lookup: Arc<Lookup>,
    ) -> Self {
        Self {
            lookup,
            state: Arc::new(Mutex::new(State::default())),
            ttl,
            stale_for,
            timeout,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The addresses of `host`, from the cache when fresh (or stale within its bound).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when no answer came within the timeout; [`Error::Connect`] when the
    /// name does not resolve.
    pub(crate) async fn resolve(&self, host: &str) -> Result<Arc<[IpAddr]>, Error> {
        let host = host.to_ascii_lowercase();
        let mut answer = {
            let mut st = self.state();
            if let Some(c) = st.cache.get(&host) {
                let age = c.at.elapsed();
                match &c.answer {
                    Ok(addrs) if age < self.ttl => return Ok(addrs.clone()),
                    Ok(addrs) if age < self.ttl + self.stale_for => {
                        let addrs = addrs.clone();
                        if Instant::now() >= c.retry_at {
                            self.join_or_start(&mut st, &host); // refresh in the background
                        }
                        return Ok(addrs);
                    }
                    Err(e) if age < NEGATIVE_TTL => return Err(e.clone().into_error(&host)),
                    _ => {}
                }
            }
            self.join_or_start(&mut st, &host)
        };
        let wait = answer.wait_for(Option::is_some);
        match tokio::time::timeout(self.timeout, wait).await {
            Ok(Ok(got)) => match got.clone() {
                Some(a) => a.map_err(|e| e.into_error(&host)),
                None => Err(Error::Timeout),
            },
            Ok(Err(_)) => Err(Error::Connect("resolver task ended".into())),
            Err(_) => Err(Error::Timeout),
        }
    }

    /// The receiver of `host`'s lookup in progress, starting one when there is none.
    fn join_or_start(&self, st: &mut State, host: &str) -> watch::Receiver<Option<Answer>> {
        // A lookup whose task ended without an answer (a panic, or its runtime shut down while
        // this resolver lives on) is replaced, so the host is never stuck on a dead lookup.
        if let Some(rx) = st.inflight.get(host).filter(|rx| rx.has_changed().is_ok()) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        st.inflight.insert(host.to_owned(), rx.clone());
        let this = self.clone();
        let host = host.to_owned();
        tokio::spawn(async move {
            let answer = this.lookup_bounded(&host).await;
            let answer = this.store(&host, answer);
            let _ = tx.send(Some(answer));
        });
        rx
    }

    /// One lookup, cut at the timeout (dropping it closes its sockets).
    async fn lookup_bounded(&self, host: &str) -> Answer {
        match tokio::time::timeout(self.timeout, (self.lookup)(host)).await {
            Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs.into()),
            Ok(Ok(_)) => Err(LookupError::NotFound("no address".into())),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(LookupError::Timeout),
        }
    }

    /// Records a lookup's answer and returns what callers get: a transient failure keeps a
    /// good answer that is still within its stale bound.
    fn store(&self, host: &str, answer: Answer) -> Answer {
        let now = Instant::now();
        let mut st = self.state();
        st.inflight.remove(host);
        if let (Err(e), Some(prev)) = (&answer, st.cache.get_mut(host)) {
            let usable = prev.at.elapsed() < self.ttl + self.stale_for;
            if e.is_transient() && usable && prev.answer.is_ok() {
                tracing::debug!(host, error = ?e, "DNS refresh failed; serving the last good answer");
                prev.retry_at = now + NEGATIVE_TTL;
                return prev.answer.clone();
            }
        }
        if st.cache.len() >= MAX_CACHED && !st.cache.contains_key(host) {
            self.make_room(&mut st.cache);
        }
        st.cache.insert(
            host.to_owned(),
            Cached {
                at: now,
                answer: answer.clone(),
                retry_at: now,
            },
        );
        answer
    }

    /// Drops failures and answers past their stale bound; when good answers alone fill the
    /// cache (many names that resolve), the older half of them.
    fn make_room(&self, cache: &mut HashMap<String, Cached>) {
        let keep = self.ttl + self.stale_for;
        cache.retain(|_, c| c.answer.is_ok() && c.at.elapsed() < keep);
        if cache.len() >= MAX_CACHED / 2 {
            let mut ages: Vec<Instant> = cache.values().map(|c| c.at).collect();
            let mid = ages.len() / 2;
            let (_, median, _) = ages.select_nth_unstable(mid);
            let median = *median;
            cache.retain(|_, c| c.at > median);
        }
    }
}

#[cfg(test)]
mod tests;

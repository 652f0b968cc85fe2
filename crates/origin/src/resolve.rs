//! Hostname resolution for the URL policy and the HTTP client, off the shared blocking pool.
//!
//! The system resolver (`getaddrinfo`) blocks its thread for as long as the name server takes;
//! one that never answers holds a thread for tens of seconds. On tokio's blocking pool those
//! lookups would stall every image decode. Here:
//! - each lookup runs on a thread of its own, at most [`MAX_LOOKUPS`] at once, and a caller
//!   waits at most the connect timeout (then a 408);
//! - one lookup per host at a time: concurrent callers for a host share it, so a few slow
//!   names cannot take every lookup thread;
//! - answers are reused for [`DEFAULT_DNS_CACHE_TTL`], then served while a refresh runs (for
//!   up to [`STALE_FOR`]), and failures are remembered for [`NEGATIVE_TTL`], so the policy
//!   check that precedes every shared-cache lookup costs a map lookup.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, watch};

use crate::error::Error;

/// Lookups running at once; more wait for a free one (within their timeout).
pub const MAX_LOOKUPS: usize = 8;
/// How long a resolution is reused. Default of [`crate::OriginConfig::dns_cache_ttl`].
pub const DEFAULT_DNS_CACHE_TTL: Duration = Duration::from_secs(5);
/// How long an expired answer is still served while a refresh runs.
pub const STALE_FOR: Duration = Duration::from_secs(60);
/// How long a failed resolution is remembered.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(2);
/// Names kept at most; a full cache is emptied (simple, and rare: hosts repeat).
const MAX_CACHED: usize = 4096;

/// The outcome of one lookup: addresses, or why there are none.
type Answer = Result<Arc<[IpAddr]>, LookupError>;

#[derive(Debug, Clone)]
enum LookupError {
    /// The name server did not answer in time (or no lookup thread was free).
    Timeout,
    /// The name does not resolve.
    Failed(String),
}

impl LookupError {
    fn into_error(self, host: &str) -> Error {
        match self {
            // A slow name server is not the client's fault: a timeout, like a slow origin.
            Self::Timeout => Error::Timeout,
            Self::Failed(reason) => {
                Error::Connect(format!("DNS lookup of {host} failed: {reason}"))
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Cached {
    at: Instant,
    answer: Answer,
}

type Lookup = dyn Fn(&str) -> std::io::Result<Vec<IpAddr>> + Send + Sync;

#[derive(Default)]
struct State {
    cache: HashMap<String, Cached>,
    /// Lookups in progress, one per host; callers subscribe to its answer.
    inflight: HashMap<String, watch::Receiver<Option<Answer>>>,
}

/// A bounded, caching resolver. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Resolver {
    lookup: Arc<Lookup>,
    permits: Arc<Semaphore>,
    state: Arc<Mutex<State>>,
    ttl: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The system resolver.
fn system_lookup(host: &str) -> std::io::Result<Vec<IpAddr>> {
    Ok((host, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
}

impl Resolver {
    pub(crate) fn new(ttl: Duration, timeout: Duration) -> Self {
        Self::with_lookup(ttl, timeout, Arc::new(system_lookup))
    }

    /// A resolver over another lookup function (tests of the bounds).
    pub(crate) fn with_lookup(ttl: Duration, timeout: Duration, lookup: Arc<Lookup>) -> Self {
        Self {
            lookup,
            permits: Arc::new(Semaphore::new(MAX_LOOKUPS)),
            state: Arc::new(Mutex::new(State::default())),
            ttl,
            timeout,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The addresses of `host`, from the cache when fresh (or stale while it refreshes).
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
                    Ok(addrs) if age < self.ttl + STALE_FOR => {
                        let addrs = addrs.clone();
                        self.join_or_start(&mut st, &host); // refresh in the background
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
        if let Some(rx) = st.inflight.get(host) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        st.inflight.insert(host.to_owned(), rx.clone());
        let this = self.clone();
        let host = host.to_owned();
        tokio::spawn(async move {
            let answer = this.lookup_bounded(&host).await;
            let mut st = this.state();
            st.inflight.remove(&host);
            if st.cache.len() >= MAX_CACHED {
                st.cache.clear();
            }
            st.cache.insert(
                host,
                Cached {
                    at: Instant::now(),
                    answer: answer.clone(),
                },
            );
            let _ = tx.send(Some(answer));
        });
        rx
    }

    /// One lookup on a thread of its own, bounded by [`MAX_LOOKUPS`] and the timeout. The
    /// permit travels with the thread: a lookup stuck in the name server keeps its place
    /// until it returns, so stuck lookups never take more than MAX_LOOKUPS threads.
    async fn lookup_bounded(&self, host: &str) -> Answer {
        let attempt = async {
            let permit = self.permits.clone().acquire_owned().await.ok()?;
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (f, name) = (self.lookup.clone(), host.to_owned());
            std::thread::Builder::new()
                .name("mmcache-dns".into())
                .spawn(move || {
                    let _ = tx.send(f(&name));
                    drop(permit);
                })
                .ok()?;
            rx.await.ok()
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Some(Ok(addrs))) if !addrs.is_empty() => Ok(addrs.into()),
            Ok(Some(Ok(_))) => Err(LookupError::Failed("no address".into())),
            Ok(Some(Err(e))) => Err(LookupError::Failed(e.to_string())),
            Ok(None) => Err(LookupError::Failed("no lookup thread".into())),
            Err(_) => Err(LookupError::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(
        calls: &Arc<AtomicUsize>,
        f: impl Fn(&str) -> std::io::Result<Vec<IpAddr>> + Send + Sync + 'static,
    ) -> Arc<Lookup> {
        let calls = calls.clone();
        Arc::new(move |h| {
            calls.fetch_add(1, Ordering::Relaxed);
            f(h)
        })
    }

    #[tokio::test]
    async fn answers_are_cached_and_concurrent_callers_share_one_lookup() {
        let calls = Arc::new(AtomicUsize::new(0));
        let r = Resolver::with_lookup(
            Duration::from_secs(60),
            Duration::from_secs(5),
            counting(&calls, |_| {
                std::thread::sleep(Duration::from_millis(50));
                Ok(vec![IpAddr::from([93, 184, 216, 34])])
            }),
        );
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let r = r.clone();
                tokio::spawn(async move { r.resolve("Example.COM").await.map(|a| a.len()) })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), 1);
        }
        assert_eq!(r.resolve("example.com").await.unwrap().len(), 1);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_silent_name_server_costs_the_timeout_and_few_threads() {
        // Every lookup hangs for 2 s. Callers give up after 100 ms with a 408; distinct hosts
        // hold at most MAX_LOOKUPS threads, and the same host never more than one.
        let calls = Arc::new(AtomicUsize::new(0));
        let r = Resolver::with_lookup(
            Duration::from_secs(60),
            Duration::from_millis(100),
            counting(&calls, |_| {
                std::thread::sleep(Duration::from_secs(2));
                Ok(vec![])
            }),
        );
        let mut tasks = Vec::new();
        for i in 0..3 * MAX_LOOKUPS {
            let r = r.clone();
            let host = format!("h{}.test", i % (2 * MAX_LOOKUPS));
            tasks.push(tokio::spawn(async move { r.resolve(&host).await }));
        }
        for t in tasks {
            let err = t.await.unwrap().unwrap_err();
            assert!(matches!(err, Error::Timeout), "{err}");
            assert_eq!(err.http_status(), 408);
        }
        assert!(calls.load(Ordering::Relaxed) <= MAX_LOOKUPS);
    }

    #[tokio::test]
    async fn failures_are_remembered_briefly_and_stale_answers_serve_while_refreshing() {
        let calls = Arc::new(AtomicUsize::new(0));
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = fail.clone();
        let r = Resolver::with_lookup(
            Duration::from_millis(50),
            Duration::from_secs(5),
            counting(&calls, move |_| {
                if flag.load(Ordering::Relaxed) {
                    Err(std::io::Error::other("NXDOMAIN"))
                } else {
                    Ok(vec![IpAddr::from([192, 0, 2, 1])])
                }
            }),
        );
        for _ in 0..5 {
            assert_eq!(r.resolve("gone.test").await.unwrap_err().http_status(), 400);
        }
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "the failure is remembered"
        );
        fail.store(false, Ordering::Relaxed);
        tokio::time::sleep(NEGATIVE_TTL + Duration::from_millis(50)).await;
        assert!(r.resolve("gone.test").await.is_ok());
        // Expired but within the stale window: served at once, refreshed behind.
        tokio::time::sleep(Duration::from_millis(80)).await;
        fail.store(true, Ordering::Relaxed);
        assert!(r.resolve("gone.test").await.is_ok(), "stale answer served");
    }
}

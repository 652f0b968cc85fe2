//! Hostname resolution for the URL policy and the HTTP client, off the shared blocking pool.
//!
//! The system resolver (`getaddrinfo`) blocks its thread for as long as the name server takes;
//! one that never answers holds a thread for tens of seconds. On tokio's blocking pool those
//! lookups would stall every image decode. Here each lookup runs on a thread of its own, at most
//! [`MAX_LOOKUPS`] at once, and the caller waits at most the connect timeout. Answers are kept
//! for a few seconds ([`DEFAULT_DNS_CACHE_TTL`]), so the policy check that precedes every
//! shared-cache lookup costs a map lookup, not a resolution.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, oneshot};

use crate::error::Error;

/// Lookups running at once; more wait for a free one (within their timeout).
pub const MAX_LOOKUPS: usize = 8;
/// How long a resolution is reused. Default of [`crate::OriginConfig::dns_cache_ttl`].
pub const DEFAULT_DNS_CACHE_TTL: Duration = Duration::from_secs(5);
/// Names kept at most; a full cache is emptied (simple, and rare: hosts repeat).
const MAX_CACHED: usize = 4096;

/// Resolved addresses by lower-case host, with the time they were resolved.
type Cache = Mutex<HashMap<String, (Instant, Arc<[IpAddr]>)>>;

type Lookup = dyn Fn(&str) -> std::io::Result<Vec<IpAddr>> + Send + Sync;

/// A bounded, caching resolver. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Resolver {
    lookup: Arc<Lookup>,
    permits: Arc<Semaphore>,
    cache: Arc<Cache>,
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
            cache: Arc::new(Mutex::new(HashMap::new())),
            ttl,
            timeout,
        }
    }

    /// The addresses of `host`, from the cache when fresh.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the name does not resolve, or not within the timeout.
    pub(crate) async fn resolve(&self, host: &str) -> Result<Arc<[IpAddr]>, Error> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(addrs) = self.cached(&host) {
            return Ok(addrs);
        }
        let lookup = async {
            // The permit travels with the thread: a lookup stuck in the name server keeps its
            // place until it returns, so stuck lookups never take more than MAX_LOOKUPS threads.
            let permit = self
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| Error::Connect("resolver closed".into()))?;
            let (tx, rx) = oneshot::channel();
            let (f, name) = (self.lookup.clone(), host.clone());
            std::thread::Builder::new()
                .name("mmcache-dns".into())
                .spawn(move || {
                    let _ = tx.send(f(&name));
                    drop(permit);
                })
                .map_err(|e| Error::Connect(format!("resolver thread: {e}")))?;
            rx.await
                .map_err(|_| Error::Connect("resolver thread died".into()))?
                .map_err(|e| Error::Connect(format!("DNS lookup of {host} failed: {e}")))
        };
        let addrs = tokio::time::timeout(self.timeout, lookup)
            .await
            .map_err(|_| Error::Connect(format!("DNS lookup of {host} timed out")))??;
        if addrs.is_empty() {
            return Err(Error::Connect(format!("{host} has no address")));
        }
        let addrs: Arc<[IpAddr]> = addrs.into();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(host, (Instant::now(), addrs.clone()));
        Ok(addrs)
    }

    fn cached(&self, host: &str) -> Option<Arc<[IpAddr]>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(host)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, addrs)| addrs.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn answers_are_cached_for_the_ttl() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let r = Resolver::with_lookup(
            Duration::from_secs(60),
            Duration::from_secs(5),
            Arc::new(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
                Ok(vec![IpAddr::from([93, 184, 216, 34])])
            }),
        );
        for _ in 0..5 {
            assert_eq!(r.resolve("Example.COM.").await.unwrap().len(), 1);
        }
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_name_server_that_never_answers_costs_the_timeout_and_few_threads() {
        // Every lookup hangs for 2 s (a silent name server). Callers give up after 100 ms;
        // at most MAX_LOOKUPS threads are held, and the others never start one.
        let started = Arc::new(AtomicUsize::new(0));
        let counted = started.clone();
        let r = Resolver::with_lookup(
            Duration::from_secs(60),
            Duration::from_millis(100),
            Arc::new(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_secs(2));
                Ok(vec![])
            }),
        );
        let mut tasks = Vec::new();
        for i in 0..3 * MAX_LOOKUPS {
            let r = r.clone();
            tasks.push(tokio::spawn(async move {
                r.resolve(&format!("h{i}.test")).await
            }));
        }
        for t in tasks {
            let err = t.await.unwrap().unwrap_err();
            assert!(err.to_string().contains("timed out"), "{err}");
        }
        assert!(started.load(Ordering::Relaxed) <= MAX_LOOKUPS);
    }
}

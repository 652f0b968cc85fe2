//! The origin step: the URL policy check, DNS included, and the fetch of an admitted URL.

use std::time::Instant;

use ::metrics::{Counter, Histogram};
use bytes::Bytes;
use mmcache_origin::{Admitted, Origin};

use crate::config::Config;
use crate::error::Result;
use crate::metrics::{self, PerLabel};

/// The origin client.
pub(crate) struct OriginStep {
    origin: Origin,
    /// This worker's policy is looser than the default (internal access, or an allowlist
    /// that other workers may not share): see [`Fetched::shareable`].
    loose: bool,
    /// [`metrics::ORIGIN_FETCH_DURATION`] by outcome.
    duration: PerLabel<Histogram>,
    /// [`metrics::ORIGIN_FETCH_BYTES`].
    bytes: Counter,
}

/// An origin's bytes.
pub(super) struct Fetched {
    pub(super) bytes: Bytes,
    /// Whether the bytes may go to the disk and shared tiers. Bytes reached through redirects
    /// by a worker with a looser policy than the default stay out of the tiers other workers
    /// read: their hops might be ones those workers must refuse, and a cache answers for the
    /// first URL only.
    pub(super) shareable: bool,
}

impl OriginStep {
    pub(crate) fn new(origin: Origin, config: &Config) -> Self {
        Self {
            origin,
            loose: config.allow_internal
                || config.allow_http
                || !config.allowed_media_domains.is_empty(),
            duration: PerLabel::new(
                metrics::Outcome::ALL,
                |o: metrics::Outcome| ::metrics::histogram!(metrics::ORIGIN_FETCH_DURATION.name, "outcome" => o.as_str()),
            ),
            bytes: ::metrics::counter!(metrics::ORIGIN_FETCH_BYTES.name),
        }
    }

    pub(crate) fn client(&self) -> &Origin {
        &self.origin
    }

    /// Checks `url` against the policy, hostnames resolved (the answers are cached briefly by
    /// the client, which then connects to the same addresses): the URL it admits, parsed and
    /// checked once, is the one every tier below fetches.
    pub(super) async fn admit(&self, url: &str) -> Result<Admitted> {
        Ok(self.origin.check_resolved(url).await?)
    }

    pub(super) async fn fetch(&self, url: &Admitted) -> Result<Fetched> {
        let started = Instant::now();
        let fetched = self.origin.fetch_admitted(url).await;
        let outcome = if fetched.is_ok() {
            metrics::Outcome::Ok
        } else {
            metrics::Outcome::Error
        };
        self.duration
            .get(outcome as usize)
            .record(started.elapsed().as_secs_f64());
        let fetched = fetched?;
        self.bytes.increment(fetched.bytes.len() as u64);
        Ok(Fetched {
            shareable: fetched.redirects == 0 || !self.loose,
            bytes: fetched.bytes,
        })
    }
}

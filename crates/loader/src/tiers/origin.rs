//! The origin step: the fetch of an admitted URL and the decode of its bytes.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mmcache_decode::DecodedImage;
use mmcache_origin::Admitted;

use super::Tiers;
use crate::error::Result;
use crate::loaded::{Loaded, Outcome, Source};
use crate::metrics;

impl Tiers {
    /// The origin and the decode alone (a load that bypasses every cache layer).
    pub(super) async fn fetch_and_decode(&self, url: &str) -> Outcome {
        let url = self.origin.check_resolved(url).await?;
        let fetched = self.fetch_and_decode_bytes(&url).await?;
        let len = fetched.bytes.len();
        Ok(Loaded::decoded(fetched.image, Source::Origin, len))
    }

    pub(super) async fn fetch_and_decode_bytes(&self, url: &Admitted) -> Result<FromOrigin> {
        let started = Instant::now();
        let fetched = self.origin.fetch_admitted(url).await;
        let outcome = if fetched.is_ok() {
            metrics::Outcome::Ok
        } else {
            metrics::Outcome::Error
        };
        self.metrics
            .origin_duration(outcome)
            .record(started.elapsed().as_secs_f64());
        let fetched = fetched?;
        self.metrics
            .origin_bytes
            .increment(fetched.bytes.len() as u64);
        let image = self.decode(fetched.bytes.clone()).await?;
        // Bytes reached through redirects by a worker with a looser policy than the default
        // (internal access, or an allowlist that other workers may not share) stay out of the
        // tiers other workers read: their hops might be ones those workers must refuse, and a
        // cache answers for the first URL only.
        let loose = self.config.allow_internal || !self.config.allowed_media_domains.is_empty();
        Ok(FromOrigin {
            image,
            bytes: fetched.bytes,
            shareable: fetched.redirects == 0 || !loose,
            hedged: false,
        })
    }
}

/// An image from the origin, with its bytes.
pub(super) struct FromOrigin {
    pub(super) image: Arc<DecodedImage>,
    pub(super) bytes: Bytes,
    /// Whether the bytes may go to the disk and shared tiers (see `fetch_and_decode_bytes`).
    pub(super) shareable: bool,
    /// Fetched beside a GET that did not answer in time: its node is slow or hung, so the
    /// SET goes to the background at once instead of waiting on that node too.
    pub(super) hedged: bool,
}

impl FromOrigin {
    pub(super) fn hedged(self) -> Self {
        Self {
            hedged: true,
            ..self
        }
    }
}

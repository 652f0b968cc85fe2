//! One call's whole path: a `data:` URL, the bypass without a usable scope, the decoded cache,
//! the load in flight; and the count of its outcome under the tier that served it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mmcache_decode::{DecodeProfile, DecodedImage as Image, Variant};
use mmcache_scope::{CacheIdentity, Scope};

use super::{Tiers, Want};
use crate::error::Result;
use crate::loaded::{Loaded, Outcome, Source};
use crate::metrics;
use mmcache_origin::data_url;

impl Tiers {
    /// The profile of this loader's own loads (`load`, `load_detailed`).
    pub(crate) fn default_want(&self) -> Want {
        Want {
            profile: self.default_profile,
            variant: Variant::DEFAULT,
        }
    }

    /// What a load in `profile` wants.
    pub(crate) fn want(&self, profile: &DecodeProfile) -> Want {
        Want {
            profile: *profile,
            variant: profile.variant(&self.default_profile),
        }
    }

    /// Loads `url` within `scope`, decoded as `want` asks (see
    /// [`Loader::load_detailed`](crate::Loader::load_detailed)).
    pub(crate) async fn load(
        self: &Arc<Self>,
        url: &str,
        scope: Option<&Scope>,
        want: Want,
    ) -> Outcome {
        if data_url::is_data_url(url) {
            return self.record(Source::Data, self.load_data_url(url, want).await);
        }
        let Some(identity) = self.identity(url, scope) else {
            // Scoped mode without a usable scope: no cache layer at all, every limit still applies.
            self.metrics.bypass.increment(1);
            let started = Instant::now();
            let result = self.within_deadline(self.bypass(url, want)).await;
            self.observe(Source::Origin, started);
            return self.record(Source::Origin, result);
        };
        if let Some(image) = self.memory.get(&identity, want.variant) {
            return Ok(Loaded {
                image,
                source: Source::Memory,
                encoded_len: None,
            });
        }
        let started = Instant::now();
        let (outcome, joined) = self.join_or_start(identity, url, want).await;
        // A joined load's image came from another caller's load: none of its bytes were read
        // here.
        let outcome = outcome.map(|loaded| {
            if joined {
                Loaded {
                    source: Source::Inflight,
                    encoded_len: None,
                    ..loaded
                }
            } else {
                loaded
            }
        });
        let source = match &outcome {
            Ok(loaded) => loaded.source,
            Err(_) if joined => Source::Inflight,
            Err(_) => Source::Origin,
        };
        self.observe(source, started);
        self.record(source, outcome)
    }

    /// The memory hit of [`Tiers::load`], without awaiting (see
    /// [`Loader::load_cached`](crate::Loader::load_cached)).
    pub(crate) fn load_cached(
        &self,
        url: &str,
        scope: Option<&Scope>,
        want: Want,
    ) -> Option<Arc<Image>> {
        if data_url::is_data_url(url) {
            return None;
        }
        self.memory.get(&self.identity(url, scope)?, want.variant)
    }

    /// Decodes `bytes` as `want` asks, within the decode budget, with no cache layer (see
    /// [`Loader::decode_as`](crate::Loader::decode_as)).
    pub(crate) async fn decode_bytes(&self, bytes: Bytes, want: Want) -> Result<Arc<Image>> {
        if bytes.len() as u64 > self.config.max_file_size_bytes {
            return Err(crate::error::Error::Origin(
                mmcache_origin::Error::TooLarge {
                    limit: self.config.max_file_size_bytes,
                },
            ));
        }
        self.decode.image(bytes, None, want).await
    }

    /// The identity `url` is cached under, `None` in scoped mode without a usable scope.
    fn identity(&self, url: &str, scope: Option<&Scope>) -> Option<CacheIdentity> {
        CacheIdentity::resolve(self.config.session_scoped, url, scope)
    }

    async fn load_data_url(&self, url: &str, want: Want) -> Outcome {
        let bytes = data_url::decode_payload(url, self.config.max_file_size_bytes)?;
        let len = bytes.len();
        let image = self.decode.image(Bytes::from(bytes), None, want).await?;
        Ok(Loaded::decoded(image, Source::Data, len))
    }

    fn observe(&self, source: Source, started: Instant) {
        self.metrics
            .load_duration(source)
            .record(started.elapsed().as_secs_f64());
    }

    /// Counts a load's outcome under `source` (a failure's: the tier it was headed for).
    fn record(&self, source: Source, outcome: Outcome) -> Outcome {
        let label = if outcome.is_ok() {
            metrics::Outcome::Ok
        } else {
            metrics::Outcome::Error
        };
        self.metrics.loads(source, label).increment(1);
        outcome
    }
}

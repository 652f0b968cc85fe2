//! The decode step: bytes in, image out. The probe (refusing what cannot be an image), content
//! dedup (bytes already decoded in the load's scope, under another URL, are not decoded
//! again: the load shares the image), the decode budget, then the decode, in place when
//! small, else on the blocking pool.

use std::sync::Arc;
use std::time::Instant;

use ::metrics::{Counter, Histogram};
use bytes::Bytes;
use mmcache_decode::{
    ColorPolicy, DecodeLimits, DecodedCache, DecodedImage, Fallback, ImageFormat,
};
use mmcache_scope::CacheIdentity;

use crate::budget::DecodeBudget;
use crate::error::{Error, Result};
use crate::metrics::{self, PerLabel};

use super::Want;

/// The limits and the budget of every decode.
pub(crate) struct DecodeStep {
    limits: DecodeLimits,
    budget: DecodeBudget,
    /// The decoded cache, for content dedup (the memory step's).
    decoded: Arc<DecodedCache>,
    /// [`metrics::DECODE_DURATION`] by format.
    duration: PerLabel<Histogram>,
    /// [`metrics::CONTENT_SHARED`].
    content_shared: Counter,
}

impl DecodeStep {
    pub(crate) fn new(
        limits: DecodeLimits,
        budget: DecodeBudget,
        decoded: Arc<DecodedCache>,
    ) -> Self {
        Self {
            limits,
            budget,
            decoded,
            duration: PerLabel::new(
                ImageFormat::ALL,
                |f: ImageFormat| ::metrics::histogram!(metrics::DECODE_DURATION.name, "format" => f.as_str()),
            ),
            content_shared: ::metrics::counter!(metrics::CONTENT_SHARED.name),
        }
    }

    /// Reads the headers (refusing what cannot be an image), reserves the decode's memory in
    /// the budget, then decodes on the blocking pool: a large image is milliseconds of CPU.
    /// `within`: the identity a load fills, whose scope may already hold an image of these
    /// bytes (`None`, outside a load task: data URLs and loads bypassing the caches never
    /// share). `want`: the decode profile; with [`Fallback::Caller`] a refusal comes back as
    /// an undecoded image ([`mmcache_decode::hand_back`]).
    ///
    /// [`Fallback::Caller`]: mmcache_decode::Fallback::Caller
    pub(super) async fn image(
        &self,
        bytes: Bytes,
        within: Option<&CacheIdentity>,
        want: Want,
    ) -> Result<Arc<DecodedImage>> {
        let profile = want.profile;
        if profile.color == ColorPolicy::Encoded {
            return Ok(Arc::new(mmcache_decode::encoded(&bytes)));
        }
        match self.decode(bytes.clone(), within, want).await {
            Err(Error::Decode(e)) if profile.fallback == Fallback::Caller => {
                Ok(Arc::new(mmcache_decode::hand_back(bytes, e, &profile)?))
            }
            other => other,
        }
    }

    async fn decode(
        &self,
        bytes: Bytes,
        within: Option<&CacheIdentity>,
        want: Want,
    ) -> Result<Arc<DecodedImage>> {
        /// Headers of smaller files are read in place; larger ones take a scan of the bytes.
        const INLINE_PROBE_BYTES: usize = 256 << 10;
        let profile = want.profile;
        let limits = self.limits.with_layout(profile.layout);
        let started = Instant::now();
        let probe = if bytes.len() <= INLINE_PROBE_BYTES {
            mmcache_decode::probe(&bytes, &limits)?
        } else {
            let bytes = bytes.clone();
            blocking(move || mmcache_decode::probe(&bytes, &limits)).await??
        };
        // The same bytes already decoded in this load's scope (under another URL), in the same
        // profile: share it.
        if let Some(image) = within.and_then(|identity| {
            self.decoded
                .get_content_as(identity, &probe.content_key, want.variant)
        }) {
            self.content_shared.increment(1);
            return Ok(image);
        }
        /// Images this small decode in well under a millisecond: in place, without the hop
        /// to the blocking pool (which costs about as much as the decode itself).
        const INLINE_DECODE_PIXELS: u64 = 256 * 256;
        let permit = self
            .budget
            .acquire(mmcache_decode::memory_for(&probe, &profile))
            .await?;
        let small = u64::from(probe.width) * u64::from(probe.height) <= INLINE_DECODE_PIXELS
            && bytes.len() <= INLINE_PROBE_BYTES;
        let image = if small {
            let image = mmcache_decode::decode_as(&bytes, &probe, &limits, &profile);
            drop(permit);
            image?
        } else {
            // The permit moves into the decode: if this future is dropped (a hedge won), the
            // decode still runs to its end on the blocking pool, and its memory stays counted.
            blocking(move || {
                let image = mmcache_decode::decode_as(&bytes, &probe, &limits, &profile);
                drop(permit);
                image
            })
            .await??
        };
        if let Some(format) = image.format() {
            self.duration
                .get(format as usize)
                .record(started.elapsed().as_secs_f64());
        }
        Ok(Arc::new(image))
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("decode task failed: {e}")))
}

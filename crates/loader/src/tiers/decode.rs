//! The decode of a tier's bytes: the probe (refusing what cannot be an image), the decode
//! budget, then the decode, in place when small, else on the blocking pool.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mmcache_decode::DecodedImage;

use super::Tiers;
use crate::error::{Error, Result};

impl Tiers {
    /// Reads the headers (refusing what cannot be an image), reserves the decode's memory in
    /// the budget, then decodes on the blocking pool: a large image is milliseconds of CPU.
    pub(super) async fn decode(&self, bytes: Bytes) -> Result<Arc<DecodedImage>> {
        /// Headers of smaller files are read in place; larger ones take a scan of the bytes.
        const INLINE_PROBE_BYTES: usize = 256 << 10;
        let limits = self.limits;
        let started = Instant::now();
        let probe = if bytes.len() <= INLINE_PROBE_BYTES {
            mmcache_decode::probe(&bytes, &limits)?
        } else {
            let bytes = bytes.clone();
            blocking(move || mmcache_decode::probe(&bytes, &limits)).await??
        };
        // The same bytes already decoded in this load's scope (under another URL): share it.
        if let Some(image) = self.shared_content(&probe.content_key) {
            return Ok(image);
        }
        /// Images this small decode in well under a millisecond: in place, without the hop
        /// to the blocking pool (which costs about as much as the decode itself).
        const INLINE_DECODE_PIXELS: u64 = 256 * 256;
        let permit = self.budget.acquire(probe.memory_bytes).await?;
        let small = u64::from(probe.width) * u64::from(probe.height) <= INLINE_DECODE_PIXELS
            && bytes.len() <= INLINE_PROBE_BYTES;
        let image = if small {
            let image = mmcache_decode::decode_probed(&bytes, &probe, &limits);
            drop(permit);
            image?
        } else {
            // The permit moves into the decode: if this future is dropped (a hedge won), the
            // decode still runs to its end on the blocking pool, and its memory stays counted.
            blocking(move || {
                let image = mmcache_decode::decode_probed(&bytes, &probe, &limits);
                drop(permit);
                image
            })
            .await??
        };
        if let Some(format) = image.format() {
            self.metrics
                .decode_duration(format)
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

//! The demo's encoder phase: each worker loads an image and then asks for its embedding, as a
//! multimodal worker does before prefill. It counts encoder calls per image, with each worker
//! on its own and with the workers sharing the fleet tiers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mmcache_loader::Loader;
use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput};

use crate::common::{Rng, Zipf};

/// A small vision encoder's forward pass.
const ENCODER: Duration = Duration::from_millis(20);
const MODEL: &str = "demo/encoder@max_pixels=1003520";

/// One row: encoder calls across the fleet and per image it touched.
pub(super) struct EncoderRow {
    pub(super) name: &'static str,
    pub(super) calls: usize,
    pub(super) images: usize,
    pub(super) failures: usize,
}

/// Runs `requests` per worker, Zipf(1.1) over `urls`, with `lanes` concurrent requests each.
pub(super) async fn phase(
    name: &'static str,
    loaders: &[Loader],
    urls: Arc<Vec<String>>,
    requests: usize,
    lanes: usize,
) -> EncoderRow {
    let calls = Arc::new(AtomicUsize::new(0));
    let zipf = Arc::new(Zipf::new(urls.len(), 1.1));
    let mut tasks = tokio::task::JoinSet::new();
    for (w, loader) in loaders.iter().enumerate() {
        for lane in 0..lanes {
            let (loader, urls, zipf, calls) =
                (loader.clone(), urls.clone(), zipf.clone(), calls.clone());
            tasks.spawn(async move {
                let mut rng = Rng::new(7 ^ ((w as u64) << 32) ^ (lane as u64 + 1));
                let mut seen = Vec::new();
                let mut failures = 0;
                for _ in 0..requests.div_ceil(lanes) {
                    let image = zipf.sample(&mut rng);
                    seen.push(image);
                    let Ok(pixels) = loader.load(&urls[image], None).await else {
                        failures += 1;
                        continue;
                    };
                    // Keyed by content: the digest the load took of the encoded bytes.
                    let key = EmbeddingKeyInput::content(&*pixels);
                    let calls = calls.clone();
                    let encode = move || async move {
                        calls.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(ENCODER).await;
                        Embedding::from_f32(vec![64, 64], vec![0.5; 64 * 64])
                    };
                    let got = loader
                        .embeddings()
                        .get_or_compute(&key, MODEL, None, encode)
                        .await;
                    failures += usize::from(got.is_err());
                }
                (seen, failures)
            });
        }
    }
    let mut images = std::collections::HashSet::new();
    let mut failures = 0;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((seen, f)) => {
                images.extend(seen);
                failures += f;
            }
            Err(_) => failures += 1,
        }
    }
    for l in loaders {
        l.shutdown(Duration::from_secs(5)).await;
    }
    EncoderRow {
        name,
        calls: calls.load(Ordering::Relaxed),
        images: images.len(),
        failures,
    }
}

pub(super) fn print(rows: &[EncoderRow]) {
    let title = format!("encoder calls ({} ms each)", ENCODER.as_millis());
    println!(
        "\n{title:<66} {:>6} {:>8} {:>10}",
        "calls", "images", "per image"
    );
    for r in rows {
        println!(
            "  {:<64} {:>6} {:>8} {:>10.2}",
            r.name,
            r.calls,
            r.images,
            r.calls as f64 / r.images.max(1) as f64
        );
    }
}

//! What the embedding fleet tests share: the model id, the values, a counted
//! `get_or_compute`, scratch directories.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mmcache_loader::Loader;
use mmcache_loader::embeddings::{DType, Embedding, EmbeddingKeyInput, EmbeddingSource};

pub(crate) const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";

/// A fresh temporary directory's path (not created), unique to this process and `name`.
pub(crate) fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mmcache-embf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// One 1024 px image in Qwen2.5-VL-7B: about 1300 tokens x 3584 x bf16 = 9.3 MB.
pub(crate) fn big() -> Embedding {
    let n = 1300 * 3584;
    let bits: Vec<u16> = (0..n).map(|i| (i % 65_000) as u16).collect();
    Embedding::from_u16_bits(DType::BF16, vec![1300, 3584], bits).unwrap()
}

pub(crate) fn small() -> Embedding {
    Embedding::from_f32(vec![4, 8], (0..32).map(|i| i as f32).collect()).unwrap()
}

/// `get_or_compute` of `key` with a compute that counts itself and returns `value`.
pub(crate) async fn get(
    loader: &Loader,
    key: &str,
    value: Embedding,
    computes: &Arc<AtomicUsize>,
) -> (Embedding, EmbeddingSource) {
    let c = computes.clone();
    let got = loader
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller(key),
            MODEL,
            None,
            move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(value)
            },
        )
        .await
        .expect("embedding");
    (got.embedding, got.source)
}

/// Shuts `loader` down, asserting its writes drained.
pub(crate) async fn settled(loader: Loader) {
    assert!(
        loader.shutdown(Duration::from_secs(20)).await,
        "writes drained"
    );
}

//! `Embeddings::find`: a lookup without a compute reads memory, then the fleet tiers (a real
//! directory, a real 3-master Redis Cluster), and keeps a tier hit in memory; what no tier has
//! is `None`, and nothing is computed or left behind.

use std::time::Duration;

use mmcache_loader::Loader;
use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput, EmbeddingSource};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";

fn value() -> Embedding {
    Embedding::from_f32(vec![4, 8], (0..32).map(|i| i as f32).collect()).unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mmcache-embfind-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

async fn compute_into(loader: &Loader, key: &EmbeddingKeyInput) {
    loader
        .embeddings()
        .get_or_compute(key, MODEL, None, || async { Ok::<_, String>(value()) })
        .await
        .expect("computed");
}

async fn source_of(loader: &Loader, key: &EmbeddingKeyInput) -> Option<EmbeddingSource> {
    let found = loader.embeddings().find(key, MODEL, None).await?;
    assert_eq!(found.embedding, value());
    Some(found.source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_reads_the_shared_tier_then_memory_and_never_computes() {
    let cluster = RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster");
    let key = EmbeddingKeyInput::caller("find-shared");
    let writer = Loader::builder()
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    compute_into(&writer, &key).await;
    assert!(
        writer.shutdown(Duration::from_secs(20)).await,
        "writes drained"
    );

    let reader = Loader::builder()
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    assert_eq!(
        source_of(&reader, &key).await,
        Some(EmbeddingSource::Shared)
    );
    assert_eq!(
        source_of(&reader, &key).await,
        Some(EmbeddingSource::Memory)
    );
    let unknown = EmbeddingKeyInput::caller("find-never-computed");
    assert!(
        reader
            .embeddings()
            .find(&unknown, MODEL, None)
            .await
            .is_none()
    );
    assert!(
        reader.embeddings().get(&unknown, MODEL, None).is_none(),
        "nothing was stored"
    );
    // Another model's key is another entry.
    assert!(
        reader
            .embeddings()
            .find(&key, "other-model", None)
            .await
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_reads_the_disk_tier() {
    let dir = scratch("disk");
    let key = EmbeddingKeyInput::caller("find-disk");
    let writer = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    compute_into(&writer, &key).await;
    assert!(
        writer.shutdown(Duration::from_secs(20)).await,
        "writes drained"
    );
    let reader = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    assert_eq!(source_of(&reader, &key).await, Some(EmbeddingSource::Disk));
    assert_eq!(
        source_of(&reader, &key).await,
        Some(EmbeddingSource::Memory)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_without_fleet_tiers_is_the_memory_lookup() {
    let loader = Loader::builder().build().unwrap();
    let key = EmbeddingKeyInput::caller("find-memory");
    assert!(loader.embeddings().find(&key, MODEL, None).await.is_none());
    compute_into(&loader, &key).await;
    assert_eq!(
        source_of(&loader, &key).await,
        Some(EmbeddingSource::Memory)
    );
}

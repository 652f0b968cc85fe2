//! Embeddings through the fleet tiers: a real directory for the disk tier, a real 3-master
//! Redis Cluster for the shared cache. Bad values (truncated, corrupt, another key's, a
//! missing chunk) are deleted and recomputed, never returned; a value over this reader's cap
//! is a miss that deletes nothing (embeddings_fleet_keep.rs has more).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mmcache_loader::embeddings::{
    Embedding, EmbeddingKeyInput, EmbeddingSource, disk_entry_name, shared_key,
};
use mmcache_loader::{Loader, LoaderBuilder, Scope};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

use crate::fleet_common::{MODEL, big, get, scratch, settled, small};

fn cluster() -> RedisCluster {
    RedisCluster::start(ClusterOptions::default()).expect("start a Redis Cluster")
}

fn with_cluster(c: &RedisCluster) -> LoaderBuilder {
    Loader::builder().shared_cache_url(c.url())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_tier_serves_other_loaders_and_replaces_a_corrupt_entry() {
    let dir = scratch("disk");
    let n = Arc::new(AtomicUsize::new(0));
    let a = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    assert_eq!(get(&a, "k", small(), &n).await.1, EmbeddingSource::Computed);
    settled(a).await;
    let b = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    let (e, source) = get(&b, "k", big(), &n).await;
    assert_eq!(
        (source, n.load(Ordering::SeqCst)),
        (EmbeddingSource::Disk, 1)
    );
    assert_eq!(e, small());
    // Flip one byte of the file: the entry is refused, removed, and computed again.
    let key = b
        .embeddings()
        .key(&EmbeddingKeyInput::caller("k"), MODEL, None)
        .unwrap();
    let path = b
        .disk_cache()
        .unwrap()
        .path_of_named(&disk_entry_name(&key));
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    // Truncated too, in another entry.
    let c = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    let (e, source) = get(&c, "k", small(), &n).await;
    assert_eq!(
        (source, n.load(Ordering::SeqCst)),
        (EmbeddingSource::Computed, 2)
    );
    assert_eq!(e, small());
    settled(c).await;
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    std::fs::write(&path, &std::fs::read(&path).unwrap()[..len - 1]).unwrap();
    let d = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    assert_eq!(get(&d, "k", small(), &n).await.1, EmbeddingSource::Computed);
    assert_eq!(n.load(Ordering::SeqCst), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_tier_chunks_a_large_value_over_slots_and_reads_it_back() {
    let cluster = cluster();
    let n = Arc::new(AtomicUsize::new(0));
    let a = with_cluster(&cluster).build().unwrap();
    assert_eq!(get(&a, "big", big(), &n).await.1, EmbeddingSource::Computed);
    settled(a).await;
    let key = {
        let l = with_cluster(&cluster).build().unwrap();
        l.embeddings()
            .key(&EmbeddingKeyInput::caller("big"), MODEL, None)
            .unwrap()
    };
    let manifest = cluster
        .get_raw(&shared_key(&key))
        .unwrap()
        .expect("manifest");
    assert!(manifest.starts_with(b"MMCC") && manifest.len() == 128);
    // 9.3 MB in chunks of the default size (36 of 256 KiB), on more than one master.
    let m = mmcache_decode::Manifest::decode(&manifest, &key, u64::MAX, u64::MAX).unwrap();
    assert_eq!(
        u64::from(m.chunk_bytes),
        mmcache_decode::DEFAULT_EMBEDDING_CHUNK_BYTES
    );
    assert!(m.count > 1 && m.total_len > 9_000_000, "{m:?}");
    let mut chunks = Vec::new();
    let mut masters = 0;
    for i in 0..3 {
        let keys = cluster.cli(i, &["KEYS", "mmcache:emb:v1:*:chunk"]).unwrap();
        let keys: Vec<String> = keys
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        masters += usize::from(!keys.is_empty());
        chunks.extend(keys);
    }
    assert_eq!(chunks.len(), m.count as usize, "{chunks:?}");
    assert!(masters >= 2, "chunks all on one master");
    let nothing = cluster.keys_on_masters("dynamo:mm:image:*");
    assert!(nothing.is_empty(), "image key space touched: {nothing:?}");
    let b = with_cluster(&cluster).build().unwrap();
    let (e, source) = get(&b, "big", small(), &n).await;
    assert_eq!(
        (source, n.load(Ordering::SeqCst)),
        (EmbeddingSource::Shared, 1)
    );
    assert_eq!(e, big());
    // A missing chunk: miss, manifest deleted, computed again (and written again).
    cluster.cli_cluster(&["DEL", &chunks[2]]).unwrap();
    let c = with_cluster(&cluster).build().unwrap();
    let (e, source) = get(&c, "big", big(), &n).await;
    assert_eq!(
        (source, n.load(Ordering::SeqCst)),
        (EmbeddingSource::Computed, 2)
    );
    assert_eq!(e, big());
    settled(c).await;
    let d = with_cluster(&cluster).build().unwrap();
    assert_eq!(get(&d, "big", small(), &n).await.1, EmbeddingSource::Shared);
    // A flipped byte in one chunk of that new write: the checksum, taken chunk by chunk as
    // they land, fails; the value is deleted and computed again, never returned.
    let rewritten: Vec<String> = cluster
        .keys_on_masters("mmcache:emb:v1:*:chunk")
        .into_iter()
        .filter(|k| !chunks.contains(k))
        .collect();
    assert_eq!(rewritten.len(), m.count as usize, "{rewritten:?}");
    let victim = &rewritten[rewritten.len() / 2];
    let mut chunk = cluster.get_raw(victim).unwrap().expect("chunk");
    chunk[1000] ^= 1;
    cluster.set_raw(victim, &chunk, None).unwrap();
    let f = with_cluster(&cluster).build().unwrap();
    let (e, source) = get(&f, "big", big(), &n).await;
    assert_eq!(
        (source, n.load(Ordering::SeqCst)),
        (EmbeddingSource::Computed, 3)
    );
    assert_eq!(e, big());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_corrupt_shared_values_are_deleted_and_oversized_ones_left() {
    let cluster = cluster();
    let n = Arc::new(AtomicUsize::new(0));
    let a = with_cluster(&cluster).build().unwrap();
    get(&a, "x", small(), &n).await;
    settled(a).await;
    let l = with_cluster(&cluster).build().unwrap();
    let key = |k: &str| {
        let key = l
            .embeddings()
            .key(&EmbeddingKeyInput::caller(k), MODEL, None)
            .unwrap();
        shared_key(&key)
    };
    let x = cluster.get_raw(&key("x")).unwrap().expect("value of x");
    // Another key's valid value under y; a corrupt copy under z; a PNG under w.
    cluster.set_raw(&key("y"), &x, None).unwrap();
    let mut bad = x.clone();
    bad[60] ^= 1;
    cluster.set_raw(&key("z"), &bad, None).unwrap();
    cluster
        .set_raw(&key("w"), b"\x89PNG\r\n\x1a\n0000", None)
        .unwrap();
    let other = Embedding::from_f32(vec![1], vec![7.0]).unwrap();
    for k in ["y", "z", "w"] {
        let before = n.load(Ordering::SeqCst);
        let (e, source) = get(&l, k, other.clone(), &n).await;
        assert_eq!((k, source), (k, EmbeddingSource::Computed));
        assert_eq!(e, other);
        assert_eq!(n.load(Ordering::SeqCst), before + 1);
    }
    assert!(l.clone().shutdown(Duration::from_secs(20)).await);
    // Each bad value was deleted, then replaced by the recomputed one.
    let m = with_cluster(&cluster).build().unwrap();
    for k in ["y", "z", "w"] {
        assert_eq!(
            get(&m, k, small(), &n).await,
            (other.clone(), EmbeddingSource::Shared)
        );
    }
    // Over this worker's cap: refused before it is read whole, and left for the others.
    let tight = with_cluster(&cluster)
        .embedding_max_value_bytes(64)
        .embedding_chunk_bytes(64)
        .build()
        .unwrap();
    assert_eq!(
        get(&tight, "x", other.clone(), &n).await.1,
        EmbeddingSource::Computed
    );
    assert_eq!(cluster.get_raw(&key("x")).unwrap(), Some(x));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_mode_without_a_scope_stores_nothing_and_scopes_never_share() {
    let cluster = cluster();
    let dir = scratch("scoped");
    let n = Arc::new(AtomicUsize::new(0));
    let l = with_cluster(&cluster)
        .disk_cache_dir(&dir)
        .session_scoped(true)
        .build()
        .unwrap();
    let c = n.clone();
    let got = l
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller("k"),
            MODEL,
            None,
            move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(small())
            },
        )
        .await
        .unwrap();
    assert_eq!(got.source, EmbeddingSource::Computed);
    let s1 = Scope::new("tenant-1").unwrap();
    let c = n.clone();
    l.embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller("k"),
            MODEL,
            Some(&s1),
            move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(small())
            },
        )
        .await
        .unwrap();
    settled(l).await;
    let keys = cluster.keys_on_masters("mmcache:emb:v1:*");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let other = with_cluster(&cluster).session_scoped(true).build().unwrap();
    let s2 = Scope::new("tenant-2").unwrap();
    let c = n.clone();
    let got = other
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller("k"),
            MODEL,
            Some(&s2),
            move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(small())
            },
        )
        .await
        .unwrap();
    assert_eq!(got.source, EmbeddingSource::Computed);
    assert_eq!(n.load(Ordering::SeqCst), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_off_switch_keeps_embeddings_in_memory() {
    let cluster = cluster();
    let n = Arc::new(AtomicUsize::new(0));
    let l = with_cluster(&cluster)
        .embedding_fleet(false)
        .build()
        .unwrap();
    get(&l, "k", small(), &n).await;
    settled(l).await;
    let keys = cluster.keys_on_masters("mmcache:emb:*");
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_read_from_a_tier_holds_no_download_budget_while_cached() {
    use mmcache_loader::Source;
    use mmcache_test_support::{images, origin::Route, origin::TestOrigin};
    let dir = scratch("budget");
    let n = Arc::new(AtomicUsize::new(0));
    // 1.5 MiB of f32, written to the disk tier by one loader.
    let held = Embedding::from_f32(vec![384, 1024], vec![0.5; 384 * 1024]).unwrap();
    let a = Loader::builder().disk_cache_dir(&dir).build().unwrap();
    assert_eq!(
        get(&a, "held", held.clone(), &n).await.1,
        EmbeddingSource::Computed
    );
    settled(a).await;
    // Read (and cached) by another whose bodies with a length may hold 2 MiB together.
    let b = Loader::builder()
        .disk_cache_dir(&dir)
        .allow_internal(true)
        .download_memory_bytes(4 << 20)
        .build()
        .unwrap();
    let (e, source) = get(&b, "held", small(), &n).await;
    assert_eq!((source, e), (EmbeddingSource::Disk, held));
    // A 1 MB download fits only if the cached embedding gave its read's reservation back:
    // otherwise it waits the whole decode wait (default 30 s) and fails with 503.
    let origin = TestOrigin::start();
    origin.set("/noise.png", Route::ok(images::noise_png(600, 580, 7)));
    let loaded = b
        .load_detailed(&origin.url("/noise.png"), None)
        .await
        .expect("the download finds its budget free");
    assert_eq!(loaded.source, Source::Origin);
    assert_eq!(n.load(Ordering::SeqCst), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_read_reserves_its_whole_value_in_the_download_budget() {
    let cluster = cluster();
    let n = Arc::new(AtomicUsize::new(0));
    let a = with_cluster(&cluster).build().unwrap();
    get(&a, "big", big(), &n).await;
    settled(a).await;
    // A budget whose largest reservation (half of it, 8 MiB) is under the 9.3 MB value: the
    // assembly cannot be reserved, so the value is not read (a miss that deletes nothing).
    let small_budget = with_cluster(&cluster)
        .download_memory_bytes(16 << 20)
        .build()
        .unwrap();
    assert_eq!(
        get(&small_budget, "big", big(), &n).await.1,
        EmbeddingSource::Computed
    );
    // Twice that, and the value is read.
    let enough = with_cluster(&cluster)
        .download_memory_bytes(32 << 20)
        .build()
        .unwrap();
    assert_eq!(
        get(&enough, "big", small(), &n).await.1,
        EmbeddingSource::Shared
    );
    assert_eq!(n.load(Ordering::SeqCst), 2);
}

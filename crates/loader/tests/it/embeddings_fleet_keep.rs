//! Readers never delete for their own reasons: on a real 3-master Redis Cluster and a real
//! directory, a value over one reader's cap, or in a format version this build does not know,
//! is a miss that deletes (and overwrites) nothing; a value bad for everyone is deleted only if
//! it still is the value read, so a good value a writer stored meanwhile survives.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mmcache_loader::embeddings::{
    EmbeddingKey, EmbeddingKeyInput, EmbeddingSource, disk_entry_name, shared_key,
};
use mmcache_loader::{Loader, LoaderBuilder};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

use crate::fleet_common::{self, MODEL, big, scratch, settled, small};

/// Where `get_or_compute` of `key` found its value (computing `value`, counted).
async fn get(
    loader: &Loader,
    key: &str,
    value: mmcache_loader::embeddings::Embedding,
    computes: &Arc<AtomicUsize>,
) -> EmbeddingSource {
    fleet_common::get(loader, key, value, computes).await.1
}

fn key_of(loader: &Loader, k: &str) -> EmbeddingKey {
    loader
        .embeddings()
        .key(&EmbeddingKeyInput::caller(k), MODEL, None)
        .unwrap()
}

fn on(cluster: &RedisCluster, dir: &std::path::Path) -> LoaderBuilder {
    Loader::builder()
        .shared_cache_url(cluster.url())
        .disk_cache_dir(dir)
}

/// Every key of ours in the cluster and its bytes, in one digest (sorted by key).
fn snapshot(cluster: &RedisCluster) -> String {
    let mut keys = cluster.keys_on_masters("mmcache:emb:v1:*");
    keys.sort();
    let mut all = blake3::Hasher::new();
    for k in &keys {
        let v = cluster.get_raw(k).unwrap().unwrap_or_default();
        all.update(k.as_bytes()).update(digest(Some(&v)).as_bytes());
    }
    format!("{} keys {}", keys.len(), &all.finalize().to_hex()[..16])
}

/// A short digest of a value (`-` when absent), for assertions that print.
fn digest(v: Option<&[u8]>) -> String {
    v.map_or("-".into(), |v| {
        format!("{} bytes {}", v.len(), &blake3::hash(v).to_hex()[..16])
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_with_a_smaller_cap_deletes_nothing_on_either_tier() {
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let dir = scratch("cap");
    let n = Arc::new(AtomicUsize::new(0));
    let a = on(&cluster, &dir).build().unwrap();
    assert_eq!(get(&a, "big", big(), &n).await, EmbeddingSource::Computed);
    let key = key_of(&a, "big");
    let file = a
        .disk_cache()
        .unwrap()
        .path_of_named(&disk_entry_name(&key));
    settled(a).await;
    let stored = snapshot(&cluster);
    let keys = cluster.keys_on_masters("mmcache:emb:v1:*").len();
    assert!(keys > 30, "a manifest and its chunks: {keys}");
    let on_disk = std::fs::read(&file).expect("the disk entry");
    // A worker whose cap is 1 MiB: the value is too big for it, not bad.
    let tight = on(&cluster, &dir)
        .embedding_max_value_bytes(1 << 20)
        .build()
        .unwrap();
    assert_eq!(
        get(&tight, "big", big(), &n).await,
        EmbeddingSource::Computed
    );
    settled(tight).await;
    assert_eq!(snapshot(&cluster), stored, "the shared value is untouched");
    assert_eq!(
        digest(std::fs::read(&file).ok().as_deref()),
        digest(Some(&on_disk)),
        "the disk entry too"
    );
    // Workers with the default cap still find it, on disk and in the shared cache.
    let b = on(&cluster, &dir).build().unwrap();
    assert_eq!(get(&b, "big", small(), &n).await, EmbeddingSource::Disk);
    let c = Loader::builder()
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    assert_eq!(get(&c, "big", small(), &n).await, EmbeddingSource::Shared);
    assert_eq!(
        n.load(Ordering::SeqCst),
        2,
        "the writer and the tight reader"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `value` as a newer build would write it: format version 2 (bytes 4..6 of a value or a
/// manifest).
fn future(mut value: Vec<u8>) -> Vec<u8> {
    value[4..6].copy_from_slice(&2u16.to_le_bytes());
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_of_a_future_format_version_is_left_alone() {
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let dir = scratch("future");
    let n = Arc::new(AtomicUsize::new(0));
    let a = on(&cluster, &dir).build().unwrap();
    get(&a, "small", small(), &n).await;
    get(&a, "big", big(), &n).await;
    let (small_key, big_key) = (key_of(&a, "small"), key_of(&a, "big"));
    let disk = a.disk_cache().unwrap().clone();
    settled(a).await;
    // A rolling upgrade: a newer build rewrote the small value (both tiers) and the big
    // value's manifest in its format.
    let file = disk.path_of_named(&disk_entry_name(&small_key));
    let newer_file = future(std::fs::read(&file).unwrap());
    std::fs::write(&file, &newer_file).unwrap();
    for k in [&small_key, &big_key] {
        let main = shared_key(k);
        let newer = future(cluster.get_raw(&main).unwrap().unwrap());
        cluster.set_raw(&main, &newer, None).unwrap();
    }
    let stored = snapshot(&cluster);
    // This build reads neither: it computes, and deletes or overwrites nothing.
    let b = on(&cluster, &dir).build().unwrap();
    assert_eq!(
        get(&b, "small", small(), &n).await,
        EmbeddingSource::Computed
    );
    settled(b).await;
    // The big value's disk entry is still in this build's format: a reader without it.
    let c = Loader::builder()
        .shared_cache_url(cluster.url())
        .build()
        .unwrap();
    assert_eq!(get(&c, "big", big(), &n).await, EmbeddingSource::Computed);
    settled(c).await;
    assert_eq!(n.load(Ordering::SeqCst), 4);
    assert_eq!(snapshot(&cluster), stored, "the newer values stay");
    assert_eq!(
        digest(std::fs::read(&file).ok().as_deref()),
        digest(Some(&newer_file)),
        "on disk too"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_value_replaced_between_read_and_delete_survives() {
    let cluster = RedisCluster::start(ClusterOptions::default()).unwrap();
    let dir = scratch("cad");
    let n = Arc::new(AtomicUsize::new(0));
    let a = on(&cluster, &dir).build().unwrap();
    get(&a, "k", small(), &n).await;
    let key = key_of(&a, "k");
    let file = a
        .disk_cache()
        .unwrap()
        .path_of_named(&disk_entry_name(&key));
    settled(a).await;
    let main = shared_key(&key);
    let good = cluster.get_raw(&main).unwrap().expect("the value");
    let good_file = std::fs::read(&file).unwrap();
    // A flipped byte in both tiers: bad for every reader.
    let mut bad = good.clone();
    bad[60] ^= 1;
    cluster.set_raw(&main, &bad, None).unwrap();
    let mut bad_file = good_file.clone();
    bad_file[60] ^= 1;
    std::fs::write(&file, &bad_file).unwrap();
    let reader = on(&cluster, &dir).build().unwrap();
    // Between the reader's read and its delete, a writer stores the good value again: on
    // disk first (the tier read first; as a writer does: a new file renamed over the name),
    // then in the shared cache.
    let (f, g, gf, main_key) = (file.clone(), good.clone(), good_file.clone(), main.clone());
    let writes = Arc::new(AtomicUsize::new(0));
    let w = writes.clone();
    let cluster = Arc::new(cluster);
    let cl = cluster.clone();
    reader
        .embeddings()
        .inject_before_delete(Some(Arc::new(move || {
            if w.fetch_add(1, Ordering::SeqCst) == 0 {
                let tmp = f.with_extension("writer-tmp");
                std::fs::write(&tmp, &gf).unwrap();
                std::fs::rename(&tmp, &f).unwrap();
            } else {
                cl.set_raw(&main_key, &g, None).unwrap();
            }
        })));
    // A lookup that never computes nor writes: what survives is what the writers stored.
    let found = reader
        .embeddings()
        .find(&EmbeddingKeyInput::caller("k"), MODEL, None)
        .await;
    assert!(found.is_none(), "a bad value is never returned");
    assert_eq!(writes.load(Ordering::SeqCst), 2, "both tiers found it bad");
    assert_eq!(
        digest(cluster.get_raw(&main).unwrap().as_deref()),
        digest(Some(&good)),
        "the good value stored after the read survives the reader's delete"
    );
    assert_eq!(
        digest(std::fs::read(&file).ok().as_deref()),
        digest(Some(&good_file)),
        "on disk too"
    );
    // With nothing stored in between, the bad value read is deleted.
    reader.embeddings().inject_before_delete(None);
    cluster.set_raw(&main, &bad, None).unwrap();
    std::fs::write(&file, &bad_file).unwrap();
    let found = reader
        .embeddings()
        .find(&EmbeddingKeyInput::caller("k"), MODEL, None)
        .await;
    assert!(found.is_none());
    assert_eq!(cluster.get_raw(&main).unwrap(), None);
    assert!(!file.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::cache::assert_consistent;
use mmcache_scope::Scope;

/// A `w` x `h` image whose content key is unique to this call, so that each is its own
/// content in the cache.
fn img(w: u32, h: u32) -> Arc<DecodedImage> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed).to_le_bytes();
    Arc::new(DecodedImage::blank(w, h, &call))
}

fn id(i: usize) -> CacheIdentity {
    CacheIdentity::unscoped(&format!("https://e.com/{i}"))
}

#[test]
fn a_budget_of_small_images_keeps_every_alias() {
    // 30,000 small images (about 3 KiB each, 90 MiB) in the default 1 GiB budget: each is
    // still a memory hit under its URL.
    let cache = DecodedCache::new(1 << 30, None);
    let n = 30_000;
    for i in 0..n {
        cache.insert(&id(i), img(30, 30));
    }
    let hits = (0..n).filter(|&i| cache.get(&id(i)).is_some()).count();
    assert_eq!(hits, n);
}

#[test]
fn decoded_cache_weighs_bytes_and_keeps_what_was_hit() {
    let one = img(10, 10); // 300 bytes + overhead
    let per = 300 + ENTRY_OVERHEAD_BYTES;
    let cache = DecodedCache::new(per * 3, None);
    cache.insert(&id(0), one.clone());
    for i in 1..3 {
        cache.insert(&id(i), img(one.width(), one.height()));
    }
    assert!(Arc::ptr_eq(&cache.get(&id(0)).unwrap(), &one)); // a hit is the same Arc
    cache.insert(&id(3), img(one.width(), one.height()));
    assert!(cache.get(&id(0)).is_some(), "the entry that was hit stays");
    assert!(cache.get(&id(3)).is_some(), "the new entry is in");
    let gone = (1..3).filter(|&i| cache.get(&id(i)).is_none()).count();
    assert_eq!(gone, 1);
    assert_eq!(
        cache.stats(),
        CacheStats {
            entries: 3,
            bytes: per * 3
        }
    );
    assert_consistent(&cache.inner, per * 3);
}

#[test]
fn one_content_under_two_identities_is_one_entry_weighed_once() {
    let one = img(10, 10);
    let per = 300 + ENTRY_OVERHEAD_BYTES;
    let cache = DecodedCache::new(per * 2, None);
    let same = Arc::new((*one).clone()); // another decode of the same bytes
    assert!(Arc::ptr_eq(&cache.insert(&id(0), one.clone()), &one));
    assert!(
        Arc::ptr_eq(&cache.insert(&id(1), same), &one),
        "the held copy is shared"
    );
    assert!(Arc::ptr_eq(&cache.get(&id(1)).unwrap(), &one));
    assert_eq!(
        cache.stats(),
        CacheStats {
            entries: 1,
            bytes: per
        }
    );
    // Forgetting one identity frees the image: the other misses too.
    cache.remove(&id(0));
    assert!(cache.get(&id(0)).is_none() && cache.get(&id(1)).is_none());
    assert_eq!(cache.stats(), CacheStats::default());
    cache.insert(&id(1), one.clone());
    // Evicting the image: every identity of it misses, and nothing stays counted.
    cache.insert(&id(2), img(10, 10));
    cache.insert(&id(3), img(10, 10));
    cache.insert(&id(4), img(10, 10));
    if cache.get_content(&id(1), &one.content_key()).is_none() {
        assert!(cache.get(&id(1)).is_none());
    }
    assert!(cache.stats().bytes <= per * 2);
    assert_consistent(&cache.inner, per * 2);
}

#[test]
fn content_is_shared_within_a_scope_only() {
    let one = img(4, 4);
    let cache = DecodedCache::new(1 << 20, None);
    let (a, b) = (Scope::new("a").unwrap(), Scope::new("b").unwrap());
    let url = |n: u32| format!("https://e.com/{n}.png");
    cache.insert(&CacheIdentity::scoped(&a, &url(0)), one.clone());
    let key = one.content_key();
    assert!(
        cache
            .get_content(&CacheIdentity::scoped(&a, &url(1)), &key)
            .is_some()
    );
    assert!(
        cache
            .get_content(&CacheIdentity::scoped(&b, &url(0)), &key)
            .is_none()
    );
    assert!(
        cache
            .get_content(&CacheIdentity::unscoped(&url(0)), &key)
            .is_none()
    );
    let other = Arc::new((*one).clone());
    let held = cache.insert(&CacheIdentity::scoped(&b, &url(0)), other.clone());
    assert!(Arc::ptr_eq(&held, &other), "scope b keeps its own copy");
    assert_eq!(cache.stats().entries, 2);
}

#[test]
fn hot_entry_survives_a_scan_of_one_off_inserts() {
    let one = img(10, 10);
    let per = 300 + ENTRY_OVERHEAD_BYTES;
    let cache = DecodedCache::new(per * 10, None);
    cache.insert(&id(0), img(one.width(), one.height()));
    for _ in 0..3 {
        assert!(cache.get(&id(0)).is_some());
    }
    // Strict LRU would have evicted id 0 at the 10th one-off insert.
    for i in 1..=100 {
        cache.insert(&id(i), img(one.width(), one.height()));
    }
    assert!(cache.get(&id(0)).is_some());
    assert!(cache.get(&id(100)).is_some());
    assert_eq!(cache.stats().entries, 10);
    assert_consistent(&cache.inner, per * 10);
}

#[test]
fn entry_cap_is_exact() {
    let one = img(2, 2);
    let per = 12 + ENTRY_OVERHEAD_BYTES;
    let cache = DecodedCache::new(1 << 20, Some(2));
    for i in 0..3 {
        cache.insert(&id(i), img(one.width(), one.height()));
    }
    assert!(cache.get(&id(2)).is_some());
    // Real weights are reported, not the minimum charge that holds the cap.
    assert_eq!(
        cache.stats(),
        CacheStats {
            entries: 2,
            bytes: 2 * per
        }
    );

    let single = DecodedCache::new(1 << 20, Some(1));
    single.insert(&id(0), img(one.width(), one.height()));
    single.insert(&id(1), img(one.width(), one.height()));
    assert!(single.get(&id(1)).is_some());
    assert_eq!(single.stats().entries, 1);

    let seven = DecodedCache::new(1 << 20, Some(7));
    for i in 0..500 {
        seven.insert(&id(i), img(one.width(), one.height()));
        if i % 3 == 0 {
            seven.get(&id(i / 2));
        }
        assert!(seven.stats().entries <= 7);
    }
    assert_eq!(
        seven.stats().entries,
        7,
        "the cap, not the charge, is the limit"
    );
    assert_consistent(&seven.inner, 1 << 20);

    // Sharded: each shard holds its share of the cap.
    let sharded = DecodedCache::new(1 << 30, Some(1000));
    assert!(sharded.inner.shards_and_len().0 > 1);
    for i in 0..5000 {
        sharded.insert(&id(i), img(one.width(), one.height()));
    }
    assert!(sharded.stats().entries <= 1000);
    assert_consistent(&sharded.inner, 1 << 30);
}

#[test]
fn entry_cap_zero_disables() {
    let cache = DecodedCache::new(1 << 30, Some(0));
    let id = CacheIdentity::unscoped("https://e.com/x");
    cache.insert(&id, img(2, 2));
    assert!(cache.get(&id).is_none());
    assert_eq!(cache.stats(), CacheStats::default());
}

#[test]
fn too_heavy_is_not_stored_and_drops_the_older_value() {
    let per = 300 + ENTRY_OVERHEAD_BYTES;
    let cache = DecodedCache::new(per * 3, None);
    cache.insert(&id(0), img(10, 10));
    cache.insert(&id(0), img(30, 30)); // 2,700 bytes: over the whole budget
    assert!(cache.get(&id(0)).is_none());
    assert_eq!(cache.stats(), CacheStats::default());
}

#[test]
fn remove_and_clear() {
    let one = img(2, 2);
    let cache = DecodedCache::new(1 << 20, None);
    for i in 0..5 {
        cache.insert(&id(i), img(one.width(), one.height()));
    }
    cache.remove(&id(1));
    cache.remove(&id(99)); // absent: no change
    assert!(cache.get(&id(1)).is_none());
    assert_eq!(cache.stats().entries, 4);
    assert_consistent(&cache.inner, 1 << 20);
    cache.clear();
    assert!((0..5).all(|i| cache.get(&id(i)).is_none()));
    assert_eq!(cache.stats(), CacheStats::default());
    assert_eq!(cache.inner.shards_and_len().1, 0);
}

#[test]
fn scoped_identities_do_not_collide() {
    let cache = DecodedCache::new(1 << 20, None);
    let url = "https://e.com/x.png";
    let a = CacheIdentity::scoped(&Scope::new("a").unwrap(), url);
    let b = CacheIdentity::scoped(&Scope::new("b").unwrap(), url);
    cache.insert(&a, img(2, 2));
    assert!(cache.get(&a).is_some());
    assert!(cache.get(&b).is_none());
    assert!(cache.get(&CacheIdentity::unscoped(url)).is_none());
}

/// Gauges as `f64` bits, per name; every cache registered under it adds to them.
#[derive(Default)]
struct GaugeRecorder(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl GaugeRecorder {
    fn value(&self, name: &str) -> f64 {
        let gauges = self.0.lock().unwrap();
        f64::from_bits(gauges[name].load(Ordering::Relaxed))
    }
}

impl metrics::Recorder for GaugeRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        let mut gauges = self.0.lock().unwrap();
        metrics::Gauge::from_arc(gauges.entry(key.name().to_owned()).or_default().clone())
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[test]
fn gauges_follow_the_caches_and_return_to_zero_on_drop() {
    let recorder = GaugeRecorder::default();
    let per = 300 + ENTRY_OVERHEAD_BYTES;
    let (a, b) = metrics::with_local_recorder(&recorder, || {
        (
            DecodedCache::new(per * 4, None),
            DecodedCache::new(1 << 20, Some(3)),
        )
    });
    let gauges = || {
        (
            recorder.value(crate::metrics::DECODED_CACHE_ENTRIES),
            recorder.value(crate::metrics::DECODED_CACHE_BYTES),
        )
    };
    let sum = |caches: &[&DecodedCache]| {
        let entries = caches.iter().map(|c| c.stats().entries as f64).sum::<f64>();
        let bytes = caches.iter().map(|c| c.stats().bytes as f64).sum::<f64>();
        (entries, bytes)
    };
    // Inserts that evict, a replacement, a refused value, a remove and a clear.
    for i in 0..10 {
        a.insert(&id(i), img(10, 10));
        b.insert(&id(i), img(2, 2));
    }
    a.insert(&id(9), img(5, 5));
    a.insert(&id(8), img(40, 40));
    b.remove(&id(9));
    assert!(sum(&[&a, &b]).0 > 0.0);
    assert_eq!(gauges(), sum(&[&a, &b]));
    assert_consistent(&a.inner, per * 4);
    assert_consistent(&b.inner, 1 << 20);
    b.clear();
    assert_eq!(gauges(), sum(&[&a]));
    b.insert(&id(0), img(2, 2));
    drop(a);
    assert_eq!(gauges(), sum(&[&b]));
    drop(b);
    assert_eq!(gauges(), (0.0, 0.0));
}

#[test]
fn many_tiny_entries_keep_the_budget() {
    // The hand-written LRU scanned every entry per eviction: seconds per insert at this size.
    let one = img(1, 1);
    let budget = 1 << 20;
    for max_entries in [None, Some(1000)] {
        let cache = DecodedCache::new(budget, max_entries);
        for i in 0..200_000 {
            cache.insert(&id(i), img(one.width(), one.height()));
            if i % 20_000 == 0 {
                assert!(cache.stats().bytes <= budget);
            }
        }
        let stats = cache.stats();
        assert!(stats.bytes <= budget, "{stats:?}");
        // Full up to whichever limit binds.
        match max_entries {
            Some(cap) => assert_eq!(stats.entries, cap),
            None => assert!(stats.bytes > budget / 2, "{stats:?}"),
        }
        assert!(cache.get(&id(199_999)).is_some());
        assert_consistent(&cache.inner, budget);
    }
}

#[test]
fn racing_inserts_of_one_key_leave_one_resident_copy() {
    // Threads decode the same bytes at once and insert their own copies under one identity:
    // every caller must get the one copy the cache keeps (a second live copy would be memory
    // the budget does not see). Bounded: 300 rounds of 4 threads.
    let threads = 4;
    let base = img(8, 8);
    for round in 0..300 {
        let cache = DecodedCache::new(1 << 20, None);
        let start = std::sync::Barrier::new(threads);
        let held: Vec<Arc<DecodedImage>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let (cache, start, copy) = (&cache, &start, Arc::new((*base).clone()));
                    s.spawn(move || {
                        start.wait();
                        cache.insert(&id(0), copy)
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let resident = cache.get(&id(0)).expect("the image is cached");
        for h in &held {
            assert!(
                Arc::ptr_eq(h, &resident),
                "round {round}: an insert returned a copy other than the resident one"
            );
        }
        assert_eq!(cache.stats().entries, 1);
    }
}

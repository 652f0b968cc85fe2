//! `get_or_compute` through a real loader on a real multi-threaded tokio runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mmcache_loader::Loader;
use mmcache_loader::Scope;
use mmcache_loader::embeddings::{
    DType, Embedding, EmbeddingError, EmbeddingKeyInput, EmbeddingSource, TensorError,
};
use tokio::sync::Notify;

const MODEL: &str = "test-model@max_pixels=1003520";
/// A bound on every wait, generous for a loaded 2-core machine.
const BOUND: Duration = Duration::from_secs(30);

fn loader() -> Loader {
    Loader::builder().build().unwrap()
}

fn key(k: &str) -> EmbeddingKeyInput {
    EmbeddingKeyInput::caller(k)
}

fn vector(n: usize) -> Embedding {
    Embedding::from_f32(vec![1, n], (0..n).map(|i| i as f32).collect()).unwrap()
}

/// A compute that counts its runs and returns a 16-element vector.
fn counting(
    runs: &Arc<AtomicUsize>,
) -> impl FnOnce() -> std::future::Ready<Result<Embedding, String>> + Send + 'static {
    let runs = runs.clone();
    move || {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(vector(16)))
    }
}

/// A compute that waits for `gate` before answering, counting its runs.
fn gated(
    runs: &Arc<AtomicUsize>,
    gate: &Arc<Notify>,
    result: Result<usize, &'static str>,
) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Result<Embedding, String>> + Send>>
+ Send
+ 'static {
    let (runs, gate) = (runs.clone(), gate.clone());
    move || {
        runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            gate.notified().await;
            result.map(vector).map_err(str::to_owned)
        })
    }
}

/// Waits, at most 30 s, until `done`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_callers_compute_once() {
    let loader = loader();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (loader, compute) = (loader.clone(), gated(&runs, &gate, Ok(8)));
        tasks.spawn(async move {
            loader
                .embeddings()
                .get_or_compute(&key("one"), MODEL, None, compute)
                .await
        });
    }
    until("the compute to start", || runs.load(Ordering::SeqCst) == 1).await;
    // Let the other callers reach the join before the compute ends.
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate.notify_one();
    let mut sources = Vec::new();
    while let Some(r) = tokio::time::timeout(BOUND, tasks.join_next())
        .await
        .unwrap()
    {
        let loaded = r.unwrap().unwrap();
        assert_eq!(loaded.embedding, vector(8));
        sources.push(loaded.source);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(sources.len(), 64);
    assert_eq!(
        sources
            .iter()
            .filter(|s| **s == EmbeddingSource::Computed)
            .count(),
        1
    );
    let again = loader
        .embeddings()
        .get_or_compute(&key("one"), MODEL, None, counting(&runs))
        .await
        .unwrap();
    assert_eq!(again.source, EmbeddingSource::Memory);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(loader.embeddings().inflight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_first_caller_cancels_nothing() {
    let loader = loader();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let first = {
        let (loader, compute) = (loader.clone(), gated(&runs, &gate, Ok(4)));
        tokio::spawn(async move {
            loader
                .embeddings()
                .get_or_compute(&key("k"), MODEL, None, compute)
                .await
        })
    };
    until("the compute to start", || runs.load(Ordering::SeqCst) == 1).await;
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let (loader, compute) = (loader.clone(), counting(&runs));
            tokio::spawn(async move {
                loader
                    .embeddings()
                    .get_or_compute(&key("k"), MODEL, None, compute)
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    gate.notify_one();
    for w in waiters {
        let loaded = tokio::time::timeout(BOUND, w)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(loaded.source, EmbeddingSource::Inflight);
        assert_eq!(loaded.embedding, vector(4));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The aborted caller's compute was cached too.
    assert_eq!(
        loader.embeddings().get(&key("k"), MODEL, None),
        Some(vector(4))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_reaches_every_waiter_and_is_not_cached() {
    let loader = loader();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let (loader, compute) = (loader.clone(), gated(&runs, &gate, Err("encoder OOM")));
        tasks.spawn(async move {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            loader
                .embeddings()
                .get_or_compute(&key("bad"), MODEL, None, compute)
                .await
        });
    }
    until("the compute to start", || runs.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate.notify_one();
    let mut errors = 0;
    while let Some(r) = tokio::time::timeout(BOUND, tasks.join_next())
        .await
        .unwrap()
    {
        let err = r.unwrap().unwrap_err();
        assert!(matches!(err, EmbeddingError::Compute { .. }), "{err}");
        assert!(err.to_string().contains("encoder OOM"), "{err}");
        errors += 1;
    }
    assert_eq!((errors, runs.load(Ordering::SeqCst)), (8, 1));
    assert_eq!(loader.embeddings().get(&key("bad"), MODEL, None), None);
    let next = loader
        .embeddings()
        .get_or_compute(&key("bad"), MODEL, None, counting(&runs))
        .await
        .unwrap();
    assert_eq!(next.source, EmbeddingSource::Computed);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_compute_is_a_typed_error_and_the_next_call_works() {
    let loader = loader();
    let err = loader
        .embeddings()
        .get_or_compute(&key("p"), MODEL, None, || async {
            if true {
                panic!("encoder blew up");
            }
            Ok::<_, String>(vector(1))
        })
        .await
        .unwrap_err();
    match &err {
        EmbeddingError::Panicked { message } => assert_eq!(&**message, "encoder blew up"),
        other => panic!("expected Panicked, got {other:?}"),
    }
    assert_eq!(loader.embeddings().inflight(), 0);
    let runs = Arc::new(AtomicUsize::new(0));
    let next = loader
        .embeddings()
        .get_or_compute(&key("p"), MODEL, None, counting(&runs))
        .await
        .unwrap();
    assert_eq!(
        (next.source, runs.load(Ordering::SeqCst)),
        (EmbeddingSource::Computed, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_over_the_budget_is_returned_but_not_stored() {
    let loader = Loader::builder()
        .embedding_cache_bytes(64 << 10)
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    for round in 1..=2 {
        let r = runs.clone();
        let loaded = loader
            .embeddings()
            .get_or_compute(&key("big"), MODEL, None, move || {
                r.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Ok::<_, String>(vector(32 << 10))) // 128 KiB
            })
            .await
            .unwrap();
        assert_eq!(loaded.source, EmbeddingSource::Computed);
        assert_eq!(loaded.embedding.bytes().len(), 128 << 10);
        assert_eq!(runs.load(Ordering::SeqCst), round);
    }
    assert_eq!(loader.embeddings().stats().entries, 0);
    assert!(
        !loader
            .embeddings()
            .insert(&key("big"), MODEL, None, vector(32 << 10))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_keeps_bytes_within_the_budget() {
    let budget = 256 << 10;
    let loader = Loader::builder()
        .embedding_cache_bytes(budget)
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    for i in 0..100 {
        let r = runs.clone();
        loader
            .embeddings()
            .get_or_compute(&key(&i.to_string()), MODEL, None, move || {
                r.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Ok::<_, String>(vector(4096))) // 16 KiB each
            })
            .await
            .unwrap();
        assert!(loader.embeddings().stats().bytes <= budget);
    }
    let stats = loader.embeddings().stats();
    assert!(stats.entries >= 8 && stats.entries < 16, "{stats:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_mode_partitions_by_scope_and_never_joins_without_one() {
    let loader = Loader::builder().session_scoped(true).build().unwrap();
    let (a, b) = (Scope::new("a").unwrap(), Scope::new("b").unwrap());
    let runs = Arc::new(AtomicUsize::new(0));
    let e = loader.embeddings();
    let first = e
        .get_or_compute(&key("k"), MODEL, Some(&a), counting(&runs))
        .await
        .unwrap();
    let other = e
        .get_or_compute(&key("k"), MODEL, Some(&b), counting(&runs))
        .await
        .unwrap();
    let again = e
        .get_or_compute(&key("k"), MODEL, Some(&a), counting(&runs))
        .await
        .unwrap();
    assert_eq!(
        (first.source, other.source, again.source),
        (
            EmbeddingSource::Computed,
            EmbeddingSource::Computed,
            EmbeddingSource::Memory
        )
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // Another model id is another key.
    e.get_or_compute(&key("k"), "other-model", Some(&a), counting(&runs))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3);

    // No scope: two concurrent calls both compute, nothing is cached or joined.
    let gate = Arc::new(Notify::new());
    let none_runs = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let (loader, compute) = (loader.clone(), gated(&none_runs, &gate, Ok(2)));
            tokio::spawn(async move {
                loader
                    .embeddings()
                    .get_or_compute(&key("k"), MODEL, None, compute)
                    .await
            })
        })
        .collect();
    until("both computes to start", || {
        none_runs.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(loader.embeddings().inflight(), 0);
    gate.notify_waiters();
    for c in calls {
        let loaded = tokio::time::timeout(BOUND, c)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(loaded.source, EmbeddingSource::Computed);
    }
    assert_eq!(e.get(&key("k"), MODEL, None), None);
    let before = e.stats().entries;
    e.get_or_compute(&key("k"), MODEL, None, counting(&runs))
        .await
        .unwrap();
    assert_eq!(
        (e.stats().entries, runs.load(Ordering::SeqCst)),
        (before, 4)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f32_f16_bf16_entries_round_trip_and_bad_shapes_are_typed_errors() {
    let loader = loader();
    let e = loader.embeddings();
    let bits: Vec<u16> = vec![0x3c00, 0x4000, 0xc000]; // 1, 2, -2 in f16
    for dtype in [DType::F16, DType::BF16] {
        let t = Embedding::from_u16_bits(dtype, vec![3], bits.clone()).unwrap();
        let loaded = e
            .get_or_compute(&key(dtype.as_str()), MODEL, None, move || async move {
                Ok::<_, String>(t)
            })
            .await
            .unwrap();
        assert_eq!(loaded.embedding.dtype(), dtype);
        assert_eq!(loaded.embedding.as_u16_bits(), Some(&bits[..]));
        let hit = e.get(&key(dtype.as_str()), MODEL, None).unwrap();
        assert_eq!(hit.bytes().as_ptr(), loaded.embedding.bytes().as_ptr()); // no copy
    }
    let meta = bytes::Bytes::from_static(b"{\"image_grid_thw\":[1,36,36]}");
    let t = vector(6).with_metadata(meta.clone()).unwrap();
    let loaded = e
        .get_or_compute(&key("f32"), MODEL, None, move || async move {
            Ok::<_, String>(t)
        })
        .await
        .unwrap();
    assert_eq!(loaded.embedding.as_f32().unwrap()[5], 5.0);
    assert_eq!(loaded.embedding.metadata(), Some(&meta));
    assert_eq!(loaded.embedding.bytes().as_ptr() as usize % 4, 0);

    // A compute that builds a bad tensor fails with its typed error, not cached.
    let err = e
        .get_or_compute(&key("shape"), MODEL, None, || async {
            Embedding::from_f32(vec![3, 3], vec![0.0; 8])
        })
        .await
        .unwrap_err();
    let EmbeddingError::Compute { source } = &err else {
        panic!("{err:?}")
    };
    let typed = source.downcast_ref::<TensorError>().unwrap();
    assert!(matches!(
        typed,
        TensorError::ShapeMismatch {
            expected: 36,
            actual: 32,
            ..
        }
    ));
    assert!(matches!(
        Embedding::from_u16_bits(DType::BF16, vec![usize::MAX, 3], vec![]),
        Err(TensorError::ShapeOverflow { .. })
    ));
}

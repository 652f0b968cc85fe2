//! The bypass path (session-scoped mode, no usable scope): the compute runs for this caller
//! alone, joined and cached by nobody, so it lives exactly as long as its caller. Dropping the
//! caller's future (a client gone, a `select!` lost) stops the compute, and the compute
//! deadline holds there as on the keyed path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mmcache_loader::Loader;
use mmcache_loader::embeddings::{Embedding, EmbeddingError, EmbeddingKeyInput};

use crate::common::DropFlag;

const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";

/// A scoped loader with compute deadline `deadline`: a call without a scope bypasses it.
fn scoped(deadline: Duration) -> Loader {
    Loader::builder()
        .session_scoped(true)
        .embedding_compute_timeout(Some(deadline))
        .build()
        .unwrap()
}

/// A bypass call whose compute never returns; `started` is set when the compute runs,
/// `dropped` when its future is dropped.
async fn hung(
    loader: &Loader,
    started: &Arc<AtomicBool>,
    dropped: &Arc<AtomicBool>,
) -> Result<(), EmbeddingError> {
    let flag = DropFlag(dropped.clone());
    let started = started.clone();
    loader
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller("k"),
            MODEL,
            None,
            move || async move {
                let _flag = flag;
                started.store(true, Ordering::SeqCst);
                std::future::pending::<Result<Embedding, String>>().await
            },
        )
        .await
        .map(|_| ())
}

/// Waits (at most 2 s) for `flag`.
async fn eventually(flag: &AtomicBool) -> bool {
    for _ in 0..200 {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    flag.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_bypass_caller_stops_its_compute() {
    // A deadline far away: only the caller's drop can stop the compute within the test.
    let loader = scoped(Duration::from_secs(600));
    let (started, dropped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let caller = tokio::spawn({
        let (loader, started, dropped) = (loader.clone(), started.clone(), dropped.clone());
        async move { hung(&loader, &started, &dropped).await }
    });
    // Aborted only once the compute runs: an abort before would drop the unused closure, and
    // with it the flag, whatever the loader does with a running compute.
    assert!(eventually(&started).await, "the compute started");
    assert!(!dropped.load(Ordering::SeqCst), "the compute is running");
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    assert!(
        eventually(&dropped).await,
        "the compute's future was dropped with its only caller"
    );
    assert_eq!(loader.embeddings().inflight(), 0, "a bypass joins nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compute_deadline_holds_on_the_bypass_path() {
    let deadline = Duration::from_millis(300);
    let loader = scoped(deadline);
    let (started, dropped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let got = tokio::time::timeout(Duration::from_secs(20), hung(&loader, &started, &dropped))
        .await
        .expect("answered at the deadline");
    let err = got.expect_err("a compute that never returns");
    assert!(
        matches!(err, EmbeddingError::Timeout { after } if after == deadline),
        "{err:?}"
    );
    assert_eq!(err.http_status(), 408);
    assert!(
        started.load(Ordering::SeqCst),
        "the compute ran until the deadline"
    );
    assert!(eventually(&dropped).await, "the late compute was dropped");
}

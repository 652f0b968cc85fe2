//! What the budget tests share: every load started at once, each in its own task.

use mmcache_loader::{Loader, Source};

/// Loads every URL at once, each in a task of its own that drops the image (so only the
/// loads' own memory is live), and returns where each came from; any failed load panics.
pub(crate) async fn load_all_at_once(loader: &Loader, urls: Vec<String>) -> Vec<Source> {
    let tasks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let loader = loader.clone();
            tokio::spawn(async move { loader.load_detailed(&url, None).await.map(|l| l.source) })
        })
        .collect();
    let mut sources = Vec::with_capacity(tasks.len());
    for t in tasks {
        let source = t
            .await
            .unwrap()
            .expect("every load is served after a bounded wait");
        sources.push(source);
    }
    sources
}

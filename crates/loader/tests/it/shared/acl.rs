//! The ACL recipe of docs/deployment.md, read out of the doc itself, on every node of a real
//! cluster: everything workers send is allowed. Images and embeddings are shared across two
//! workers, leases taken and released, and Dynamo's own Python `ImageLoader` reads and fills
//! entries under the same user; the servers refuse nothing.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mmcache_loader::LeaseConfig;
use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput, EmbeddingSource};
use mmcache_test_support::redis::acl_recipe;

use super::*;

const MODEL: &str = "acl-test-model@max_pixels=1003520";

/// The recipe's user on every node; the URL workers are given.
pub(crate) fn recipe_user(cluster: &RedisCluster) -> String {
    let recipe = acl_recipe();
    cluster.set_user(&recipe.user, &recipe.rules()).unwrap();
    cluster.url_as(&recipe.user, &recipe.password)
}

pub(crate) fn leased(url: &str) -> LoaderBuilder {
    let mut lease = LeaseConfig::default();
    lease.enabled = true;
    worker(url).shared_cache_lease(lease)
}

/// 300 x 256 f32: 300 KiB, over the default chunk size, so it is stored in chunks.
fn chunked() -> Embedding {
    Embedding::from_f32(vec![300, 256], (0..300 * 256).map(|i| i as f32).collect()).unwrap()
}

async fn embed(loader: &Loader, key: &str, computes: &Arc<AtomicUsize>) -> EmbeddingSource {
    let c = computes.clone();
    let got = loader
        .embeddings()
        .get_or_compute(
            &EmbeddingKeyInput::caller(key),
            MODEL,
            None,
            move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(chunked())
            },
        )
        .await
        .expect("embedding");
    assert_eq!(got.embedding, chunked());
    got.source
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_allows_everything_workers_send() {
    if !require_redis("the_documented_acl_allows_everything_workers_send") {
        return;
    }
    let cluster = cluster();
    let url = recipe_user(&cluster);
    let origin = TestOrigin::start();
    origin.set("/ours.png", Route::ok(images::png(40, 30, 1)));
    origin.set("/dynamos.png", Route::ok(images::png(20, 10, 2)));
    let (ours, dynamos) = (origin.url("/ours.png"), origin.url("/dynamos.png"));
    let first = leased(&url).build().unwrap();
    let second = leased(&url).build().unwrap();

    // Images: the first worker fills the entry under the lease and releases it (EVAL of a
    // script calling GET and DEL); the second one hits.
    let lease = mmcache_shared_cache::lease_key(&CacheIdentity::unscoped(&ours));
    assert_eq!(
        first.load_detailed(&ours, None).await.unwrap().source,
        Source::Origin
    );
    assert_eq!(
        second.load_detailed(&ours, None).await.unwrap().source,
        Source::Shared,
        "denied: {:?}",
        second.shared_cache().unwrap().denials()
    );
    assert!(
        cluster.command_stat("eval", "calls").unwrap() >= 1,
        "a lease was taken"
    );
    assert_eq!(cluster.get_raw(&lease).unwrap(), None, "and released");

    // Embeddings, in chunks, with the fleet's lease: computed once, then a shared hit.
    let computes = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        embed(&first, "k", &computes).await,
        EmbeddingSource::Computed
    );
    assert!(
        first.shutdown(Duration::from_secs(20)).await,
        "writes drained"
    );
    assert!(cluster.keys_on_masters("mmcache:emb:v1:*:chunk").len() >= 2);
    assert!(cluster.keys_on_masters("mmcache:emb:v1:*:lease").is_empty());
    assert_eq!(
        embed(&second, "k", &computes).await,
        EmbeddingSource::Shared,
        "denied: {:?}",
        second.shared_cache().unwrap().denials()
    );
    assert_eq!(computes.load(Ordering::SeqCst), 1);

    // Dynamo's ImageLoader under the same user: reads our entry, fills its own, which ours read.
    if let Some(out) = dynamo_image_loader(&url, &[&ours, &dynamos]) {
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [
                "image 40 30",
                "image 20 10",
                "get hit 1",
                "get miss 1",
                "set success 1"
            ],
            "{out}"
        );
        assert_eq!(
            (origin.hits("/ours.png"), origin.hits("/dynamos.png")),
            (1, 1)
        );
        let third = leased(&url).build().unwrap();
        assert_eq!(
            third.load_detailed(&dynamos, None).await.unwrap().source,
            Source::Shared
        );
    }

    for loader in [&first, &second] {
        let s = loader.shared_cache().unwrap().stats();
        assert_eq!(
            (s.denied, s.denied_skips, s.get_errors, s.set_errors),
            (0, 0, 0, 0),
            "{s:?}"
        );
    }
    // The ACLs refused nothing. `CLIENT SETINFO` aside: Valkey refuses it, both clients
    // ignore that, and Redis 7.0 knows no such command, so the recipe cannot name it.
    let refused: Vec<_> = cluster
        .acl_denials()
        .unwrap()
        .into_iter()
        .filter(|(_, object, _)| object != "client|setinfo")
        .collect();
    assert!(refused.is_empty(), "refused under the recipe: {refused:?}");
}

/// Runs Dynamo's ImageLoader (tests/dynamo/image_loader_load.py, from the ai-dynamo wheel) on
/// `urls` with the shared cache at `url`; its output. Without the wheel or the interpreter's
/// packages: a skip outside CI (saying so), a failure in CI.
fn dynamo_image_loader(url: &str, urls: &[&str]) -> Option<String> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let wheel = std::env::var_os("MMCACHE_DYNAMO_WHEEL").map_or_else(
        || repo.join("target/dynamo-wheel/ai_dynamo-1.6.1-py3-none-any.whl"),
        std::path::PathBuf::from,
    );
    let python = std::env::var("MMCACHE_PYTHON").unwrap_or_else(|_| "python3".into());
    let ready = wheel.is_file()
        && Command::new(&python)
            .args(["-c", "import PIL, redis, aiohttp"])
            .status()
            .is_ok_and(|s| s.success());
    if !ready {
        let msg = format!(
            "Dynamo's ImageLoader needs {} and {python} with tests/requirements.txt \
             (`cargo xtask test` sets both up; MMCACHE_DYNAMO_WHEEL, MMCACHE_PYTHON)",
            wheel.display()
        );
        assert!(!mmcache_test_support::in_ci(), "{msg}");
        eprintln!("SKIPPED outside CI: {msg}");
        return None;
    }
    let out = Command::new(&python)
        .arg(repo.join("tests/dynamo/image_loader_load.py"))
        .arg(&wheel)
        .args(urls)
        .env("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1")
        .env("DYN_MM_SHARED_IMAGE_CACHE_URL", url)
        .env("DYN_MM_ALLOW_INTERNAL", "1")
        .output()
        .expect("run image_loader_load.py");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "Dynamo's ImageLoader failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

//! A permission error is loud: a worker whose user lacks one command of the recipe logs it at
//! error level once per cool-down (naming the command, its key space and the variable to look
//! at, never a key or the password), counts it, keeps loading from the origin without paying
//! the denied round trip, and finds the ACL fixed on the live cluster without a restart.
//! Default settings, but the shared cache's clock is one the test moves.

use std::io::Write;
use std::sync::{Arc, Mutex};

use mmcache_shared_cache::{DENIED_COOLDOWN, ManualClock};
use mmcache_test_support::redis::acl_recipe;

use super::*;

/// Log lines at error level, captured on this thread (the tests run on a current-thread
/// runtime, so the cache's tasks log here too).
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let lines = Self::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::ERROR)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (lines, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn errors(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains("ERROR"))
            .map(str::to_owned)
            .collect()
    }
}

/// A worker with the default settings but a clock the test moves.
fn default_worker(url: &str) -> (Loader, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::default());
    let loader = Loader::builder()
        .allow_internal(true)
        .shared_cache_url(url)
        .shared_cache_clock(clock.clone())
        .build()
        .unwrap();
    (loader, clock)
}

#[tokio::test(flavor = "current_thread")]
async fn a_denied_command_is_loud_and_a_fixed_acl_is_noticed_without_a_restart() {
    if !require_redis("a_denied_command_is_loud_and_a_fixed_acl_is_noticed_without_a_restart") {
        return;
    }
    let (logs, _guard) = Lines::capture();
    let cluster = cluster();
    let recipe = acl_recipe();
    cluster
        .set_user(&recipe.user, &recipe.without("+strlen"))
        .unwrap();
    let url = cluster.url_as(&recipe.user, &recipe.password);
    let origin = TestOrigin::start();
    let (loader, clock) = default_worker(&url);
    let load = |n: usize| {
        let (loader, origin) = (loader.clone(), &origin);
        let path = format!("/{n}.png");
        origin.set(&path, Route::ok(images::png(8, 8, n as u32)));
        let url = origin.url(&path);
        async move { loader.load_detailed(&url, None).await.unwrap().source }
    };

    // Every load succeeds from the origin; only the first pays the denied round trip.
    for n in 0..6 {
        assert_eq!(load(n).await, Source::Origin);
    }
    let rejected = || cluster.acl_denied("command", "strlen").unwrap();
    assert_eq!(rejected(), 1, "the denied STRLEN was sent once");
    let stats = || loader.shared_cache().unwrap().stats();
    let s = stats();
    assert_eq!((s.denied, s.denied_skips, s.set_errors), (1, 5, 0), "{s:?}");
    let errors = logs.errors();
    assert_eq!(errors.len(), 1, "{}", logs.text());
    for needle in [
        "STRLEN",
        "dynamo:mm:image:",
        "DYN_MM_SHARED_IMAGE_CACHE_URL",
        "docs/deployment.md",
    ] {
        assert!(errors[0].contains(needle), "lacks {needle}: {}", errors[0]);
    }
    let digest = entry_key(&CacheIdentity::unscoped(&origin.url("/0.png")));
    let digest = &digest["dynamo:mm:image:{".len()..][..16];
    for secret in [recipe.password.as_str(), url.as_str(), digest] {
        assert!(
            !logs.text().contains(secret),
            "logged {secret}: {}",
            logs.text()
        );
    }

    // After the cool-down one load probes, is denied again, and logs again.
    clock.advance(DENIED_COOLDOWN);
    assert_eq!(load(6).await, Source::Origin);
    assert_eq!(load(7).await, Source::Origin);
    assert_eq!((rejected(), stats().denied, logs.errors().len()), (2, 2, 2));

    // The ACL fixed on the live cluster: after the cool-down, hits resume in this process.
    cluster.set_user(&recipe.user, &recipe.rules()).unwrap();
    clock.advance(DENIED_COOLDOWN);
    let mut hit_after = None;
    for n in 100..110 {
        let path = format!("/{n}.png");
        let bytes = images::png(8, 8, 1);
        let key = entry_key(&CacheIdentity::unscoped(&origin.url(&path)));
        cluster.set_raw(&key, &bytes, Some(60)).unwrap();
        origin.set(&path, Route::ok(bytes));
        if loader
            .load_detailed(&origin.url(&path), None)
            .await
            .unwrap()
            .source
            == Source::Shared
        {
            hit_after = Some(n - 100);
            break;
        }
    }
    assert_eq!(
        hit_after,
        Some(0),
        "the first load after the cool-down hits"
    );
    assert!(loader.shared_cache().unwrap().denials().is_empty());
    assert_eq!(logs.errors().len(), 2, "{}", logs.text());
}

#[tokio::test(flavor = "current_thread")]
async fn refused_credentials_are_loud_and_cost_one_connect_per_cooldown() {
    if !require_redis("refused_credentials_are_loud_and_cost_one_connect_per_cooldown") {
        return;
    }
    let (logs, _guard) = Lines::capture();
    let cluster = cluster();
    let recipe = acl_recipe();
    cluster.set_user(&recipe.user, &recipe.rules()).unwrap();
    let url = cluster.url_as(&recipe.user, "an-old-password");
    let origin = TestOrigin::start();
    let (loader, clock) = default_worker(&url);
    let entry = |path: &str| {
        let bytes = images::png(8, 8, 1);
        let key = entry_key(&CacheIdentity::unscoped(&origin.url(path)));
        cluster.set_raw(&key, &bytes, Some(60)).unwrap();
        origin.set(path, Route::ok(bytes));
        origin.url(path)
    };
    // Entries are there, but no command gets through: each load comes from the origin.
    for path in ["/a.png", "/b.png", "/c.png"] {
        let loaded = loader.load_detailed(&entry(path), None).await.unwrap();
        assert_eq!(loaded.source, Source::Origin);
    }
    let s = loader.shared_cache().unwrap().stats();
    assert_eq!(s.denied, 1, "one connect, refused: {s:?}");
    let auths = cluster.acl_denials().unwrap();
    assert_eq!(auths.len(), 1, "{auths:?}");
    assert_eq!((auths[0].0.as_str(), auths[0].2), ("auth", 1), "{auths:?}");
    let errors = logs.errors();
    assert_eq!(errors.len(), 1, "{}", logs.text());
    assert!(
        errors[0].contains("AUTH") && errors[0].contains("credentials"),
        "{}",
        errors[0]
    );
    assert!(!logs.text().contains("an-old-password"), "{}", logs.text());
    // The password put right: the next connect, after the cool-down, works.
    let mut rules = recipe.rules();
    rules.push(">an-old-password");
    cluster.set_user(&recipe.user, &rules).unwrap();
    clock.advance(DENIED_COOLDOWN);
    let loaded = loader.load_detailed(&entry("/d.png"), None).await.unwrap();
    assert_eq!(loaded.source, Source::Shared);
    assert_eq!(logs.errors().len(), 1);
}

/// docs/deployment.md states the cool-down; it is the constant's.
#[test]
fn the_documented_cooldown_is_the_constant() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deployment.md"),
    )
    .unwrap();
    let stated = format!("again for {} s", DENIED_COOLDOWN.as_secs());
    assert!(doc.contains(&stated), "docs/deployment.md lacks {stated:?}");
}

//! The overall load deadline (`MMCACHE_LOAD_TIMEOUT_SECS`): against an origin that never
//! answers, every waiter of the in-flight load gets a typed 408 at the deadline, the slot is
//! freed, and the next load starts afresh. With the defaults, the deadline never fires before
//! the origin timeout and the decode wait would.

use std::time::{Duration, Instant};

use mmcache_loader::{Config, LoaderBuilder, Source, env};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

/// A loader configured as from the environment, with internal access and `vars` on top.
fn from_vars(vars: &[(&str, &str)]) -> LoaderBuilder {
    let config = Config::from_lookup(|name| {
        if name == env::ALLOW_INTERNAL {
            return Some("1".into());
        }
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    LoaderBuilder::from_config(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_origin_gives_every_waiter_408_at_the_load_deadline_and_frees_the_slot() {
    let origin = TestOrigin::start();
    origin.set("/hang.png", Route::Hang);
    let url = origin.url("/hang.png");
    // The origin timeout stays at its default (30 s): only the load deadline can end this.
    let loader = from_vars(&[("MMCACHE_LOAD_TIMEOUT_SECS", "1")])
        .build()
        .unwrap();
    assert_eq!(loader.config().origin_timeout, Duration::from_secs(30));

    let started = Instant::now();
    let first = tokio::spawn({
        let (loader, url) = (loader.clone(), url.clone());
        async move { loader.load(&url, None).await }
    });
    // Joins the load in flight (the origin has seen the request, so the fill has started).
    for _ in 0..200 {
        if origin.hits("/hang.png") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(origin.hits("/hang.png"), 1);
    let joined = loader.load_detailed(&url, None).await;
    let first = first.await.unwrap();
    let elapsed = started.elapsed();
    for (who, err) in [
        ("caller", first.map(|_| ()).unwrap_err()),
        ("joined waiter", joined.map(|_| ()).unwrap_err()),
    ] {
        assert_eq!(err.http_status(), 408, "{who}: {err}");
        assert!(err.is_timeout(), "{who}: {err}");
    }
    assert!(
        elapsed < Duration::from_secs(15),
        "both ended at the 1 s load deadline, well before the 30 s origin timeout: {elapsed:?}"
    );

    // The slot was freed: the next load fetches again and succeeds.
    origin.set("/hang.png", Route::ok(images::png(16, 16, 1)));
    let next = loader.load_detailed(&url, None).await.unwrap();
    assert_eq!(next.source, Source::Origin);
    assert_eq!(origin.hits("/hang.png"), 2);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_deadline_outlasts_the_origin_timeout_and_the_decode_wait() {
    let defaults = Config::default();
    let origin_and_decode = defaults.origin_timeout + defaults.decode_wait;
    assert!(
        defaults.load_timeout() >= origin_and_decode,
        "default load deadline {:?} < origin timeout + decode wait {origin_and_decode:?}",
        defaults.load_timeout()
    );
    // Derived: a longer origin timeout or a lease wait lengthens the default with it.
    let mut longer = Config::default();
    longer.origin_timeout = Duration::from_secs(120);
    longer.shared.lease.enabled = true;
    assert!(
        longer.load_timeout()
            >= longer.origin_timeout + longer.decode_wait + longer.shared.lease.wait
    );

    // A slow but healthy origin (3 s before it answers) with every default: the load succeeds.
    let origin = TestOrigin::start();
    origin.set(
        "/slow.png",
        Route::Delay(
            Duration::from_secs(3),
            Box::new(Route::ok(images::png(32, 32, 2))),
        ),
    );
    let loader = from_vars(&[]).build().unwrap();
    assert_eq!(loader.config().load_timeout(), defaults.load_timeout());
    let loaded = loader
        .load_detailed(&origin.url("/slow.png"), None)
        .await
        .unwrap();
    assert_eq!(loaded.source, Source::Origin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_deadline_releases_the_disk_fill_lock() {
    let dir = std::env::temp_dir().join(format!("mmcache-load-timeout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let origin = TestOrigin::start();
    origin.set("/hang.png", Route::Hang);
    let url = origin.url("/hang.png");
    let dir_var = dir.display().to_string();
    let loader = from_vars(&[
        ("MMCACHE_LOAD_TIMEOUT_SECS", "1"),
        ("MMCACHE_DISK_CACHE_DIR", &dir_var),
    ])
    .build()
    .unwrap();
    let err = loader.load(&url, None).await.unwrap_err();
    assert_eq!(err.http_status(), 408, "{err}");

    // The dropped fill held the entry's lock file; had it kept it, this load would wait for
    // it (the origin timeout + decode wait: 60 s) before filling the entry itself.
    origin.set("/hang.png", Route::ok(images::png(16, 16, 3)));
    let next = loader
        .load_detailed(&url, None)
        .await
        .expect("within its own 1 s deadline: the lock was free");
    assert_eq!(next.source, Source::Origin);
    assert!(loader.shutdown(Duration::from_secs(30)).await);
    let _ = std::fs::remove_dir_all(&dir);
}

//! Tests of builder.rs: setting a setting by its name, by a variable or a keyword, through its
//! one reader.

use std::time::Duration;

use super::LoaderBuilder;
use crate::config::{Config, ConfigError, Setting, env};

/// The configuration the environment `pairs` give.
fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_lookup(|name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    })
}

/// Configurations compared by what Debug shows (`Config` holds hooks: not `PartialEq`).
fn assert_same(a: &Config, b: &Config) {
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn with_setting_reads_a_variable_or_a_keyword_as_the_environment_does() {
    let set = |name: &str, text: &str| LoaderBuilder::default().with_setting(name, text);
    for (name, text) in [
        (env::SHARED_LEASE, "1"),
        (env::SHARED_CONNECT_TIMEOUT_SECS, "0.25"),
        (env::SHARED_BREAKER_COOLDOWN_MS, "250"),
        (env::IMAGE_CACHE_SIZE, "0"),
        (env::IMAGE_FORMATS, "png,webp"),
        (env::ALLOWED_MEDIA_DOMAINS, "example.com,*.cdn.example.net"),
        (env::DISK_CACHE_DIR, "/var/cache/mmcache"),
        (env::LOAD_TIMEOUT_SECS, "10"),
    ] {
        let from_env = with(&[(name, text)]).unwrap();
        assert_same(&from_env, set(name, text).unwrap().config());
        let keyword = Setting::named(name).unwrap().python;
        assert_same(&from_env, set(keyword, text).unwrap().config());
    }
    // A refusal names the setting as it was given, and echoes the text.
    for name in [env::MAX_PIXELS, "max_pixels"] {
        let err = set(name, "-1").unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { name: n, .. } if n == name),
            "{err}"
        );
        assert!(err.to_string().contains("-1"), "{err}");
    }
    // No setting by that name: neither a variable read outside a configuration, nor a typo.
    for name in [env::LOG, "max_pixel"] {
        assert_eq!(
            set(name, "1").unwrap_err(),
            ConfigError::Unknown(name.to_owned())
        );
    }
    // A blank text unsets a setting that may be unset.
    let unset = LoaderBuilder::default()
        .with_setting(env::LOAD_TIMEOUT_SECS, "10")
        .and_then(|b| b.with_setting("load_timeout_secs", " "))
        .unwrap();
    assert_eq!(unset.config().load_timeout, None);
}

/// The text of a documented default (between its first backticks), if it has one.
fn documented(default: &str) -> Option<&str> {
    default.split('`').nth(1)
}

#[test]
fn every_setting_reads_its_default_alike_by_its_variable_its_keyword_and_the_environment() {
    let mut checked = 0;
    for s in &crate::SETTINGS {
        let Some(text) = documented(s.default) else {
            continue;
        };
        let by = |name: &str| {
            LoaderBuilder::default()
                .with_setting(name, text)
                .unwrap_or_else(|e| panic!("{name}={text}: {e}"))
        };
        let from_env = with(&[(s.name, text)]).unwrap();
        // The documented default is the default (a derived one is computed where it is used:
        // setting its value pins it).
        if !s.default.starts_with("derived") {
            assert_same(&from_env, &Config::default());
        }
        assert_same(&from_env, by(s.name).config());
        // A keyword read apart takes its own unit (checked on its own below).
        if !s.keyword_reads_apart() {
            assert_same(&from_env, by(s.python).config());
        }
        checked += 1;
    }
    assert!(checked > 35, "{checked} settings with a documented default");
}

#[test]
fn a_blank_text_leaves_a_setting_that_may_be_unset_unset() {
    for s in crate::SETTINGS
        .iter()
        .filter(|s| s.default.starts_with("unset"))
    {
        for name in [s.name, s.python] {
            let blank = LoaderBuilder::default()
                .with_setting(name, "")
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_same(blank.config(), &Config::default());
        }
    }
}

#[test]
fn a_keyword_whose_value_differs_from_its_variables_reads_its_own() {
    let set = |name: &str, text: &str| LoaderBuilder::default().with_setting(name, text).unwrap();
    assert_eq!(
        set("max_file_size_bytes", "1000")
            .config()
            .max_file_size_bytes,
        1000
    );
    assert_eq!(
        set(env::MAX_FILE_SIZE_MB, "1").config().max_file_size_bytes,
        1 << 20
    );
    let by_keyword = set("shared_cache_url", "redis://cache:6379");
    assert!(
        by_keyword.config().shared_enabled,
        "the keyword turns the cache on"
    );
    assert!(
        !set(env::SHARED_URL, "redis://cache:6379")
            .config()
            .shared_enabled
    );
    let pem = "-----BEGIN CERTIFICATE-----";
    let by_keyword = set("shared_cache_tls_root_ca", pem);
    assert_eq!(
        by_keyword.config().shared.tls_root_ca_pem.as_deref(),
        Some(pem.as_bytes())
    );
    for (keyword, variable) in [
        ("shared_cache_ttl_secs", env::SHARED_TTL_SECS),
        ("disk_cache_ttl_secs", env::DISK_CACHE_TTL_SECS),
    ] {
        let set_ttl = |c: &Config| (c.shared.ttl, c.disk.ttl);
        let half = set_ttl(set(keyword, "0.5").config());
        assert!(half.0 == Duration::from_millis(500) || half.1 == Duration::from_millis(500));
        let err = LoaderBuilder::default()
            .with_setting(variable, "0.5")
            .unwrap_err();
        assert!(err.to_string().contains(variable), "{err}");
    }
}

//! Tests of reading, checking and documenting the settings.

use super::*;
use std::collections::HashMap;

fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::from_lookup(|name| map.get(name).cloned())
}

/// Configurations compared by what Debug shows (`Config` holds hooks, so it is not `PartialEq`).
fn assert_same(a: &Config, b: &Config) {
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn defaults_match_the_design() {
    let c = with(&[]).unwrap();
    assert!(!c.shared_enabled && !c.disk_enabled());
    assert_eq!(c.shared.ttl, Duration::from_secs(3600));
    assert_eq!(c.shared.connect_timeout, Duration::from_millis(100));
    assert_eq!(c.shared.io_timeout, Duration::from_secs(2));
    assert_eq!(c.max_file_size_bytes, 64 << 20);
    assert!(!c.session_scoped && !c.allow_internal);
    assert_eq!(c.decoded_cache_entries, None);
    assert_eq!(c.jpeg_decoder, JpegDecoderChoice::Auto);
    assert_eq!(c.image_formats, ImageFormats::ALL);
    assert_eq!(c.decode_memory_bytes, 2 << 30);
    assert_eq!(c.decode_wait, Duration::from_secs(30));
    assert_eq!(c.embedding_cache_bytes, 1 << 30);
    assert_same(&c, &Config::default());
}

#[test]
fn good_values() {
    let c = with(&[
        (env::SHARED_ENABLED, "1"),
        (env::SHARED_URL, "redis://cache:6379"),
        (env::SHARED_TTL_SECS, "60"),
        (env::SHARED_CONNECT_TIMEOUT_SECS, "0.25"),
        (env::SHARED_IO_TIMEOUT_SECS, " 1.5 "),
        (env::MAX_FILE_SIZE_MB, "8"),
        (env::SESSION_SCOPED, "1"),
        (env::ALLOW_INTERNAL, "1"),
        (env::IMAGE_CACHE_SIZE, "0"),
        (env::DECODED_CACHE_BYTES, "1048576"),
        (env::MAX_PIXELS, "1000"),
        (env::ORIGIN_TIMEOUT_SECS, "3"),
        (env::EMBEDDING_CACHE_BYTES, "4096"),
    ])
    .unwrap();
    assert_eq!(c.embedding_cache_bytes, 4096);
    assert!(c.shared_enabled && c.session_scoped && c.allow_internal);
    assert_eq!(c.shared.url, "redis://cache:6379");
    assert_eq!(c.shared.ttl, Duration::from_secs(60));
    assert_eq!(c.shared.connect_timeout, Duration::from_millis(250));
    assert_eq!(c.shared.io_timeout, Duration::from_millis(1500));
    assert_eq!(c.max_file_size_bytes, 8 << 20);
    assert_eq!(c.decoded_cache_entries, Some(0));
    assert_eq!(c.decoded_cache_bytes, 1 << 20);
    assert_eq!(c.max_pixels, 1000);
    assert_eq!(c.origin_timeout, Duration::from_secs(3));
    let c = with(&[
        (env::SHARED_BREAKER, "0"),
        (env::SHARED_BREAKER_FAILURES, "9"),
        (env::SHARED_BREAKER_COOLDOWN_MS, "250"),
        (env::SHARED_LEASE, "1"),
        (env::SHARED_LEASE_TTL_MS, "7000"),
        (env::SHARED_LEASE_WAIT_MS, "900"),
        (env::SHARED_WRITE_BEHIND, "1"),
        (env::SHARED_WRITE_BEHIND_QUEUE, "32"),
    ])
    .unwrap();
    assert!(!c.shared.breaker.enabled && c.shared.lease.enabled && c.shared.write_behind.enabled);
    assert_eq!(c.shared.breaker.failures, 9);
    assert_eq!(c.shared.breaker.cooldown, Duration::from_millis(250));
    assert_eq!(
        (c.shared.lease.ttl, c.shared.lease.wait),
        (Duration::from_secs(7), Duration::from_millis(900))
    );
    assert_eq!(c.shared.write_behind.max_queued, 32);
    let c = with(&[
        (env::SHARED_HEDGE, "0"),
        (env::SHARED_HEDGE_MIN_MS, "5"),
        (env::SHARED_HEDGE_MAX_MS, "80"),
    ])
    .unwrap();
    assert!(!c.hedge.enabled);
    assert_eq!(c.hedge.min_delay, Duration::from_millis(5));
    assert_eq!(c.hedge.max_delay, Duration::from_millis(80));
    for (name, value) in [
        (env::SHARED_HEDGE_MIN_MS, "300"), // above the default maximum
        (env::SHARED_HEDGE_MAX_MS, "60001"),
        (env::SHARED_HEDGE, "yes"),
    ] {
        let err = with(&[(name, value)]).unwrap_err().to_string();
        assert!(err.contains(name), "{err}");
    }
    // Blank counts as unset.
    assert_eq!(
        with(&[(env::SHARED_TTL_SECS, "  ")]).unwrap().shared.ttl,
        Duration::from_secs(3600)
    );
}

#[test]
fn every_bad_value_names_its_variable_and_value() {
    let flags = [
        env::SHARED_ENABLED,
        env::SESSION_SCOPED,
        env::ALLOW_INTERNAL,
    ];
    let flag_bad = ["2", "true", "yes", "-1", "01", "1.0", "on"];
    let ints = [
        env::SHARED_TTL_SECS,
        env::MAX_FILE_SIZE_MB,
        env::MAX_PIXELS,
        env::SHARED_MAX_VALUE_BYTES,
    ];
    let int_bad = [
        "0",
        "-1",
        "1.5",
        "abc",
        "1e3",
        "+5",
        "nan",
        "99999999999999999999999",
    ];
    let zero_ok_ints = [
        env::IMAGE_CACHE_SIZE,
        env::DECODED_CACHE_BYTES,
        env::EMBEDDING_CACHE_BYTES,
    ];
    let zero_ok_bad = ["-1", "1.5", "x", "inf"];
    let secs = [
        env::SHARED_CONNECT_TIMEOUT_SECS,
        env::SHARED_IO_TIMEOUT_SECS,
        env::ORIGIN_CONNECT_TIMEOUT_SECS,
        env::ORIGIN_TIMEOUT_SECS,
    ];
    let secs_bad = [
        "0", "-0.1", "nan", "NaN", "inf", "-inf", "1e400", "abc", "1e-12", "0x10",
    ];
    let mut cases = Vec::new();
    for n in flags {
        for v in flag_bad {
            cases.push((n, v));
        }
    }
    for n in ints {
        for v in int_bad {
            cases.push((n, v));
        }
    }
    for n in zero_ok_ints {
        for v in zero_ok_bad {
            cases.push((n, v));
        }
    }
    for n in secs {
        for v in secs_bad {
            cases.push((n, v));
        }
    }
    for (name, value) in cases {
        let err = with(&[(name, value)]).expect_err(&format!("{name}={value} must fail"));
        let msg = err.to_string();
        assert!(msg.contains(name), "{msg}");
        assert!(msg.contains(value.trim()), "{msg}");
        assert!(matches!(err, ConfigError::Invalid { .. }));
    }
}

#[test]
fn url_rules_and_secrecy() {
    assert_eq!(
        with(&[(env::SHARED_ENABLED, "1")]).unwrap_err(),
        ConfigError::MissingCacheUrl
    );
    // A URL is kept out of Debug output.
    let c = with(&[(env::SHARED_URL, "redis://:hunter2@cache:6379")]).unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
    let err = with(&[(env::SHARED_TLS_CA_FILE, "/nonexistent/ca.pem")]).unwrap_err();
    assert!(err.to_string().contains(env::SHARED_TLS_CA_FILE));
}

#[test]
fn hostile_values_are_truncated_in_messages() {
    let long = "x".repeat(10_000);
    let err = with(&[(env::MAX_PIXELS, &long)]).unwrap_err();
    assert!(err.to_string().len() < 300);
}

#[test]
fn decode_settings_are_read_and_checked() {
    let c = with(&[
        (env::JPEG_DECODER, "pure-rust"),
        (env::DECODE_MEMORY_BYTES, "1048576"),
        (env::DECODE_CONCURRENCY, "3"),
        (env::DECODE_WAIT_SECS, "1.5"),
        (env::LIBTURBOJPEG, "/opt/lib/libturbojpeg.so.0"),
        (env::IMAGE_FORMATS, " JPG, png ,WebP"),
    ])
    .unwrap();
    assert_eq!(c.jpeg_decoder, JpegDecoderChoice::PureRust);
    assert_eq!(c.image_formats, ImageFormats::DYNAMO);
    assert_eq!(c.image_formats.to_string(), "jpeg,png,webp");
    assert_eq!(c.decode_memory_bytes, 1 << 20);
    assert_eq!(c.decode_concurrency, 3);
    assert_eq!(c.decode_wait, Duration::from_millis(1500));
    assert_eq!(
        c.libturbojpeg.as_deref(),
        Some(std::path::Path::new("/opt/lib/libturbojpeg.so.0"))
    );
    for (name, value) in [
        (env::JPEG_DECODER, "turbo"),
        (env::DECODE_MEMORY_BYTES, "0"),
        (env::DECODE_CONCURRENCY, "-1"),
        (env::DECODE_CONCURRENCY, "99999999999"),
        (env::DECODE_WAIT_SECS, "3601"),
        (env::DECODE_WAIT_SECS, "1e19"),
        (env::IMAGE_FORMATS, "jpeg,bmp"),
        (env::IMAGE_FORMATS, " , "),
    ] {
        let err = with(&[(name, value)]).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains(value), "{err}");
    }
}

#[test]
fn disk_settings_are_read_and_bounded() {
    let c = with(&[
        (env::DISK_CACHE_DIR, " /var/cache/mmcache "),
        (env::DISK_CACHE_MAX_BYTES, "1048576"),
        (env::DISK_CACHE_TTL_SECS, "60"),
        (env::DISK_CACHE_GROUP, " 2000 "),
        (env::DISK_CACHE_TIMEOUT_MS, "250"),
    ])
    .unwrap();
    assert_eq!(
        (c.disk.group, c.disk.timeout),
        (Some(2000), Duration::from_millis(250))
    );
    // A group name is looked up in /etc/group, where root always is.
    let root = with(&[(env::DISK_CACHE_GROUP, "root")]).unwrap();
    assert_eq!(root.disk.group, Some(0));
    let d = with(&[]).unwrap().disk;
    assert_eq!((d.group, d.timeout), (None, Duration::from_secs(1)));
    assert_eq!(
        c.disk.dir.as_path(),
        std::path::Path::new("/var/cache/mmcache")
    );
    assert_eq!(
        (c.disk.max_bytes, c.disk.ttl),
        (1 << 20, Duration::from_secs(60))
    );
    for (name, value) in [
        (env::DISK_CACHE_TTL_SECS, "31536001"),
        (env::DISK_CACHE_TTL_SECS, "0"),
        (env::DISK_CACHE_MAX_BYTES, "0"),
        (env::DISK_CACHE_MAX_BYTES, "ten"),
        (env::DISK_CACHE_GROUP, "no-such-group-here"),
        (env::DISK_CACHE_TIMEOUT_MS, "0"),
        (env::DISK_CACHE_TIMEOUT_MS, "3600001"),
        (env::DISK_CACHE_TIMEOUT_MS, "1.5"),
    ] {
        let err = with(&[(name, value)]).unwrap_err().to_string();
        assert!(err.contains(name), "{name}={value}: {err}");
    }
}

#[test]
fn allowed_media_domains_are_parsed_and_checked() {
    let c = with(&[(
        env::ALLOWED_MEDIA_DOMAINS,
        " images.example.com, *.cdn.example.net ,",
    )])
    .unwrap();
    assert_eq!(
        c.allowed_media_domains,
        ["images.example.com", "*.cdn.example.net"]
    );
    let err = with(&[(env::ALLOWED_MEDIA_DOMAINS, "ok.com,bad/host")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(env::ALLOWED_MEDIA_DOMAINS) && err.contains("bad/host"),
        "{err}"
    );
}

#[test]
fn the_allowlist_refusal_reads_the_same_from_env_and_builder() {
    // The allowlist is checked once: the same refusal reads the same either way.
    let from_env = with(&[(env::ALLOWED_MEDIA_DOMAINS, "ok.com,bad/host")]).unwrap_err();
    let from_builder = crate::Loader::builder()
        .allowed_media_domains(["ok.com", "bad/host"])
        .build()
        .unwrap_err();
    assert_eq!(from_env, from_builder);
}

#[test]
fn a_bound_refused_after_parsing_echoes_the_value_as_given() {
    // A bound refused after parsing echoes the value as it was given, in its own unit.
    for (name, value) in [
        (env::SHARED_LEASE_TTL_MS, "3600001"),
        (env::SHARED_BREAKER_COOLDOWN_MS, "99999999999"),
        (env::DISK_CACHE_TIMEOUT_MS, "3600001"),
        (env::DECODE_WAIT_SECS, "1e19"),
        (env::LOAD_TIMEOUT_SECS, "3601"),
        (env::EMBEDDING_COMPUTE_TIMEOUT_SECS, "3601"),
    ] {
        let err = with(&[(name, value)]).unwrap_err();
        let ConfigError::Invalid { value: got, .. } = &err else {
            panic!("{name}={value}: {err}");
        };
        assert_eq!(got, value, "{err}");
    }
}

#[test]
fn huge_durations_are_startup_errors_naming_the_variable() {
    for (name, value) in [
        (env::SHARED_IO_TIMEOUT_SECS, "1e19"),
        (env::SHARED_CONNECT_TIMEOUT_SECS, "3601"),
        (env::ORIGIN_TIMEOUT_SECS, "1e10"),
        (env::ORIGIN_CONNECT_TIMEOUT_SECS, "86400"),
        (env::SHARED_TTL_SECS, "31536001"),
        (env::SHARED_TTL_SECS, "18446744073709551615"),
        (env::SHARED_LEASE_TTL_MS, "3600001"),
        (env::SHARED_LEASE_WAIT_MS, "18446744073709551615"),
        (env::SHARED_BREAKER_COOLDOWN_MS, "99999999999"),
    ] {
        let err = with(&[(name, value)]).unwrap_err().to_string();
        assert!(err.contains(name), "{name}={value}: {err}");
    }
    // The largest accepted values build a loader whose arithmetic does not overflow.
    let c = with(&[
        (env::SHARED_IO_TIMEOUT_SECS, "3600"),
        (env::SHARED_CONNECT_TIMEOUT_SECS, "3600"),
        (env::SHARED_TTL_SECS, "31536000"),
    ])
    .unwrap();
    assert_eq!(c.shared.io_timeout, Duration::from_secs(3600));
    // And the builder is held to the same rules.
    let err = crate::Loader::builder()
        .shared_cache_url("redis://127.0.0.1:1")
        .shared_cache_io_timeout(Duration::MAX)
        .build()
        .unwrap_err();
    assert!(
        err.to_string().contains(env::SHARED_IO_TIMEOUT_SECS),
        "{err}"
    );
}

#[test]
fn every_declared_default_is_the_default() {
    for s in &SETTINGS {
        // A value in backticks must read as the default itself; words ("unset", "twice the
        // number of CPUs", "derived: ...") are held by `defaults_match_the_design`.
        let Some(value) = s
            .default
            .strip_prefix('`')
            .and_then(|d| d.split('`').next())
        else {
            continue;
        };
        let c = with(&[(s.name, value)]).unwrap();
        assert_eq!(
            format!("{c:?}"),
            format!("{:?}", Config::default()),
            "{}={value}",
            s.name
        );
    }
    assert_eq!(env::ALL.len(), SETTINGS.len());
    let mut keywords: Vec<&str> = SETTINGS.iter().map(|s| s.python).collect();
    keywords.sort_unstable();
    keywords.dedup();
    assert_eq!(
        keywords.len(),
        SETTINGS.len(),
        "a Python keyword is declared twice"
    );
}

#[test]
fn every_declared_bound_is_the_checked_bound() {
    // What a setting needs besides itself to reach its bound.
    let companions = |name: &str| match name {
        n if n == env::EMBEDDING_CHUNK_BYTES => {
            vec![(env::EMBEDDING_MAX_VALUE_BYTES, "4294967295")]
        }
        _ => vec![],
    };
    let mut checked = 0;
    for s in &SETTINGS {
        let floor_rule = ["integer > 0", "finite number > 0", "number > 0"];
        if floor_rule.iter().any(|r| s.rule.starts_with(r)) {
            let err = with(&[(s.name, "0")]).expect_err(s.name).to_string();
            assert!(err.contains(s.name), "{err}");
        }
        if s.rule.starts_with("integer >= 0") {
            with(&[(s.name, "0")]).unwrap();
        }
        let Some(max) = s.rule.split("<= ").nth(1).map(|t| {
            t.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        }) else {
            continue;
        };
        let Ok(max) = max.parse::<u64>() else {
            continue; // "<= the maximum": a rule between settings, tested in `good_values`
        };
        let at = max.to_string();
        let over = (max + 1).to_string();
        let mut pairs = companions(s.name);
        pairs.push((s.name, &at));
        with(&pairs).unwrap_or_else(|e| panic!("{}={at} is within {:?}: {e}", s.name, s.rule));
        pairs.pop();
        pairs.push((s.name, &over));
        let err = with(&pairs).expect_err(&over).to_string();
        assert!(err.contains(s.name) && err.contains(&over), "{err}");
        checked += 1;
    }
    // The shared TTL, disk TTL, four timeouts, three ms durations, decode concurrency and
    // wait, hedge maximum, disk timeout, load timeout, embedding chunk, embedding compute
    // timeout, host pixel TTL and timeout.
    assert_eq!(checked, 18);
}

#[test]
fn zero_is_refused_from_the_builder_where_the_rule_says_greater_than_zero() {
    // The environment's parsers refuse 0 for these; a Config set in code (the builder, Python's
    // keywords) reaches `validate` with 0 and must be refused there too, naming the variable.
    type Set = fn(&mut Config);
    let cases: [(&str, Set); 7] = [
        (env::SHARED_MAX_VALUE_BYTES, |c| {
            c.shared.max_value_bytes = 0
        }),
        (env::SHARED_BREAKER_FAILURES, |c| {
            c.shared.breaker.failures = 0
        }),
        (env::SHARED_BREAKER_COOLDOWN_MS, |c| {
            c.shared.breaker.cooldown = Duration::ZERO
        }),
        (env::SHARED_LEASE_TTL_MS, |c| {
            c.shared.lease.ttl = Duration::ZERO
        }),
        (env::SHARED_LEASE_WAIT_MS, |c| {
            c.shared.lease.wait = Duration::ZERO
        }),
        (env::SHARED_WRITE_BEHIND_QUEUE, |c| {
            c.shared.write_behind.max_queued = 0
        }),
        (env::EMBEDDING_COMPUTE_TIMEOUT_SECS, |c| {
            c.embedding_compute_timeout = Some(Duration::ZERO)
        }),
    ];
    for (name, set) in cases {
        let rule = SETTINGS.iter().find(|s| s.name == name).expect(name).rule;
        assert!(rule.contains("> 0"), "{name}: {rule}");
        let mut c = Config::default();
        set(&mut c);
        let err = c.validate().expect_err(name).to_string();
        assert!(err.contains(name), "{err}");
    }
}

#[test]
fn every_tier_field_with_a_rule_is_set_by_one_setting_named_in_its_refusal() {
    use super::settings::CheckedBy;
    let tiers = mmcache_shared_cache::Field::ALL
        .map(CheckedBy::SharedCache)
        .into_iter()
        .chain(mmcache_disk_cache::Field::ALL.map(CheckedBy::Disk))
        .chain(mmcache_disk_cache::Field::ALL.map(CheckedBy::Host));
    for tier in tiers {
        let setting: Vec<_> = SETTINGS.iter().filter(|s| s.checked_by == tier).collect();
        assert_eq!(setting.len(), 1, "{tier:?}");
        // Its refusal (a zero, which every tier rule refuses) names the variable.
        let mut c = Config::default();
        match tier {
            CheckedBy::SharedCache(f) => {
                use mmcache_shared_cache::Field as F;
                match f {
                    F::Ttl => c.shared.ttl = Duration::ZERO,
                    F::ConnectTimeout => c.shared.connect_timeout = Duration::ZERO,
                    F::IoTimeout => c.shared.io_timeout = Duration::ZERO,
                    F::MaxValueBytes => c.shared.max_value_bytes = 0,
                    F::BreakerFailures => c.shared.breaker.failures = 0,
                    F::BreakerCooldown => c.shared.breaker.cooldown = Duration::ZERO,
                    F::LeaseTtl => c.shared.lease.ttl = Duration::ZERO,
                    F::LeaseWait => c.shared.lease.wait = Duration::ZERO,
                    F::WriteBehindQueue => c.shared.write_behind.max_queued = 0,
                    other => panic!("no case for {other:?}"),
                }
            }
            CheckedBy::Disk(f) => {
                use mmcache_disk_cache::Field as F;
                match f {
                    F::MaxBytes => c.disk.max_bytes = 0,
                    F::Ttl => c.disk.ttl = Duration::ZERO,
                    F::Timeout => c.disk.timeout = Duration::ZERO,
                    other => panic!("no case for {other:?}"),
                }
            }
            CheckedBy::Host(f) => {
                use mmcache_disk_cache::Field as F;
                match f {
                    F::MaxBytes => c.host.max_bytes = 0,
                    F::Ttl => c.host.ttl = Duration::ZERO,
                    F::Timeout => c.host.timeout = Duration::ZERO,
                    other => panic!("no case for {other:?}"),
                }
            }
            CheckedBy::Loader => unreachable!(),
        }
        let err = c.validate().expect_err(setting[0].name).to_string();
        assert!(err.contains(setting[0].name), "{err}");
    }
}

#[test]
fn the_log_level_is_read_once_for_the_command_and_the_package() {
    use tracing::level_filters::LevelFilter;
    assert_eq!(env::log_level("").unwrap(), LevelFilter::WARN);
    assert_eq!(env::log_level(" off ").unwrap(), LevelFilter::OFF);
    assert_eq!(env::log_level("debug").unwrap(), LevelFilter::DEBUG);
    let err = env::log_level("verbose").unwrap_err().to_string();
    assert!(
        err.contains("MMCACHE_LOG") && err.contains("verbose"),
        "{err}"
    );
}

#[test]
fn a_built_loader_shows_the_tier_limits_in_force() {
    // The loader derives the tiers' read and entry caps from the download cap at build;
    // `config()` shows those, not the tiers' own defaults that no read obeys.
    let loader = crate::Loader::builder()
        .shared_cache_url("redis://127.0.0.1:1")
        .max_file_size_bytes(8 << 20)
        .build()
        .unwrap();
    let c = loader.config();
    assert_eq!(c.shared.max_read_bytes, 8 << 20);
    assert!(
        c.shared.read_memory.is_some(),
        "reads count in the download budget"
    );
    assert_eq!(c.disk.max_entry_bytes, 8 << 20);
}

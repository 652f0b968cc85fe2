"""Every setting has a `mmcache.Loader` keyword that sets what its environment variable sets.

The keywords and variables come from the one declaration (`mmcache_loader::SETTINGS`, exposed
as `mmcache._native.SETTINGS`): a new setting without a keyword, or a keyword that sets
something else than its variable, fails here.
"""

from __future__ import annotations

import pytest

import mmcache
from mmcache import _native

URL = "redis://127.0.0.1:1"  # never contacted: a loader connects on first use

# keyword -> (keyword value, the same as its variable's text)
CASES = {
    "shared_cache": (False, "0"),
    "shared_cache_url": ("redis://127.0.0.1:2", "redis://127.0.0.1:2"),
    "shared_cache_ttl_secs": (60, "60"),
    "shared_cache_connect_timeout_secs": (0.25, "0.25"),
    "shared_cache_io_timeout_secs": (1.5, "1.5"),
    "shared_cache_max_value_bytes": (1024, "1024"),
    "shared_cache_breaker": (False, "0"),
    "shared_cache_breaker_failures": (9, "9"),
    "shared_cache_breaker_cooldown_ms": (250, "250"),
    "shared_cache_lease": (True, "1"),
    "shared_cache_lease_ttl_ms": (7000, "7000"),
    "shared_cache_lease_wait_ms": (900, "900"),
    "shared_cache_write_behind": (True, "1"),
    "shared_cache_write_behind_queue": (32, "32"),
    "shared_cache_hedge": (False, "0"),
    "shared_cache_hedge_min_ms": (5, "5"),
    "shared_cache_hedge_max_ms": (80, "80"),
    "max_file_size_bytes": (1 << 20, "1"),
    "session_scoped": (True, "1"),
    "allow_internal": (True, "1"),
    "decoded_cache_entries": (3, "3"),
    "decoded_cache_bytes": (4096, "4096"),
    "max_pixels": (1000, "1000"),
    "origin_connect_timeout_secs": (1.5, "1.5"),
    "origin_timeout_secs": (2.5, "2.5"),
    "jpeg_decoder": ("pure-rust", "pure-rust"),
    "image_formats": ("png,webp", "png,webp"),
    # The Python default is "rgbx": "rgb" changes it.
    "pixel_layout": ("rgb", "rgb"),
    "libturbojpeg": ("/nonexistent/libturbojpeg.so.0", "/nonexistent/libturbojpeg.so.0"),
    "decode_memory_bytes": (1 << 20, "1048576"),
    "decode_concurrency": (3, "3"),
    "decode_wait_secs": (1.5, "1.5"),
    "allow_http": (True, "1"),
    "allowed_media_domains": (
        ["example.com", "*.cdn.example.net"],
        "example.com,*.cdn.example.net",
    ),
    "disk_cache_max_bytes": (1 << 20, "1048576"),
    "disk_cache_ttl_secs": (60, "60"),
    "disk_cache_group": ("root", "root"),
    "disk_cache_timeout_ms": (250, "250"),
    "load_timeout_secs": (10.0, "10"),
    "download_memory_bytes": (1 << 20, "1048576"),
    "embedding_cache_bytes": (4096, "4096"),
    "embedding_fleet": (False, "0"),
    "embedding_max_value_bytes": (4 << 20, "4194304"),
    "embedding_chunk_bytes": (1 << 20, "1048576"),
    "embedding_compute_timeout_secs": (2.5, "2.5"),
}
# Set with a temporary path or PEM bytes: checked in their own tests below.
SPECIAL = {"disk_cache_dir", "shared_cache_tls_root_ca"}


def bases(keyword: str) -> tuple[dict, dict]:
    """What a keyword needs besides itself (a shared-cache URL), as keywords and as variables."""
    if keyword.startswith("shared_cache"):
        return (
            {"shared_cache_url": URL},
            {"DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1", "DYN_MM_SHARED_IMAGE_CACHE_URL": URL},
        )
    return {}, {}


def test_every_setting_has_a_keyword_with_a_case_here():
    assert len(_native.SETTINGS) == 47
    assert all(v.startswith(("DYN_MM_", "MMCACHE_")) for v in _native.SETTINGS.values())
    assert set(CASES) | SPECIAL == set(_native.SETTINGS)


@pytest.mark.parametrize("keyword", sorted(CASES))
def test_a_keyword_sets_what_its_variable_sets(keyword):
    value, text = CASES[keyword]
    kw_base, env_base = bases(keyword)
    by_keyword = mmcache.Loader(**{**kw_base, keyword: value})
    by_variable = mmcache.Loader(environ={**env_base, _native.SETTINGS[keyword]: text})
    assert repr(by_keyword) == repr(by_variable)
    # ... and it sets something (the URL is redacted from the repr).
    if keyword != "shared_cache_url":
        assert repr(by_keyword) != repr(mmcache.Loader(**kw_base))


def test_the_disk_directory_and_group_keywords(tmp_path):
    var = _native.SETTINGS["disk_cache_dir"]
    by_keyword = mmcache.Loader(disk_cache_dir=str(tmp_path), disk_cache_group=0)
    by_variable = mmcache.Loader(environ={var: str(tmp_path), "MMCACHE_DISK_CACHE_GROUP": "0"})
    assert repr(by_keyword) == repr(by_variable) != repr(mmcache.Loader())
    with pytest.raises(ValueError, match="disk_cache_group"):
        mmcache.Loader(disk_cache_group="no-such-group-here")


def test_the_tls_root_ca_keyword_takes_pem_bytes(tmp_path):
    # Not a certificate: refused at build like the same file named by the variable.
    pem = tmp_path / "ca.pem"
    pem.write_bytes(b"not a certificate")
    var = _native.SETTINGS["shared_cache_tls_root_ca"]
    outcomes = []
    for build in (
        lambda: mmcache.Loader(
            shared_cache_url="rediss://127.0.0.1:1", shared_cache_tls_root_ca=pem.read_bytes()
        ),
        lambda: mmcache.Loader(environ={
            "DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1",
            "DYN_MM_SHARED_IMAGE_CACHE_URL": "rediss://127.0.0.1:1",
            var: str(pem),
        }),
    ):
        try:
            build()
            outcomes.append("built")
        except mmcache.ConfigError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]


def test_bad_new_keyword_values_are_refused_naming_them():
    with pytest.raises(ValueError, match="jpeg_decoder"):
        mmcache.Loader(jpeg_decoder="turbo")
    with pytest.raises(mmcache.ConfigError, match="MMCACHE_SHARED_IMAGE_CACHE_HEDGE_MIN_MS"):
        mmcache.Loader(shared_cache_hedge_min_ms=300)  # above the default maximum
    with pytest.raises(mmcache.ConfigError, match="MMCACHE_LOAD_TIMEOUT_SECS"):
        mmcache.Loader(load_timeout_secs=3601.0)
    assert "load_timeout: None" in repr(mmcache.Loader(load_timeout_secs=None))

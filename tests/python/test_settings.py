"""`mmcache.Loader`'s keywords are the declared settings: `mmcache_loader::SETTINGS` (exposed
as `mmcache._native.SETTINGS`, keyword -> variable) holds each keyword with its variable and its
reader, and a keyword's Python value is turned into text in one generic place, then read by that
reader (`LoaderBuilder::with_setting`). So these tests check the table, and the turn of each kind
of Python value into text, not each setting.
"""

from __future__ import annotations

import decimal
import enum
import fractions
import pathlib
import re

import numpy as np
import pytest

import mmcache
from mmcache import _native

URL = "redis://127.0.0.1:1"  # never contacted: a loader connects on first use


class Pixels(enum.IntEnum):
    SMALL = 1000


DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_keywords_are_the_declared_settings():
    assert len(_native.SETTINGS) == 52
    assert all(v.startswith(("DYN_MM_", "MMCACHE_")) for v in _native.SETTINGS.values())
    assert len(set(_native.SETTINGS.values())) == len(_native.SETTINGS)
    assert set(_native.SETTINGS.values()) <= set(_native.VARIABLES)
    # The Python keyword table of docs/configuration.md (generated from the same declaration).
    table = DOCS.read_text().split("(python-keywords)")[1].split("<!-- end of")[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| `([A-Z_]+)` \|", table, re.M))
    assert rows == _native.SETTINGS


def test_every_variable_the_package_reads_is_declared():
    package = pathlib.Path(mmcache.__file__).parent
    named = set()
    for source in package.glob("*.py"):
        named |= set(re.findall(r"[\"']((?:DYN_MM|MMCACHE)_[A-Z0-9_]+)[\"']", source.read_text()))
    assert "DYN_MM_HTTP_TIMEOUT" in named  # read by mmcache.dynamo
    assert named <= set(_native.VARIABLES), named - set(_native.VARIABLES)


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
    "host_pixels_max_bytes": (1 << 20, "1048576"),
    "host_pixels_ttl_secs": (60, "60"),
    "host_pixels_group": ("root", "root"),
    "host_pixels_timeout_ms": (250, "250"),
    "load_timeout_secs": (10.0, "10"),
    "download_memory_bytes": (1 << 20, "1048576"),
    "embedding_cache_bytes": (4096, "4096"),
    "embedding_fleet": (False, "0"),
    "embedding_max_value_bytes": (4 << 20, "4194304"),
    "embedding_chunk_bytes": (1 << 20, "1048576"),
    "embedding_compute_timeout_secs": (2.5, "2.5"),
}
# Set with a temporary path or PEM bytes: checked in their own tests below.
SPECIAL = {"disk_cache_dir", "host_pixels_dir", "shared_cache_tls_root_ca"}


def bases(keyword: str) -> tuple[dict, dict]:
    """What a keyword needs besides itself (a shared-cache URL), as keywords and as variables."""
    if keyword.startswith("shared_cache"):
        return (
            {"shared_cache_url": URL},
            {"DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1", "DYN_MM_SHARED_IMAGE_CACHE_URL": URL},
        )
    return {}, {}


def test_every_setting_has_a_keyword_with_a_case_here():
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


# One case per kind of Python value: (keyword, value, its variable's text).
KINDS = {
    "bool": ("allow_internal", True, "1"),
    "bool false": ("embedding_fleet", False, "0"),
    "int": ("decode_concurrency", 3, "3"),
    "float": ("origin_timeout_secs", 2.5, "2.5"),
    "whole float": ("load_timeout_secs", 10.0, "10"),
    "str": ("jpeg_decoder", "pure-rust", "pure-rust"),
    "path": ("libturbojpeg", pathlib.Path("/nonexistent/libturbojpeg.so.0"),
             "/nonexistent/libturbojpeg.so.0"),
    "list": ("allowed_media_domains", ["example.com", "*.cdn.example.net"],
             "example.com,*.cdn.example.net"),
    "tuple": ("image_formats", ("png", "webp"), "png,webp"),
    # Keywords whose value differs from the variable's, each read by its own reader.
    "bytes where the variable counts MiB": ("max_file_size_bytes", 1 << 20, "1"),
    "float seconds where the variable counts whole ones": ("disk_cache_ttl_secs", 60.0, "60"),
    # What behaves as a number, as Python's own conversions take it.
    "numpy int": ("decode_concurrency", np.int64(3), "3"),
    "numpy bool": ("allow_internal", np.bool_(True), "1"),
    "numpy float": ("origin_timeout_secs", np.float32(2.5), "2.5"),
    # Not exact as a binary fraction: its own spelling, not the f64 nearest float32's 0.1.
    "numpy float32 0.1": ("origin_timeout_secs", np.float32(0.1), "0.1"),
    "float with an exponent": ("max_pixels", 1e7, "10000000"),
    "whole float past 2**53": ("max_pixels", 1e16, "10000000000000000"),
    # Its str ("5/2") is not a number: the float it converts to.
    "Fraction": ("origin_timeout_secs", fractions.Fraction(5, 2), "2.5"),
    "IntEnum": ("max_pixels", Pixels.SMALL, "1000"),
    "Decimal": ("decode_wait_secs", decimal.Decimal("1.5"), "1.5"),
    "bytearray": ("jpeg_decoder", bytearray(b"pure-rust"), "pure-rust"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_value_sets_what_its_variable_sets(kind):
    keyword, value, text = KINDS[kind]
    by_keyword = mmcache.Loader(**{keyword: value})
    by_variable = mmcache.Loader(environ={_native.SETTINGS[keyword]: text})
    assert repr(by_keyword) == repr(by_variable) != repr(mmcache.Loader())


def test_none_unsets_and_a_url_keyword_turns_the_cache_on():
    var = _native.SETTINGS["decoded_cache_entries"]
    unset = mmcache.Loader(environ={var: "3"}, decoded_cache_entries=None)
    assert repr(unset) == repr(mmcache.Loader())
    by_keyword = mmcache.Loader(shared_cache_url=URL)
    by_variable = mmcache.Loader(environ={
        "DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1", _native.SETTINGS["shared_cache_url"]: URL,
    })
    assert repr(by_keyword) == repr(by_variable)
    assert by_keyword.shared_cache_enabled


def test_only_keywords_of_the_table_and_values_of_a_known_kind_are_taken():
    with pytest.raises(TypeError, match="unexpected keyword argument 'DYN_MM_ALLOW_INTERNAL'"):
        mmcache.Loader(DYN_MM_ALLOW_INTERNAL=True)
    with pytest.raises(TypeError, match="max_pixels"):
        mmcache.Loader(max_pixels={"a": 1})
    with pytest.raises(mmcache.ConfigError, match="max_pixels"):
        mmcache.Loader(max_pixels=-1)


@pytest.mark.parametrize("tier", ["disk_cache", "host_pixels"])
def test_the_tier_directory_and_group_keywords(tmp_path, tier):
    var = _native.SETTINGS[f"{tier}_dir"]
    group = _native.SETTINGS[f"{tier}_group"]
    by_keyword = mmcache.Loader(**{f"{tier}_dir": str(tmp_path), f"{tier}_group": 0})
    by_variable = mmcache.Loader(environ={var: str(tmp_path), group: "0"})
    assert repr(by_keyword) == repr(by_variable) != repr(mmcache.Loader())
    with pytest.raises(ValueError, match=f"{tier}_group"):
        mmcache.Loader(**{f"{tier}_group": "no-such-group-here"})
    # None: unset, as a blank variable.
    assert repr(mmcache.Loader(**{f"{tier}_group": None})) == repr(mmcache.Loader())


def test_none_unsets_a_path_or_pem_that_may_be_unset():
    for keyword in ("libturbojpeg", "shared_cache_tls_root_ca"):
        assert repr(mmcache.Loader(**{keyword: None})) == repr(mmcache.Loader()), keyword


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

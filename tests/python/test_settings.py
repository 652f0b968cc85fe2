"""`mmcache.Loader`'s keywords are the declared settings: `mmcache_loader::SETTINGS` (exposed
as `mmcache._native.SETTINGS`, keyword -> variable) holds each keyword with its variable and its
reader, and a keyword's Python value is turned into text in one generic place, then read by that
reader (`LoaderBuilder::with_setting`). So these tests check the table, and the turn of each kind
of Python value into text, not each setting.
"""

from __future__ import annotations

import pathlib
import re

import pytest

import mmcache
from mmcache import _native

URL = "redis://127.0.0.1:1"  # never contacted: a loader connects on first use
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

"""The exception classes of mmcache.errors: the native module's list agrees with errors.py,
the documented hierarchy, pickling, and the class and status of each kind of failure."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from conftest import Route, png

import mmcache
from mmcache import _native, errors

# Every class of mmcache.errors with its bases, as documented (README, errors.py).
HIERARCHY = {
    "MmcacheError": ("Exception",),
    "ConfigError": ("MmcacheError", "ValueError"),
    "UrlPolicyError": ("MmcacheError", "ValueError"),
    "OriginStatusError": ("MmcacheError",),
    "OriginTimeoutError": ("MmcacheError", "TimeoutError"),
    "LoadTimeoutError": ("OriginTimeoutError",),
    "OriginConnectionError": ("MmcacheError", "ConnectionError"),
    "TooLargeError": ("MmcacheError", "ValueError"),
    "BodyTooLargeError": ("TooLargeError",),
    "ImageTooLargeError": ("TooLargeError",),
    "DownloadBudgetError": ("TooLargeError",),
    "UnsupportedImageError": ("MmcacheError", "ValueError"),
    "EmptyBodyError": ("MmcacheError", "ValueError"),
    "InvalidDataUrlError": ("MmcacheError", "ValueError"),
    "BusyError": ("MmcacheError",),
    "DecodeBusyError": ("BusyError",),
    "DownloadBusyError": ("BusyError",),
    "BatchError": ("MmcacheError",),
    "EmbeddingError": ("MmcacheError",),
    "EmbeddingTypeError": ("EmbeddingError", "TypeError"),
    "InvalidEmbeddingError": ("EmbeddingError", "ValueError"),
    "EmbeddingDeviceError": ("InvalidEmbeddingError",),
    "EmbeddingTooLargeError": ("EmbeddingError", "TooLargeError"),
    "EmbeddingComputeError": ("EmbeddingError",),
    "EmbeddingTimeoutError": ("EmbeddingError", "TimeoutError"),
}


def declared() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.MmcacheError)
    }


def test_native_module_maps_to_exactly_the_classes_of_errors_py():
    # The native module imports each class once by name (crates/python/src/errors.rs): a
    # class only one side knows is a mistake.
    assert sorted(_native._ERROR_CLASSES) == sorted(declared())
    assert len(set(_native._ERROR_CLASSES)) == len(_native._ERROR_CLASSES)


def test_every_class_has_its_documented_bases_and_is_exported():
    assert sorted(declared()) == sorted(HIERARCHY)
    for name, bases in HIERARCHY.items():
        cls = getattr(errors, name)
        assert tuple(b.__name__ for b in cls.__bases__) == bases, name
        assert cls.__module__ == "mmcache.errors" and cls.__qualname__ == name
        assert getattr(mmcache, name) is cls and name in mmcache.__all__
        assert cls("m").http_status == 500 and cls("m", 413).http_status == 413
        assert str(cls("a message")) == "a message"


def load_error(loader, url):
    with pytest.raises(mmcache.MmcacheError) as info:
        loader.load_sync(url)
    return info.value


def roundtrip(e):
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and str(back) == str(e) and back.http_status == e.http_status
    return back


def test_errors_pickle_with_their_attributes(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    e = roundtrip(load_error(loader, origin.base + path()))
    assert type(e) is mmcache.OriginStatusError and e.origin_status == 404
    e = roundtrip(load_error(loader, "data:image/png;base64,***"))
    assert type(e) is mmcache.InvalidDataUrlError and e.reason == "bad_base64"
    bad = origin.image(path("bad.png"), b"not an image")
    with pytest.raises(mmcache.BatchError) as info:
        loader.load_batch_sync([bad, bad])
    e = roundtrip(info.value)
    assert [(i, type(f)) for i, f in e.failures] == [
        (0, mmcache.UnsupportedImageError),
        (1, mmcache.UnsupportedImageError),
    ]
    assert all(f.http_status == 415 for _, f in e.failures)
    with pytest.raises(mmcache.ConfigError) as config:
        mmcache.Loader(max_pixels=0)
    roundtrip(config.value)


def test_the_other_kinds_have_their_class_and_status(origin, path):
    # The kinds tests/python/test_loader.py does not produce: a redirect loop, a body over the
    # download budget, a batch's status.
    loader = mmcache.Loader(allow_internal=True)
    here, there = path(), path()
    origin.set(here, Route(302, b"", headers={"Location": origin.base + there}))
    origin.set(there, Route(302, b"", headers={"Location": origin.base + here}))
    e = load_error(loader, origin.base + here)
    assert type(e) is mmcache.UrlPolicyError and e.http_status == 400
    small = mmcache.Loader(
        environ={"DYN_MM_ALLOW_INTERNAL": "1", "MMCACHE_DOWNLOAD_MEMORY_BYTES": "1000"}
    )
    e = load_error(small, origin.image(path(), png(64, 64) + b"\0" * 5000))
    assert type(e) is mmcache.DownloadBudgetError and e.http_status == 413
    assert isinstance(e, mmcache.TooLargeError) and isinstance(e, ValueError)
    bad = origin.image(path("bad.png"), b"not an image")
    with pytest.raises(mmcache.BatchError) as info:
        loader.load_batch_sync([bad, "data:image/png;base64,***"])
    # A batch's status is its first failure's.
    assert info.value.http_status == 415
    assert [type(f) for _, f in info.value.failures] == [
        mmcache.UnsupportedImageError,
        mmcache.InvalidDataUrlError,
    ]


def test_a_batch_reports_by_the_rust_loaders_rule(origin, path):
    # Loader::load_batch's rule (crates/loader): the first failure with an origin status, else
    # the first URL-policy refusal (Error::is_policy: scheme, address, allowlist), else all of
    # them; Python adds one step: a batch with one failure raises that failure.
    loader = mmcache.Loader(allow_internal=True)
    bad = origin.image(path("bad.png"), b"not an image")
    here, there = path(), path()
    origin.set(here, Route(302, b"", headers={"Location": origin.base + there}))
    origin.set(there, Route(302, b"", headers={"Location": origin.base + here}))
    looping = origin.base + here
    # A redirect loop is a UrlPolicyError but not a refusal by the URL policy: it does not
    # stand for the batch.
    with pytest.raises(mmcache.BatchError) as info:
        loader.load_batch_sync([bad, looping])
    assert [(i, type(f)) for i, f in info.value.failures] == [
        (0, mmcache.UnsupportedImageError),
        (1, mmcache.UrlPolicyError),
    ]
    with pytest.raises(mmcache.UrlPolicyError) as policy:
        loader.load_batch_sync([bad, looping, "file:///etc/passwd"])
    assert "local file access" in str(policy.value)
    with pytest.raises(mmcache.OriginStatusError):
        loader.load_batch_sync(["file:///etc/passwd", origin.base + path()])
    with pytest.raises(mmcache.UrlPolicyError) as only:
        loader.load_batch_sync([origin.image(path(), png(4, 4)), looping])
    assert "redirect loop" in str(only.value)


def test_the_native_module_refuses_to_load_when_errors_py_lacks_a_class():
    # A real interpreter whose mmcache.errors lacks ConfigError: the import fails, naming it,
    # rather than a later load raising AttributeError.
    code = (
        "import sys, types\n"
        "fake = types.ModuleType('mmcache.errors')\n"
        "fake.MmcacheError = type('MmcacheError', (Exception,), {})\n"
        "sys.modules['mmcache.errors'] = fake\n"
        "try:\n"
        "    import mmcache\n"
        "except ImportError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused: mmcache.errors.ConfigError is not an MmcacheError class" in out.stdout, (
        out.stdout + out.stderr
    )

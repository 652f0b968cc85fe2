"""mmcache.Loader from Python against a real origin and a real Redis Cluster."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import sys
import time

import numpy as np
import pytest
from conftest import Route, pixels_of, png
from PIL import Image

import mmcache


def shared_key(url: str, scope: str | None = None) -> str:
    """Dynamo's shared-cache key of a URL (docs/DESIGN: dynamo:mm:image:{sha256}:bytes)."""
    identity = url
    if scope is not None:
        identity = hashlib.sha256(scope.strip().encode()).hexdigest() + ":" + url
    return "dynamo:mm:image:{" + hashlib.sha256(identity.encode()).hexdigest() + "}:bytes"


def wait_for(predicate, seconds: float = 10.0) -> bool:
    """Polls `predicate` every 20 ms for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# --- pixels -------------------------------------------------------------------------------


def test_load_returns_readonly_uint8_view_with_pillows_pixels(origin, path):
    data = png(37, 21, seed=4)
    url = origin.image(path(), data)
    loader = mmcache.Loader(allow_internal=True)
    a = loader.load_sync(url)
    assert isinstance(a, np.ndarray)
    assert a.shape == (21, 37, 3) and a.dtype == np.uint8
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0, 0] = 1
    with pytest.raises(ValueError):
        a.flags.writeable = True
    assert a.tobytes() == pixels_of(data)


def test_memory_hit_shares_the_cached_pixels_without_a_copy(origin, path):
    url = origin.image(path(), png(16, 16, seed=1))
    loader = mmcache.Loader(allow_internal=True)
    first = loader.load_sync(url)
    second = loader.load_sync(url)
    # Two arrays over the same memory: the decoded cache's pixels, not copies.
    assert first.__array_interface__["data"][0] == second.__array_interface__["data"][0]
    assert isinstance(first.base, mmcache.Pixels)


def test_pixels_outlive_their_cache_entry_and_the_loader(origin, path):
    data = png(64, 64, seed=8)
    loader = mmcache.Loader(allow_internal=True, decoded_cache_entries=1)
    kept = loader.load_sync(origin.image(path(), data))
    # Evict its entry, drop the loader, and churn the allocator with same-sized images.
    for i in range(8):
        loader.load_sync(origin.image(path(), png(64, 64, seed=100 + i)))
    del loader
    import gc
    gc.collect()
    churn = [np.full((64, 64, 3), 7, np.uint8) for _ in range(32)]
    assert kept.tobytes() == pixels_of(data)
    del churn


# --- sources: every layer -----------------------------------------------------------------


def test_sources_origin_then_memory_and_data(origin, path):
    url = origin.image(path(), png(8, 8))
    loader = mmcache.Loader(allow_internal=True)

    async def run():
        _, s1 = await loader.load_detailed(url)
        _, s2 = await loader.load_detailed(url)
        import base64
        data_url = "data:image/png;base64," + base64.b64encode(png(4, 4)).decode()
        _, s3 = await loader.load_detailed(data_url)
        return s1, s2, s3

    assert asyncio.run(run()) == ("origin", "memory", "data")
    assert origin.count(url.removeprefix(origin.base)) == 1


def test_inflight_join_downloads_once(origin, path):
    p = path()
    url = origin.image(p, png(8, 8), delay=0.5)
    loader = mmcache.Loader(allow_internal=True)

    async def run():
        return await asyncio.gather(*(loader.load_detailed(url) for _ in range(5)))

    sources = sorted(s for _, s in asyncio.run(run()))
    assert sources == ["inflight"] * 4 + ["origin"]
    assert origin.count(p) == 1


def test_disk_tier_serves_a_second_loader(origin, path, tmp_path):
    p = path()
    url = origin.image(p, png(8, 8, seed=2))
    first = mmcache.Loader(allow_internal=True, disk_cache_dir=str(tmp_path))
    second = mmcache.Loader(allow_internal=True, disk_cache_dir=str(tmp_path))
    a, s1 = asyncio.run(first.load_detailed(url))
    b, s2 = asyncio.run(second.load_detailed(url))
    assert (s1, s2) == ("origin", "disk")
    assert a.tobytes() == b.tobytes()
    assert origin.count(p) == 1


def test_shared_cache_serves_another_worker(origin, path, shared_env):
    p = path()
    url = origin.image(p, png(8, 8, seed=3))
    writer = mmcache.Loader.from_env()
    reader = mmcache.Loader.from_env()
    assert writer.shared_cache_enabled
    _, s1 = asyncio.run(writer.load_detailed(url))
    assert writer.flush(5.0)
    _, s2 = asyncio.run(reader.load_detailed(url))
    assert (s1, s2) == ("origin", "shared")
    assert origin.count(p) == 1
    # Dynamo's histogram names, for dashboards built on Dynamo's Python workers.
    text = mmcache.metrics_text()
    assert 'dynamo_component_image_shared_cache_get_duration_seconds_count{outcome="hit"' in text
    assert "dynamo_component_image_shared_cache_set_duration_seconds_bucket" in text


# --- a mixed fleet: the same keys and values as Dynamo's Python workers --------------------


def test_entry_written_by_redis_py_at_dynamos_key_is_a_hit(origin, path, shared_env):
    p = path()
    url = origin.base + p  # the origin does not even serve it
    data = png(9, 7, seed=5)
    shared_env.client.set(shared_key(url), data, ex=60)
    arr, source = asyncio.run(mmcache.Loader.from_env().load_detailed(url))
    assert source == "shared"
    assert arr.tobytes() == pixels_of(data)
    assert origin.count(p) == 0


def test_our_entry_is_the_exact_origin_bytes_at_dynamos_key(origin, path, shared_env, monkeypatch):
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS", "123")
    data = png(10, 10, seed=6)
    url = origin.image(path(), data)
    loader = mmcache.Loader.from_env()
    loader.load_sync(url)
    assert loader.flush(5.0)
    key = shared_key(url)
    assert shared_env.client.get(key) == data
    assert 0 < shared_env.client.ttl(key) <= 123


def test_scoped_entries_use_dynamos_scoped_key(origin, path, shared_env, monkeypatch):
    monkeypatch.setenv("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
    data = png(6, 6, seed=7)
    url = origin.image(path(), data)
    loader = mmcache.Loader.from_env()
    loader.load_sync(url, " session-a ")
    assert loader.flush(5.0)
    assert shared_env.client.get(shared_key(url, "session-a")) == data
    assert shared_env.client.get(shared_key(url)) is None


# --- errors and statuses -------------------------------------------------------------------


def load_error(loader, url, **kw):
    with pytest.raises(mmcache.MmcacheError) as info:
        loader.load_sync(url, **kw)
    return info.value


def test_errors_have_a_class_and_status_per_kind(origin, path):
    loader = mmcache.Loader(allow_internal=True, max_file_size_bytes=1000, max_pixels=10_000)
    e = load_error(loader, origin.base + path())
    assert type(e) is mmcache.OriginStatusError and e.http_status == 404 and e.origin_status == 404
    e = load_error(loader, origin.set(path(), Route(503, b"busy")))
    assert e.http_status == 503 and e.origin_status == 503
    e = load_error(loader, origin.image(path("x.svg"), b"<svg xmlns='http://www.w3.org/2000/svg'/>"))
    assert type(e) is mmcache.UnsupportedImageError and e.http_status == 415
    e = load_error(loader, origin.image(path(), b"\x89PNG" + b"\0" * 5000))
    assert type(e) is mmcache.BodyTooLargeError and e.http_status == 413
    assert isinstance(e, mmcache.TooLargeError) and isinstance(e, ValueError)
    e = load_error(loader, origin.image(path(), png(200, 200)))
    assert type(e) is mmcache.ImageTooLargeError and e.http_status == 413
    e = load_error(loader, "http://127.0.0.1:1/refused.png")
    assert type(e) is mmcache.OriginConnectionError and e.http_status == 400
    e = load_error(loader, "data:text/plain;base64,aGk=")
    assert type(e) is mmcache.InvalidDataUrlError and e.reason == "not_image"
    e = load_error(loader, "data:image/png;base64,***")
    assert type(e) is mmcache.InvalidDataUrlError and e.reason == "bad_base64"
    assert e.http_status == 400


def test_url_policy_errors_are_value_errors(origin, path):
    strict = mmcache.Loader()
    e = load_error(strict, origin.image(path(), png(4, 4)))
    assert type(e) is mmcache.UrlPolicyError and isinstance(e, ValueError)
    assert e.http_status in (400, 403)
    e = load_error(strict, "https://169.254.169.254/latest/meta-data")
    assert type(e) is mmcache.UrlPolicyError
    listed = mmcache.Loader(allow_internal=True, allowed_media_domains=["images.example.com"])
    e = load_error(listed, origin.image(path(), png(4, 4)))
    assert type(e) is mmcache.UrlPolicyError


def test_timeout_is_408(origin, path):
    # A short timeout keeps this quick; tests/python/test_dynamo.py has the 30 s default.
    loader = mmcache.Loader(allow_internal=True, origin_timeout_secs=0.3)
    e = load_error(loader, origin.image(path(), png(4, 4), delay=2.0))
    assert type(e) is mmcache.OriginTimeoutError and e.http_status == 408
    assert isinstance(e, TimeoutError)


def test_load_deadline_is_408_load_timeout_error(monkeypatch, origin, path):
    # The origin's own timeout stays at its 30 s default: the load's deadline fires first.
    monkeypatch.setenv("DYN_MM_ALLOW_INTERNAL", "1")
    monkeypatch.setenv("MMCACHE_LOAD_TIMEOUT_SECS", "0.5")
    loader = mmcache.Loader.from_env()
    started = time.monotonic()
    e = load_error(loader, origin.image(path(), png(4, 4), delay=5.0))
    assert type(e) is mmcache.LoadTimeoutError and e.http_status == 408
    assert isinstance(e, mmcache.OriginTimeoutError) and isinstance(e, TimeoutError)
    assert time.monotonic() - started < 4.0


def test_messages_name_the_host_but_not_the_path_query_or_credentials(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    port = origin.base.rsplit(":", 1)[1]
    e = load_error(loader, f"http://user:hunter2@127.0.0.1:{port}/secret-path.png?sig=tok3n")
    text = str(e)
    assert "127.0.0.1" in text
    for secret in ("hunter2", "user:", "secret-path", "tok3n"):
        assert secret not in text


def test_config_errors_name_the_variable_and_never_the_cache_url(monkeypatch):
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "true")
    with pytest.raises(mmcache.ConfigError) as info:
        mmcache.Loader.from_env()
    assert "DYN_MM_SHARED_IMAGE_CACHE_ENABLED" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(mmcache.ConfigError) as info:
        mmcache.Loader(shared_cache=True, shared_cache_url="ftp://admin:s3cret@cache:6379")
    assert "s3cret" not in str(info.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):
        mmcache.Loader(no_such=1)
    with pytest.raises(ValueError, match="origin_timeout_secs"):
        mmcache.Loader(origin_timeout_secs=-1.0)
    with pytest.raises(ValueError, match="image_formats.*bmp"):
        mmcache.Loader(image_formats="jpeg,bmp")
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "0")
    monkeypatch.setenv("MMCACHE_IMAGE_FORMATS", "png,tiff")
    with pytest.raises(mmcache.ConfigError, match="MMCACHE_IMAGE_FORMATS"):
        mmcache.Loader.from_env()


def test_image_formats_setting_refuses_other_formats_with_415():
    loader = mmcache.Loader(image_formats=["png"])
    png_url = "data:image/png;base64," + base64.b64encode(png(4, 3)).decode()
    assert loader.load_sync(png_url).shape == (3, 4, 3)
    buf = io.BytesIO()
    Image.new("RGB", (4, 3)).save(buf, format="JPEG")
    jpeg_url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    with pytest.raises(mmcache.UnsupportedImageError) as info:
        loader.load_sync(jpeg_url)
    assert info.value.http_status == 415 and "jpeg images are not accepted" in str(info.value)


def test_batch_keeps_order_and_reports_every_failure(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    good = [origin.image(path(), png(5 + i, 5, seed=i)) for i in range(3)]
    arrays = asyncio.run(loader.load_batch(good))
    assert [a.shape[1] for a in arrays] == [5, 6, 7]
    bad = origin.image(path("bad.png"), b"not an image")
    with pytest.raises(mmcache.BatchError) as info:
        loader.load_batch_sync([good[0], bad, bad])
    assert [i for i, _ in info.value.failures] == [1, 2]
    assert all(isinstance(e, mmcache.UnsupportedImageError) for _, e in info.value.failures)
    # An origin status wins over other failures, as in Dynamo.
    with pytest.raises(mmcache.OriginStatusError):
        loader.load_batch_sync([bad, origin.base + path()])


# --- concurrency and cancellation -----------------------------------------------------------


def test_cancelling_one_waiter_does_not_cancel_the_load(origin, path):
    p = path()
    url = origin.image(p, png(8, 8), delay=0.5)
    loader = mmcache.Loader(allow_internal=True)

    async def run():
        a = asyncio.ensure_future(loader.load(url))
        b = asyncio.ensure_future(loader.load(url))
        await asyncio.sleep(0.1)
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        return await b

    assert asyncio.run(run()).shape == (8, 8, 3)
    assert origin.count(p) == 1


def test_a_cancelled_load_still_fills_the_cache(origin, path):
    p = path()
    url = origin.image(p, png(8, 8), delay=0.3)
    loader = mmcache.Loader(allow_internal=True)

    async def run():
        task = asyncio.ensure_future(loader.load(url))
        await asyncio.sleep(0.05)
        task.cancel()
        # The load goes on without its caller: wait (bounded) until it filled the cache.
        for _ in range(500):
            if loader.cache_entries:
                break
            await asyncio.sleep(0.01)
        return await loader.load_detailed(url)

    _, source = asyncio.run(run())
    assert source == "memory"
    assert origin.count(p) == 1


def test_100_concurrent_loads(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    distinct = [origin.image(path(), png(16, 16, seed=i), delay=0.01) for i in range(100)]
    same_path = path()
    same = origin.image(same_path, png(16, 16, seed=200), delay=0.2)

    async def run():
        return await asyncio.gather(*(loader.load(u) for u in distinct + [same] * 100))

    arrays = asyncio.run(run())
    assert len(arrays) == 200
    assert all(a.shape == (16, 16, 3) for a in arrays)
    assert arrays[7].tobytes() == pixels_of(png(16, 16, seed=7))
    assert origin.count(same_path) == 1


def test_the_gil_is_released_while_a_load_waits(origin, path):
    import threading
    url = origin.image(path(), png(8, 8), delay=0.5)
    loader = mmcache.Loader(allow_internal=True)
    ticks = 0
    done = threading.Event()

    def spin():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.01)

    t = threading.Thread(target=spin)
    t.start()
    try:
        loader.load_sync(url)
    finally:
        done.set()
        t.join(5)
    # 0.5 s of waiting: a thread needing the GIL ran all along (about 50 ticks).
    assert ticks >= 10


# --- scope and metrics ------------------------------------------------------------------------


def test_empty_body_and_single_batch_failures(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    empty = origin.image(path(), b"")
    e = load_error(loader, empty)
    assert type(e) is mmcache.EmptyBodyError and e.http_status == 400
    # A batch with one failure raises that failure, not a BatchError.
    timeout_loader = mmcache.Loader(allow_internal=True, origin_timeout_secs=0.3)
    slow = origin.image(path(), png(4, 4), delay=2.0)
    with pytest.raises(mmcache.OriginTimeoutError):
        timeout_loader.load_batch_sync([origin.image(path(), png(4, 4)), slow])


def test_flush_async_waits_for_the_write(origin, path, shared_env, monkeypatch):
    # Write-behind: the load returns before its SET; flush_async waits for it.
    monkeypatch.setenv("MMCACHE_SHARED_IMAGE_CACHE_WRITE_BEHIND", "1")
    data = png(4, 4, seed=21)
    url = origin.image(path(), data)
    loader = mmcache.Loader.from_env()

    async def run():
        await loader.load(url)
        return await loader.flush_async(5.0)

    assert asyncio.run(run()) is True
    assert shared_env.client.get(shared_key(url)) == data


def test_scope_from_headers_follows_the_precedence():
    assert mmcache.scope_from_headers({"X-Dynamo-Session-Id": " s1 ", "thread-id": "t"}) == "s1"
    assert mmcache.scope_from_headers([("x-claude-code-session-id", "p"),
                                       ("x-claude-code-agent-id", "child")]) == "child"
    assert mmcache.scope_from_headers({"thread-id": b"codex"}) == "codex"
    assert mmcache.scope_from_headers({"x-dynamo-session-id": "   ", "x-session-id": "o"}) == "o"
    # DeepSeek harness: after Codex's thread-id, before OpenCode's x-session-id.
    assert mmcache.scope_from_headers({"x-session-id": "o",
                                       "X-DeepSeek-Harness-Session-Id": " ds "}) == "ds"
    assert mmcache.scope_from_headers({"x-deepseek-harness-session-id": "ds",
                                       "thread-id": "t"}) == "t"
    assert mmcache.scope_from_headers({"x-dynamo-session-id": b"\xff"}) is None
    assert mmcache.scope_from_headers({}) is None
    # ASGI gives raw (bytes, bytes) pairs.
    assert mmcache.scope_from_headers([(b"x-dynamo-session-id", b"asgi")]) == "asgi"


def test_scoped_loader_partitions_and_bypasses(origin, path):
    p = path()
    url = origin.image(p, png(8, 8))
    loader = mmcache.Loader(allow_internal=True, session_scoped=True)

    async def run():
        return [s for _, s in [await loader.load_detailed(url, sc) for sc in ("a", "b", "a", None)]]

    assert asyncio.run(run()) == ["origin", "origin", "memory", "origin"]
    assert origin.count(p) == 3


def test_metrics_text_has_the_loader_metrics(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    loader.load_sync(origin.image(path(), png(4, 4)))
    text = mmcache.metrics_text()
    assert 'mmcache_loads_total{source="origin",outcome="ok"}' in text
    assert "# TYPE mmcache_loads_total counter" in text


def in_forked_child(work):
    """Runs `work()` in a forked child (bounded: 20 s, then killed); returns what it returned
    or its exception's text."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child():
        try:
            q.put(work())
        except Exception as e:  # noqa: BLE001 - reported to the parent
            q.put(f"{type(e).__name__}: {e}")

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    try:
        proc.join(20)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return q.get(timeout=5)


fork_only = pytest.mark.skipif(sys.platform != "linux", reason="fork is tested on Linux")


@fork_only
def test_a_forked_child_gets_a_clear_error_not_a_hang(origin, path):
    url = origin.image(path(), png(4, 4))
    loader = mmcache.Loader(allow_internal=True)
    loader.load_sync(url)  # the runtime runs in this process now
    message = in_forked_child(lambda: (loader.load_sync(url), "loaded")[1])
    assert message.startswith("RuntimeError") and "fork" in message


@fork_only
def test_a_forked_child_can_build_and_use_its_own_loader(origin, path):
    data = png(5, 5, seed=3)
    url = origin.image(path(), data)
    mmcache.Loader(allow_internal=True).load_sync(url)  # the parent's runtime is running
    got = in_forked_child(lambda: mmcache.Loader(allow_internal=True).load_sync(url).tobytes())
    assert got == pixels_of(data)


@fork_only
def test_a_parent_loader_dropped_in_a_child_leaves_the_parent_working(origin, path):
    import gc
    urls = [origin.image(path(), png(4, 4, seed=i)) for i in range(3)]
    holder = [mmcache.Loader(allow_internal=True)]
    holder[0].load_sync(urls[0])  # a pooled keep-alive connection, registered with epoll

    def drop_it():
        holder.clear()  # drop the parent's loader here
        gc.collect()
        return "dropped"

    assert in_forked_child(drop_it) == "dropped"
    # The parent's sockets are still registered and its runtime still serves them.
    for url in urls:
        assert holder[0].load_sync(url).shape == (4, 4, 3)

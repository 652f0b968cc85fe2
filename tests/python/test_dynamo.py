"""mmcache.dynamo.ImageLoader on the cases Dynamo's own tests document (DYNAMO-SPEC §7), with a
real origin and a real Redis Cluster instead of mocks."""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import time
import zlib

import pytest
from conftest import Route, pixels_of, png
from PIL import Image
from test_dynamo_embeddings import Endpoint, dynamo_prometheus
from test_loader import shared_key

import mmcache
from mmcache import dynamo
from mmcache.dynamo import (
    HttpStatusError,
    ImageLoader,
    UrlValidationError,
    image_cache_scope_from_request,
)


class Policy:
    """Dynamo's UrlValidationPolicy shape."""

    def __init__(self, allow: bool) -> None:
        self.allow_http = allow
        self.allow_private_ips = allow


def internal(**kw) -> ImageLoader:
    return ImageLoader(url_policy=Policy(True), **kw)


def run(coro):
    return asyncio.run(coro)


def raises(exc_type, coro):
    with pytest.raises(exc_type) as info:
        run(coro)
    return info.value


def test_returns_an_rgb_pil_image_with_pillows_pixels(origin, path):
    data = png(23, 11, seed=9)
    img = run(internal().load_image(origin.image(path(), data)))
    assert isinstance(img, Image.Image) and img.mode == "RGB" and img.size == (23, 11)
    assert img.tobytes() == pixels_of(data)
    # A separate image: writing to it never changes what later loads see.
    img.putpixel((0, 0), (1, 2, 3))


def test_concurrent_same_url_deduplicates(origin, path):
    p = path()
    url = origin.image(p, png(8, 8), delay=0.3)
    loader = internal()

    async def both():
        return await asyncio.gather(loader.load_image(url), loader.load_image(url))

    a, b = run(both())
    assert a.tobytes() == b.tobytes()
    assert origin.count(p) == 1


def test_concurrent_different_urls_fetch_independently(origin, path):
    p1, p2 = path(), path()
    u1, u2 = origin.image(p1, png(8, 8, 1)), origin.image(p2, png(8, 8, 2))
    loader = internal()

    async def both():
        return await asyncio.gather(loader.load_image(u1), loader.load_image(u2))

    run(both())
    assert (origin.count(p1), origin.count(p2)) == (1, 1)


def test_waiter_cancellation_does_not_cancel_shared_task(origin, path):
    url = origin.image(path(), png(8, 8), delay=0.4)
    loader = internal()

    async def scenario():
        a = asyncio.ensure_future(loader.load_image(url))
        b = asyncio.ensure_future(loader.load_image(url))
        await asyncio.sleep(0.1)
        a.cancel()
        return await b

    assert run(scenario()).size == (8, 8)
    assert origin.count(url.removeprefix(origin.base)) == 1


def test_retry_after_failure(origin, path):
    p = path()
    url = origin.image(p, png(4, 4), delay=1.0)
    loader = internal(http_timeout=0.3)
    e = raises(HttpStatusError, loader.load_image(url))
    assert e.status == 408 and "Timeout" in str(e)
    origin.image(p, png(4, 4))  # now fast: the failure was not cached
    assert run(loader.load_image(url)).size == (4, 4)


def test_timeout_with_the_default_http_timeout_is_408(origin, path):
    # Dynamo's default (30 s) and ours, unchanged: what users run.
    url = origin.image(path(), png(4, 4), delay=32.0)
    e = raises(HttpStatusError, internal().load_image(url))
    assert e.status == 408 and e.http_status == 408
    assert "timeout=30.0s" in str(e)


def test_http_rejected_by_default(origin, path):
    e = raises(UrlValidationError, ImageLoader().load_image(origin.image(path(), png(4, 4))))
    assert isinstance(e, ValueError)


def test_file_and_schemeless_sources_rejected():
    loader = ImageLoader()
    for url in ("file:///etc/passwd", "/etc/passwd"):
        e = raises(ValueError, loader.load_image(url))
        assert "local file access is not allowed" in str(e)


def test_data_url_invalid_base64_normalized():
    e = raises(ValueError, ImageLoader().load_image("data:image/png;base64,@@@"))
    assert "Invalid base64" in str(e)


def test_data_url_non_image_rejected():
    e = raises(ValueError, ImageLoader().load_image("data:text/plain;base64,aGk="))
    assert "Data URL must be an image type" in str(e)


def test_data_url_image_loads():
    data = png(5, 3, seed=4)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    assert run(ImageLoader().load_image(url)).tobytes() == pixels_of(data)


def test_http_connection_error_raises_400():
    e = raises(HttpStatusError, internal().load_image("http://127.0.0.1:1/x.png"))
    assert e.status == 400 and "Connection error" in str(e)


def test_http_status_error_propagated(origin, path):
    e = raises(HttpStatusError, internal().load_image(origin.base + path()))
    assert e.status == 404 and e.http_status == 404


def test_unsupported_format_url_raises_415(origin, path):
    svg = b"<svg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/>"
    e = raises(HttpStatusError, internal().load_image(origin.image(path("a.svg"), svg)))
    assert e.status == 415 and "Unsupported Media Type" in str(e)


def test_gif_is_unsupported_as_in_dynamo(origin, path):
    # Dynamo opens JPEG, PNG and WebP only; the native loader accepts GIF by default.
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(buf, format="GIF")
    gif = buf.getvalue()
    e = raises(HttpStatusError, internal().load_image(origin.image(path("a.gif"), gif)))
    assert e.status == 415 and "Unsupported Media Type" in str(e)
    data_url = "data:image/gif;base64," + base64.b64encode(gif).decode()
    assert raises(HttpStatusError, ImageLoader().load_image(data_url)).status == 415
    assert mmcache.Loader().load_sync(data_url).shape == (3, 4, 3)


def test_gif_is_decoded_when_the_operator_opts_in(monkeypatch):
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(buf, format="GIF")
    monkeypatch.setenv("MMCACHE_IMAGE_FORMATS", "jpeg,png,webp,gif")
    data_url = "data:image/gif;base64," + base64.b64encode(buf.getvalue()).decode()
    image = asyncio.run(ImageLoader().load_image(data_url))
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (200, 10, 10)


def test_unsupported_format_data_url_raises_415():
    url = "data:image/svg+xml;base64," + base64.b64encode(b"<svg/>").decode()
    assert raises(HttpStatusError, ImageLoader().load_image(url)).status == 415


def test_unsupported_format_batch_url_raises_415(origin, path):
    url = origin.image(path("a.svg"), b"<svg/>")
    e = raises(HttpStatusError, internal().load_image_batch([{"Url": url}]))
    assert e.status == 415


def test_oversized_download_is_a_url_validation_error_413(origin, path):
    url = origin.image(path(), png(64, 64, 3))
    e = raises(UrlValidationError, internal(max_bytes=100).load_image(url))
    assert e.http_status == 413


def _png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height grey pixels, with one tiny IDAT."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_decompression_bomb_is_413_not_500(origin, path):
    # 20000 x 20000 is over the 100 MP pixel limit: refused from the header, nothing decoded.
    url = origin.image(path(), _png_declaring(20000, 20000))
    e = raises(HttpStatusError, internal().load_image(url))
    assert e.status == 413


def test_empty_body_is_a_value_error(origin, path):
    e = raises(ValueError, internal().load_image(origin.image(path(), b"")))
    assert "Empty response content" in str(e)


def test_environment_is_read_as_leniently_as_dynamo(origin, path, monkeypatch):
    monkeypatch.setenv("DYN_MM_MAX_FILE_SIZE_MB", "lots")     # Dynamo: warn, use 64
    monkeypatch.setenv("DYN_MM_IMAGE_CACHE_SIZE", "-1")       # Dynamo: cache off
    loader = ImageLoader(url_policy=Policy(True))
    assert run(loader.load_image(origin.image(path(), png(4, 4)))).size == (4, 4)
    monkeypatch.setenv("DYN_MM_ALLOW_INTERNAL", "yes")        # Dynamo: only "1" allows
    with pytest.raises(UrlValidationError):
        run(ImageLoader().load_image(origin.image(path(), png(4, 4))))
    with pytest.raises(ValueError, match="max_bytes"):
        ImageLoader(max_bytes=-1)


def test_messages_leave_out_credentials_and_query(origin, path, caplog):
    port = origin.base.rsplit(":", 1)[1]
    # Refused by the policy (credentials in the URL): never echoed.
    url = f"http://user:hunter2@127.0.0.1:{port}{path()}?sig=tok3n"
    with pytest.raises(UrlValidationError) as info:
        run(internal().load_image(url))
    assert "hunter2" not in str(info.value) and "tok3n" not in str(info.value)
    # A 404 with a signed query: message and log show scheme, host and path only.
    p = path()
    url = f"{origin.base}{p}?sig=tok3n#frag"
    with caplog.at_level("ERROR", logger="mmcache.dynamo"):
        e = raises(HttpStatusError, internal().load_image(url))
    assert e.status == 404 and e.url == url  # the attribute keeps it, as Dynamo's
    assert p in str(e) and "tok3n" not in str(e) and "frag" not in str(e)
    assert p in caplog.text and "tok3n" not in caplog.text


def test_uuid_only_image_slots_preserve_batch_alignment(origin, path):
    url = origin.image(path(), png(4, 4))
    items = [{"Url": url}, {"UuidOnly": "u"}, {"Url": url}]
    out = run(internal().load_image_batch(items, preserve_uuid_slots=True))
    assert out[1] is None and out[0].size == out[2].size == (4, 4)


def test_uuid_only_image_slots_require_opt_in():
    e = raises(ValueError, ImageLoader().load_image_batch([{"UuidOnly": "u"}]))
    assert "preserve_uuid_slots" in str(e)


def test_decoded_items_and_bad_items_are_value_errors():
    assert "decoded media" in str(raises(ValueError, ImageLoader().load_image_batch([{"Decoded": {}}])))
    assert "index 0" in str(raises(ValueError, ImageLoader().load_image_batch([{"Nope": 1}])))


def test_batch_propagates_cancellation(origin, path):
    url = origin.image(path(), png(4, 4), delay=1.0)
    loader = internal()

    async def scenario():
        task = asyncio.ensure_future(loader.load_image_batch([{"Url": url}]))
        await asyncio.sleep(0.1)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        run(scenario())


def test_ssrf_blocked_batch_url_raises_url_validation_error():
    e = raises(UrlValidationError, ImageLoader().load_image_batch(
        [{"Url": "https://169.254.169.254/latest/meta-data"}]))
    assert isinstance(e, ValueError)


def test_redirect_cap_is_a_url_validation_error(origin, path):
    hops = [path() for _ in range(5)]
    for here, there in zip(hops, hops[1:]):
        origin.set(here, Route(302, b"", headers={"Location": origin.base + there}))
    origin.image(hops[-1], png(4, 4))
    e = raises(UrlValidationError, internal().load_image(origin.base + hops[0]))
    assert "redirect" in str(e)


def test_image_batch_prioritizes_typed_client_error(origin, path):
    svg = origin.image(path("a.svg"), b"<svg/>")
    # The first HttpStatusError in item order wins over everything else.
    e = raises(HttpStatusError, internal().load_image_batch(
        [{"Url": "data:image/png;base64,@@"}, {"Url": "http://127.0.0.1:1/x.png"}, {"Url": svg}]))
    assert e.status == 400
    # Without one, a UrlValidationError wins over a plain ValueError.
    e = raises(UrlValidationError, ImageLoader().load_image_batch(
        [{"Url": "data:image/png;base64,@@"}, {"Url": "https://169.254.169.254/x"}]))
    assert "169.254.169.254" in str(e) or "blocked" in str(e).lower() or "internal" in str(e).lower()


def test_cache_is_lru_not_fifo(origin, path):
    paths = {k: path() for k in "abcd"}
    urls = {k: origin.image(p, png(8, 8, seed=ord(k))) for k, p in paths.items()}
    loader = internal(cache_size=3)

    async def scenario():
        for k in "abc":
            await loader.load_image(urls[k])
        await loader.load_image(urls["a"])  # touch a
        await loader.load_image(urls["d"])  # evicts one entry
        await loader.load_image(urls["a"])

    run(scenario())
    assert loader.cache_entries == 3
    assert origin.count(paths["a"]) == 1  # a stayed: recently used


def test_cache_size_zero_turns_the_local_cache_off(origin, path):
    p = path()
    url = origin.image(p, png(4, 4))
    loader = internal(cache_size=0)
    run(loader.load_image(url))
    run(loader.load_image(url))
    assert origin.count(p) == 2 and loader.cache_entries == 0


def test_frontend_decoding_is_refused():
    with pytest.raises(ValueError, match="enable_frontend_decoding"):
        ImageLoader(enable_frontend_decoding=True)


def test_shared_cache_requires_url_when_enabled(monkeypatch):
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1")
    with pytest.raises(ValueError, match="DYN_MM_SHARED_IMAGE_CACHE_URL"):
        ImageLoader()


def test_shared_cache_enabled_rejects_other_spellings(monkeypatch):
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "true")
    with pytest.raises(ValueError, match="DYN_MM_SHARED_IMAGE_CACHE_ENABLED"):
        ImageLoader()


def test_shared_cache_hit_skips_origin_fetch(origin, path, shared_env):
    p = path()
    url = origin.base + p
    data = png(7, 5, seed=11)
    shared_env.client.set(shared_key(url), data, ex=60)
    assert run(ImageLoader().load_image(url)).tobytes() == pixels_of(data)
    assert origin.count(p) == 0


def test_shared_cache_miss_writes_validated_origin_bytes(origin, path, shared_env, monkeypatch):
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_TTL_SECS", "123")
    data = png(6, 6, seed=12)
    url = origin.image(path(), data)
    loader = ImageLoader()
    run(loader.load_image(url))
    assert loader.loader.flush(5.0)
    assert shared_env.client.get(shared_key(url)) == data
    assert 0 < shared_env.client.ttl(shared_key(url)) <= 123


def test_shared_cache_does_not_write_invalid_origin_bytes(origin, path, shared_env):
    url = origin.image(path("a.svg"), b"<svg/>")
    loader = ImageLoader()
    assert raises(HttpStatusError, loader.load_image(url)).status == 415
    assert loader.loader.flush(5.0)
    assert shared_env.client.get(shared_key(url)) is None


def test_shared_cache_errors_fall_back_to_origin(origin, path, monkeypatch):
    # Nothing listens there: every cache call fails, every load succeeds.
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1")
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_URL", "redis://127.0.0.1:1")
    loader = internal()
    for i in range(3):
        assert run(loader.load_image(origin.image(path(), png(4, 4, i)))).size == (4, 4)


@pytest.mark.parametrize("bad", [b"garbage", png(16, 16, 5)[:-30]], ids=["invalid", "truncated"])
def test_invalid_shared_cache_entry_is_deleted_and_refetched(origin, path, shared_env, bad):
    data = png(16, 16, seed=5)
    p = path()
    url = origin.image(p, data)
    shared_env.client.set(shared_key(url), bad, ex=60)
    loader = ImageLoader()
    assert run(loader.load_image(url)).tobytes() == pixels_of(data)
    assert origin.count(p) == 1
    assert loader.loader.flush(5.0)
    # Replaced by the origin's bytes (deleted, then refilled).
    assert shared_env.client.get(shared_key(url)) == data


def test_cache_key_preserves_url_path_and_query_case(origin, path, shared_env):
    p = path("Img.PNG")
    u1 = origin.image(p + "?Q=1", png(4, 4, 1))
    u2 = origin.image(p.lower() + "?q=1", png(4, 4, 2))
    loader = ImageLoader()
    run(loader.load_image(u1))
    run(loader.load_image(u2))
    assert loader.loader.flush(5.0)
    assert shared_env.client.get(shared_key(u1)) != shared_env.client.get(shared_key(u2))


@pytest.mark.parametrize("spelling", ["HTTP://localhost:{port}{p}", "http://LocalHost:{port}{p}",
                                      "http://localhost:{port}{p}#frag",
                                      "http://localhost:{port}{p}?#"])
def test_mixed_fleet_shares_keys_dynamo_normalises(origin, path, shared_env, spelling):
    # ai-dynamo 1.6.1 keys _normalize_http_url_key(url): scheme and host lowercased, fragment and
    # an empty ? dropped. A Dynamo worker's entry for the plain URL is a hit for any spelling,
    # and what ours writes for a spelling is at the plain URL's key.
    port = origin.base.rsplit(":", 1)[1]
    p = path()
    data = png(5, 3, seed=13)
    shared_env.client.set(shared_key(f"http://localhost:{port}{p}"), data, ex=60)
    url = spelling.format(port=port, p=p)
    assert run(ImageLoader().load_image(url)).tobytes() == pixels_of(data)
    assert origin.count(p) == 0 and origin.count(p + "?") == 0

    p = path()
    data = png(3, 5, seed=14)
    origin.image(p, data)
    origin.image(p + "?", data)  # the download uses the URL as given
    loader = ImageLoader()
    run(loader.load_image(spelling.format(port=port, p=p)))
    assert loader.loader.flush(5.0)
    assert shared_env.client.get(shared_key(f"http://localhost:{port}{p}")) == data


def test_session_scoped_cache_partitions_local_and_shared_keys(origin, path, shared_env):
    p = path()
    url = origin.image(p, png(4, 4))
    loader = ImageLoader(session_scoped_cache=True)
    for scope in ("a", "b", "a"):
        run(loader.load_image(url, cache_scope=scope))
    assert origin.count(p) == 2
    assert loader.loader.flush(5.0)
    assert shared_env.client.exists(shared_key(url, "a"), shared_key(url, "b")) == 2


def test_session_scoped_cache_partitions_inflight_dedup(origin, path):
    p = path()
    url = origin.image(p, png(4, 4), delay=0.3)
    loader = internal(session_scoped_cache=True)

    async def scenario():
        await asyncio.gather(*(loader.load_image(url, cache_scope=s) for s in "aab"))

    run(scenario())
    assert origin.count(p) == 2


def test_session_scope_is_ignored_when_flag_is_disabled(origin, path):
    p = path()
    url = origin.image(p, png(4, 4))
    loader = internal(session_scoped_cache=False)
    run(loader.load_image(url, cache_scope="a"))
    run(loader.load_image(url, cache_scope="b"))
    assert origin.count(p) == 1


def test_session_scoped_cache_can_be_enabled_by_env(monkeypatch):
    monkeypatch.setenv("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
    assert ImageLoader().session_scoped_cache
    monkeypatch.setenv("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "yes")
    with pytest.raises(ValueError, match="DYN_MM_IMAGE_CACHE_SESSION_SCOPED"):
        ImageLoader()


def test_session_scoped_cache_bypasses_when_scope_is_missing(origin, path, shared_env):
    p = path()
    url = origin.image(p, png(4, 4))
    loader = ImageLoader(session_scoped_cache=True)
    run(loader.load_image(url))
    run(loader.load_image(url, cache_scope="  "))
    assert origin.count(p) == 2 and loader.cache_entries == 0
    assert loader.loader.flush(5.0)
    assert shared_env.client.get(shared_key(url)) is None


@pytest.mark.parametrize("value,expected", [(" session-a ", "session-a"), ("", None),
                                            (123, None), ({}, None)])
def test_image_cache_scope_from_request(value, expected):
    assert image_cache_scope_from_request({"image_cache_scope": value}) == expected


def test_properties():
    loader = ImageLoader()
    assert loader.cache_entries == 0
    assert loader.session_scoped_cache is False
    assert loader.shared_image_cache_stats is None  # the shared tier is off, as in Dynamo
    assert dynamo.ImageLoader.CACHE_SIZE_MAXIMUM == 8


GET_SECONDS = "dynamo_component_image_shared_cache_get_duration_seconds"
SET_SECONDS = "dynamo_component_image_shared_cache_set_duration_seconds"


def observed(text: str, name: str, outcome: str, size_bucket: str) -> float:
    """The `_count` of one histogram series of a scrape (0 when the series is absent)."""
    want = (f'outcome="{outcome}"', f'size_bucket="{size_bucket}"', 'model="m"')
    for line in text.splitlines():
        if line.startswith(name + "_count{") and all(w in line for w in want):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_dynamo_image_loader_metrics_scrape_the_shared_cache(origin, path, tmp_path, shared_env):
    """Dynamo's own register_image_loader_metrics (from the wheel) drains our shared cache's
    GET/SET samples into its histograms on each scrape, as it does Dynamo's loader."""
    prometheus = dynamo_prometheus(tmp_path)
    loader = ImageLoader(cache_size=0)  # no memory tier: the second load is a shared GET hit
    endpoint = Endpoint()
    prometheus.register_image_loader_metrics(endpoint, loader, "m", "worker")
    assert len(endpoint.expfmt) == 1 and len(endpoint.typed) == 1
    scrape = endpoint.expfmt[0]
    assert observed(scrape(), GET_SECONDS, "miss", "unknown") == 0

    data = png(9, 9, seed=21)  # well under 64 KiB
    p = path()
    url = origin.image(p, data)
    run(loader.load_image(url))  # GET miss, origin, SET
    assert loader.loader.flush(5.0)
    first = scrape()
    assert observed(first, GET_SECONDS, "miss", "unknown") == 1
    assert observed(first, SET_SECONDS, "success", "le_64kib") == 1
    assert observed(first, GET_SECONDS, "hit", "le_64kib") == 0
    assert "dynamo_component_image_cache_entries{" in first

    run(loader.load_image(url))  # GET hit
    second = scrape()
    assert origin.count(p) == 1
    assert observed(second, GET_SECONDS, "hit", "le_64kib") == 1
    assert observed(second, GET_SECONDS, "miss", "unknown") == 1  # cumulative in Dynamo's registry
    assert observed(second, SET_SECONDS, "success", "le_64kib") == 1
    # Drained: a scrape with no new operations observes nothing again.
    third = scrape()
    for name, outcome, bucket in [(GET_SECONDS, "hit", "le_64kib"),
                                  (GET_SECONDS, "miss", "unknown"),
                                  (SET_SECONDS, "success", "le_64kib")]:
        assert observed(third, name, outcome, bucket) == observed(second, name, outcome, bucket)
    assert endpoint.typed[0]() is not None
    # One endpoint serving Dynamo's registry and mmcache's text must not carry a family twice
    # (Prometheus refuses a scrape with two TYPE lines for one name).
    ours = mmcache.metrics_text()
    assert f"# TYPE {GET_SECONDS} histogram" in ours and f"# TYPE {SET_SECONDS}" in ours
    rest = mmcache.metrics_text(exclude_dynamo_shared_cache=True)
    assert GET_SECONDS not in rest and SET_SECONDS not in rest
    assert "mmcache_" in rest and rest.endswith("\n")
    combined = (second + rest).splitlines()
    types = [line.split()[2] for line in combined if line.startswith("# TYPE ")]
    assert len(types) == len(set(types)), "a family is exported twice"


def test_shared_image_cache_stats_snapshot_and_drain_shape(origin, path, shared_env):
    """The shape Dynamo's SharedImageCacheStats gives: {(op, outcome, size_bucket): [secs]}."""
    loader = ImageLoader()
    stats = loader.shared_image_cache_stats
    assert stats is loader.shared_image_cache_stats  # one object, as Dynamo's
    assert stats.snapshot_and_drain() == {}
    run(loader.load_image(origin.image(path(), png(5, 5, seed=22))))
    assert loader.loader.flush(5.0)
    drained = stats.snapshot_and_drain()
    assert set(drained) == {("get", "miss", "unknown"), ("set", "success", "le_64kib")}
    for samples in drained.values():
        assert len(samples) == 1 and isinstance(samples[0], float) and 0 <= samples[0] < 30
    assert stats.snapshot_and_drain() == {}
    assert stats.dropped == 0


@pytest.mark.parametrize("extra,misses", [({}, 1),
                                           ({"MMCACHE_SHARED_IMAGE_CACHE_LEASE": "1",
                                             "MMCACHE_SHARED_IMAGE_CACHE_WRITE_BEHIND": "1"}, 2)],
                         ids=["defaults", "lease_write_behind"])
def test_shared_image_cache_stats_with_default_hedging(origin, path, cluster, monkeypatch,
                                                       extra, misses):
    """Default settings (hedging on), and with the lease and write-behind: each real GET and
    SET is one sample. The lease holder looks once more before it fills (a second miss);
    lease commands are not sampled; a write-behind SET is sampled when it lands."""
    for name, value in {"DYN_MM_SHARED_IMAGE_CACHE_ENABLED": "1",
                        "DYN_MM_SHARED_IMAGE_CACHE_URL": cluster.url,
                        "DYN_MM_ALLOW_INTERNAL": "1", **extra}.items():
        monkeypatch.setenv(name, value)
    loader = ImageLoader(cache_size=0)
    stats = loader.shared_image_cache_stats
    # Warm the connections first: a cold loader's first GET is the one most likely to outlast
    # the hedge delay (250 ms until it has samples) on a loaded machine.
    run(loader.load_image(origin.image(path(), png(3, 3, seed=24))))
    assert loader.loader.flush(5.0)
    stats.snapshot_and_drain()
    url = origin.image(path(), png(6, 7, seed=23))
    run(loader.load_image(url))
    assert loader.loader.flush(5.0)
    run(loader.load_image(url))
    want = {("get", "miss", "unknown"): misses, ("get", "hit", "le_64kib"): 1,
            ("set", "success", "le_64kib"): 1}
    got: dict = {}
    # A hedged-away GET records when it ends: poll briefly (bounded) until it has.
    for _ in range(100):
        for series, samples in stats.snapshot_and_drain().items():
            got[series] = got.get(series, 0) + len(samples)
        if got == want:
            break
        time.sleep(0.1)
    # With hedging on, a miss whose GET outlasts the hedge delay is filled by the origin
    # directly: the lease holder's second look is skipped (one miss fewer), and a hedged hit
    # that the origin won stores again (one SET more). Every sample still has Dynamo's labels.
    assert set(got) == set(want), got
    assert got[("get", "hit", "le_64kib")] == 1, got
    assert misses - 1 <= got[("get", "miss", "unknown")] <= misses, got
    assert 1 <= got[("set", "success", "le_64kib")] <= 2, got

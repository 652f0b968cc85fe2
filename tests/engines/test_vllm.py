"""mmcache.vllm against vLLM 0.34.0 itself: its own "http" connector is the oracle.

Every image of the profile corpus (tests/pillow/make_profile_cases.py: every kind mmcache
decodes, EXIF orientations 2-8, RGBA/LA/palette-tRNS PNGs, RGBA WebP, transparent GIFs, CMYK,
16-bit PNG, TIFF and BMP, undecodable files) goes through vLLM's connector and through ours, as
vLLM's chat parser calls them (a new connector per request, `fetch_image_async`), and must give
the same outcome: the same exception type, or a `MediaWithBytes` of the same mode, size,
pixels, `io_config` and mm_hash. Then vLLM's own connector behaviours, as tests of ours; the
plugin found by a fresh process; entries shared both ways with Dynamo's ImageLoader and the
Rust loader; the session middleware through vLLM's own app wiring.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import wave

import aiohttp
import numpy as np
import pytest
from PIL import Image
from vllm.exceptions import VLLMUnprocessableEntityError, VLLMValidationError
from vllm.multimodal.hasher import MultiModalHasher
from vllm.multimodal.media import MediaConnector, MediaWithBytes

import mmcache
import mmcache.vllm as mv
from mmcache._engines import ProcessLoader

from conftest import Route

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
# Read at import: the autouse fixture clears MMCACHE_* variables for each test.
DYNAMO_WHEEL = os.environ.get("MMCACHE_DYNAMO_WHEEL")
CORPUS_SCRIPT = os.path.join(ROOT, "tests", "pillow", "make_profile_cases.py")


# One event loop for the module: vLLM's connector keeps one aiohttp session, bound to the loop
# it was made on (as in a server).
_LOOP = asyncio.new_event_loop()


def run(coro):
    return _LOOP.run_until_complete(coro)


@pytest.fixture
def fresh(monkeypatch):
    """The connector's process loader, built anew from this test's environment (internal
    addresses allowed: the origin is on 127.0.0.1)."""
    monkeypatch.setenv("DYN_MM_ALLOW_INTERNAL", "1")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    process = ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"})
    monkeypatch.setattr(mv, "_process", process)
    mv.register()
    return process


@pytest.fixture(scope="module")
def corpus():
    out = tempfile.mkdtemp(prefix="mmcache-vllm-corpus-")
    subprocess.run([sys.executable, CORPUS_SCRIPT, out], check=True)
    cases = [json.loads(line) for line in open(os.path.join(out, "manifest.jsonl"))]
    files = {c["name"]: open(os.path.join(out, c["file"]), "rb").read() for c in cases}
    return cases, files


def outcome(result):
    """What the oracle compares: the exception type, or mode, size, pixels, io_config and
    vLLM's mm_hash of a MediaWithBytes."""
    if isinstance(result, BaseException):
        return ("error", type(result).__name__)
    assert isinstance(result, MediaWithBytes)
    image = result.media
    return (image.mode, image.size, np.asarray(image).tobytes(), result.io_config,
            MultiModalHasher.hash_kwargs("blake3", image=result))


async def fetch(connector, url, **kwargs):
    try:
        return await connector.fetch_image_async(url, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- the outcome is the exception's type
        return exc


def kind_of(name):
    return name.split("-")[0] + "-" + (name.split("-")[1] if "-" in name else "")


@pytest.mark.parametrize("media_io_kwargs,image_mode", [
    (None, "RGB"),
    ({"image": {"rgba_background_color": [0, 128, 255]}}, "RGB"),
    (None, None),
    # A mode vLLM converts itself: the bytes through the tiers, vLLM's own conversion.
    ({"image": {"image_mode": "LA"}}, "RGB"),
])
def test_every_corpus_image_is_vllms_own(fresh, origin, path, corpus, media_io_kwargs,
                                         image_mode):
    cases, files = corpus
    identical, differing = 0, {}

    async def go():
        nonlocal identical
        for case in cases:
            data = files[case["name"]]
            urls = [origin.image(path(case["file"]), data)]
            if data:
                urls.append("data:image/png;base64," + base64.b64encode(data).decode())
            for url in urls:
                theirs = await fetch(MediaConnector(media_io_kwargs), url, image_mode=image_mode)
                ours = await fetch(mv.MmcacheMediaConnector(media_io_kwargs), url,
                                   image_mode=image_mode)
                again = await fetch(mv.MmcacheMediaConnector(media_io_kwargs), url,
                                    image_mode=image_mode)  # a memory hit
                expected = outcome(theirs)
                if outcome(ours) == expected == outcome(again):
                    identical += 1
                else:
                    kind = kind_of(case["name"])
                    differing.setdefault(kind, []).append(
                        (case["name"], url[:5], expected[:2], outcome(ours)[:2]))

    run(go())
    print(f"image_mode={image_mode!r} kwargs={media_io_kwargs}: {identical} identical, "
          f"{sum(len(v) for v in differing.values())} differing {differing}")
    assert identical > 200
    assert not differing


@pytest.mark.parametrize("image_mode", ["RGB", None])
def test_host_pixel_hits_are_vllms_own(request, monkeypatch, origin, path, corpus, image_mode):
    """Two process loaders (two worker processes' decoded caches) share a host pixel tier: the
    first decodes every corpus image and writes its pixels, the second maps them, and both
    give what vLLM's own connector gives (mm_hash included)."""
    host = tempfile.mkdtemp(prefix="mmcache-vllm-host-",
                            dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    # Decoded pixels stay in memory until removed.
    request.addfinalizer(lambda: shutil.rmtree(host, ignore_errors=True))
    monkeypatch.setenv("MMCACHE_HOST_PIXELS_DIR", os.path.join(host, "tier"))
    monkeypatch.setenv("DYN_MM_ALLOW_INTERNAL", "1")
    monkeypatch.setenv("VLLM_MEDIA_FETCH_MAX_RETRIES", "1")
    cases, files = corpus
    urls = [origin.image(path(c["file"]), files[c["name"]]) for c in cases]

    def counted(prefix: str, *labels: str) -> int:
        return sum(int(float(line.rsplit(" ", 1)[1]))
                   for line in mmcache.metrics_text().splitlines()
                   if line.startswith(prefix + "{") and all(x in line for x in labels))

    def host_hits() -> int:
        return counted("mmcache_loads_total", 'source="host"', 'outcome="ok"')

    def host_writes() -> int:
        return counted("mmcache_host_pixels_writes_total", 'outcome="success"')

    async def through(process):
        monkeypatch.setattr(mv, "_process", process)
        out = [outcome(await fetch(mv.MmcacheMediaConnector(), u, image_mode=image_mode))
               for u in urls]
        assert await process.loader().flush_async(10.0)
        return out

    async def go():
        theirs = [outcome(await fetch(MediaConnector(), u, image_mode=image_mode)) for u in urls]
        writes = host_writes()
        wrote = await through(ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
        written, hits = host_writes() - writes, host_hits()
        mapped = await through(ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
        return theirs, wrote, mapped, written, host_hits() - hits

    theirs, wrote, mapped, written, hits = run(go())
    assert wrote == theirs
    assert mapped == theirs
    # Every image the first loader decoded was written and the second mapped each one (what
    # mmcache hands back to vLLM's Pillow undecoded has no pixels to share).
    images = sum(1 for o in theirs if o[0] != "error")
    assert written > images // 2, f"{written} written for {images} images"
    assert hits == written, f"{hits} host hits for {written} written"


def test_the_original_mode_is_kept_with_image_mode_none(fresh, origin, path):
    rgba = Image.new("RGBA", (9, 7), (10, 20, 30, 100))
    buf = io.BytesIO()
    rgba.save(buf, format="PNG")
    url = origin.image(path(), buf.getvalue())
    got = run(mv.MmcacheMediaConnector().fetch_image_async(url, image_mode=None))
    assert got.media.mode == "RGBA" and got.io_config is None
    assert got.media.tobytes() == rgba.tobytes()
    rgb = run(mv.MmcacheMediaConnector().fetch_image_async(url))
    assert rgb.media.mode == "RGB" and rgb.io_config == {
        "image_mode": "RGB", "rgba_background_color": (255, 255, 255)}


def png_bytes(size=(5, 4), colour=(1, 2, 3)):
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("url", [
    "data:image/png;charset=utf-8;base64,{b64}",   # parameters before base64
    "data:text/plain;base64,{b64}",                # vLLM does not look at the media type
    "data:image/png;base64{b64}",                  # no comma
    "data:image/png,{b64}",                        # not base64
    "data:image/png;base64,{b64}!!",               # bad base64
    "data:image/png;base64,",                      # empty
])
def test_data_urls_as_vllm_reads_them(fresh, url):
    url = url.format(b64=base64.b64encode(png_bytes()).decode())
    theirs = run(fetch(MediaConnector(), url))
    ours = run(fetch(mv.MmcacheMediaConnector(), url))
    assert outcome(ours) == outcome(theirs)


def test_local_files_only_inside_the_allowed_path(fresh, tmp_path):
    inside = tmp_path / "allowed"
    inside.mkdir()
    (inside / "a.png").write_bytes(png_bytes())
    (tmp_path / "b.png").write_bytes(png_bytes())
    cases = [
        (str(inside), f"file://{inside}/a.png"),
        (str(inside), f"file://{tmp_path}/b.png"),
        (str(inside), f"file://{inside}/../b.png"),
        ("", f"file://{inside}/a.png"),
    ]
    for allowed, url in cases:
        theirs = run(fetch(MediaConnector(allowed_local_media_path=allowed), url))
        ours = run(fetch(mv.MmcacheMediaConnector(allowed_local_media_path=allowed), url))
        assert outcome(ours) == outcome(theirs), (allowed, url)
    assert isinstance(run(fetch(mv.MmcacheMediaConnector(), cases[3][1])), VLLMValidationError)


def test_a_disallowed_domain_is_refused_before_any_tier(fresh, origin, path):
    url = origin.image(path(), png_bytes())
    for connector in (MediaConnector, mv.MmcacheMediaConnector):
        got = run(fetch(connector(allowed_media_domains=["example.com"]), url))
        assert type(got) is ValueError and "allowed domains" in str(got)
    assert origin.count(url[len(origin.base):]) == 0
    ok = run(mv.MmcacheMediaConnector(allowed_media_domains=["127.0.0.1"]).fetch_image_async(url))
    assert ok.media.size == (5, 4)


@pytest.mark.parametrize("status", [404, 403, 400, 408, 429, 500, 503])
def test_http_errors_become_vllms_exceptions(fresh, origin, path, status):
    url = origin.set(path(), Route(status, b"nope"))
    theirs = run(fetch(MediaConnector(), url))
    ours = run(fetch(mv.MmcacheMediaConnector(), url))
    assert type(ours) is type(theirs)
    if isinstance(theirs, aiohttp.ClientResponseError):
        assert ours.status == theirs.status == status
    else:
        assert isinstance(ours, VLLMUnprocessableEntityError) and str(ours) == str(theirs)


def test_connection_failures_and_empty_bodies_become_vllms_exceptions(fresh, origin, path):
    with socket_closed_port() as port:
        url = f"http://127.0.0.1:{port}/x.png"
        theirs = run(fetch(MediaConnector(), url))
        ours = run(fetch(mv.MmcacheMediaConnector(), url))
        assert type(ours) is type(theirs) is aiohttp.ClientConnectorError
    empty = origin.set(path(), Route(200, b""))
    assert outcome(run(fetch(mv.MmcacheMediaConnector(), empty))) == \
        outcome(run(fetch(MediaConnector(), empty))) == ("error", "ValueError")


def test_a_server_error_is_retried_as_vllm_retries_it_with_the_default_retries(
        fresh, origin, path, monkeypatch):
    """vLLM's default (3 attempts, 1 s then 4 s apart): a 503 that recovers is loaded."""
    monkeypatch.delenv("VLLM_MEDIA_FETCH_MAX_RETRIES")
    p = path()
    url = origin.set(p, Route(503, b"busy"))

    async def go():
        task = asyncio.ensure_future(mv.MmcacheMediaConnector().fetch_image_async(url))
        for _ in range(200):  # the first attempt has failed: the origin recovers
            if origin.count(p) >= 1:
                break
            await asyncio.sleep(0.01)
        origin.image(p, png_bytes())
        return await task

    got = run(go())
    assert got.media.size == (5, 4) and origin.count(p) == 2


def test_a_timeout_is_vllms_timeout(fresh, origin, path, monkeypatch):
    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "1")
    url = origin.set(path(), Route(200, png_bytes(), delay=3.0))
    theirs = run(fetch(MediaConnector(), url))
    ours = run(fetch(mv.MmcacheMediaConnector(), url))
    assert isinstance(theirs, TimeoutError) and isinstance(ours, TimeoutError)


def test_vllms_limits_and_budgets_are_charged(fresh, origin, path, monkeypatch):
    big = png_bytes((300, 200))
    url = origin.image(path(), big)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")
    theirs = run(fetch(MediaConnector(), url))
    ours = run(fetch(mv.MmcacheMediaConnector(), url))
    assert type(ours) is type(theirs) is ValueError and str(ours) == str(theirs)
    monkeypatch.delenv("VLLM_MAX_IMAGE_PIXELS")
    # The decoded budget: 4 bytes a pixel per request.
    from vllm.multimodal.media.base import MediaDecodedBudget

    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", str(300 * 200 * 4 + 10))
    for connector in (MediaConnector, mv.MmcacheMediaConnector):
        budget = MediaDecodedBudget()
        c = connector(decoded_budget=budget)
        run(c.fetch_image_async(url))
        assert budget.used == 300 * 200 * 4
        assert isinstance(run(fetch(c, url)), ValueError)  # the second image is over it
    # The download budget: every http load's bytes, memory hits included.
    from vllm.connections import MediaRequestDownloadBudget

    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "1")
    huge = np.random.default_rng(3).integers(0, 256, (700, 600, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(huge).save(buf, format="PNG")
    heavy = origin.image(path(), buf.getvalue())
    for connector in (MediaConnector, mv.MmcacheMediaConnector):
        budget = MediaRequestDownloadBudget()
        assert isinstance(run(fetch(connector(download_budget=budget), heavy)),
                          VLLMUnprocessableEntityError)
    budget = MediaRequestDownloadBudget()
    run(mv.MmcacheMediaConnector(download_budget=budget).fetch_image_async(url))
    assert budget.used == len(big)


def test_mmcaches_own_protections_refuse_what_vllm_would_fetch(monkeypatch, origin, path):
    """Internal addresses stay refused without DYN_MM_ALLOW_INTERNAL=1 (docs/vllm.md)."""
    monkeypatch.setattr(mv, "_process", ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
    url = origin.image(path(), png_bytes())
    assert run(MediaConnector().fetch_image_async(url)).media.size == (5, 4)
    refused = run(fetch(mv.MmcacheMediaConnector(), url))
    assert isinstance(refused, VLLMUnprocessableEntityError) and "internal" in str(refused)


def test_mmcaches_pixel_limit_is_vllms_exception_type(fresh, origin, path, monkeypatch):
    monkeypatch.setenv("MMCACHE_MAX_PIXELS", "1000")
    monkeypatch.setattr(mv, "_process", ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
    url = origin.image(path(), png_bytes((300, 200)))
    refused = run(fetch(mv.MmcacheMediaConnector(), url))
    assert type(refused) is ValueError and "1000" in str(refused)


def wav_bytes(n=1600):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes((i * 7) % 256 for i in range(2 * n)))
    return buf.getvalue()


def test_audio_bytes_come_through_the_tiers(fresh, origin, path, monkeypatch):
    audio = wav_bytes()
    p = path("a.wav")
    url = origin.image(p, audio)
    theirs = run(MediaConnector().fetch_audio_async(url))
    for _ in range(2):
        ours = run(mv.MmcacheMediaConnector().fetch_audio_async(url))
        assert np.array_equal(ours[0], theirs[0]) and ours[1] == theirs[1]
    assert origin.count(p) == 2, "vLLM's own load, then ours once: the second is cached"
    # Over the download cap: loaded as vLLM loads it, and cached nowhere (each load asks the
    # origin twice: our fetch stops at the announced length, then vLLM's own reads it).
    monkeypatch.setattr(mv, "_process", ProcessLoader(
        {"MMCACHE_ALLOW_HTTP": "1", "DYN_MM_MAX_FILE_SIZE_MB": "1"}))
    long = wav_bytes(600_000)
    q = path("long.wav")
    big = origin.image(q, long)
    for i in range(2):
        ours = run(mv.MmcacheMediaConnector().fetch_audio_async(big))
        assert len(ours[0]) == 600_000 and origin.count(q) == 2 * (i + 1)


def mp4_bytes(tmp_path, frames=6):
    import cv2

    out = str(tmp_path / "v.mp4")
    writer = cv2.VideoWriter(out, cv2.VideoWriter_fourcc(*"mp4v"), 10, (32, 24))
    for i in range(frames):
        writer.write(np.full((24, 32, 3), i * 40, dtype=np.uint8))
    writer.release()
    return open(out, "rb").read()


def test_video_bytes_come_through_the_tiers_and_vllms_decoder(fresh, origin, path, tmp_path):
    p = path("v.mp4")
    url = origin.image(p, mp4_bytes(tmp_path))
    theirs = run(MediaConnector().fetch_video_async(url))
    for _ in range(2):
        ours = run(mv.MmcacheMediaConnector().fetch_video_async(url))
        assert np.array_equal(np.asarray(ours[0]), np.asarray(theirs[0]))
        assert ours[1] == theirs[1] and ours.original_bytes == theirs.original_bytes
    assert origin.count(p) == 2, "vLLM's own load, then ours once: the second is cached"


def test_a_fresh_process_finds_the_connector_by_name():
    code = (
        "import sys\n"
        "import mmcache\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, 'mmcache imports vllm'\n"
        "from vllm import envs\n"
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "from vllm.multimodal.media import MEDIA_CONNECTOR_REGISTRY\n"
        "c = MEDIA_CONNECTOR_REGISTRY.load(envs.VLLM_MEDIA_CONNECTOR, media_io_kwargs=None,\n"
        "    allowed_local_media_path='', allowed_media_domains=None)\n"
        "print(type(c).__module__, type(c).__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_MM_", "MMCACHE_"))}
    env["VLLM_MEDIA_CONNECTOR"] = "mmcache"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["mmcache.vllm", "MmcacheMediaConnector"]


class socket_closed_port:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""

    def __enter__(self):
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *exc):
        return False


def test_entries_are_shared_both_ways_with_dynamo_and_the_rust_loader(shared_env, origin, path,
                                                                      monkeypatch):
    monkeypatch.setattr(mv, "_process", ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
    data = png_bytes((31, 17), (200, 100, 50))
    # Ours fills the shared cache; the Rust loader (a process of its own) finds it there.
    p = path()
    url = origin.image(p, data)
    run(mv.MmcacheMediaConnector().fetch_image_async(url))
    assert mv.loader().flush(10.0)
    assert rust_source(url) == "shared" and origin.count(p) == 1
    # The Rust loader fills it; ours (a fresh process loader: empty memory) reads it.
    q = path()
    url = origin.image(q, data)
    assert rust_source(url) == "origin"
    monkeypatch.setattr(mv, "_process", ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
    got = run(mv.MmcacheMediaConnector().fetch_image_async(url))
    assert got.media.size == (31, 17) and origin.count(q) == 1
    # Dynamo's own ImageLoader fills it; ours reads it.
    r = path()
    url = origin.image(r, data)
    dynamo_load(url)
    monkeypatch.setattr(mv, "_process", ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
    run(mv.MmcacheMediaConnector().fetch_image_async(url))
    assert origin.count(r) == 1


def rust_source(url):
    """Where a Rust loader in a process of its own found `url`."""
    code = ("import asyncio, sys, mmcache\n"
            "l = mmcache.Loader.from_env()\n"
            "_, source = asyncio.run(l.load_detailed(sys.argv[1]))\n"
            "l.flush(10.0)\n"
            "print(source)\n")
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-1]


def dynamo_load(url):
    """Dynamo's ImageLoader (read from the ai-dynamo wheel) loads `url` in a process."""
    wheel = DYNAMO_WHEEL
    if not wheel:
        if os.environ.get("CI"):
            pytest.fail("MMCACHE_DYNAMO_WHEEL is not set (cargo xtask test sets it)")
        pytest.skip("outside CI, skipping: MMCACHE_DYNAMO_WHEEL is not set")
    script = os.path.join(ROOT, "tests", "dynamo", "image_loader_load.py")
    out = subprocess.run([sys.executable, script, wheel, url], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_middleware_scopes_a_request_through_vllms_app(monkeypatch, origin, path):
    """vLLM's own app (build_app with --middleware), no engine: the chat route's handler is a
    stand-in that loads the request's image through the connector, as vLLM's parser would."""
    monkeypatch.setenv("DYN_MM_ALLOW_INTERNAL", "1")
    monkeypatch.setenv("DYN_MM_IMAGE_CACHE_SESSION_SCOPED", "1")
    monkeypatch.setattr(mv, "_process", ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"}))
    import httpx
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.serve.engine.protocol import ErrorInfo, ErrorResponse
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--middleware", "mmcache.vllm.ScopeMiddleware"])
    app = build_app(args, supported_tasks=("generate",))
    p = path()
    url = origin.image(p, png_bytes())
    seen = []

    class Chat:
        async def create_chat_completion(self, request, raw_request):
            seen.append(mv.current_scope.get())
            await mv.MmcacheMediaConnector().fetch_image_async(url)
            return ErrorResponse(error=ErrorInfo(message="stand-in", type="x", code=418))

    app.state.openai_serving_chat = Chat()
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}]}

    async def post(headers):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://vllm") as client:
            return await client.post("/v1/chat/completions", json=body, headers=headers)

    for headers in ({"x-dynamo-session-id": "a"}, {"x-dynamo-session-id": "a"},
                    {"x-dynamo-session-id": "b"}, {}):
        run(post(headers))

    async def scrape():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://vllm") as client:
            return await client.get("/metrics")

    metrics = run(scrape())
    assert metrics.status_code == 200
    from prometheus_client.parser import text_string_to_metric_families

    loads = {tuple(sorted(sample.labels.items())): sample.value
             for family in text_string_to_metric_families(metrics.text)
             if family.name == "mmcache_loads" for sample in family.samples}
    assert loads[(("outcome", "ok"), ("source", "memory"))] >= 1, loads
    assert seen[:3] == ["a", "a", "b"] and seen[3] is None
    # Scope a twice (one download), scope b once, no scope: no cache layer at all.
    assert origin.count(p) == 3


def test_doctor_says_whether_vllm_will_find_the_connector():
    def doctor(**env):
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("DYN_MM_", "MMCACHE_", "VLLM_PLUGINS", "VLLM_MEDIA"))}
        return subprocess.run([sys.executable, "-m", "mmcache", "doctor"], env={**clean, **env},
                              capture_output=True, text=True, timeout=120)

    used = doctor(VLLM_MEDIA_CONNECTOR="mmcache")
    assert used.returncode == 0, used.stdout + used.stderr
    assert "vLLM    uses the mmcache connector" in used.stdout
    assert "not selected (VLLM_MEDIA_CONNECTOR=http)" in doctor().stdout
    filtered = doctor(VLLM_MEDIA_CONNECTOR="mmcache", VLLM_PLUGINS="lora_filesystem_resolver")
    assert filtered.returncode == 16 and "VLLM_PLUGINS=" in filtered.stdout

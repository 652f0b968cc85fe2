"""Smoke test of target/venv-engines: vLLM's and SGLang's own media code runs here, on CPU.

`cargo xtask engines` builds the venv (vLLM and SGLang installed with --no-deps, then
tests/engines/requirements.txt) and runs this script in it. Each check prints one line; the
script exits non-zero when any fails. The media are made here (a PNG, an MP4, a WAV): nothing
is fetched but from a server on 127.0.0.1 that the script starts itself.
"""

import asyncio
import base64
import http.server
import io
import os
import sys
import tempfile
import threading
import time
import traceback
import wave

# vLLM finds no platform on a machine with neither a GPU nor its CPU build: its CLI parser
# (the OpenAI server's) then fails building DeviceConfig. The media code needs no platform.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# SGLang's own machinery, without the plugins installed in this venv (mmcache's among them:
# tests/engines/test_sglang.py tests it); a name no plugin has.
os.environ["SGLANG_PLUGINS"] = "none"

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

FAILED = []


def check(name):
    """Runs the decorated function at once as the check `name`, printing its outcome."""

    def run(fn):
        started = time.monotonic()
        try:
            detail = fn()
        except Exception:
            FAILED.append(name)
            print(f"FAIL {name}", flush=True)
            traceback.print_exc()
        else:
            took = time.monotonic() - started
            print(f"ok   {name} ({took:.1f} s){': ' + detail if detail else ''}", flush=True)
        return fn

    return run


def png_bytes():
    """A 7x5 RGB gradient as PNG."""
    pixels = np.zeros((5, 7, 3), dtype=np.uint8)
    pixels[..., 0] = np.arange(7, dtype=np.uint8)[None, :] * 36
    pixels[..., 1] = np.arange(5, dtype=np.uint8)[:, None] * 60
    pixels[..., 2] = 200
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue(), pixels


PNG, PIXELS = png_bytes()
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


class Origin(http.server.BaseHTTPRequestHandler):
    """Serves PNG at /img.png on 127.0.0.1, for vLLM's HTTP fetch."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(PNG)))
        self.end_headers()
        self.wfile.write(PNG)

    def log_message(self, *args):
        pass


@check("import vllm.multimodal.media, hasher, plugins, envs, connections, exceptions")
def _():
    global vllm_media, MultiModalHasher
    import vllm.connections
    import vllm.envs
    import vllm.exceptions
    import vllm.multimodal.media as vllm_media
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.plugins import load_general_plugins

    for name in (
        "MediaConnector",
        "MEDIA_CONNECTOR_REGISTRY",
        "MediaWithBytes",
        "ImageMediaIO",
        "VideoMediaIO",
        "AudioMediaIO",
    ):
        assert hasattr(vllm_media, name), name
    assert vllm.connections.global_http_connection is not None
    assert issubclass(vllm.exceptions.VLLMValidationError, Exception)
    load_general_plugins()
    return f"vllm {vllm.__version__}, video backend {vllm.envs.VLLM_VIDEO_LOADER_BACKEND}"


@check("vLLM MediaConnector().fetch_image(data URL), MultiModalHasher blake3")
def _():
    connector = vllm_media.MEDIA_CONNECTOR_REGISTRY.load("http")
    assert isinstance(connector, vllm_media.MediaConnector)
    image = connector.fetch_image(DATA_URL)
    assert isinstance(image, vllm_media.MediaWithBytes), type(image)
    assert image.original_bytes == PNG
    assert image.mode == "RGB" and image.size == (7, 5)
    assert np.array_equal(np.asarray(image.media), PIXELS)
    digest = MultiModalHasher.hash_kwargs("blake3", image=image)
    again = MultiModalHasher.hash_kwargs("blake3", image=connector.fetch_image(DATA_URL))
    assert len(digest) == 64 and digest == again, (digest, again)
    return digest[:16]


@check("vLLM MediaConnector fetch_image and fetch_image_async over HTTP (127.0.0.1)")
def _():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/img.png"
        connector = vllm_media.MediaConnector()
        sync = connector.fetch_image(url)
        via_aiohttp = asyncio.run(connector.fetch_image_async(url))
        for image in (sync, via_aiohttp):
            assert np.array_equal(np.asarray(image.media), PIXELS)
    finally:
        server.shutdown()
        server.server_close()


def mp4_bytes(frames=6, w=32, h=24, fps=6):
    """A tiny MPEG-4 Part 2 video in MP4, written by OpenCV's bundled FFmpeg."""
    import cv2

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "v.mp4")
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        assert writer.isOpened(), "OpenCV cannot write mp4v"
        for i in range(frames):
            frame = np.full((h, w, 3), 40 * i, dtype=np.uint8)
            writer.write(frame)
        writer.release()
        with open(path, "rb") as f:
            return f.read()


@check("vLLM VideoMediaIO(ImageMediaIO()).load_bytes(MP4) (OpenCV)")
def _():
    data = mp4_bytes()
    frames, meta = vllm_media.VideoMediaIO(vllm_media.ImageMediaIO()).load_bytes(data)
    assert frames.shape == (6, 24, 32, 3), frames.shape
    means = [int(f.mean()) for f in frames]
    assert all(abs(m - 40 * i) <= 4 for i, m in enumerate(means)), means
    return f"{len(data)} bytes, frames {frames.shape}, {meta['video_backend']}, fps {meta['fps']}"


def wav_bytes(rate=16000, secs=0.25):
    """A 440 Hz tone, mono 16-bit PCM WAV (the standard library's wave)."""
    t = np.arange(int(rate * secs)) / rate
    samples = (np.sin(2 * np.pi * 440 * t) * 16384).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return out.getvalue(), samples


@check("vLLM AudioMediaIO().load_bytes(WAV) (soundfile)")
def _():
    data, samples = wav_bytes()
    audio, rate = vllm_media.AudioMediaIO().load_bytes(data)
    assert rate == 16000 and audio.dtype == np.float32, (rate, audio.dtype)
    assert np.allclose(audio, samples / 32768.0, atol=1e-6)
    return f"{audio.shape[0]} samples at {rate} Hz"


class Probe:
    """An ASGI middleware, passed to vLLM's server by `--middleware __main__.Probe`."""

    paths = []

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            Probe.paths.append(scope["path"])
        await self.app(scope, receive, send)


async def asgi_call(app, method, path, body=b""):
    """One HTTP request straight into the ASGI app (no server, no lifespan)."""
    messages = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()

    async def send(message):
        messages.append(message)

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], payload


@check("vLLM OpenAI server app built without an engine, --middleware applied")
def _():
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.serve.engine.protocol import ErrorInfo, ErrorResponse
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--middleware", "__main__.Probe"]
    )
    app = build_app(args, supported_tasks=("generate",))
    assert any(m.cls is Probe for m in app.user_middleware), app.user_middleware

    # The chat route's handler is app.state.openai_serving_chat (init_app_state sets it from
    # an engine); a stand-in records what the route parsed from the body.
    seen = []

    class Chat:
        async def create_chat_completion(self, request, raw_request):
            seen.append(request)
            return ErrorResponse(error=ErrorInfo(message="stand-in", type="Test", code=418))

    app.state.openai_serving_chat = Chat()
    status, body = asyncio.run(asgi_call(app, "GET", "/version"))
    assert status == 200 and b"0.34.0" in body, (status, body)
    chat = (
        b'{"model":"m","messages":[{"role":"user","content":'
        b'[{"type":"image_url","image_url":{"url":"' + DATA_URL.encode() + b'"}}]}]}'
    )
    status, body = asyncio.run(asgi_call(app, "POST", "/v1/chat/completions", chat))
    assert status == 418, (status, body)
    part = seen[0].messages[0]["content"][0]
    assert part["image_url"]["url"] == DATA_URL, part
    assert Probe.paths == ["/version", "/v1/chat/completions"], Probe.paths
    return f"{len(app.routes)} routes, middleware saw {Probe.paths}"


@check("import sglang load_image, load_plugins, HookRegistry, base_processor")
def _():
    global sgl_common, sgl_base, HookRegistry, HookType
    import sglang
    import sglang.srt.multimodal.processors.base_processor as sgl_base
    import sglang.srt.utils.common as sgl_common
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    assert sgl_base.load_image is sgl_common.load_image
    load_plugins()
    return f"sglang {sglang.__version__}"


@check("SGLang load_image(data URL), bytes, base64")
def _():
    for source in (DATA_URL, PNG, base64.b64encode(PNG).decode()):
        image, size = sgl_common.load_image(source)
        assert isinstance(image, Image.Image), type(image)
        assert np.array_equal(np.asarray(image.convert("RGB")), PIXELS)


@check("SGLang HookRegistry AROUND hook on load_image reaches base_processor's name")
def _():
    calls = []

    def around(original, *args, **kwargs):
        calls.append(args[0][:10])
        return original(*args, **kwargs)

    HookRegistry.register("sglang.srt.utils.common.load_image", around, HookType.AROUND)
    HookRegistry.apply_hooks()
    image, _ = sgl_base.load_image(DATA_URL)
    assert calls == [DATA_URL[:10]], calls
    assert np.array_equal(np.asarray(image.convert("RGB")), PIXELS)


if FAILED:
    print(f"engines smoke: {len(FAILED)} failed: {', '.join(FAILED)}")
    sys.exit(1)
print("engines smoke: all passed")

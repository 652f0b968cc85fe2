"""One SGLang process for tests/engines/test_sglang.py: SGLang 0.5.23's own ``load_image``, or
the one mmcache's plugin installs, called as SGLang calls it (through the name
``sglang.srt.multimodal.processors.base_processor`` imported).

Usage: sglang_worker.py own|plugin

``own``: the parent sets ``SGLANG_PLUGINS=none`` (a name no plugin has), so ``load_plugins()``
loads nothing and SGLang's function stays its own. ``plugin``: ``load_plugins()`` as SGLang's
server calls it, with the plugins installed. The function is never captured before the
plugins run (importing SGLang may apply them): each mode is a process of its own.

Reads one JSON command a line on stdin and writes one JSON reply a line on stdout (SGLang's
and mmcache's logs go to stderr). Every load's outcome is reduced to JSON: the exception's
type (and HTTP status), or the image's mode, size, the returned size, and digests of its
pixels, palette, ``info`` transparency, EXIF and XMP, and of what SGLang's processor makes of
it (``convert("RGB")``, ``smart_to_rgb``).
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import io
import json
import os
import sys
import threading
import warnings

warnings.simplefilter("ignore")  # SGLang's import-time warnings (no GPU, GGUF ...)

MODE = sys.argv[1]
assert MODE in ("own", "plugin"), MODE
if MODE == "own":
    assert os.environ.get("SGLANG_PLUGINS") == "none", "own mode needs SGLANG_PLUGINS=none"

_stdout = sys.stdout
sys.stdout = sys.stderr  # anything printed by SGLang or a plugin stays off the replies

from sglang.srt.plugins import load_plugins  # noqa: E402

load_plugins()

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from sglang.srt.multimodal.processors import base_processor  # noqa: E402
from sglang.srt.utils import common  # noqa: E402


def digest(data) -> str | None:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(bytes(data)).hexdigest()[:32]


def outcome(result) -> dict:
    if isinstance(result, BaseException):
        response = getattr(result, "response", None)
        return {"error": f"{type(result).__module__}.{type(result).__qualname__}",
                "status": getattr(response, "status_code", None),
                "message": str(result)[:300]}
    image, size = result
    if isinstance(image, torch.Tensor):
        return {"tensor": str(image.dtype), "shape": list(image.shape),
                "device": image.device.type, "pixels": digest(image.cpu().numpy().tobytes()),
                "returned_size": size}
    palette = image.getpalette()
    info = image.info
    return {
        "mode": image.mode,
        "size": list(image.size),
        "returned_size": None if size is None else list(size),
        "pixels": digest(image.tobytes()),
        "palette": None if palette is None else digest(bytes(palette)),
        "transparency": repr(info.get("transparency")),
        "exif": digest(info.get("exif")),
        "xmp": digest(info.get("xmp")),
        # What SGLang's processor goes on with (BaseMultimodalProcessor._load_single_item).
        "rgb": digest(image.convert("RGB").tobytes()),
        "smart_rgb": digest(common.smart_to_rgb(image).tobytes()),
    }


def load(image_file, gpu=False):
    try:
        return base_processor.load_image(image_file, gpu)
    except Exception as exc:  # noqa: BLE001 -- the outcome is the exception's type
        return exc


def item_input(item: dict):
    """The input an item names: a URL, bytes, a PIL image (opened lazily, as a caller's),
    bare base64, a file path, or an ImageData."""
    if "url" in item:
        return item["url"]
    if "bytes" in item:
        return base64.b64decode(item["bytes"])
    if "pil" in item:
        return Image.open(io.BytesIO(base64.b64decode(item["pil"])))
    if "b64" in item:
        return item["b64"]
    if "path" in item:
        return item["path"]
    if "image_data" in item:
        return common.ImageData(url=item["image_data"])
    raise ValueError(f"unknown item {item}")


def mmcache_counts() -> tuple[int, int, int, int]:
    """mmcache's loads (every source and outcome), decodes, host pixel tier hits and host
    pixel tier writes in this process so far."""
    import mmcache

    loads = decodes = host_hits = host_writes = 0
    for line in mmcache.metrics_text().splitlines():
        if not line.startswith("mmcache_"):
            continue  # comments and blank lines
        value = int(float(line.rsplit(" ", 1)[1]))
        if line.startswith("mmcache_loads_total{"):
            loads += value
            if 'source="host"' in line and 'outcome="ok"' in line:
                host_hits += value
        elif line.startswith("mmcache_decode_duration_seconds_count{"):
            decodes += value
        elif line.startswith("mmcache_host_pixels_writes_total{") and 'outcome="success"' in line:
            host_writes += value
    return loads, decodes, host_hits, host_writes


def installed() -> dict:
    fn = base_processor.load_image
    # SGLang's AROUND wrapper holds the hook in its closure, SGLang's function in __wrapped__.
    hooks = [cell.cell_contents for cell in getattr(fn, "__closure__", None) or ()]
    return {
        "installed": any(getattr(h, "__module__", "") == "mmcache.sglang"
                         and getattr(h, "__name__", "") == "load_image" for h in hooks),
        "wraps_sglangs": getattr(getattr(fn, "__wrapped__", None), "__module__", None),
        "same_as_common": fn is common.load_image,
        "same_as_utils": fn is sys.modules["sglang.srt.utils"].load_image,
        "plugins": os.environ.get("SGLANG_PLUGINS"),
    }


def _filled(image, value) -> list:
    return [value] * (image.width * image.height)


#: Pillow's public writes, each changing the image it is given (an RGB image).
WRITES = {
    "putpixel": lambda im, draw, ops: im.putpixel((0, 0), (1, 2, 3)),
    "putdata": lambda im, draw, ops: im.putdata(_filled(im, (1, 2, 3))),
    "frombytes": lambda im, draw, ops: im.frombytes(bytes(len(im.tobytes()))),
    "paste": lambda im, draw, ops: im.paste((1, 2, 3), (0, 0, 2, 2)),
    "thumbnail": lambda im, draw, ops: im.thumbnail((8, 8)),
    "ImageDraw": lambda im, draw, ops: draw.Draw(im).rectangle((0, 0, 3, 3), fill=(1, 2, 3)),
    "load()[x, y] =": lambda im, draw, ops: im.load().__setitem__((0, 0), (1, 2, 3)),
    "exif_transpose(in_place=True)": lambda im, draw, ops: ops.exif_transpose(im, in_place=True),
}


def run(cmd: dict) -> dict:
    op = cmd["op"]
    if op == "hello":
        return {"pid": os.getpid(), **installed()}
    if op == "load":
        security = cmd.get("security")
        if security:
            common.configure_media_url_security(**security)
        try:
            before = mmcache_counts() if MODE == "plugin" else None
            out = []
            for item in cmd["items"]:
                out.append([outcome(load(item_input(item), cmd.get("gpu", False)))
                            for _ in range(cmd.get("repeat", 1))])
            after = mmcache_counts() if MODE == "plugin" else None
        finally:
            if security:
                common.configure_media_url_security()  # SGLang's defaults again
        if before is None:
            return {"outcomes": out, "mmcache_loads": None, "mmcache_decodes": None,
                    "host_hits": None}
        return {"outcomes": out, "mmcache_loads": after[0] - before[0],
                "mmcache_decodes": after[1] - before[1], "host_hits": after[2] - before[2]}
    if op == "flush":
        # The cache writes of the loads so far land (the host pixel tier's entries among them).
        import mmcache.sglang

        flushed = mmcache.sglang._process.loader().flush(10.0)
        return {"flushed": flushed, "host_writes": mmcache_counts()[3]}
    if op == "threads":
        # SGLang's pattern: the processor's io_executor, a ThreadPoolExecutor.
        urls = cmd["urls"]
        barrier = threading.Barrier(cmd["workers"])

        def one(url):
            try:
                barrier.wait(timeout=30)  # every thread starts its load at once
            except threading.BrokenBarrierError:
                pass
            return outcome(load(url))

        with concurrent.futures.ThreadPoolExecutor(max_workers=cmd["workers"]) as pool:
            return {"outcomes": list(pool.map(one, urls))}
    if op == "gil":
        # A Python thread counts while this thread's load waits on a slow origin.
        count = [0]
        stop = threading.Event()
        started = threading.Event()

        def counter():
            started.set()
            n = 0
            while not stop.is_set():
                n += 1
                count[0] = n

        thread = threading.Thread(target=counter, daemon=True)
        thread.start()
        started.wait(10)
        before = count[0]
        result = outcome(load(cmd["url"]))
        after = count[0]
        stop.set()
        thread.join(10)
        return {"advanced": after - before, "outcome": result}
    if op == "writes":
        # Every public Pillow write on a returned image, each on a load of its own; then
        # whether the next load of the URL still gets the original pixels.
        from PIL import ImageDraw, ImageOps

        url = cmd["url"]
        original = outcome(load(url))
        changed, leaked = {}, []
        for name in WRITES:
            image, _ = load(url)
            before = digest(image.tobytes()), image.size
            WRITES[name](image, ImageDraw, ImageOps)
            changed[name] = (digest(image.tobytes()), image.size) != before
            if outcome(load(url)) != original:
                leaked.append(name)
        return {"changed": changed, "leaked": leaked}
    if op == "cuda":
        return {"cuda": bool(common.is_cuda())}
    if op == "metrics":
        # SGLang's own /metrics wiring (--enable-metrics), on an app of its kind, scraped.
        import asyncio

        import httpx
        from fastapi import FastAPI
        from prometheus_client.parser import text_string_to_metric_families

        from prometheus_client import Counter

        # An SGLang-style metric (its processes write them to PROMETHEUS_MULTIPROC_DIR).
        Counter("sglang_worker_probe", "a metric of SGLang's kind").inc()
        app = FastAPI()
        common.add_prometheus_middleware(app)

        async def scrape():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sglang") as c:
                return await c.get("/metrics")

        response = asyncio.run(scrape())
        hits = sum(sample.value for family in text_string_to_metric_families(response.text)
                   if family.name == "mmcache_loads" for sample in family.samples
                   if sample.labels.get("source") == "memory")
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        probe = families.get("sglang_worker_probe")
        return {"status": response.status_code, "memory_hits": hits,
                "sglang_metric": probe.samples[0].value if probe else None}
    raise ValueError(f"unknown op {op}")


def main() -> None:
    _stdout.write(json.dumps({"ready": MODE, **installed()}) + "\n")
    _stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = {"ok": True, **run(json.loads(line))}
        except Exception as exc:  # noqa: BLE001 -- reported to the test, which fails
            import traceback

            reply = {"ok": False, "error": traceback.format_exc()[-3000:], "type": repr(exc)}
        _stdout.write(json.dumps(reply) + "\n")
        _stdout.flush()


if __name__ == "__main__":
    main()

"""One engine's image loading under test, in a process of its own, driven by
engines_compare.py.

vLLM implementations, each loading as vLLM's chat parser does: asyncio at concurrency 16, a new
connector per load, ``fetch_image_async``, then vLLM's blake3 mm_hash of the result:

* ``http``: vLLM 0.34.0's own connector;
* ``http-media-cache``: the same with ``VLLM_MEDIA_CACHE`` (vLLM's disk cache of downloads) in a
  directory of its own;
* ``mmcache``: ``mmcache.vllm.MmcacheMediaConnector``;
* ``dynamo``: ai-dynamo 1.6.1's ``DynamoMediaConnector`` (over its ``ImageLoader``), read from
  the wheel at ``MMCACHE_DYNAMO_WHEEL``.

SGLang implementations, each loading as SGLang's processor does: a thread pool of 8, each
thread calling ``base_processor.load_image(url, False)``:

* ``sglang``: SGLang 0.5.23's own (``SGLANG_PLUGINS=none``);
* ``mmcache-sglang``: the function mmcache's plugin installs (``load_plugins()``).

Commands from the pipe: ``reset`` (empty memory: a new process loader, a new Dynamo loader, a
new empty ``VLLM_MEDIA_CACHE`` directory), ``pass`` (load URLs, timed), ``exit``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import tempfile
import time
import warnings
import zipfile

import worker

VLLM = ("http", "http-media-cache", "mmcache", "dynamo")
SGLANG = ("sglang", "mmcache-sglang")
CONCURRENCY = {"vllm": 16, "sglang": 8}
LOAD_TIMEOUT_SECS = 60.0


class Vllm:
    def __init__(self, name: str) -> None:
        from vllm.multimodal.hasher import MultiModalHasher
        from vllm.multimodal.media import MediaConnector, MediaWithBytes

        self.name, self.hasher, self.with_bytes = name, MultiModalHasher, MediaWithBytes
        if name == "mmcache":
            import mmcache.vllm as mv

            self.module = mv
            self.cls = mv.MmcacheMediaConnector
        elif name == "dynamo":
            # The wheel's dynamo/common, unpacked (a wheel's namespace package does not
            # import from the zip).
            root = tempfile.mkdtemp(prefix="mmcache-bench-dynamo-")
            with zipfile.ZipFile(os.environ["MMCACHE_DYNAMO_WHEEL"]) as z:
                z.extractall(root, [n for n in z.namelist() if n.startswith("dynamo/common/")])
            sys.path.insert(0, root)
            worker.import_dynamo()
            import dynamo.common.multimodal.media_connector as dc

            self.module = dc
            self.cls = dc.DynamoMediaConnector
        else:
            self.cls = MediaConnector
        self.event_loop = asyncio.new_event_loop()
        self.reset()

    def reset(self) -> None:
        if self.name == "mmcache":
            from mmcache._engines import ProcessLoader

            self.module._process = ProcessLoader(self.module._process._defaults)
        elif self.name == "dynamo":
            self.module._shared_image_loader = None
        elif self.name == "http-media-cache":
            os.environ["VLLM_MEDIA_CACHE"] = tempfile.mkdtemp(prefix="vllm-media-cache-")

    async def load(self, url: str, size) -> None:
        result = await self.cls().fetch_image_async(url)
        self.hasher.hash_kwargs("blake3", image=result)
        image = result.media if isinstance(result, self.with_bytes) else result
        if image.mode != "RGB" or image.size != tuple(size):
            raise AssertionError(f"{self.name}: unexpected image {image!r}")

    def run(self, urls: list) -> dict:
        # One loop for the process: vLLM's connector (and Dynamo's loader) keeps an HTTP
        # session bound to the loop it was made on, as in a server.
        return self.event_loop.run_until_complete(self._pass(urls))

    async def _pass(self, urls: list) -> dict:
        latencies, failures = [], []
        pending = iter(urls)

        async def one() -> None:
            for url, size in pending:
                started = time.perf_counter()
                try:
                    await asyncio.wait_for(self.load(url, size), LOAD_TIMEOUT_SECS)
                except Exception as exc:  # noqa: BLE001 - every failure counts
                    failures.append(f"{type(exc).__qualname__}: {str(exc)[:160]} ({url})")
                latencies.append(time.perf_counter() - started)

        return await timed(lambda: asyncio.gather(*(one() for _ in range(CONCURRENCY["vllm"]))),
                           latencies, failures, len(urls))


class Sglang:
    def __init__(self, name: str) -> None:
        warnings.simplefilter("ignore")
        if name == "sglang":
            os.environ["SGLANG_PLUGINS"] = "none"  # a name no plugin has: SGLang's own
        from sglang.srt.plugins import load_plugins

        load_plugins()
        from sglang.srt.multimodal.processors import base_processor

        self.name, self.load_image = name, base_processor.load_image
        if name == "mmcache-sglang":
            import mmcache.sglang as ms

            self.module = ms
        self.pool = concurrent.futures.ThreadPoolExecutor(CONCURRENCY["sglang"])

    def reset(self) -> None:
        if self.name == "mmcache-sglang":
            from mmcache._engines import ProcessLoader

            self.module._process = ProcessLoader(self.module._process._defaults)

    def run(self, urls: list) -> dict:
        latencies, failures = [], []

        def one(item) -> None:
            url, size = item
            started = time.perf_counter()
            try:
                image, _ = self.load_image(url, False)
                if image.size != tuple(size):
                    raise AssertionError(f"{self.name}: unexpected image {image!r}")
            except Exception as exc:  # noqa: BLE001 - every failure counts
                failures.append(f"{type(exc).__qualname__}: {str(exc)[:160]} ({url})")
            latencies.append(time.perf_counter() - started)

        async def go():
            return list(self.pool.map(one, urls))

        return asyncio.run(timed(go, latencies, failures, len(urls)))


async def timed(start, latencies: list, failures: list, loads: int) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    await start()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return worker.pass_result(loads, wall, cpu, 0.0, latencies, failures)


def main(name: str, conn, env: dict[str, str], verbose: bool) -> None:
    """The worker process: `name`'s implementation, configured by `env`."""
    os.environ.update(env)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    if not verbose:
        logging.disable(logging.CRITICAL)
    try:
        impl = Vllm(name) if name in VLLM else Sglang(name)
    except BaseException as exc:  # noqa: BLE001 - the coordinator reports it
        conn.send({"ok": False, "error": f"{name}: {type(exc).__qualname__}: {exc}"})
        return
    conn.send({"ok": True, "versions": versions(name)})
    while True:
        cmd = conn.recv()
        try:
            if cmd["op"] == "reset":
                impl.reset()
                reply = {"ok": True}
            elif cmd["op"] == "pass":
                reply = {"ok": True, **impl.run(cmd["urls"])}
                if name.startswith("mmcache"):
                    # mmcache writes the shared cache in the background: the pass's time
                    # includes finishing those writes (Dynamo's are in its loads).
                    started = time.perf_counter()
                    impl.module.loader().flush(10.0)
                    reply["wall_s"] += time.perf_counter() - started
            elif cmd["op"] == "exit":
                conn.send({"ok": True})
                return
            else:
                reply = {"ok": False, "error": f"unknown op {cmd['op']!r}"}
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator
            reply = {"ok": False, "error": f"{type(exc).__qualname__}: {exc}"}
        conn.send(reply)


def versions(name: str) -> dict[str, str]:
    from importlib.metadata import version

    out = {"python": sys.version.split()[0]}
    for package in ("vllm", "sglang", "mmcache", "pillow"):
        try:
            out[package] = version(package)
        except Exception:  # noqa: BLE001 - not installed, or an editable install
            pass
    if name == "dynamo":
        out["ai-dynamo"] = os.path.basename(os.environ["MMCACHE_DYNAMO_WHEEL"])
    return out

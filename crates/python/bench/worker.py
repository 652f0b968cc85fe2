"""One implementation under test, in a process of its own, driven by dynamo_compare.py.

Implementations:

* ``dynamo``: Dynamo's ``ImageLoader`` (ai-dynamo 1.6.1 wheel, imported without its compiled
  runtime, as ../../../../shared/DYNAMO-SPEC.md describes), PIL images;
* ``mmcache``: ``mmcache.dynamo.ImageLoader``, the drop-in, PIL images;
* ``mmcache-numpy``: ``mmcache.Loader.load``, numpy arrays;
* ``mmcache-before`` (with ``--before DIR``): the drop-in of an earlier build, from DIR.

Each is built with its defaults from the same ``DYN_MM_*`` variables. The worker keeps one
event loop for its life and answers commands from its pipe: ``build`` (a loader, warmed by one
load of a URL of its own), ``pass`` (load URLs at concurrency 16, timed; then flush background
cache writes outside the timed region), ``stats`` (its pid and decodes), ``drop``, ``exit``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import statistics
import sys
import time
import types

CONCURRENCY = 16
LOAD_TIMEOUT_SECS = 60.0
# ``mmcache-before``: the variable naming the folder of an earlier build's ``mmcache``.
BEFORE_PATH = "MMCACHE_BENCH_BEFORE_PATH"


def import_dynamo():
    """Dynamo's ImageLoader class, without its compiled runtime."""
    spec = importlib.util.find_spec("dynamo.common")
    if spec is None or spec.origin is None:
        raise SystemExit(
            "Dynamo's wheel is missing: pip install --no-deps ai-dynamo==1.6.1 "
            "&& pip install httpx aiohttp redis pillow"
        )
    common = os.path.dirname(spec.origin)
    # Bare packages instead of __init__ modules that import torch, yaml and compiled code.
    for name in ("dynamo.common.multimodal", "dynamo.common.utils",
                 "dynamo.common.configuration", "dynamo.common.configuration.groups"):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [os.path.join(common, *name.split(".")[2:])]
            sys.modules[name] = module
    if "dynamo.runtime" not in sys.modules:
        runtime = types.ModuleType("dynamo.runtime")

        class DistributedRuntime:  # imported by dynamo.common.utils.runtime, never called here
            def __init__(self, *args, **kwargs) -> None:
                raise RuntimeError("stub: Dynamo's compiled runtime is not loaded")

        runtime.DistributedRuntime = DistributedRuntime
        sys.modules["dynamo.runtime"] = runtime
    from dynamo.common.multimodal.image_loader import ImageLoader

    return ImageLoader


class Impl:
    """Builds loaders of one implementation and loads one URL with one."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "dynamo":
            cls = import_dynamo()
            self.build = cls
        elif name in ("mmcache", "mmcache-before"):
            if name == "mmcache-before":
                sys.path.insert(0, os.environ[BEFORE_PATH])
            from mmcache.dynamo import ImageLoader

            self.build = ImageLoader
        else:
            import mmcache

            self.build = mmcache.Loader.from_env

    def load(self, loader, url: str):
        return loader.load(url) if self.name == "mmcache-numpy" else loader.load_image(url)

    def check(self, result, size: tuple[int, int]) -> None:
        if self.name == "mmcache-numpy":
            ok = result.shape == (size[1], size[0], 3)
        else:
            ok = result.mode == "RGB" and result.size == tuple(size)
        if not ok:
            raise AssertionError(f"{self.name}: unexpected image {result!r}")

    async def flush(self, loader) -> None:
        """Waits for background cache writes (mmcache's write-behind and hedged SETs)."""
        native = getattr(loader, "loader", loader)
        flush = getattr(native, "flush_async", None)
        if flush is not None:
            await flush(10.0)

    async def close(self, loader) -> None:
        """Closes Dynamo's Redis client (no close method of its own); mmcache's loader closes
        its connections when dropped."""
        client = getattr(getattr(loader, "_shared_image_cache", None), "_client", None)
        if client is not None:
            try:
                await asyncio.wait_for(client.aclose(), 5)
            except Exception:  # noqa: BLE001 - a dead or hung cluster: nothing to close cleanly
                pass


async def timed_pass(impl: Impl, loader, urls: list) -> dict:
    """Loads `urls` ([url, [w, h]] each) at concurrency 16: latencies, wall and CPU times."""
    latencies: list[float] = []
    failures: list[str] = []
    pending = iter(urls)

    async def worker() -> None:
        for url, size in pending:
            started = time.perf_counter()
            try:
                result = await asyncio.wait_for(impl.load(loader, url), LOAD_TIMEOUT_SECS)
                impl.check(result, size)
            except Exception as exc:  # noqa: BLE001 - every failure counts
                if len(failures) < 3:
                    failures.append(f"{type(exc).__qualname__}: {str(exc)[:160]} ({url})")
                else:
                    failures.append("")
            latencies.append(time.perf_counter() - started)

    started, cpu, loop = time.perf_counter(), time.process_time(), time.thread_time()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    # loop: the event-loop thread alone (what bounds loads/s however many cores there are);
    # cpu: every thread of the process (loop, decode threads, Rust runtime).
    loop = time.thread_time() - loop
    return pass_result(len(urls), wall, cpu, loop, latencies, failures)


def decodes() -> int:
    """Images this process decoded (mmcache's ``mmcache_decode_duration_seconds`` count, every
    format); 0 for Dynamo, which counts none."""
    try:
        import mmcache
    except ImportError:
        return 0
    total = 0
    for line in mmcache.metrics_text().splitlines():
        if line.startswith("mmcache_decode_duration_seconds_count"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def pass_result(loads: int, wall: float, cpu: float, loop: float, latencies: list[float],
                failures: list[str]) -> dict:
    """One timed pass as the coordinators read it (`failures`: one entry per failed load,
    empty past the examples kept)."""
    latencies.sort()
    return {
        "loads": loads,
        "wall_s": wall,
        "cpu_s": cpu,
        "loop_cpu_s": loop,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "max_ms": 1000 * latencies[-1],
        "failed": len(failures),
        "failure_examples": [f for f in failures if f][:3],
    }


async def serve(impl: Impl, conn) -> None:
    loaders: dict[int, object] = {}
    while True:
        cmd = await asyncio.to_thread(conn.recv)
        op = cmd["op"]
        try:
            if op == "build":
                loader = impl.build()
                for url, size in cmd["warm"]:  # connections opened, memory filled
                    impl.check(await impl.load(loader, url), size)
                await impl.flush(loader)
                loaders[cmd["id"]] = loader
                reply = {"ok": True}
            elif op == "pass":
                loader = loaders[cmd["id"]]
                reply = await timed_pass(impl, loader, cmd["urls"])
                await impl.flush(loader)  # outside the timed region
                reply["ok"] = True
            elif op == "stats":
                reply = {"ok": True, "pid": os.getpid(), "decodes": decodes()}
            elif op == "drop":
                await impl.close(loaders.pop(cmd["id"], None))
                reply = {"ok": True}
            elif op == "exit":
                conn.send({"ok": True})
                return
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator
            reply = {"ok": False, "error": f"{type(exc).__qualname__}: {exc}"}
        conn.send(reply)


def main(name: str, conn, env: dict[str, str], verbose: bool) -> None:
    """The worker process: `name`'s implementation, configured by `env`."""
    os.environ.update(env)
    if not verbose:
        logging.disable(logging.CRITICAL)
    try:
        impl = Impl(name)
    except BaseException as exc:  # noqa: BLE001 - the coordinator reports it
        conn.send({"ok": False, "error": f"{name}: {exc}"})
        return
    conn.send({"ok": True, "versions": versions(name)})
    asyncio.run(serve(impl, conn))


def versions(name: str) -> dict[str, str]:
    from importlib.metadata import version

    import PIL

    out = {"pillow": PIL.__version__, "python": sys.version.split()[0]}
    package = "ai-dynamo" if name == "dynamo" else "mmcache"
    try:
        out[package] = version(package)
    except Exception:  # noqa: BLE001 - an editable install may lack metadata
        out[package] = "unknown"
    return out

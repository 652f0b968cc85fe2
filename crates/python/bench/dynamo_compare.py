#!/usr/bin/env python3
"""mmcache's drop-in against Dynamo's own ``ImageLoader``, in one run, on the same images.

    target/venv/bin/python crates/python/bench/dynamo_compare.py [--quick] [--rounds N]
                                                                 [--out PATH] [--no-hung]

Both loaders run in this process on one asyncio loop, at concurrency 16, against:

* an HTTP origin in a separate process (so it does not share this process's GIL) serving
  generated JPEGs and PNGs from memory, in two classes: "large" (JPEG 1024x768, PNG 512x512:
  decoding dominates) and "small" (JPEG 320x240, PNG 256x256: the loader's own cost shows); any path ``/<tag>/<index>.<ext>`` serves image
  ``index``, so every (image, pass) pair gets its own URL and a miss is a real miss;
* a real 3-master Redis Cluster (``redis-server``, or the binary named by
  ``$MMCACHE_TEST_SERVER``) on free 127.0.0.1 ports, stopped by PID at the end.

Scenarios, each run for both loaders in every round, the loader that goes first alternating
from round to round; the table reports each loader's median round (by loads/s):

* ``shared-hits``: every image pre-written by redis-py at Dynamo's key
  ``dynamo:mm:image:{sha256hex(url)}:bytes``; a new loader per round (cold local cache),
  each URL loaded once per round: shared-cache GET + decode.
* ``misses``: fresh URLs every round: origin fetch + decode + shared-cache SET.
* ``hung``: every cluster node SIGSTOPped (connections open, nothing answers) while loaders
  built and warmed before the stop load fresh URLs; SIGCONT afterwards.
* ``outage``: every cluster node killed (connections refused) under loaders built and warmed
  while the cluster was up; fresh URLs. Runs last.

Dynamo's loader is imported from the ``ai-dynamo`` wheel (``pip install --no-deps
ai-dynamo==1.6.1 httpx aiohttp redis pillow``) without its compiled runtime: the package
``__init__`` modules that pull torch and the compiled LLM module are replaced by bare package
modules, and ``dynamo.runtime`` by a stub with a ``DistributedRuntime`` class.

Output: a Markdown table on stdout, and JSON at ``--out`` (default
``target/bench-python.json`` in the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import io
import json
import logging
import multiprocessing
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import redis
from PIL import Image

REPO = Path(__file__).resolve().parents[3]
CONCURRENCY = 16
LOAD_TIMEOUT_SECS = 60.0
TARGETS = {"shared-hits": 2.0, "misses": 4.0}  # mmcache/dynamo loads/s
ZERO_FAILURE_SCENARIOS = ("hung", "outage")


# ---------------------------------------------------------------------------------------------
# Images


def make_jpeg(seed: int, width: int = 1024, height: int = 768) -> bytes:
    """A photo-like JPEG: smooth per-channel gradients and waves plus sensor-like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for _ in range(3):
        a, b = rng.uniform(-0.25, 0.25, 2)
        fx, fy = rng.uniform(0.002, 0.02, 2)
        phase = rng.uniform(0, 2 * np.pi)
        c = 128 + a * (x - width / 2) + b * (y - height / 2)
        c += 40 * np.sin(fx * x + fy * y + phase)
        channels.append(c)
    img = np.stack(channels, axis=-1)
    img += rng.normal(0, 6, img.shape).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(
        out, format="JPEG", quality=90
    )
    return out.getvalue()


def make_png(seed: int, size: int = 512) -> bytes:
    """A PNG of gradients, a few flat shapes and mild noise (a screenshot/diagram mix)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    img = np.stack(
        [(x * rng.uniform(0.1, 0.5) + y * rng.uniform(0.1, 0.5) + rng.uniform(0, 255)) % 256
         for _ in range(3)],
        axis=-1,
    )
    for _ in range(6):
        x0, y0 = rng.integers(0, size - 64, 2)
        w, h = rng.integers(32, 160, 2)
        img[y0:y0 + h, x0:x0 + w] = rng.integers(0, 256, 3)
    img += rng.normal(0, 2, img.shape).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(out, format="PNG")
    return out.getvalue()


# Image classes: (JPEG width, height, PNG side). "large" is a photo at a model's typical input
# resolution, where decoding dominates the cost of a load; "small" is a thumbnail-sized image,
# where what a loader adds around the decode shows.
CLASSES = {"large": (1024, 768, 512), "small": (320, 240, 256)}


def make_images(jpegs: int, pngs: int) -> list[tuple[str, bytes, tuple[int, int], str]]:
    """(extension, encoded bytes, (width, height), class) for each image, deterministic."""
    images = []
    for k, (cls, (w, h, side)) in enumerate(CLASSES.items()):
        images += [("jpg", make_jpeg(1000 * (k + 1) + i, w, h), (w, h), cls)
                   for i in range(jpegs)]
        images += [("png", make_png(1000 * (k + 1) + 500 + i, side), (side, side), cls)
                   for i in range(pngs)]
    return images


# ---------------------------------------------------------------------------------------------
# Origin (a separate process)


def _origin_main(bodies: list[bytes], conn, counter) -> None:
    """Serves ``/<tag>/<index>.<ext>`` from ``bodies`` until terminated; counts requests.

    A minimal HTTP/1.1 server on asyncio streams (keep-alive, GET only): the origin shares the
    machine's cores with the loaders, so it must cost as little per request as it can, or it
    caps the faster loader and the ratio measures the origin.
    """
    types_by_ext = {b"jpg": b"image/jpeg", b"png": b"image/png"}
    responses: dict[bytes, bytes] = {}

    def response(path: bytes) -> bytes:
        name = path.rsplit(b"/", 1)[-1]
        stem, _, ext = name.partition(b".")
        if stem.isdigit() and int(stem) < len(bodies) and ext in types_by_ext:
            key = stem + b"." + ext
            if key not in responses:
                body = bodies[int(stem)]
                responses[key] = (b"HTTP/1.1 200 OK\r\nContent-Type: " + types_by_ext[ext]
                                  + b"\r\nContent-Length: " + str(len(body)).encode()
                                  + b"\r\n\r\n" + body)
            return responses[key]
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                with counter.get_lock():
                    counter.value += 1
                parts = head.split(b" ", 2)
                writer.write(response(parts[1] if len(parts) > 1 else b"/"))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=256)
        conn.send(server.sockets[0].getsockname()[1])
        conn.close()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class Origin:
    def __init__(self, images: list[tuple[str, bytes, tuple[int, int]]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.counter = ctx.Value("q", 0)
        parent, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_origin_main, args=([b for _, b, _, _ in images], child, self.counter),
            daemon=True,
        )
        self.proc.start()
        if not parent.poll(30):
            self.close()
            raise RuntimeError("the origin process did not start in 30 s")
        self.base = f"http://127.0.0.1:{parent.recv()}"

    def requests(self) -> int:
        return self.counter.value

    def close(self) -> None:
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.join(5)
            if self.proc.is_alive():
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.join(5)


# ---------------------------------------------------------------------------------------------
# Redis Cluster


def _port_pair_free(port: int) -> bool:
    for p in (port, port + 10000):  # the cluster bus listens on port + 10000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def _free_ports(n: int) -> list[int]:
    ports: list[int] = []
    for _ in range(500):
        port = random.randint(20000, 29999)
        if port not in ports and _port_pair_free(port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise RuntimeError("no free port pairs for the cluster in 500 tries")


def _server_binary() -> str:
    name = os.environ.get("MMCACHE_TEST_SERVER", "").strip() or "redis-server"
    found = shutil.which(name) or (name if os.path.isfile(name) else None)
    if not found:
        raise SystemExit(f"{name} not found: install redis-server or set MMCACHE_TEST_SERVER")
    return found


class Cluster:
    """Three masters on 127.0.0.1 owning all 16384 slots."""

    def __init__(self) -> None:
        binary = _server_binary()
        self.dir = tempfile.mkdtemp(prefix="mmcache-bench-redis-")
        self.ports = _free_ports(3)
        self.procs: list[subprocess.Popen] = []
        self.stopped = False
        try:
            for port in self.ports:
                node_dir = os.path.join(self.dir, str(port))
                os.makedirs(node_dir)
                self.procs.append(subprocess.Popen(
                    [binary, "--port", str(port), "--bind", "127.0.0.1",
                     "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--dir", node_dir, "--save", "", "--appendonly", "no",
                     # Long enough that SIGSTOPping every node never marks one failed.
                     "--cluster-node-timeout", "60000"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
            nodes = [self._wait_ping(p) for p in self.ports]
            per = 16384 // 3
            for i, node in enumerate(nodes):
                last = 16383 if i == 2 else (i + 1) * per - 1
                node.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
            for node in nodes[1:]:
                node.execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])
            self.wait_ok(nodes)
            for node in nodes:
                node.close()
        except BaseException:
            self.close()
            raise
        self.url = f"redis://127.0.0.1:{self.ports[0]}"

    @staticmethod
    def _wait_ping(port: int) -> redis.Redis:
        node = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                node.ping()
                return node
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis node on port {port} did not answer in 10 s")

    def wait_ok(self, nodes: list[redis.Redis] | None = None, timeout: float = 30) -> None:
        own = nodes is None
        nodes = nodes or [self._wait_ping(p) for p in self.ports]
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if all(b"cluster_state:ok" in n.execute_command("CLUSTER", "INFO")
                       for n in nodes):
                    return
                time.sleep(0.1)
            raise RuntimeError(f"the cluster did not reach cluster_state:ok in {timeout} s")
        finally:
            if own:
                for n in nodes:
                    n.close()

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0])

    def signal_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, sig)

    def hang(self) -> None:
        self.signal_all(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        self.signal_all(signal.SIGCONT)
        self.stopped = False
        self.wait_ok()

    def kill(self) -> None:
        if self.stopped:
            self.signal_all(signal.SIGCONT)
            self.stopped = False
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait(timeout=10)

    def close(self) -> None:
        if self.stopped:
            self.signal_all(signal.SIGCONT)
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The two loaders


def import_loaders():
    """(Dynamo's ImageLoader class, mmcache.dynamo.ImageLoader), Dynamo's without its runtime."""
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
    from dynamo.common.multimodal.image_loader import ImageLoader as DynamoImageLoader

    from mmcache.dynamo import ImageLoader as MmcacheImageLoader  # after the stubs

    return DynamoImageLoader, MmcacheImageLoader


def shared_key(url: str) -> str:
    return f"dynamo:mm:image:{{{hashlib.sha256(url.encode()).hexdigest()}}}:bytes"


# ---------------------------------------------------------------------------------------------
# Measurement


class Bench:
    def __init__(self, args, images, origin: Origin, cluster: Cluster, classes) -> None:
        self.args = args
        self.images = images
        self.origin = origin
        self.cluster = cluster
        self.classes = {"dynamo": classes[0], "mmcache": classes[1]}
        self.rows: list[dict] = []
        self.unique = 0
        self.cls = "large"

    def urls(self, tag: str, count: int | None = None) -> list[tuple[str, tuple[int, int]]]:
        picked = [(i, ext, size) for i, (ext, _, size, cls) in enumerate(self.images)
                  if cls == self.cls]
        picked = picked if count is None else picked[:count]
        return [(f"{self.origin.base}/{tag}/{i}.{ext}", size) for i, ext, size in picked]

    def fresh(self, scenario: str, loader: str, rnd: int, count: int | None = None):
        self.unique += 1
        return self.urls(f"{scenario}-{loader}-r{rnd}-{self.unique}", count)

    def make_loader(self, name: str):
        os.environ["DYN_MM_SHARED_IMAGE_CACHE_ENABLED"] = "1"
        os.environ["DYN_MM_SHARED_IMAGE_CACHE_URL"] = self.cluster.url
        os.environ["DYN_MM_ALLOW_INTERNAL"] = "1"
        return self.classes[name]()

    async def warm(self, name: str, loader) -> None:
        """One load of a URL of its own: opens the HTTP and cache connections."""
        self.unique += 1
        url = f"{self.origin.base}/warm-{name}-{self.unique}/0.{self.images[0][0]}"
        await loader.load_image(url)

    @staticmethod
    async def run_pass(loader, urls) -> dict:
        latencies: list[float] = []
        failures: list[BaseException] = []
        pending = iter(urls)

        async def worker() -> None:
            for url, (width, height) in pending:
                started = time.perf_counter()
                try:
                    image = await asyncio.wait_for(loader.load_image(url), LOAD_TIMEOUT_SECS)
                    if image.mode != "RGB" or image.size != (width, height):
                        raise AssertionError(f"got {image.mode} {image.size} for {url}")
                except Exception as exc:  # noqa: BLE001 - every failure counts
                    failures.append(exc)
                latencies.append(time.perf_counter() - started)

        started, cpu, loop = time.perf_counter(), time.process_time(), time.thread_time()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        # cpu: every thread of this process (event loop, decode threads, Rust runtime);
        # loop: the event-loop thread alone, which bounds loads/s however many cores there are.
        loop = time.thread_time() - loop
        return {"loads": len(urls), "wall_s": wall, "cpu_s": cpu, "loop_cpu_s": loop,
                "latencies": latencies, "failures": failures}

    async def scenario(self, name: str, rounds: int) -> None:
        per_loader: dict[str, list[dict]] = {"mmcache": [], "dynamo": []}
        subset = self.args.hung_images if name == "hung" else None
        hits_urls = self.urls(f"hits-{self.cls}") if name == "shared-hits" else None
        loaders: dict[tuple[str, int], object] = {}
        # One unmeasured round first (not for hung: Dynamo's rounds there take many seconds):
        # the process's allocator, caches and connections settle, so the first scenario of the
        # run is not penalised.
        warmup = 0 if name == "hung" else 1
        rounds += warmup

        if name == "outage":  # loaders built and warmed while the cluster is up
            for rnd in range(rounds):
                for lname in per_loader:
                    loaders[(lname, rnd)] = self.make_loader(lname)
                    await self.warm(lname, loaders[(lname, rnd)])
            self.cluster.kill()

        for rnd in range(rounds):
            order = ["mmcache", "dynamo"] if rnd % 2 == 0 else ["dynamo", "mmcache"]
            if name != "outage":
                for lname in order:
                    loaders[(lname, rnd)] = self.make_loader(lname)
                    await self.warm(lname, loaders[(lname, rnd)])
            if name == "hung":
                self.cluster.hang()
            try:
                for lname in order:
                    urls = hits_urls or self.fresh(name, lname, rnd, subset)
                    before = self.origin.requests()
                    result = await self.run_pass(loaders[(lname, rnd)], urls)
                    result["origin_requests"] = self.origin.requests() - before
                    result["round"] = rnd
                    if rnd >= warmup:
                        per_loader[lname].append(result)
            finally:
                if name == "hung":
                    self.cluster.resume()
            for lname in order:
                await close_loader(loaders.pop((lname, rnd), None))
            await asyncio.sleep(0.1)

        for lname, results in per_loader.items():
            self.rows.append(summarize(f"{name} ({self.cls})", lname, results))
            row = self.rows[-1]
            print(f"  {name:12} {lname:8} {row['loads_per_s']:9.1f} loads/s  "
                  f"p50 {row['p50_ms']:8.1f} ms  p99 {row['p99_ms']:8.1f} ms  "
                  f"failed {row['failed']}", file=sys.stderr, flush=True)


async def close_loader(loader) -> None:
    """Closes Dynamo's Redis client (it has no close method of its own); mmcache's loader
    closes its connections when dropped."""
    client = getattr(getattr(loader, "_shared_image_cache", None), "_client", None)
    if client is not None:
        try:
            await asyncio.wait_for(client.aclose(), 5)
        except Exception:  # noqa: BLE001 - a dead or hung cluster: nothing to close cleanly
            pass


def summarize(scenario: str, loader: str, results: list[dict]) -> dict:
    by_rate = sorted(results, key=lambda r: r["loads"] / r["wall_s"])
    median = by_rate[(len(by_rate) - 1) // 2]
    lat = sorted(median["latencies"])
    failures = [f for r in results for f in r["failures"]]
    kinds: list[str] = []
    for f in failures:
        label = f"{type(f).__module__}.{type(f).__qualname__}: {str(f)[:160]}"
        if label not in kinds:
            kinds.append(label)
    return {
        "scenario": scenario,
        "loader": loader,
        "loads_per_s": median["loads"] / median["wall_s"],
        "p50_ms": 1000 * statistics.median(lat),
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "cpu_ms_per_load": 1000 * median["cpu_s"] / median["loads"],
        "loop_cpu_ms_per_load": 1000 * median["loop_cpu_s"] / median["loads"],
        "failed": len(failures),
        "loads": sum(r["loads"] for r in results),
        "rounds": len(results),
        "round_loads_per_s": [r["loads"] / r["wall_s"] for r in results],
        "origin_requests": sum(r["origin_requests"] for r in results),
        "failure_examples": kinds[:3],
    }


def verdicts(rows: list[dict]) -> list[dict]:
    out = []
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    for s in scenarios:
        mm = next(r for r in rows if r["scenario"] == s and r["loader"] == "mmcache")
        dyn = next(r for r in rows if r["scenario"] == s and r["loader"] == "dynamo")
        ratio = mm["loads_per_s"] / dyn["loads_per_s"] if dyn["loads_per_s"] else float("inf")
        base = s.split(" (")[0]
        if base in TARGETS:
            target, met = f">= {TARGETS[base]:g}x loads/s", ratio >= TARGETS[base]
        else:
            target = "0 failed"
            met = mm["failed"] == 0
        out.append({"scenario": s, "ratio": ratio, "target": target, "met": met,
                    "mmcache_failed": mm["failed"], "dynamo_failed": dyn["failed"]})
    return out


def markdown(rows: list[dict], checks: list[dict]) -> str:
    lines = [
        "| scenario | loader | loads/s | p50 ms | p99 ms | failed | loads | origin GETs "
        "| CPU ms/load | loop CPU ms/load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['loader']} | {r['loads_per_s']:.1f} | {r['p50_ms']:.1f} "
            f"| {r['p99_ms']:.1f} | {r['failed']} | {r['loads']} | {r['origin_requests']} "
            f"| {r['cpu_ms_per_load']:.2f} | {r['loop_cpu_ms_per_load']:.2f} |"
        )
    lines += ["", "| scenario | mmcache/dynamo loads/s | target | met |", "|---|---:|---|---|"]
    for c in checks:
        lines.append(f"| {c['scenario']} | {c['ratio']:.2f}x | {c['target']} "
                     f"| {'yes' if c['met'] else 'NO'} |")
    for r in rows:
        if r["loader"] == "dynamo" and r["failure_examples"]:
            lines.append("")
            lines.append(f"Dynamo's failures in {r['scenario']} (first 3 kinds):")
            lines += [f"- `{k}`" for k in r["failure_examples"]]
    for r in rows:
        if r["loader"] == "mmcache" and r["failure_examples"]:
            lines.append("")
            lines.append(f"mmcache's failures in {r['scenario']} (first 3 kinds):")
            lines += [f"- `{k}`" for k in r["failure_examples"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="12 JPEGs + 12 PNGs, 3 rounds, 8 URLs for hung (about a minute)")
    p.add_argument("--rounds", type=int, help="rounds per scenario (default 5, quick 3)")
    p.add_argument("--jpegs", type=int, help="JPEGs per class (default 48, quick 12)")
    p.add_argument("--pngs", type=int, help="PNGs per class (default 48, quick 12)")
    p.add_argument("--hung-images", type=int,
                   help="URLs per pass in the hung scenario, at most 3 rounds "
                        "(default 16, quick 8)")
    p.add_argument("--no-hung", action="store_true", help="skip the hung-nodes scenario")
    p.add_argument("--out", type=Path, default=REPO / "target" / "bench-python.json",
                   help="JSON output (default target/bench-python.json)")
    p.add_argument("--verbose", action="store_true", help="keep the loaders' log output")
    a = p.parse_args()
    a.rounds = a.rounds or (3 if a.quick else 5)
    a.jpegs = a.jpegs if a.jpegs is not None else (12 if a.quick else 48)
    a.pngs = a.pngs if a.pngs is not None else (12 if a.quick else 48)
    a.hung_images = a.hung_images or (8 if a.quick else 16)
    if a.rounds < 1 or a.jpegs + a.pngs < 1:
        p.error("need at least one round and one image")
    return a


async def run(args, images, origin: Origin, cluster: Cluster, classes) -> list[dict]:
    bench = Bench(args, images, origin, cluster, classes)
    writer = cluster.client()
    try:
        for cls in CLASSES:
            bench.cls = cls
            for url, _ in bench.urls(f"hits-{cls}"):
                index = int(url.rsplit("/", 1)[-1].split(".")[0])
                writer.set(shared_key(url), images[index][1], ex=3600)
    finally:
        writer.close()
    plan = [(cls, name) for cls in CLASSES for name in ("shared-hits", "misses")]
    # The cache failures on small images, where their cost is not hidden by decoding; the
    # outage kills the cluster, so it runs last.
    plan += [("small", name) for name in ([] if args.no_hung else ["hung"]) + ["outage"]]
    for cls, name in plan:
        bench.cls = cls
        # Hung nodes make Dynamo's loads take seconds each: at most 3 rounds there.
        await bench.scenario(name, min(args.rounds, 3) if name == "hung" else args.rounds)
    return bench.rows


def main() -> int:
    args = parse_args()
    if not args.verbose:
        logging.disable(logging.CRITICAL)
    t0 = time.monotonic()
    print(f"generating {args.jpegs} JPEGs and {args.pngs} PNGs of each class {CLASSES} ...",
          file=sys.stderr, flush=True)
    images = make_images(args.jpegs, args.pngs)
    origin = cluster = None
    try:
        origin = Origin(images)
        cluster = Cluster()
        classes = import_loaders()
        print(f"origin {origin.base}, cluster {cluster.url}; "
              f"{args.rounds} rounds at concurrency {CONCURRENCY}", file=sys.stderr, flush=True)
        rows = asyncio.run(run(args, images, origin, cluster, classes))
    finally:
        if cluster is not None:
            cluster.close()
        if origin is not None:
            origin.close()
    checks = verdicts(rows)
    print(markdown(rows, checks))
    import mmcache
    from importlib.metadata import version

    report = {
        "benchmark": "mmcache.dynamo.ImageLoader vs dynamo.common.multimodal.image_loader",
        "concurrency": CONCURRENCY,
        "rounds": args.rounds,
        "images": {"classes": {k: {"jpeg": f"{w}x{h}", "png": f"{p}x{p}"}
                               for k, (w, h, p) in CLASSES.items()},
                   "jpegs_per_class": args.jpegs, "pngs_per_class": args.pngs,
                   "encoded_bytes": sum(len(b) for _, b, _, _ in images)},
        "versions": {"ai-dynamo": version("ai-dynamo"), "mmcache": mmcache.__version__,
                     "redis-py": redis.__version__, "pillow": Image.__version__,
                     "python": platform.python_version()},
        "cpus": os.cpu_count(),
        "elapsed_s": time.monotonic() - t0,
        "rows": [{k: v for k, v in r.items()} for r in rows],
        "checks": checks,
        "all_targets_met": all(c["met"] for c in checks),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out} in {report['elapsed_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

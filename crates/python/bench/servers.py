"""What dynamo_compare.py loads from: generated images, an HTTP origin in a process of its own,
and a real 3-master Redis Cluster on 127.0.0.1 (stopped by PID).

Every URL of a run serves bytes of its own: a few base images per class, each URL's copy
carrying a unique comment (a JPEG COM segment, a PNG tEXt chunk) that decoders skip. So the
pixels and the decode's cost are the base image's, while no two URLs share bytes (mmcache
shares one decode among URLs of identical bytes; a benchmark of distinct images must not let
it).
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import zlib

import numpy as np
import redis
from PIL import Image

# Image classes: name -> (format, side in px). JPEGs are photo-like (q90); the PNG is a
# screenshot/diagram mix.
CLASSES = {
    "jpeg512": ("jpg", 512),
    "jpeg1024": ("jpg", 1024),
    "jpeg2048": ("jpg", 2048),
    "png1024": ("png", 1024),
}
BASES_PER_CLASS = 4


def make_jpeg(seed: int, side: int) -> bytes:
    """A photo-like JPEG: smooth per-channel gradients and waves plus sensor-like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side].astype(np.float32)
    channels = []
    for _ in range(3):
        a, b = rng.uniform(-0.25, 0.25, 2) * (512 / side)
        fx, fy = rng.uniform(0.002, 0.02, 2) * (512 / side)
        phase = rng.uniform(0, 2 * np.pi)
        c = 128 + a * (x - side / 2) + b * (y - side / 2)
        c += 40 * np.sin(fx * x + fy * y + phase)
        channels.append(c)
    img = np.stack(channels, axis=-1)
    img += rng.normal(0, 6, img.shape).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def make_png(seed: int, side: int) -> bytes:
    """A PNG of gradients, a few flat shapes and mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side].astype(np.float32)
    img = np.stack(
        [(x * rng.uniform(0.1, 0.5) + y * rng.uniform(0.1, 0.5) + rng.uniform(0, 255)) % 256
         for _ in range(3)],
        axis=-1,
    )
    for _ in range(6):
        x0, y0 = rng.integers(0, side - 64, 2)
        w, h = rng.integers(side // 16, side // 3, 2)
        img[y0:y0 + h, x0:x0 + w] = rng.integers(0, 256, 3)
    img += rng.normal(0, 2, img.shape).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(out, format="PNG")
    return out.getvalue()


def make_bases(classes: dict[str, tuple[str, int]] = CLASSES) -> dict[str, list[bytes]]:
    """The base images of every class of `classes` (name -> (format, side)), deterministic."""
    bases = {}
    for k, (cls, (ext, side)) in enumerate(classes.items()):
        make = make_jpeg if ext == "jpg" else make_png
        bases[cls] = [make(1000 * (k + 1) + i, side) for i in range(BASES_PER_CLASS)]
    return bases


def variant(base: bytes, tag: bytes) -> bytes:
    """`base` with `tag` in a comment its decoders skip: other bytes, the same pixels."""
    if base[:2] == b"\xff\xd8":  # JPEG: a COM segment right after SOI
        return base[:2] + b"\xff\xfe" + struct.pack(">H", len(tag) + 2) + tag + base[2:]
    # PNG: a tEXt chunk right after IHDR (8 + 25 bytes)
    body = b"tEXt" + b"bench\0" + tag
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    return base[:33] + chunk + base[33:]


def body_for(bases: dict[str, list[bytes]], path: str) -> bytes | None:
    """The bytes the origin serves at `/<class>/<tag>/<index>.<ext>` (None: 404)."""
    parts = path.strip("/").split("/")
    if len(parts) != 3 or parts[0] not in bases:
        return None
    stem = parts[2].split(".")[0]
    if not stem.isdigit():
        return None
    images = bases[parts[0]]
    return variant(images[int(stem) % len(images)], path.encode())


def _origin_main(bases: dict[str, list[bytes]], conn, counter) -> None:
    """A minimal HTTP/1.1 server on asyncio streams (keep-alive, GET only), counting requests:
    it shares the cores with the loaders, so it costs as little per request as it can."""

    def response(path: bytes) -> bytes:
        body = body_for(bases, path.decode("latin-1"))
        if body is None:
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"
        kind = b"image/jpeg" if body[:2] == b"\xff\xd8" else b"image/png"
        return (b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body)

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
    """The origin, in a process of its own (it must not share the loaders' GIL)."""

    def __init__(self, bases: dict[str, list[bytes]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.counter = ctx.Value("q", 0)
        parent, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_origin_main, args=(bases, child, self.counter),
                                daemon=True)
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

    def flush(self) -> None:
        """Empties every master (between image classes: Redis memory stays bounded)."""
        for port in self.ports:
            node = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
            node.flushall()
            node.close()

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

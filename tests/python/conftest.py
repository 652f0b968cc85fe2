"""Real servers for the Python tests: an HTTP origin and a Redis Cluster on 127.0.0.1.

The cluster is three `redis-server` masters (or the binary named by `MMCACHE_TEST_SERVER`,
e.g. Valkey's `valkey-server`), started for the session and stopped by PID. Without the
binary the cluster tests fail in CI (`CI` set) and are skipped, saying so, elsewhere.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from PIL import Image


def png(width: int, height: int, seed: int = 0) -> bytes:
    """A PNG whose pixels depend on `seed`."""
    img = Image.new("RGB", (width, height))
    img.putdata(
        [((x * 7 + seed) % 256, (y * 5 + seed * 3) % 256, (x + y + seed) % 256)
         for y in range(height) for x in range(width)]
    )
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def pixels_of(data: bytes):
    """Pillow's RGB pixels of encoded bytes, as bytes (what parity means)."""
    return Image.open(io.BytesIO(data)).convert("RGB").tobytes()


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    headers: dict = field(default_factory=dict)


class Origin:
    """A threaded HTTP server whose routes the tests set, counting requests per path."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                path = self.path
                with origin.lock:
                    origin.hits[path] = origin.hits.get(path, 0) + 1
                    route = origin.routes.get(path, Route(404, b"not found"))
                if route.delay:
                    time.sleep(route.delay)
                try:
                    self.send_response(route.status)
                    for k, v in route.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(route.body)))
                    self.end_headers()
                    self.wfile.write(route.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def set(self, path: str, route: Route) -> str:
        with self.lock:
            self.routes[path] = route
        return self.base + path

    def image(self, path: str, data: bytes, delay: float = 0.0) -> str:
        return self.set(path, Route(200, data, delay))

    def count(self, path: str) -> int:
        with self.lock:
            return self.hits.get(path, 0)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


_unique = iter(range(1, 1 << 30))


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


@pytest.fixture
def path():
    """A fresh path per call, so tests never share cache entries."""
    return lambda name="img.png": f"/{next(_unique)}-{random.getrandbits(32):08x}/{name}"


def _server_binary() -> str | None:
    name = os.environ.get("MMCACHE_TEST_SERVER", "").strip() or "redis-server"
    return shutil.which(name) or (name if os.path.isfile(name) else None)


def _free_port() -> int:
    """A port whose cluster bus port (+10000) is free as well."""
    for _ in range(200):
        # Below the ephemeral range (32768 and up), bus port included.
        port = random.randint(12000, 21999)
        ok = True
        for p in (port, port + 10000):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError("no free port pair found in 200 tries")


class Cluster:
    """Three masters owning all slots; `url` is what a worker is configured with."""

    def __init__(self, binary: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="mmcache-pytest-redis-")
        self.procs: list[subprocess.Popen] = []
        try:
            self._start(binary)
        except BaseException:
            self.close()
            raise

    def _start(self, binary: str) -> None:
        self.ports = [_free_port() for _ in range(3)]
        for port in self.ports:
            node_dir = os.path.join(self.dir, str(port))
            os.makedirs(node_dir)
            self.procs.append(subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--dir", node_dir, "--save", "",
                 "--appendonly", "no", "--cluster-node-timeout", "2000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))
        nodes = [self._wait_ping(port, proc) for port, proc in zip(self.ports, self.procs)]
        per = 16384 // 3
        for i, node in enumerate(nodes):
            first, last = i * per, (16383 if i == 2 else (i + 1) * per - 1)
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        for node in nodes[1:]:
            node.execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(b"cluster_state:ok" in n.execute_command("CLUSTER", "INFO") for n in nodes):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the test cluster did not reach cluster_state:ok in 30 s")
        self.url = f"redis://127.0.0.1:{self.ports[0]}"
        self.client = redis.RedisCluster(host="127.0.0.1", port=self.ports[0])

    def _wait_ping(self, port: int, proc: subprocess.Popen) -> redis.Redis:
        node = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            # Our process must be alive: if it exited (port taken), whatever answers on the
            # port is somebody else's server, not ours to reconfigure.
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {port} exited ({proc.returncode})")
            try:
                # Our server, not one that held the port first.
                if node.info("server")["process_id"] == proc.pid:
                    return node
                raise RuntimeError(f"port {port} is served by another process")
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"cache node on port {port} did not answer in 10 s")

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    binary = _server_binary()
    if binary is None:
        message = ("redis-server is not installed (apt-get install -y redis-server, or set "
                   "MMCACHE_TEST_SERVER to a valkey-server)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(f"outside CI, skipping: {message}")
    c = Cluster(binary)
    yield c
    c.close()


@pytest.fixture
def shared_env(monkeypatch, cluster):
    """The DYN_MM_* environment of a worker with the shared cache on.

    Hedging is off: these tests count origin fetches exactly, and a hedge (a cold loader's
    first GET slower than 250 ms on a loaded CI machine) would add one. The Rust tests and
    the chaos suite cover hedging with the defaults."""
    monkeypatch.setenv("MMCACHE_SHARED_IMAGE_CACHE_HEDGE", "0")
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1")
    monkeypatch.setenv("DYN_MM_SHARED_IMAGE_CACHE_URL", cluster.url)
    monkeypatch.setenv("DYN_MM_ALLOW_INTERNAL", "1")
    return cluster


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """Tests start from Dynamo's defaults, whatever the shell exports."""
    for name in list(os.environ):
        if name.startswith(("DYN_MM_", "MMCACHE_")) and name not in (
            "MMCACHE_TEST_SERVER", "MMCACHE_LIBTURBOJPEG", "MMCACHE_LOG"
        ):
            monkeypatch.delenv(name)

"""mmcache.sglang against SGLang 0.5.23 itself: its own ``load_image`` is the oracle.

Two long-lived SGLang processes (tests/engines/sglang_worker.py): ``own``, where
``SGLANG_PLUGINS=none`` leaves SGLang's function in place, and ``plugin``, where
``load_plugins()`` installed mmcache's, as SGLang's server does. Importing SGLang can apply the
plugins, so the two never share a process. Each load is called as SGLang's processor calls it
(``base_processor.load_image``), and its outcome reduced to JSON by the worker.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import pytest
from PIL import Image

from conftest import Route

HERE = os.path.dirname(__file__)
ROOT = os.path.join(HERE, "..", "..")
WORKER = os.path.join(HERE, "sglang_worker.py")
CORPUS_SCRIPT = os.path.join(ROOT, "tests", "pillow", "make_profile_cases.py")


class Worker:
    """One SGLang process, driven a JSON command a line."""

    def __init__(self, mode: str, env: dict) -> None:
        self.mode = mode
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, mode], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        self.hello = self._read(timeout=300)
        assert self.hello.get("ready") == mode, self.hello

    def send(self, cmd: dict) -> None:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def _read(self, timeout: float) -> dict:
        # A reader thread bounds the wait: a hung worker fails the test, never hangs it.
        box = []
        thread = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()),
                                  daemon=True)
        thread.start()
        thread.join(timeout)
        assert box and box[0], f"{self.mode} worker gave no reply within {timeout} s"
        return json.loads(box[0])

    def reply(self, timeout: float = 300) -> dict:
        out = self._read(timeout)
        assert out.pop("ok", False), out
        return out

    def __call__(self, cmd: dict, timeout: float = 300) -> dict:
        self.send(cmd)
        return self.reply(timeout)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def worker_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DYN_MM_", "MMCACHE_", "SGLANG_"))}
    env["DYN_MM_ALLOW_INTERNAL"] = "1"  # the origin is on 127.0.0.1
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def workers():
    metrics_dir = tempfile.mkdtemp(prefix="mmcache-sglang-metrics-")
    own = Worker("own", worker_env(SGLANG_PLUGINS="none"))
    plugin = Worker("plugin", worker_env(PROMETHEUS_MULTIPROC_DIR=metrics_dir))
    yield own, plugin
    own.close()
    plugin.close()


def both(workers, cmd: dict, timeout: float = 300) -> tuple[dict, dict]:
    """`cmd` in both processes at once (a timeout test waits once, not twice)."""
    for w in workers:
        w.send(cmd)
    return tuple(w.reply(timeout) for w in workers)


@pytest.fixture(scope="module")
def corpus():
    out = tempfile.mkdtemp(prefix="mmcache-sglang-corpus-")
    subprocess.run([sys.executable, CORPUS_SCRIPT, out], check=True)
    cases = [json.loads(line) for line in open(os.path.join(out, "manifest.jsonl"))]
    files = {c["name"]: open(os.path.join(out, c["file"]), "rb").read() for c in cases}
    return cases, files


def same(outcome: dict) -> dict:
    """What must be identical: all of an image's outcome; an exception's type and status."""
    return {k: v for k, v in outcome.items() if k != "message"}


def png(size=(5, 4), colour=(1, 2, 3), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, colour).save(buf, "PNG")
    return buf.getvalue()


def test_load_plugins_installs_the_plugin_where_sglang_calls_it(workers):
    own, plugin = workers
    assert plugin.hello["installed"], plugin.hello
    # base_processor's imported name, common's and sglang.srt.utils' are the hooked function,
    # which wraps SGLang's own.
    assert plugin.hello["same_as_common"] and plugin.hello["same_as_utils"], plugin.hello
    assert plugin.hello["wraps_sglangs"] == "sglang.srt.utils.common", plugin.hello
    assert not own.hello["installed"], own.hello  # SGLANG_PLUGINS leaves it out


def test_every_corpus_image_is_sglangs_own(workers, origin, path, corpus):
    cases, files = corpus
    items = []
    for case in cases:
        data = files[case["name"]]
        items.append((case["name"], {"url": origin.image(path(case["file"]), data)}))
        if data:
            items.append((case["name"], {
                "url": "data:image/png;base64," + base64.b64encode(data).decode()}))
    cmd = {"op": "load", "items": [item for _, item in items], "repeat": 2}
    theirs, ours = both(workers, cmd)
    identical, differing = 0, []
    for (name, item), expected, got in zip(items, theirs["outcomes"], ours["outcomes"]):
        # The plugin's second load is a memory hit (or the same refusal); SGLang's, a repeat.
        if same(got[0]) == same(expected[0]) == same(got[1]):
            identical += 1
        else:
            differing.append((name, item["url"][:5], expected[0], got[0], got[1]))
    print(f"{identical} of {len(items)} identical; differing: {differing}")
    assert not differing
    assert identical == len(items) and identical > 200
    assert sum(1 for out in ours["outcomes"] if "mode" in out[0]) > 150  # images, not errors
    assert ours["mmcache_loads"] >= len(items)  # through mmcache, not around it


def test_host_pixel_hits_are_sglangs_own(workers, origin, path, corpus):
    """Two plugin processes share a host pixel tier: the first decodes every corpus image and
    writes its pixels, the second maps them (no decode) and gets SGLang's own outcome."""
    cases, files = corpus
    items = [{"url": origin.image(path(c["file"]), files[c["name"]])} for c in cases]
    host = tempfile.mkdtemp(prefix="mmcache-sglang-host-",
                            dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    env = worker_env(MMCACHE_HOST_PIXELS_DIR=os.path.join(host, "tier"))
    started = []
    try:
        first = Worker("plugin", env)
        started.append(first)
        second = Worker("plugin", env)
        started.append(second)
        own, _ = workers
        theirs = own({"op": "load", "items": items})
        wrote = first({"op": "load", "items": items})
        flushed = first({"op": "flush"})
        assert flushed["flushed"]
        mapped = second({"op": "load", "items": items})
    finally:
        for worker in started:
            worker.close()
        shutil.rmtree(host, ignore_errors=True)  # decoded pixels in memory until removed
    for outcomes in (wrote, mapped):
        got = [same(o[0]) for o in outcomes["outcomes"]]
        assert got == [same(o[0]) for o in theirs["outcomes"]]
    # Every image the first decoded was written, and the second mapped each one; what mmcache
    # hands back to SGLang's own Pillow undecoded (APNG, XMP in a text chunk, a GIF that
    # Pillow opens as L with a palette) has no pixels to share: each process probes it again.
    written = flushed["host_writes"]
    assert written > 100
    assert mapped["host_hits"] == written
    assert mapped["mmcache_decodes"] == wrote["mmcache_decodes"] - written


def test_other_inputs_are_sglangs_own(workers, tmp_path):
    data = png(colour=(9, 8, 7))
    file = tmp_path / "img.png"
    file.write_bytes(data)
    b64 = base64.b64encode(data).decode()
    items = [{"bytes": b64}, {"pil": b64}, {"b64": b64}, {"path": str(file)},
             {"url": f"file://{file}"}, {"image_data": f"file://{file}"},
             {"b64": "not base64 !"}, {"path": str(tmp_path / "missing.png")}]
    theirs, ours = both(workers, {"op": "load", "items": items})
    assert [same(o[0]) for o in ours["outcomes"]] == [same(o[0]) for o in theirs["outcomes"]]
    assert ours["mmcache_loads"] == ours["mmcache_decodes"] == 0  # SGLang's own code, all
    # A PIL image comes back with its size, a URL's image with none (SGLang's contract).
    assert ours["outcomes"][1][0]["returned_size"] == [5, 4]


def test_image_data_and_data_urls_go_through_mmcache(workers, origin, path):
    url = origin.image(path(), png(colour=(3, 3, 3)))
    data_url = "data:image/png;base64," + base64.b64encode(png(colour=(4, 4, 4))).decode()
    items = [{"image_data": url}, {"url": data_url}]
    theirs, ours = both(workers, {"op": "load", "items": items})
    assert [same(o[0]) for o in ours["outcomes"]] == [same(o[0]) for o in theirs["outcomes"]]
    # The URL is a load (origin, then cached); the data URL a decode of its bytes, uncached.
    assert ours["mmcache_loads"] == 1 and ours["mmcache_decodes"] == 2, ours


@pytest.mark.parametrize("status", [400, 403, 404, 429, 500, 503])
def test_http_errors_are_sglangs_http_error(workers, origin, path, status):
    url = origin.set(path(), Route(status, b"no"))
    theirs, ours = both(workers, {"op": "load", "items": [{"url": url}]})
    expected = theirs["outcomes"][0][0]
    assert expected["error"] == "requests.exceptions.HTTPError" and expected["status"] == status
    assert same(ours["outcomes"][0][0]) == same(expected)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_failures_raise_sglangs_exception_types(workers, origin, path):
    loop = path()
    items = [
        {"url": f"http://127.0.0.1:{closed_port()}/x.png"},            # connection refused
        {"url": origin.set(path(), Route(200, b"<html>not an image"))},  # undecodable
        {"url": origin.set(path(), Route(200, b""))},                     # empty body
        {"url": origin.set(loop, Route(302, b"", headers={"Location": loop}))},  # a loop
        {"url": origin.set(path(), Route(200, png()[:40]))},              # truncated
        {"url": "data:image/png;base64,@@@"},                            # bad base64
        {"url": "http://"},                                              # no host
        {"url": "http://exa mple.com/x.png"},                            # a space in the host
        {"url": "http://[::1]:99999/x.png"},                             # a bad port
    ]
    theirs, ours = both(workers, {"op": "load", "items": items})
    got = [same(o[0]) for o in ours["outcomes"]]
    expected = [same(o[0]) for o in theirs["outcomes"]]
    assert got == expected
    assert expected[0]["error"] == "requests.exceptions.ConnectionError"
    assert expected[3]["error"] == "requests.exceptions.TooManyRedirects"
    assert [e["error"] for e in expected[6:]] == ["requests.exceptions.InvalidURL"] * 3


def test_a_slow_origin_times_out_as_sglangs_with_the_default_timeout(workers, origin, path):
    # REQUEST_TIMEOUT is unset in both processes: SGLang's 3 s, the plugin's default too.
    url = origin.set(path(), Route(200, png(), delay=4.5))
    theirs, ours = both(workers, {"op": "load", "items": [{"url": url}]}, timeout=60)
    assert theirs["outcomes"][0][0]["error"] == "requests.exceptions.ReadTimeout"
    assert same(ours["outcomes"][0][0]) == same(theirs["outcomes"][0][0])


def test_sglangs_url_policy_is_honoured(workers, origin, path):
    image = origin.image(path(), png())
    # A redirect from an allowed host to another: SGLang checks every hop, so must we.
    to_other = origin.set(path(), Route(302, b"", headers={
        "Location": image.replace("127.0.0.1", "localhost")}))
    noise = noise_png()  # an image, so a limit not applied would load it
    big = origin.image(path(), noise)
    big_data_url = "data:image/png;base64," + base64.b64encode(noise).decode()
    cases = [
        ({"allowed_media_domains": ["example.com"]}, image, "allowed"),
        ({"allowed_media_domains": ["127.0.0.1"]}, to_other, "allowed"),
        ({"allowed_media_domains": ["127.0.0.1"]}, image, None),
        ({"max_file_size_mb": 1}, big, "download limit"),
        # SGLang's limit is of downloads: an inline image over it loads.
        ({"max_file_size_mb": 1}, big_data_url, None),
    ]
    for security, url, refusal in cases:
        theirs, ours = both(workers, {"op": "load", "items": [{"url": url}],
                                      "security": security})
        expected, got = theirs["outcomes"][0][0], ours["outcomes"][0][0]
        assert same(got) == same(expected), (security, url[:60], expected, got)
        if refusal is None:
            assert "mode" in got, got
        else:
            assert got["error"] == "builtins.ValueError", got
            assert refusal in expected["message"] and refusal in got["message"], (
                expected, got)


def noise_png() -> bytes:
    """A 1.5 MiB PNG (random pixels do not compress): over a 1 MiB limit."""
    buf = io.BytesIO()
    Image.frombytes("RGB", (512, 1024), os.urandom(512 * 1024 * 3)).save(buf, "PNG")
    data = buf.getvalue()
    assert 1024 * 1024 < len(data) < 2 * 1024 * 1024, len(data)
    return data


def test_sixteen_threads_make_one_origin_download_per_url(workers, origin, path):
    _, plugin = workers
    paths = [path() for _ in range(4)]
    urls = [origin.image(p, png(colour=(i, 1, 2)), delay=0.3) for i, p in enumerate(paths)]
    out = plugin({"op": "threads", "workers": 16, "urls": urls * 4})
    images = out["outcomes"]
    assert all("mode" in o for o in images), images
    for i in range(4):  # every load of one URL got the same pixels
        assert len({images[i + 4 * k]["pixels"] for k in range(4)}) == 1
    assert [origin.count(p) for p in paths] == [1, 1, 1, 1]


def test_a_load_does_not_hold_the_gil_while_it_waits(workers, origin, path):
    _, plugin = workers
    url = origin.image(path(), png(), delay=1.0)
    out = plugin({"op": "gil", "url": url})
    assert "mode" in out["outcome"], out
    # A thread counting in Python ran while the load waited a second for the origin.
    assert out["advanced"] > 10_000, out


def test_public_pillow_writes_never_reach_the_cache(workers, origin, path):
    # An RGB JPEG with EXIF orientation 6 (so exif_transpose has work to do), not flat.
    image = Image.linear_gradient("L").resize((40, 24)).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    image.save(buf, "JPEG", exif=exif)
    url = origin.image(path("oriented.jpg"), buf.getvalue())
    theirs, ours = both(workers, {"op": "writes", "url": url})
    assert all(theirs["changed"].values()) and theirs["leaked"] == [], theirs
    # Every write changed the caller's image, and the next load got the cached pixels.
    assert ours["changed"] == theirs["changed"], ours
    assert ours["leaked"] == [], ours


def test_mmcaches_metrics_are_on_sglangs_metrics_route(workers, origin, path):
    _, plugin = workers
    plugin({"op": "load", "items": [{"url": origin.image(path(), png())}], "repeat": 2})
    out = plugin({"op": "metrics"})
    assert out["status"] == 200
    assert out["memory_hits"] >= 1, out
    assert out["sglang_metric"] == 1.0, out  # SGLang's own multiprocess metrics, still there


def test_gpu_decode_gets_its_bytes_through_the_tiers(workers, origin, path):
    own, plugin = workers
    if not plugin({"op": "cuda"})["cuda"]:
        pytest.skip("no CUDA on this machine: SGLang's GPU decode path cannot run here")
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 90)).save(buf, "JPEG")
    data = buf.getvalue()
    p = path("img.jpg")
    cmd = {"op": "load", "items": [{"url": origin.image(p, data)}], "gpu": True, "repeat": 2}
    theirs, ours = own(cmd), plugin(cmd)
    assert ours["outcomes"] == theirs["outcomes"]
    assert "tensor" in ours["outcomes"][0][0]


def test_importing_mmcache_imports_neither_sglang_nor_torch():
    code = ("import sys, mmcache, mmcache.sglang; "
            "bad = [m for m in ('sglang', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]

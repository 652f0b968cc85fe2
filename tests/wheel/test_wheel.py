"""The installed wheel as a user gets it: its own libjpeg-turbo, Pillow's pixels.

`cargo xtask wheel --test` runs this (with tests/python) in a clean venv, inside a mount
namespace where the system's libturbojpeg is masked, with MMCACHE_JPEG_DECODER=libjpeg-turbo
and MMCACHE_EXPECT_LIBJPEG_TURBO naming the version the wheel must bundle.
"""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import mmcache

ROOT = Path(__file__).resolve().parents[2]
MAKE_CASES = ROOT / "tests" / "pillow" / "make_cases.py"


def test_system_libturbojpeg_is_masked():
    # The point of the run: only a library inside the wheel can serve JPEGs.
    for name in ("libturbojpeg.so.0", "libturbojpeg.so"):
        with pytest.raises(OSError):
            ctypes.CDLL(name)


def test_the_extension_is_not_from_the_source_tree():
    native = Path(mmcache._native.__file__).resolve()
    assert "site-packages" in native.parts, native


def test_bundled_libjpeg_turbo_version():
    expected = os.environ["MMCACHE_EXPECT_LIBJPEG_TURBO"]
    mmcache.Loader.from_env()  # builds the loader: selects the decoder, sets the gauge
    text = mmcache.metrics_text()
    line = (
        'mmcache_libjpeg_turbo_info{linkage="vendored",version="' + expected + '"} 1'
    )
    assert line in text, text


def test_python_m_mmcache_doctor_runs_from_the_wheel():
    # A Python worker's image has no `mmcache` binary: the wheel ships the doctor. Its own
    # libjpeg-turbo is found (no exit 12) with the system's masked.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYN_MM_")}
    out = subprocess.run([sys.executable, "-m", "mmcache", "doctor"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "JPEG decoder: libjpeg-turbo" in out.stdout, out.stdout
    assert "in all, before the runtime" in out.stdout, out.stdout
    assert "no problems found" in out.stdout, out.stdout


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("cases")
    subprocess.run([sys.executable, str(MAKE_CASES), str(out)], check=True, timeout=300)
    lines = (out / "manifest.txt").read_text().splitlines()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *a: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield out, lines[0], [line.split() for line in lines[1:]], server.server_address[1]
    server.shutdown()
    server.server_close()


def test_pillow_parity(cases):
    out, versions, manifest, port = cases
    loader = mmcache.Loader.from_env(allow_internal=True)

    async def all_cases():
        differ = []
        for name, file, width, height in manifest:
            pixels = await loader.load(f"http://127.0.0.1:{port}/{file}")
            want = (out / f"{name}.rgb").read_bytes()
            if pixels.shape != (int(height), int(width), 3) or pixels.tobytes() != want:
                differ.append(name)
        return differ

    import asyncio

    differ = asyncio.run(all_cases())
    jpegs = sum(1 for m in manifest if m[1].endswith(".jpg"))
    print(f"{versions}: {len(manifest) - len(differ)} of {len(manifest)} identical "
          f"({jpegs} JPEG)")
    assert jpegs >= 21
    assert not differ, f"{versions}: differ from Pillow: {differ}"

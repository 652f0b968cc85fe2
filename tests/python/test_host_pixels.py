"""The host pixel tier from Python, across real worker processes: one process decodes an image,
the others map its pixels; the numpy arrays and PIL images they get view the mapping without a
copy; the mapping is read-only to the OS, so a stray write through Pillow's internal core object
faults in the writing process and never reaches another."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest
from conftest import pixels_of
from PIL import Image

# A worker: loads each URL of argv through the drop-in (PIL images) and the numpy API, and
# prints what it got: where from, a digest of the pixels, and whether the numpy array's data
# lies in a mapping of a file in the host tier's directory.
WORKER = textwrap.dedent("""
    import asyncio, hashlib, json, os, sys
    import numpy as np
    import mmcache
    from mmcache.dynamo import ImageLoader

    class Policy:
        allow_http = allow_private_ips = True

    def mapped_from(address, directory):
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= address < hi and len(parts) > 5 and parts[5].startswith(directory):
                    return "r" in parts[1] and "w" not in parts[1]
        return False

    async def main():
        loader = mmcache.Loader.from_env()
        drop_in = ImageLoader(url_policy=Policy())
        for url in sys.argv[1:]:
            array, source = await loader.load_detailed(url)
            image = await drop_in.load_image(url)
            address = array.__array_interface__["data"][0]
            print(json.dumps({
                "source": source,
                "numpy": hashlib.sha256(np.ascontiguousarray(array[:, :, :3]).tobytes()).hexdigest(),
                "pil": hashlib.sha256(image.tobytes()).hexdigest(),
                "mapped": mapped_from(address, os.environ["MMCACHE_HOST_PIXELS_DIR"]),
            }))
        await loader.flush_async(10.0)
        await drop_in.loader.flush_async(10.0)

    asyncio.run(main())
""")

# Loads one URL through the drop-in, then writes through Pillow's internal core object.
STRAY_WRITE = textwrap.dedent("""
    import asyncio, sys
    from mmcache.dynamo import ImageLoader

    class Policy:
        allow_http = allow_private_ips = True

    image = asyncio.run(ImageLoader(url_policy=Policy()).load_image(sys.argv[1]))
    print("loaded", flush=True)
    image.im.putpixel((0, 0), (1, 2, 3))
    print("wrote", flush=True)
""")


@pytest.fixture
def host_dir():
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = tempfile.mkdtemp(prefix="mmcache-py-host-", dir=base)
    yield os.path.join(d, "tier")
    shutil.rmtree(d, ignore_errors=True)


def env_for(host_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_MM_", "MMCACHE_"))}
    env.update({"DYN_MM_ALLOW_INTERNAL": "1", "MMCACHE_HOST_PIXELS_DIR": host_dir})
    return env


def run_worker(host_dir: str, urls: list[str]) -> list[dict]:
    out = subprocess.run([sys.executable, "-c", WORKER, *urls], env=env_for(host_dir),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def jpeg(seed: int, size=(320, 240)) -> bytes:
    img = Image.radial_gradient("L").resize(size).convert("RGB")
    img.putpixel((seed % size[0], 0), (seed % 256, 7, 9))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def test_one_process_decodes_the_others_map_the_same_pixels_without_a_copy(origin, path, host_dir):
    bodies = [jpeg(i) for i in range(3)]
    urls = [origin.image(path(f"{i}.jpg"), b) for i, b in enumerate(bodies)]
    first = run_worker(host_dir, urls)
    assert [r["source"] for r in first] == ["origin"] * 3
    second = run_worker(host_dir, urls)
    assert [r["source"] for r in second] == ["host"] * 3
    for body, a, b in zip(bodies, first, second):
        want = hashlib.sha256(pixels_of(body)).hexdigest()
        assert a["pil"] == b["pil"] == want, "Pillow's pixels, mapped or not"
        assert a["numpy"] == b["numpy"] == want
        assert b["mapped"], "the array views a read-only mapping of the tier's entry"
    assert sum(origin.hits.values()) == 3


def test_a_stray_write_through_pillows_core_faults_only_the_writer(origin, path, host_dir):
    body = jpeg(7)
    url = origin.image(path("w.jpg"), body)
    run_worker(host_dir, [url])  # writes the entry
    writer = subprocess.run([sys.executable, "-c", STRAY_WRITE, url], env=env_for(host_dir),
                            capture_output=True, text=True, timeout=120)
    assert "loaded" in writer.stdout, writer.stderr
    assert "wrote" not in writer.stdout, "a write through the mapping must not succeed"
    assert writer.returncode in (-signal.SIGSEGV, -signal.SIGBUS), writer
    # Every other process still maps Pillow's pixels.
    after = run_worker(host_dir, [url])
    assert after[0]["source"] == "host"
    assert after[0]["pil"] == hashlib.sha256(pixels_of(body)).hexdigest()


def test_public_writes_to_a_mapped_image_copy_it_first(origin, path, host_dir, monkeypatch):
    """Every public Pillow write (test_pil's list) on an image that maps the host tier: the
    caller's image changes, no write faults, and the entry the next load maps is intact."""
    from test_pil import drop_in, encoded, leaked_writes

    monkeypatch.setenv("MMCACHE_HOST_PIXELS_DIR", host_dir)
    monkeypatch.setenv("DYN_MM_IMAGE_CACHE_SIZE", "0")  # every load below memory: mapped
    url = origin.image(path(), encoded("png"))
    loader = drop_in()

    async def load_image():
        image = await loader.load_image(url)
        await loader.loader.flush_async(10.0)  # the first load's entry lands before the next
        return image

    first = asyncio.run(load_image())
    again = asyncio.run(load_image())
    assert again.tobytes() == first.tobytes()
    assert leaked_writes(load_image) == []
    assert origin.count(url.removeprefix(origin.base)) == 1, "every later load mapped the entry"

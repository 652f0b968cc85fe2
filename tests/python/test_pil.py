"""The Python boundary: PIL images and numpy arrays over the cached pixels, without a copy,
read-only to their caller; memory hits that complete without suspending.

Run on the newest and the oldest Pillow the package supports (pyproject.toml): the gate runs
this file again in a venv with the oldest.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os

import numpy as np
import pytest
from conftest import png
from PIL import Image, ImageDraw, ImageOps

import mmcache
from mmcache import dynamo
from mmcache.dynamo import ImageLoader


class Policy:
    def __init__(self) -> None:
        self.allow_http = self.allow_private_ips = True


def drop_in(**kw) -> ImageLoader:
    return ImageLoader(url_policy=Policy(), **kw)


def run(coro):
    return asyncio.run(coro)


def encoded(kind: str, size: tuple[int, int] = (37, 23)) -> bytes:
    """Encoded bytes of an image of `kind` whose pixels are not flat."""
    w, h = size
    rgb = Image.frombytes("RGB", size, bytes((x * 7 + y * 3 + c * 50) % 256
                                             for y in range(h) for x in range(w) for c in range(3)))
    out = io.BytesIO()
    if kind == "jpeg":
        rgb.save(out, "JPEG", quality=85)
    elif kind == "png-rgba":
        rgba = rgb.copy()
        rgba.putalpha(Image.linear_gradient("L").resize(size))
        rgba.save(out, "PNG")
    elif kind == "png-grey":
        rgb.convert("L").save(out, "PNG")
    elif kind == "png-palette":
        rgb.convert("P").save(out, "PNG")
    elif kind == "webp":
        rgb.save(out, "WEBP", lossless=True)
    else:
        return png(w, h, seed=5)
    return out.getvalue()


KINDS = ["png", "jpeg", "png-rgba", "png-grey", "png-palette", "webp"]


@pytest.mark.parametrize("kind", KINDS)
def test_pil_images_hold_pillows_pixels_fourth_byte_included(origin, path, kind):
    data = encoded(kind)
    url = origin.image(path(), data)
    want = Image.open(io.BytesIO(data)).convert("RGB")
    loader = drop_in()

    async def both():
        return await loader.load_image(url), await loader.load_image(url)  # miss, memory hit

    for img in run(both()):
        assert img.mode == "RGB" and img.size == want.size
        assert img.tobytes() == want.tobytes()
        assert img.tobytes("raw", "RGBX") == want.tobytes("raw", "RGBX")
        assert img.readonly
    arr = run(loader.loader.load(url))
    assert arr.shape == (want.height, want.width, 3) and arr.dtype == np.uint8
    assert np.array_equal(arr, np.asarray(want))


def test_numpy_arrays_are_read_only_strided_views_in_pillows_layout(origin, path):
    url = origin.image(path(), png(40, 30, seed=2))
    loader = mmcache.Loader(allow_internal=True)
    a = run(loader.load(url))
    b = run(loader.load(url))  # a memory hit: the same pixels
    assert a.shape == (30, 40, 3) and a.strides == (160, 4, 1)
    assert not a.flags.c_contiguous and not a.flags.writeable
    assert np.shares_memory(a, b)
    assert np.ascontiguousarray(a).flags.c_contiguous
    assert isinstance(a.base, mmcache.Pixels) and a.base.layout == "rgbx"

    narrow = mmcache.Loader(allow_internal=True, pixel_layout="rgb")
    c = run(narrow.load(url))
    assert c.flags.c_contiguous and not c.flags.writeable and c.base.layout == "rgb"
    assert np.array_equal(a, c)


def test_the_pixel_layout_variable_is_read_and_checked(monkeypatch):
    monkeypatch.setenv("MMCACHE_PIXEL_LAYOUT", "rgb")
    assert "pixel_layout: Rgb," in repr(mmcache.Loader.from_env())
    monkeypatch.setenv("MMCACHE_PIXEL_LAYOUT", "rgba")
    with pytest.raises(mmcache.ConfigError, match="MMCACHE_PIXEL_LAYOUT"):
        mmcache.Loader.from_env()
    # Blank (a ConfigMap's empty value) is unset: Pillow's layout, not 3 bytes a pixel.
    monkeypatch.setenv("MMCACHE_PIXEL_LAYOUT", "  ")
    assert "pixel_layout: Rgbx," in repr(mmcache.Loader.from_env())
    assert "pixel_layout: Rgbx," in repr(mmcache.Loader(environ={"MMCACHE_PIXEL_LAYOUT": ""}))
    assert mmcache._native.SETTINGS["pixel_layout"] == "MMCACHE_PIXEL_LAYOUT"


def test_decoded_cache_counts_the_bytes_it_holds(origin, path):
    url = origin.image(path(), png(50, 20, seed=3))
    wide, narrow = mmcache.Loader(allow_internal=True), mmcache.Loader(
        allow_internal=True, pixel_layout="rgb")
    run(wide.load(url))
    run(narrow.load(url))
    overhead = 256  # mmcache_decode::ENTRY_OVERHEAD_BYTES
    assert wide.cache_bytes == 50 * 20 * 4 + overhead
    assert narrow.cache_bytes == 50 * 20 * 3 + overhead


def writes(img: Image.Image) -> dict[str, callable]:
    """Every way a caller writes into a PIL image, each setting pixel (2, 2) to (1, 2, 3)."""
    return {
        "putpixel": lambda: img.putpixel((2, 2), (1, 2, 3)),
        "paste": lambda: img.paste((1, 2, 3), (2, 2, 3, 3)),
        "ImageDraw": lambda: ImageDraw.Draw(img).point((2, 2), fill=(1, 2, 3)),
        "load()[x, y] =": lambda: img.load().__setitem__((2, 2), (1, 2, 3)),
        "floodfill": lambda: ImageDraw.floodfill(img, (2, 2), (1, 2, 3)),
        # Pillow's frombytes writes through the image's core, past its read-only flag.
        "frombytes": lambda: img.frombytes(frombytes_with(img, (2, 2), (1, 2, 3))),
        "putdata": lambda: img.putdata(list_with(img, (2, 2), (1, 2, 3))),
    }


def list_with(img: Image.Image, xy: tuple[int, int], color) -> list:
    """The image's pixels, with `xy` set to `color`."""
    raw = img.tobytes()
    data = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    data[xy[1] * img.width + xy[0]] = color
    return data


def frombytes_with(img: Image.Image, xy: tuple[int, int], color) -> bytes:
    """The image's RGB bytes, with `xy` set to `color`."""
    return bytes(b for px in list_with(img, xy, color) for b in px)


def leaked_writes(load_image) -> list[str]:
    """The writes to a returned image that the next load of the same URL sees."""
    leaked = []
    first = run(load_image())
    original = first.getpixel((2, 2))
    assert original != (1, 2, 3)
    for name in writes(first):
        img = run(load_image())
        writes(img)[name]()
        assert img.getpixel((2, 2)) == (1, 2, 3), f"{name} did not write the caller's image"
        if run(load_image()).getpixel((2, 2)) != original:
            leaked.append(name)
    return leaked


def test_writes_to_a_returned_image_never_reach_the_cache(origin, path):
    url = origin.image(path(), encoded("png"))
    loader = drop_in()
    assert leaked_writes(lambda: loader.load_image(url)) == []
    assert origin.count(url.removeprefix(origin.base)) == 1, "every later load was a hit"


def test_resizing_and_transposing_in_place_never_reach_the_cache(origin, path):
    """The writes that replace an image's pixels rather than set some: thumbnail, and
    exif_transpose(in_place=True) (a no-op on the drop-in's images: their info is empty)."""
    url = origin.image(path(), encoded("png"))
    loader = drop_in()
    original = run(loader.load_image(url)).tobytes()
    img = run(loader.load_image(url))
    img.thumbnail((8, 8))
    assert img.size == (8, 5)
    img = run(loader.load_image(url))
    ImageOps.exif_transpose(img, in_place=True)
    again = run(loader.load_image(url))
    assert again.size == (37, 23) and again.tobytes() == original


def test_an_arrow_export_of_a_returned_image_holds_its_pixels(origin, path):
    """Pillow 11.3 to 12.3 crash exporting an image over a foreign buffer: there the export
    is of a copy (this test then kills the process without the fix); 13 exports the image."""
    url = origin.image(path(), encoded("png"))
    loader = drop_in()
    img = run(loader.load_image(url))
    again = Image.fromarrow(img, "RGB", img.size)
    assert again.tobytes() == img.tobytes()
    # Reads through load() see the pixels; a write through it is the caller's alone.
    access = img.load()
    assert access[2, 2] == img.getpixel((2, 2))
    access[2, 2] = (9, 9, 9)
    assert access[2, 2] == (9, 9, 9) and img.getpixel((2, 2)) == (9, 9, 9)
    assert run(loader.load_image(url)).getpixel((2, 2)) != (9, 9, 9)


@pytest.mark.parametrize("how", list(writes(Image.new("RGB", (1, 1)))))
def test_an_earlier_pixel_access_reads_what_a_later_write_wrote(origin, path, how):
    """load() taken before any write, then a write by another route (which gives the image
    pixels of its own): the earlier access reads and writes the image's pixels, not the
    cached ones."""
    url = origin.image(path(), encoded("png"))
    loader = drop_in()
    img = run(loader.load_image(url))
    access = img.load()
    original = access[2, 2]
    writes(img)[how]()
    assert access[2, 2] == (1, 2, 3) == img.getpixel((2, 2))
    access[3, 3] = (4, 5, 6)
    assert img.getpixel((3, 3)) == (4, 5, 6)
    assert run(loader.load_image(url)).getpixel((2, 2)) == original


def test_the_write_check_catches_a_loader_that_shares_its_image(origin, path):
    """The check above can fail: against Dynamo's behaviour (its LRU hands every caller the
    one cached PIL object, DYNAMO-SPEC §2.6) every write leaks."""
    url = origin.image(path(), encoded("png"))
    shared: dict[str, Image.Image] = {}

    async def dynamo_like():
        if url not in shared:
            shared[url] = (await drop_in().load_image(url)).copy()
        return shared[url]

    assert leaked_writes(dynamo_like) == list(writes(Image.new("RGB", (1, 1))))


def test_images_map_the_cached_pixels_without_a_copy(origin, path):
    """Fifty live 2048 x 2048 images of one URL: a copy each would hold 800 MiB."""
    big = Image.radial_gradient("L").resize((2048, 2048)).convert("RGB")
    out = io.BytesIO()
    big.save(out, "JPEG", quality=80)
    url = origin.image(path(), out.getvalue())
    loader = drop_in()

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    async def many():
        first = await loader.load_image(url)
        before = rss()
        held = [await loader.load_image(url) for _ in range(50)]
        return first, held, rss() - before

    first, held, grown = run(many())
    assert all(img.tobytes() == first.tobytes() for img in held[:3])
    assert grown < 64 << 20, f"RSS grew {grown >> 20} MiB for 50 images"


def completes_at_once(coro):
    """The value of a coroutine that finishes at its first step, without suspending (so no
    task, no thread hop, no event-loop turn); fails if it suspends."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the coroutine suspended")


def test_memory_hits_complete_without_suspending(origin, path):
    url = origin.image(path(), png(12, 9, seed=4))
    loader = mmcache.Loader(allow_internal=True)
    drop = drop_in()

    async def first_load_suspends():
        miss = loader.load(url)
        try:
            miss.send(None)
        except StopIteration:
            return False
        miss.close()
        return True

    assert run(first_load_suspends()), "a miss suspends (it waits for the load)"
    run(loader.load(url))
    run(drop.load_image(url))
    assert completes_at_once(loader.load(url)).shape == (9, 12, 3)
    assert completes_at_once(loader.load_detailed(url))[1] == "memory"
    assert completes_at_once(drop.load_image(url)).size == (12, 9)
    assert loader.load_sync(url).shape == (9, 12, 3)

    embeddings = loader.embeddings

    async def compute():
        return np.arange(4, dtype=np.float32)

    run(embeddings.get_or_compute("k", compute, model="m"))
    assert completes_at_once(embeddings.get("k", model="m")).source == "memory"
    assert completes_at_once(embeddings.get_or_compute("k", compute, model="m")).source == "memory"


def test_memory_hits_keep_scoping(origin, path):
    url = origin.image(path(), png(8, 8, seed=6))
    loader = mmcache.Loader(allow_internal=True, session_scoped=True)
    run(loader.load(url, "a"))
    assert completes_at_once(loader.load_detailed(url, "a"))[1] == "memory"
    _, source = run(loader.load_detailed(url, "b"))
    assert source == "origin", "another scope never sees the entry"
    _, source = run(loader.load_detailed(url))
    assert source == "origin", "no scope in scoped mode: no cache"


@pytest.mark.parametrize("why", ["no fromarrow", "rgb layout"])
def test_the_fallback_copies_the_same_pixels_and_says_so(origin, path, monkeypatch, caplog, why):
    data = encoded("jpeg")
    url = origin.image(path(), data)
    if why == "no fromarrow":
        monkeypatch.delattr(Image, "fromarrow")
        loader = drop_in()
    else:
        monkeypatch.setenv("MMCACHE_PIXEL_LAYOUT", "rgb")
        loader = drop_in()
    monkeypatch.setattr(dynamo, "_fallback_logged", False)
    with caplog.at_level(logging.INFO, logger="mmcache.dynamo"):
        img = run(loader.load_image(url))
        run(loader.load_image(url))
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "copies each PIL image" in caplog.records[0].message
    assert img.tobytes() == Image.open(io.BytesIO(data)).convert("RGB").tobytes()
    img.putpixel((2, 2), (1, 2, 3))  # a copy of its own: writable, the cache untouched
    assert run(loader.load_image(url)).getpixel((2, 2)) != (1, 2, 3)

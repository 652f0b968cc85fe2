"""Writes the decode-profile corpus: every image of make_cases.py plus the kinds the engine
profiles care about (EXIF orientations, transparency of every kind, files Pillow refuses,
formats mmcache does not decode), and what Pillow makes of each the way each engine asks.

Usage: make_profile_cases.py OUT_DIR

For every case it writes OUT_DIR/<name>.<ext> and one JSON object per line to
OUT_DIR/manifest.jsonl: {"name", "file", "profiles": {profile: outcome}}, where an outcome is
{"error": "<exception type>"} or {"mode", "width", "height", "pixels": "<file>", ...}: the
pixels as Pillow stores them (RGB as 4 bytes a pixel, LA as L, L, L, A, I;16 little-endian),
read through Pillow's own Arrow export, with "palette" (hex), "transparency" and "exif"/"xmp"
(hex) where Pillow has them, and "converted" for vLLM's profiles (whether the conversion made
a new image: vLLM then hashes io_config with the bytes).

The profiles, each written here in a few lines from the engine's documented behaviour (the
oracle tests in tests/python/test_vllm.py and test_sglang.py run the engines themselves):
- "vllm": vLLM's ImageMediaIO with image_mode="RGB", white background: Image.open,
  ImageOps.exif_transpose (its errors ignored), load, then a transparent image (alpha mode or
  `transparency` in info) converted to RGBA and pasted onto the background through its alpha,
  any other non-RGB image converted to RGB;
- "vllm_bg": the same over the background (0, 128, 255);
- "vllm_none": image_mode=None: transposed, loaded, kept in its mode;
- "sglang": SGLang's load_image on the CPU: Image.open, load, kept as opened.
"""

import ctypes
import io
import json
import os
import struct
import sys
import zlib

from PIL import Image, ImageOps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_cases  # noqa: E402

WHITE = (255, 255, 255)
COLOUR = (0, 128, 255)


class _ArrowArray(ctypes.Structure):
    _fields_ = [("length", ctypes.c_int64), ("null_count", ctypes.c_int64),
                ("offset", ctypes.c_int64), ("n_buffers", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("buffers", ctypes.POINTER(ctypes.c_void_p)),
                ("children", ctypes.c_void_p), ("dictionary", ctypes.c_void_p),
                ("release", ctypes.c_void_p), ("private", ctypes.c_void_p)]


_capsule = ctypes.pythonapi.PyCapsule_GetPointer
_capsule.restype = ctypes.c_void_p
_capsule.argtypes = [ctypes.py_object, ctypes.c_char_p]


def storage(im):
    """The image's pixels as Pillow holds them, through its Arrow export."""
    _, array = im.__arrow_c_array__()
    arr = _ArrowArray.from_address(_capsule(array, b"arrow_array"))
    if arr.n_children:
        arr = ctypes.cast(arr.children, ctypes.POINTER(ctypes.POINTER(_ArrowArray)))[0].contents
        size = 1
    else:
        size = {"I;16": 2, "I": 4, "F": 4}.get(im.mode, 1)
    return ctypes.string_at(arr.buffers[1], arr.length * size)


def transposed(im):
    try:
        return ImageOps.exif_transpose(im)
    except Exception:  # vLLM ignores a transpose that fails
        return im


def transparent(im):
    return im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info


def vllm_rgb(data, background):
    im = Image.open(io.BytesIO(data))
    im = transposed(im)
    im.load()
    if transparent(im):
        rgba = im if im.mode == "RGBA" else im.convert("RGBA")
        out = Image.new("RGB", im.size, background)
        out.paste(rgba, mask=rgba.split()[3])
        return out, True
    if im.mode == "RGB":
        return im, False
    return im.convert("RGB"), True


def vllm_none(data):
    im = Image.open(io.BytesIO(data))
    im = transposed(im)
    im.load()
    return im, False


def sglang(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im, False


PROFILES = {
    "vllm": lambda d: vllm_rgb(d, WHITE),
    "vllm_bg": lambda d: vllm_rgb(d, COLOUR),
    "vllm_none": vllm_none,
    "sglang": sglang,
}


def outcome(out_dir, name, profile, data):
    try:
        im, converted = PROFILES[profile](data)
    except Exception as exc:  # noqa: BLE001 -- every refusal is an outcome
        return {"error": type(exc).__name__}
    pixels = f"{name}.{profile}"
    with open(os.path.join(out_dir, pixels), "wb") as f:
        f.write(storage(im))
    got = {"mode": im.mode, "width": im.width, "height": im.height, "pixels": pixels,
           "converted": converted}
    if im.mode == "P" and im.palette is not None:
        got["palette"] = bytes(im.palette.palette).hex()
    t = im.info.get("transparency")
    if t is not None:
        got["transparency"] = t.hex() if isinstance(t, bytes) else t
    for key in ("exif", "xmp"):
        if isinstance(im.info.get(key), bytes):
            got[key] = im.info[key].hex()
    return got


def chunk(kind, data):
    return make_cases.png_chunk(kind, data)


def with_chunk(png, kind, data, before=b"IDAT"):
    at = png.find(before) - 4
    return png[:at] + chunk(kind, data) + png[at:]


def exif_of(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def profile_cases(add):
    """The kinds only the engine profiles tell apart."""
    base = make_cases.base(37, 23, 12)
    for o in range(1, 9):
        buf = io.BytesIO()
        base.save(buf, format="JPEG", quality=90, exif=exif_of(o))
        add(f"jpeg-orientation-{o}", "jpg", buf.getvalue())
        buf = io.BytesIO()
        base.save(buf, format="PNG", exif=exif_of(o))
        add(f"png-orientation-{o}", "png", buf.getvalue())
    # The orientation in XMP only, and EXIF winning over XMP.
    xmp = b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    buf = io.BytesIO()
    base.save(buf, format="JPEG", quality=90, xmp=xmp)
    add("jpeg-xmp-orientation", "jpg", buf.getvalue())
    buf = io.BytesIO()
    base.save(buf, format="JPEG", quality=90, xmp=xmp, exif=exif_of(3))
    add("jpeg-exif-over-xmp", "jpg", buf.getvalue())
    # A rotated grey and CMYK JPEG; an orientation on a transparent PNG.
    for mode in ("L", "CMYK"):
        buf = io.BytesIO()
        base.convert(mode).save(buf, format="JPEG", quality=90, exif=exif_of(6))
        add(f"jpeg-{mode.lower()}-orientation-6", "jpg", buf.getvalue())
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(base.size))
    buf = io.BytesIO()
    rgba.save(buf, format="PNG", exif=exif_of(8))
    add("png-rgba-orientation-8", "png", buf.getvalue())

    # Transparency of every kind PNG has.
    grey = base.convert("L")
    buf = io.BytesIO()
    grey.save(buf, format="PNG", transparency=grey.getpixel((0, 0)))
    add("png-grey-trns", "png", buf.getvalue())
    one = base.convert("1")
    buf = io.BytesIO()
    one.save(buf, format="PNG", transparency=0)
    add("png-1bit-trns", "png", buf.getvalue())
    pal = base.convert("P", palette=Image.Palette.ADAPTIVE, colors=12)
    alphas = bytes((i * 37) % 256 for i in range(12))
    buf = io.BytesIO()
    pal.save(buf, format="PNG", transparency=alphas)
    add("png-palette-alphas", "png", buf.getvalue())
    buf = io.BytesIO()
    pal.save(buf, format="PNG", transparency=alphas[:5])
    add("png-palette-short-alphas", "png", buf.getvalue())
    for depth in (2, 4):
        levels = 1 << depth
        # Sub-byte rows, packed by hand; the transparent grey is the raw sample 1 (Pillow
        # compares it with the scaled value it stores, so no pixel turns transparent).
        rows = b""
        for y in range(7):
            bits = "".join(format((x + y) % levels, f"0{depth}b") for x in range(13))
            bits += "0" * (-len(bits) % 8)
            rows += b"\0" + int(bits, 2).to_bytes(len(bits) // 8, "big")
        ihdr = struct.pack(">IIBBBBB", 13, 7, depth, 0, 0, 0, 0)
        raw = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"tRNS", struct.pack(">H", 1))
               + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
        add(f"png-grey{depth}-trns", "png", raw)
    # A tRNS after the image data (Pillow reads it when it loads), and one too short.
    buf = io.BytesIO()
    base.save(buf, format="PNG")
    png = buf.getvalue()
    iend = png.rfind(b"IEND") - 4
    add("png-rgb-trns-after-idat", "png",
        png[:iend] + chunk(b"tRNS", struct.pack(">3H", *base.getpixel((1, 1)))) + png[iend:])
    add("png-rgb-trns-short", "png", with_chunk(png, b"tRNS", b"\x00\x01"))
    # XMP in a PNG text chunk (handed to the engine), an animated PNG.
    add("png-xmp-text", "png", with_chunk(png, b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp))
    buf = io.BytesIO()
    base.save(buf, format="PNG", save_all=True, append_images=[make_cases.base(37, 23, 4)])
    add("png-animated", "png", buf.getvalue())
    # WebP with alpha, lossy and lossless, and a GIF with a transparent index.
    for kind, options in (("lossy", dict(quality=80)), ("lossless", dict(lossless=True))):
        buf = io.BytesIO()
        rgba.save(buf, format="WEBP", **options)
        add(f"webp-{kind}-rgba", "webp", buf.getvalue())
    buf = io.BytesIO()
    pal.save(buf, format="GIF", transparency=2)
    add("gif-transparent-index", "gif", buf.getvalue())

    # Formats mmcache does not decode, which Pillow opens.
    for fmt, ext in (("TIFF", "tif"), ("BMP", "bmp")):
        buf = io.BytesIO()
        base.save(buf, format=fmt)
        add(f"other-{ext}", ext, buf.getvalue())

    # Files that are not images, or are broken.
    jpeg = io.BytesIO()
    base.save(jpeg, format="JPEG", quality=90)
    jpeg = jpeg.getvalue()
    add("broken-empty", "bin", b"")
    add("broken-html", "bin", b"<html><body>not found</body></html>")
    add("broken-jpeg-cut", "jpg", jpeg[: len(jpeg) // 2])
    add("broken-jpeg-header-only", "jpg", jpeg[:200])
    add("broken-png-cut", "png", png[: len(png) // 2])
    bad = bytearray(png)
    idat = png.find(b"IDAT") + 8
    bad[idat + 10: idat + 30] = b"\xff" * 20
    add("broken-png-idat", "png", bytes(bad))
    add("broken-gif-header", "gif", b"GIF89a\x01")


def main(out):
    os.makedirs(out, exist_ok=True)
    cases = []

    def add(name, ext, data):
        cases.append((name, ext, data))

    sizes = [(64, 48), (17, 9)]
    saved = []

    def save(name, ext, image, **params):
        buf = io.BytesIO()
        image.save(buf, **params)
        saved.append((name, ext, buf.getvalue()))

    make_cases.constructed_cases(add)
    for w, h in sizes:
        im = make_cases.base(w, h, w * 31 + h)
        rgba = im.copy()
        rgba.putalpha(Image.linear_gradient("L").resize((w, h)))
        pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)
        save(f"jpeg-{w}x{h}", "jpg", im, format="JPEG", quality=85)
        save(f"jpeg-grey-{w}x{h}", "jpg", im.convert("L"), format="JPEG", quality=85)
        save(f"jpeg-cmyk-{w}x{h}", "jpg", im.convert("CMYK"), format="JPEG", quality=85)
        save(f"png-rgb-{w}x{h}", "png", im, format="PNG")
        save(f"png-rgba-{w}x{h}", "png", rgba, format="PNG")
        save(f"png-grey-{w}x{h}", "png", im.convert("L"), format="PNG")
        save(f"png-la-{w}x{h}", "png", rgba.convert("LA"), format="PNG")
        save(f"png-1bit-{w}x{h}", "png", im.convert("1"), format="PNG")
        save(f"png-palette-{w}x{h}", "png", pal, format="PNG")
        save(f"png-palette-trns-{w}x{h}", "png", pal, format="PNG", transparency=3)
        save(f"png-rgb-trns-{w}x{h}", "png", im, format="PNG",
             transparency=im.getpixel((0, 0)))
        grey16 = im.convert("L").point(lambda v: v * 3).convert("I").point(lambda v: v * 97)
        save(f"png-grey16-{w}x{h}", "png", grey16.convert("I;16"), format="PNG")
        save(f"webp-lossy-{w}x{h}", "webp", im, format="WEBP", quality=80)
        save(f"webp-lossless-alpha-{w}x{h}", "webp", rgba, format="WEBP", lossless=True)
        save(f"webp-lossy-alpha-{w}x{h}", "webp", rgba, format="WEBP", quality=80)
        save(f"gif-{w}x{h}", "gif", im, format="GIF")
        save(f"gif-transparent-{w}x{h}", "gif", pal, format="GIF", transparency=3)
    cases.extend(saved)
    profile_cases(add)

    with open(os.path.join(out, "manifest.jsonl"), "w") as manifest:
        for name, ext, data in cases:
            path = os.path.join(out, f"{name}.{ext}")
            with open(path, "wb") as f:
                f.write(data)
            profiles = {p: outcome(out, name, p, data) for p in PROFILES}
            manifest.write(json.dumps({"name": name, "file": f"{name}.{ext}",
                                       "profiles": profiles}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])

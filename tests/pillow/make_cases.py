"""Writes images of every kind the loader decodes, and what Pillow decodes each to.

Usage: make_cases.py OUT_DIR

For every case it writes OUT_DIR/<name>.<ext> (the encoded file), OUT_DIR/<name>.rgb
(the bytes of Pillow's ``Image.open(f).convert("RGB")``, what Dynamo's Python ImageLoader
returns), OUT_DIR/<name>.rgbx (the same image as Pillow holds it, 4 bytes a pixel), and one line ``<name> <file> <width> <height>`` to OUT_DIR/manifest.txt. The
first manifest line names the Pillow and libjpeg-turbo versions. Images are made from a
fixed seed, so every run writes the same files.
"""

import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

from PIL import Image, ImageFile, features

ImageFile.MAXBLOCK = 1 << 24  # progressive JPEGs of the larger sizes need a big buffer


def base(width, height, seed):
    """A photo-like RGB image: gradients, a ring, and noise (fixed seed)."""
    rnd = random.Random(seed)
    r = Image.linear_gradient("L").resize((width, height))
    g = Image.radial_gradient("L").resize((width, height))
    b = Image.effect_noise((width, height), 40).convert("L")
    smooth = Image.merge("RGB", (r, g, b))
    noise = Image.frombytes("RGB", (width, height), rnd.randbytes(width * height * 3))
    return Image.blend(smooth, noise, 0.25)


def png_chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


# Adam7 passes: (x0, y0, dx, dy).
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def raw_png(width, height, depth, colour_type, pixel, interlaced=False, extra=b""):
    """A PNG Pillow cannot write (Adam7, 16-bit colour): `pixel(x, y)` gives a pixel's bytes."""
    passes = ADAM7 if interlaced else [(0, 0, 1, 1)]
    raw = bytearray()
    for x0, y0, dx, dy in passes:
        xs, ys = range(x0, width, dx), range(y0, height, dy)
        if xs and ys:
            for y in ys:
                raw += b"\0" + b"".join(pixel(x, y) for x in xs)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, int(interlaced))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra
            + png_chunk(b"IDAT", zlib.compress(bytes(raw))) + png_chunk(b"IEND", b""))


def lzw_literals(indices, min_code):
    """GIF image data: every index a literal code, a clear code before the table would grow."""
    clear, width = 1 << min_code, min_code + 1
    codes, since_clear = [clear], 0
    for i in indices:
        codes.append(i)
        since_clear += 1
        if since_clear == (1 << width) - clear - 3:
            codes.append(clear)
            since_clear = 0
    codes.append(clear + 1)
    acc = bits = 0
    data = bytearray()
    for c in codes:
        acc |= c << bits
        bits += width
        while bits >= 8:
            data.append(acc & 255)
            acc >>= 8
            bits -= 8
    if bits:
        data.append(acc)
    blocks = b"".join(bytes([len(data[k:k + 255])]) + data[k:k + 255]
                      for k in range(0, len(data), 255))
    return bytes([min_code]) + blocks + b"\0"


def raw_gif(screen, frame, indices, global_palette=None, local_palette=None,
            transparent=None, min_code=2, before_frame=b""):
    """A one-frame GIF with the frame `(left, top, width, height)` anywhere on the screen."""
    def table_flags(palette):
        return 0x80 | ((len(palette) // 3).bit_length() - 2) if palette else 0
    out = b"GIF89a" + struct.pack("<HHBBB", *screen, table_flags(global_palette), 0, 0)
    out += global_palette or b""
    out += before_frame
    if transparent is not None:
        out += b"\x21\xf9\x04\x01\0\0" + bytes([transparent]) + b"\0"
    left, top, w, h = frame
    out += b"\x2c" + struct.pack("<HHHHB", left, top, w, h, table_flags(local_palette))
    out += local_palette or b""
    out += lzw_literals([indices[k % len(indices)] for k in range(w * h)], min_code)
    return out + b";"


def riff_chunks(data):
    """(fourcc, payload) of a RIFF file's chunks."""
    at, out = 12, []
    while at + 8 <= len(data):
        size = struct.unpack("<I", data[at + 4:at + 8])[0]
        out.append((data[at:at + 4], data[at + 8:at + 8 + size]))
        at += 8 + size + (size & 1)
    return out


def riff_chunk(kind, payload):
    return kind + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) & 1)


def animated_webp(canvas, frames):
    """An animated WebP whose frames `(x, y, image, blend, **save options)` are placed by hand
    (an encoder places and flags its own)."""
    def u24(v):
        return struct.pack("<I", v)[:3]
    body = riff_chunk(b"VP8X", bytes([0x12, 0, 0, 0]) + u24(canvas[0] - 1) + u24(canvas[1] - 1))
    body += riff_chunk(b"ANIM", bytes([0, 0, 255, 255, 0, 0]))  # opaque red background hint
    for x, y, image, blend, options in frames:
        buf = io.BytesIO()
        image.save(buf, format="WEBP", **options)
        bitstream = b"".join(riff_chunk(k, d) for k, d in riff_chunks(buf.getvalue())
                             if k in (b"ALPH", b"VP8 ", b"VP8L"))
        flags = 0 if blend else 2
        body += riff_chunk(b"ANMF", u24(x // 2) + u24(y // 2) + u24(image.width - 1)
                           + u24(image.height - 1) + u24(100) + bytes([flags]) + bitstream)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def constructed_cases(add):
    """Files Pillow cannot write but reads (and the web has): interlaced and 16-bit colour
    PNGs, and GIFs whose first frame is offset, reaches past the screen, or uses indices past
    its palette."""
    rnd = random.Random(7)
    w, h = 37, 23
    im = base(w, h, 3)
    deep = [[[rnd.randrange(65536) for _ in range(4)] for _ in range(w)] for _ in range(h)]

    def rgb8(x, y):
        return bytes(im.getpixel((x, y)))

    add("png-interlaced-rgb", "png", raw_png(w, h, 8, 2, rgb8, interlaced=True))
    add("png-interlaced-rgba", "png", raw_png(
        w, h, 8, 6, lambda x, y: rgb8(x, y) + bytes([x * 7 % 256]), interlaced=True))
    add("png-interlaced-grey", "png", raw_png(
        w, h, 8, 0, lambda x, y: bytes([deep[y][x][0] >> 8]), interlaced=True))
    add("png-interlaced-1x9", "png", raw_png(1, 9, 8, 2, lambda x, y: bytes([y * 20, 3, 7]), True))
    add("png-interlaced-9x1", "png", raw_png(9, 1, 8, 2, lambda x, y: bytes([x * 20, 3, 7]), True))
    for interlaced in (False, True):
        tag = "-interlaced" if interlaced else ""
        add(f"png-rgb16{tag}", "png", raw_png(
            w, h, 16, 2, lambda x, y: struct.pack(">3H", *deep[y][x][:3]), interlaced))
        add(f"png-rgba16{tag}", "png", raw_png(
            w, h, 16, 6, lambda x, y: struct.pack(">4H", *deep[y][x]), interlaced))
        add(f"png-la16{tag}", "png", raw_png(
            w, h, 16, 4, lambda x, y: struct.pack(">2H", *deep[y][x][:2]), interlaced))
    add("png-gamma-srgb", "png", raw_png(
        w, h, 8, 2, rgb8, extra=png_chunk(b"gAMA", struct.pack(">I", 45455))
        + png_chunk(b"sRGB", b"\0")))

    four = bytes([10, 20, 30, 200, 0, 0, 0, 200, 0, 0, 0, 200])
    eight = bytes(rnd.randrange(256) for _ in range(24))
    ramp = bytes(v for i in range(4) for v in (i, i, i))
    ramp8 = bytes(v for i in range(8) for v in (i, i, i))
    gifs = {
        "full": ((8, 4), (0, 0, 8, 4), [1, 2, 3], dict(global_palette=four)),
        "offset": ((20, 10), (5, 3, 8, 4), [1, 2, 3], dict(global_palette=four)),
        "offset-transparent": ((20, 10), (5, 3, 8, 4), [1, 2, 3],
                               dict(global_palette=four, transparent=2)),
        "past-screen": ((6, 6), (3, 3, 8, 4), [1, 2, 3], dict(global_palette=four)),
        "past-screen-transparent": ((6, 6), (3, 3, 8, 4), [1, 2, 3],
                                    dict(global_palette=four, transparent=3)),
        "index-past-palette": ((8, 4), (0, 0, 8, 4), [0, 1, 5, 7, 3],
                               dict(global_palette=four, min_code=3)),
        "transparent-past-palette": ((8, 4), (1, 1, 4, 2), [1, 2, 3],
                                     dict(global_palette=four, transparent=9)),
        "local-palette": ((20, 10), (5, 3, 8, 4), [1, 2, 3, 6],
                          dict(global_palette=four, local_palette=eight, min_code=3)),
        "local-palette-only": ((20, 10), (5, 3, 8, 4), [1, 2, 3, 6],
                               dict(local_palette=eight, min_code=3)),
        "no-palette": ((8, 4), (1, 1, 4, 2), [1, 2, 3, 5], dict(min_code=3)),
        "no-palette-transparent": ((8, 4), (1, 1, 4, 2), [1, 2, 3, 5],
                                   dict(transparent=2, min_code=3)),
        "ramp-local-over-global": ((8, 4), (1, 1, 4, 2), [1, 2, 3, 5, 7],
                                   dict(global_palette=four, local_palette=ramp8, min_code=3)),
        "ramp-local-over-global-transparent": (
            (8, 4), (1, 1, 4, 2), [1, 2, 3, 5, 7],
            dict(global_palette=four, local_palette=ramp8, transparent=6, min_code=3)),
        "ramp-local-over-ramp-global": ((8, 4), (1, 1, 4, 2), [1, 2, 3, 5, 7],
                                        dict(global_palette=ramp, local_palette=ramp8,
                                             min_code=3)),
        "unknown-extension": ((8, 4), (0, 0, 8, 4), [1, 2, 3],
                              dict(global_palette=four,
                                   before_frame=b"\x21\x02\x03abc\x00")),
        "comment-and-application": (
            (8, 4), (0, 0, 8, 4), [1, 2, 3],
            dict(global_palette=four, before_frame=b"\x21\xfe\x05hello\x00"
                 b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00")),
        "two-control-extensions": (
            (20, 10), (5, 3, 8, 4), [1, 2, 3],
            dict(global_palette=four, before_frame=b"\x21\xf9\x04\x01\0\0\x02\0"
                 b"\x21\xf9\x04\x00\x0a\0\x00\0")),
        "grey-ramp": ((8, 4), (1, 1, 4, 2), [1, 2, 3, 5], dict(global_palette=ramp, min_code=3)),
        "grey-ramp-transparent": ((8, 4), (1, 1, 4, 2), [1, 2, 3, 5],
                                  dict(global_palette=ramp, transparent=3, min_code=3)),
    }
    for name, (screen, frame, indices, options) in gifs.items():
        add(f"gif-made-{name}", "gif", raw_gif(screen, frame, indices, **options))

    # Animated WebPs whose first frame sits inside the canvas and asks to be blended: libwebp
    # draws a first frame as a key frame, unblended.
    small = base(20, 10, 7).convert("RGBA")
    faded = small.copy()
    faded.putalpha(Image.linear_gradient("L").resize((20, 10)))
    second = base(40, 30, 1)
    for blend in (True, False):
        tag = "blend" if blend else "no-blend"
        for kind, options in [("lossless", dict(lossless=True)), ("lossy", dict(quality=80))]:
            for alpha, image in [("opaque", small), ("alpha", faded)]:
                add(f"webp-made-offset-{kind}-{alpha}-{tag}", "webp", animated_webp(
                    (40, 30), [(8, 6, image, blend, options), (0, 0, second, blend, options)]))


def main(out):
    os.makedirs(out, exist_ok=True)
    cases = []

    def add(name, ext, data):
        cases.append((name, ext, data))

    def save(name, ext, image, **params):
        buf = io.BytesIO()
        image.save(buf, **params)
        add(name, ext, buf.getvalue())

    sizes = [(257, 173), (64, 48), (17, 9), (1, 1)]
    for w, h in sizes:
        im = base(w, h, w * 31 + h)
        for sub, label in [(0, "444"), (1, "422"), (2, "420")]:
            for q in (30, 75, 95):
                for prog in (False, True):
                    kind = "prog" if prog else "base"
                    save(f"jpeg-{label}-q{q}-{kind}-{w}x{h}", "jpg", im,
                         format="JPEG", quality=q, subsampling=sub, progressive=prog)
        save(f"jpeg-grey-{w}x{h}", "jpg", im.convert("L"), format="JPEG", quality=85)
        save(f"jpeg-grey-prog-{w}x{h}", "jpg", im.convert("L"), format="JPEG",
             quality=85, progressive=True)
        save(f"jpeg-cmyk-{w}x{h}", "jpg", im.convert("CMYK"), format="JPEG", quality=85)
        save(f"jpeg-cmyk-prog-{w}x{h}", "jpg", im.convert("CMYK"), format="JPEG",
             quality=90, progressive=True)
        save(f"jpeg-optimized-{w}x{h}", "jpg", im, format="JPEG", quality=80, optimize=True)

        rgba = im.copy()
        rgba.putalpha(Image.linear_gradient("L").resize((w, h)))
        save(f"png-rgb-{w}x{h}", "png", im, format="PNG")
        save(f"png-rgba-{w}x{h}", "png", rgba, format="PNG")
        save(f"png-grey-{w}x{h}", "png", im.convert("L"), format="PNG")
        save(f"png-la-{w}x{h}", "png", rgba.convert("LA"), format="PNG")
        save(f"png-1bit-{w}x{h}", "png", im.convert("1"), format="PNG")
        pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)
        save(f"png-palette-{w}x{h}", "png", pal, format="PNG")
        save(f"png-palette-4bit-{w}x{h}", "png",
             im.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), format="PNG", bits=4)
        save(f"png-palette-trns-{w}x{h}", "png", pal, format="PNG", transparency=3)
        save(f"png-rgb-trns-{w}x{h}", "png", im, format="PNG",
             transparency=im.getpixel((0, 0)))
        grey16 = im.convert("L").point(lambda v: v * 3).convert("I").point(lambda v: v * 97)
        save(f"png-grey16-{w}x{h}", "png", grey16.convert("I;16"), format="PNG")

        save(f"webp-lossy-{w}x{h}", "webp", im, format="WEBP", quality=80)
        save(f"webp-lossless-{w}x{h}", "webp", im, format="WEBP", lossless=True)
        save(f"webp-lossy-alpha-{w}x{h}", "webp", rgba, format="WEBP", quality=80)
        save(f"webp-lossless-alpha-{w}x{h}", "webp", rgba, format="WEBP", lossless=True)
        second = base(w, h, w + h)
        save(f"webp-animated-{w}x{h}", "webp", im, format="WEBP", save_all=True,
             append_images=[second], duration=100, quality=80)

        save(f"gif-{w}x{h}", "gif", im, format="GIF")
        save(f"gif-transparent-{w}x{h}", "gif", pal, format="GIF", transparency=3)
        save(f"gif-animated-{w}x{h}", "gif", im, format="GIF", save_all=True,
             append_images=[second], duration=100)

    # Layouts Pillow cannot write, made by libjpeg-turbo's cjpeg when it is installed
    # (`cargo xtask test` installs it): odd sampling factors, restart markers, non-interleaved
    # scans, arithmetic coding, a custom progressive script.
    if shutil.which("cjpeg"):
        with tempfile.TemporaryDirectory() as tmp:
            ppm = os.path.join(tmp, "in.ppm")
            base(67, 45, 11).save(ppm)
            scans = os.path.join(tmp, "scans.txt")
            with open(scans, "w") as f:
                f.write("0;\n1;\n2;\n")
            variants = {
                "sample-h4v2": ["-sample", "4x2,1x1,1x1"],
                "sample-h1v4": ["-sample", "1x4,1x1,1x1"],
                "sample-h2v1-h1v2": ["-sample", "2x1,1x2,1x1"],
                "sample-h3v1": ["-sample", "3x1,1x1,1x1"],
                "restart-1-block": ["-restart", "1B"],
                "restart-2-rows": ["-restart", "2"],
                "non-interleaved": ["-scans", scans],
                "arithmetic": ["-arithmetic"],
                "arithmetic-progressive": ["-arithmetic", "-progressive"],
                "grey-sample-h2v2": ["-grayscale", "-sample", "2x2"],
                "rgb-colour-space": ["-rgb"],
                "rgb-colour-space-progressive": ["-rgb", "-progressive"],
                "float-dct-q100": ["-quality", "100", "-dct", "float"],
            }
            for name, args in variants.items():
                data = subprocess.run(["cjpeg", "-quality", "85", *args, ppm],
                                      check=True, capture_output=True).stdout
                add(f"jpeg-cjpeg-{name}", "jpg", data)

    constructed_cases(add)

    # An ICC profile does not change the pixels Pillow returns (it does not apply it).
    save("jpeg-icc-profile", "jpg", base(40, 24, 6), format="JPEG", quality=90,
         icc_profile=bytes(range(256)) * 12)
    im = base(37, 23, 3)
    save("gif-interlaced", "gif", im.convert("P", palette=Image.Palette.ADAPTIVE, colors=7),
         format="GIF", interlace=True)
    save("gif-grey", "gif", im.convert("L"), format="GIF")
    save("webp-grey-lossless", "webp", im.convert("L"), format="WEBP", lossless=True)

    # Bytes libjpeg skips with a warning (Pillow decodes the file): junk before markers, a
    # stuffed zero between segments, and data after the end of image.
    for prog in (False, True):
        buf = io.BytesIO()
        base(48, 32, 8).save(buf, format="JPEG", quality=85, progressive=prog)
        good = buf.getvalue()
        sos, dqt = good.find(b"\xff\xda"), good.find(b"\xff\xdb")
        kind = "prog" if prog else "base"
        add(f"jpeg-extraneous-bytes-{kind}", "jpg",
            good[:dqt] + b"\x00\xff\x00" + good[dqt:sos] + b"junk" + good[sos:])
        add(f"jpeg-trailing-data-{kind}", "jpg", good + b"\x00trailing" * 50)

    # EXIF orientation 6 (rotate 90): Pillow's Image.open does not apply it, nor do we.
    exif = Image.Exif()
    exif[0x0112] = 6
    save("jpeg-exif-rotated", "jpg", base(40, 24, 5), format="JPEG", quality=90, exif=exif)

    with open(os.path.join(out, "manifest.txt"), "w") as manifest:
        turbo = features.version("libjpeg_turbo") or "none"
        manifest.write(f"pillow {Image.__version__} libjpeg-turbo {turbo}\n")
        for name, ext, data in cases:
            path = os.path.join(out, f"{name}.{ext}")
            with open(path, "wb") as f:
                f.write(data)
            rgb = Image.open(io.BytesIO(data)).convert("RGB")
            with open(os.path.join(out, f"{name}.rgb"), "wb") as f:
                f.write(rgb.tobytes())
            # Pillow's own storage of the RGB image, 4 bytes a pixel, fourth byte included.
            with open(os.path.join(out, f"{name}.rgbx"), "wb") as f:
                f.write(rgb.tobytes("raw", "RGBX"))
            manifest.write(f"{name} {name}.{ext} {rgb.width} {rgb.height}\n")


if __name__ == "__main__":
    main(sys.argv[1])

"""Writes images of every kind the loader decodes, and what Pillow decodes each to.

Usage: make_cases.py OUT_DIR

For every case it writes OUT_DIR/<name>.<ext> (the encoded file) and OUT_DIR/<name>.rgb
(the bytes of Pillow's ``Image.open(f).convert("RGB")``, what Dynamo's Python ImageLoader
returns), and one line ``<name> <file> <width> <height>`` to OUT_DIR/manifest.txt. The
first manifest line names the Pillow and libjpeg-turbo versions. Images are made from a
fixed seed, so every run writes the same files.
"""

import io
import os
import random
import shutil
import subprocess
import sys
import tempfile

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
            }
            for name, args in variants.items():
                data = subprocess.run(["cjpeg", "-quality", "85", *args, ppm],
                                      check=True, capture_output=True).stdout
                add(f"jpeg-cjpeg-{name}", "jpg", data)

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
            manifest.write(f"{name} {name}.{ext} {rgb.width} {rgb.height}\n")


if __name__ == "__main__":
    main(sys.argv[1])

"""Writes crates/decode/tests/vllm_hashes.tsv: PNG files (hex) and the digest vLLM's own
MultiModalHasher gives their Pillow RGB image, `hash_kwargs("blake3", image=img)`.

vLLM's hasher.py is imported alone, from the wheel unpacked at $VLLM_SRC (the directory that
holds vllm/multimodal/hasher.py); its imports that pull in the rest of vLLM (torch, config,
logger, media) are stubbed: none of them is used for a PIL image.

    pip download --no-deps vllm==0.33.0 -d target/vllm && unzip target/vllm/*.whl \
        'vllm/multimodal/hasher.py' -d target/vllm
    VLLM_SRC=target/vllm target/venv/bin/python tests/vllm/make_vllm_hashes.py [OUT]

OUT defaults to the committed TSV. `cargo xtask test` (and `cargo xtask vllm-hashes`) does all
of this into target/vllm and fails when the regenerated file differs from the committed one.
"""

import importlib.util
import io
import logging
import os
import random
import sys
import types

from PIL import Image


def load_hasher(src):
    class _Unused:  # isinstance() targets that no PIL image is
        pass

    torch = types.ModuleType("torch")
    torch.Tensor = _Unused
    torch.bfloat16 = object()
    config = types.ModuleType("vllm.config.multimodal")
    config.MMHasherAlgorithm = str
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger
    media = types.ModuleType("vllm.multimodal.media")
    media.MediaWithBytes = _Unused
    for name, mod in {
        "torch": torch,
        "vllm": types.ModuleType("vllm"),
        "vllm.config": types.ModuleType("vllm.config"),
        "vllm.config.multimodal": config,
        "vllm.logger": logger,
        "vllm.multimodal": types.ModuleType("vllm.multimodal"),
        "vllm.multimodal.media": media,
    }.items():
        sys.modules.setdefault(name, mod)
    path = os.path.join(src, "vllm", "multimodal", "hasher.py")
    spec = importlib.util.spec_from_file_location("vllm.multimodal.hasher", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MultiModalHasher


def images():
    rng = random.Random(20261201)
    for w, h, mode in [(1, 1, "RGB"), (7, 5, "RGB"), (64, 48, "RGB"), (33, 17, "RGBA"),
                       (16, 9, "L"), (97, 61, "RGB")]:
        img = Image.frombytes(mode, (w, h), bytes(rng.randrange(256) for _ in range(
            w * h * len(mode))))
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        yield buf.getvalue()


def main():
    hasher = load_hasher(os.environ.get("VLLM_SRC", "target/vllm"))
    committed = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "decode", "tests",
                             "vllm_hashes.tsv")
    out = sys.argv[1] if len(sys.argv) > 1 else committed
    with open(out, "w") as f:
        f.write("# png_hex\tvllm_blake3 (vLLM 0.33.0 MultiModalHasher.hash_kwargs('blake3', "
                "image=Image.open(png).convert('RGB')))\n")
        for png in images():
            img = Image.open(io.BytesIO(png)).convert("RGB")
            digest = hasher.hash_kwargs("blake3", image=img)
            f.write(f"{png.hex()}\t{digest}\n")


if __name__ == "__main__":
    main()

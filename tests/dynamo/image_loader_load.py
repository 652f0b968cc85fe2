"""Dynamo's own ImageLoader (from the ai-dynamo 1.6.1 wheel) loads URLs with the DYN_MM_*
environment it is given, as a Python worker of a mixed fleet would.

    python tests/dynamo/image_loader_load.py WHEEL URL...

Prints `image W H` for each URL, then `OP OUTCOME COUNT` for the shared cache's operations as
Dynamo's SharedImageCacheStats recorded them (`get hit 1`, `set success 1`, ...). The wheel's
`dynamo/common` is extracted to a temporary directory and imported without its compiled
runtime: the package `__init__` modules that pull torch and compiled code are replaced by bare
packages, and `dynamo.runtime` by a stub (as crates/python/bench/dynamo_compare.py does).
Needs Pillow, redis-py and aiohttp (tests/requirements.txt).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import types
import zipfile
from collections import Counter
from pathlib import Path


def import_image_loader(wheel: str, root: Path):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("dynamo/common/")])
    common = root / "dynamo" / "common"
    for name in ("dynamo", "dynamo.common", "dynamo.common.multimodal", "dynamo.common.utils",
                 "dynamo.common.configuration", "dynamo.common.configuration.groups"):
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = module
    runtime = types.ModuleType("dynamo.runtime")

    class DistributedRuntime:  # imported by dynamo.common.utils.runtime, never called here
        def __init__(self, *args, **kwargs) -> None:
            raise RuntimeError("stub: Dynamo's compiled runtime is not loaded")

    runtime.DistributedRuntime = DistributedRuntime
    sys.modules["dynamo.runtime"] = runtime
    assert common.is_dir(), f"no dynamo/common in {wheel}"
    from dynamo.common.multimodal.image_loader import ImageLoader

    return ImageLoader


async def main(wheel: str, urls: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="mmcache-dynamo-") as tmp:
        loader = import_image_loader(wheel, Path(tmp))()
        for url in urls:
            width, height = (await loader.load_image(url)).size
            print(f"image {width} {height}")
    ops = Counter()
    stats = loader.shared_image_cache_stats
    if stats is not None:
        for (op, outcome, _bucket), samples in stats.snapshot_and_drain().items():
            ops[f"{op} {outcome}"] += len(samples)
    for op, n in sorted(ops.items()):
        print(f"{op} {n}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))

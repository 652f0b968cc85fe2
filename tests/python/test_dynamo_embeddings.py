"""mmcache.dynamo.EmbeddingCache as Dynamo reads a MultimodalEmbeddingCacheManager: the
wheel's own register_embedding_cache_metrics, imported alone, scrapes it."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import types
import zipfile
from pathlib import Path

import numpy as np

import mmcache
from mmcache.dynamo import CachedEmbedding, EmbeddingCache

ROOT = Path(__file__).resolve().parents[2]
WHEEL = Path(
    os.environ.get(
        "MMCACHE_DYNAMO_WHEEL", ROOT / "target/dynamo-wheel/ai_dynamo-1.6.1-py3-none-any.whl"
    )
)
MODEL = "test-model@max_pixels=1003520"


def dynamo_prometheus(tmp_path: Path) -> types.ModuleType:
    """The wheel's dynamo/common/utils/prometheus.py, without the packages' __init__ files
    and with stubs for the two compiled-runtime modules it imports (the runtime cannot run
    here: the seam is its Endpoint, which only collects the registered callbacks)."""
    assert WHEEL.exists(), f"the ai-dynamo wheel is missing: {WHEEL} (cargo xtask test downloads it)"
    name = "dynamo/common/utils/prometheus.py"
    with zipfile.ZipFile(WHEEL) as wheel:
        source = wheel.read(name)
    path = tmp_path / "prometheus.py"
    path.write_bytes(source)
    saved = {k: v for k, v in sys.modules.items() if k == "dynamo" or k.startswith("dynamo.")}
    for pkg in ("dynamo", "dynamo.common", "dynamo.common.utils"):
        module = types.ModuleType(pkg)
        module.__path__ = []
        sys.modules[pkg] = module
    core = types.ModuleType("dynamo._core")
    core.Endpoint = type("Endpoint", (), {})
    sys.modules["dynamo._core"] = core
    names = types.ModuleType("dynamo.prometheus_names")
    names.labels = types.SimpleNamespace(MODEL="model", COMPONENT="dynamo_component")
    names.name_prefix = types.SimpleNamespace(COMPONENT="dynamo_component")
    names.kvstats = types.SimpleNamespace()
    names.model_info = types.SimpleNamespace()
    sys.modules["dynamo.prometheus_names"] = names
    try:
        spec = importlib.util.spec_from_file_location("dynamo.common.utils.prometheus", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k in [k for k in sys.modules if k == "dynamo" or k.startswith("dynamo.")]:
            del sys.modules[k]
        sys.modules.update(saved)
    return module


class Endpoint:
    """What register_embedding_cache_metrics calls on a Dynamo Endpoint: two registrations."""

    def __init__(self) -> None:
        self.expfmt = []
        self.typed = []
        self.metrics = self

    def register_prometheus_expfmt_callback(self, callback) -> None:
        self.expfmt.append(callback)

    def register_prometheus_typed_callback(self, callback) -> None:
        self.typed.append(callback)


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and 'model="m"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the scrape:\n{text}")


def test_dynamo_metrics_callback_reads_the_wrapper(tmp_path):
    prometheus = dynamo_prometheus(tmp_path)
    loader = mmcache.Loader(embedding_cache_bytes=64 * 1024)
    cache = EmbeddingCache(loader, model=MODEL)
    endpoint = Endpoint()
    prometheus.register_embedding_cache_metrics(endpoint, cache, "m", "encoder")
    assert len(endpoint.expfmt) == 1 and len(endpoint.typed) == 1
    scrape = endpoint.expfmt[0]
    prefix = "dynamo_component_embedding_cache"

    first = scrape()
    assert sample(first, f"{prefix}_hits_total") == 0
    assert sample(first, f"{prefix}_misses_total") == 0
    assert sample(first, f"{prefix}_entries") == 0

    runs = []

    async def encode():
        runs.append(1)
        return CachedEmbedding(np.ones((4, 8), np.float32), image_grid_thw=[[1, 2, 2]])

    async def main():
        a = await cache.get_or_compute("img-1", encode)  # miss, computed
        b = await cache.get_or_compute("img-1", encode)  # hit
        c = await cache.get("img-1")  # hit
        d = await cache.get("img-2")  # miss
        return a, b, c, d

    a, b, c, d = asyncio.run(asyncio.wait_for(main(), 60))
    assert len(runs) == 1
    assert b.image_grid_thw == [[1, 2, 2]] and d is None
    assert b.tensor.__array_interface__["data"][0] == c.tensor.__array_interface__["data"][0]

    second = scrape()
    assert sample(second, f"{prefix}_hits_total") == 2
    assert sample(second, f"{prefix}_misses_total") == 2
    assert sample(second, f"{prefix}_entries") == 1
    assert sample(second, f"{prefix}_current_bytes") > 128
    assert 0 < sample(second, f"{prefix}_utilization") < 1

    # Fill the 64 KiB budget with 8 KiB entries: some are evicted, and the counter moves.
    before = sample(second, f"{prefix}_evictions_total")

    async def fill():
        for i in range(20):
            async def big():
                return np.zeros(2048, np.float32)
            await cache.get_or_compute(f"fill-{i}", big)

    asyncio.run(asyncio.wait_for(fill(), 60))
    third = scrape()
    assert sample(third, f"{prefix}_evictions_total") > before
    assert sample(third, f"{prefix}_misses_total") == 22
    assert sample(third, f"{prefix}_current_bytes") <= 64 * 1024
    assert endpoint.typed[0]() is not None


def test_foreign_metadata_is_served_without_grid_fields():
    """An entry another worker wrote with metadata that is not our JSON (not JSON at all, or
    JSON that is not an object) still serves its tensor: the shim never fails on it."""
    loader = mmcache.Loader()
    cache = EmbeddingCache(loader, model=MODEL)
    tensor = np.ones((2, 3), dtype=np.float32)

    async def main():
        for key, metadata in [("raw", b"\xff\x00 not json"), ("list", b"[1, 2]")]:

            async def foreign():
                return tensor, metadata

            # Written through the plain API, as a worker of another kind would.
            await loader.embeddings.get_or_compute(key, foreign, model=MODEL)
            got = await cache.get(key)
            assert got is not None
            assert np.array_equal(got.tensor, tensor)
            assert got.image_grid_thw is None

    asyncio.run(asyncio.wait_for(main(), 60))

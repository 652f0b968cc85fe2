"""A Dynamo-shaped embedding cache over mmcache's (``loader.embeddings``).

Dynamo 1.6.1 keeps encoder outputs in ``dynamo.common.memory.MultimodalEmbeddingCacheManager``
(an LRU in Python) behind ``dynamo.common.multimodal.async_encoder_cache.AsyncEncoderCache``
(``get_or_compute`` with coalescing). :class:`EmbeddingCache` offers both surfaces over the
Rust cache::

    from mmcache.dynamo import EmbeddingCache
    cache = EmbeddingCache(loader, model="Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520")
    entry = await cache.get_or_compute(key, encode)        # as AsyncEncoderCache's
    register_embedding_cache_metrics(endpoint, cache, model_name, component_name)  # Dynamo's

``stats`` has the keys Dynamo's metrics callback reads (``entries``, ``current_bytes``,
``capacity_bytes``, ``utilization``, ``hits``, ``misses``, ``evictions``, ``hit_rate``; plus
``in_flight``). Hits and misses count this object's lookups (as Dynamo's manager counts its
own); ``evictions`` is the process's memory-tier eviction counter (one loader per worker).

Differences: ``tensor`` is a read-only numpy array over the cached bytes, which torch does not
honour: ``torch.from_numpy``, ``torch.as_tensor`` and ``torch.from_dlpack`` of it give a
writable tensor over the cache's memory, so write only to ``torch.tensor(entry.tensor)`` (a
copy; docs/embeddings.md, "What a consumer gets"); the other ``CachedEmbedding``
fields travel as JSON in the entry's metadata; the cache is thread-safe and shared by every
event loop of the process; a compute runs once per key per process even across loops.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from . import _native

_GRID_FIELDS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts", "video_timestamps")
_EVICTIONS = re.compile(
    r'^mmcache_embedding_cache_evictions_total\{[^}]*tier="memory"[^}]*\} (\S+)$', re.M
)


class CachedEmbedding(NamedTuple):
    """Dynamo's ``CachedEmbedding`` fields; ``tensor`` is a read-only numpy array."""

    tensor: Any
    image_grid_thw: list | None = None
    video_grid_thw: list | None = None
    second_per_grid_ts: float | None = None
    video_timestamps: list[float] | None = None


def _pack(value: Any) -> Any:
    """A compute's result as what ``loader.embeddings`` takes: an array, or (array, JSON of
    the grid fields) for anything with a ``tensor`` attribute (Dynamo's CachedEmbedding)."""
    tensor = getattr(value, "tensor", None)
    if tensor is None:
        return value
    fields = {f: getattr(value, f, None) for f in _GRID_FIELDS}
    fields = {k: v for k, v in fields.items() if v is not None}
    if not fields:
        return tensor
    return tensor, json.dumps(fields, separators=(",", ":")).encode()


def _unpack(entry: Any) -> CachedEmbedding:
    # Metadata another worker wrote (a Rust one, say) need not be our JSON: an entry whose
    # metadata is not a JSON object of grid fields is served without them, never an error.
    try:
        fields = json.loads(entry.metadata) if entry.metadata else {}
    except (ValueError, UnicodeDecodeError):
        fields = {}
    if not isinstance(fields, dict):
        fields = {}
    return CachedEmbedding(entry.array, **{k: fields.get(k) for k in _GRID_FIELDS})


class EmbeddingCache:
    """``MultimodalEmbeddingCacheManager`` + ``AsyncEncoderCache`` over ``loader.embeddings``:
    keys are the caller's (Dynamo's content hashes), under one ``model`` id and ``scope``."""

    def __init__(self, loader: Any, *, model: str, scope: str | None = None) -> None:
        self._embeddings = loader.embeddings
        self._model = model
        self._scope = scope
        self._hits = 0
        self._misses = 0

    async def get_or_compute(
        self, key: str, compute_fn: Callable[[], Awaitable[Any]]
    ) -> CachedEmbedding:
        """The cached entry of ``key``, else the result of ``await compute_fn()`` (once per
        key per process; concurrent callers join). ``compute_fn`` returns a
        ``CachedEmbedding``-like object (``.tensor``) or an array."""

        async def compute() -> Any:
            return _pack(await compute_fn())

        entry = await self._embeddings.get_or_compute(
            key, compute, model=self._model, scope=self._scope
        )
        if entry.source == "memory":
            self._hits += 1
        else:
            self._misses += 1
        return _unpack(entry)

    async def get(self, key: str) -> CachedEmbedding | None:
        """The cached entry of ``key``, or ``None``."""
        entry = await self._embeddings.get(key, model=self._model, scope=self._scope)
        if entry is None:
            self._misses += 1
            return None
        self._hits += 1
        return _unpack(entry)

    @property
    def stats(self) -> dict:
        """The statistics Dynamo's ``register_embedding_cache_metrics`` reads."""
        native = self._embeddings.stats
        total = self._hits + self._misses
        capacity = native["capacity_bytes"]
        match = _EVICTIONS.search(_native.metrics_text())
        return {
            "entries": native["entries"],
            "current_bytes": native["current_bytes"],
            "capacity_bytes": capacity,
            "utilization": native["current_bytes"] / capacity if capacity > 0 else 0,
            "hits": self._hits,
            "misses": self._misses,
            "evictions": int(float(match.group(1))) if match else 0,
            "hit_rate": self._hits / total if total > 0 else 0.0,
            "in_flight": native["inflight"],
        }

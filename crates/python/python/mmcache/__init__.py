"""mmcache: image URLs to pixels for multimodal inference workers, through a decoded-image
cache, in-flight joins, a host disk tier, a fleet-wide shared cache (Redis Cluster, Valkey,
Dragonfly) and the origin, all in Rust.

>>> import asyncio, mmcache
>>> loader = mmcache.Loader.from_env()                  # DYN_MM_* / MMCACHE_* variables
>>> pixels = asyncio.run(loader.load(url))              # doctest: +SKIP
>>> pixels.shape, pixels.dtype, pixels.flags.writeable  # doctest: +SKIP
((480, 640, 3), dtype('uint8'), False)

``mmcache.dynamo.ImageLoader`` is a drop-in for Dynamo's ``ImageLoader``.
"""

from __future__ import annotations

from typing import Any

import numpy

from . import _native, errors
from ._native import Pixels, __version__, metrics_text, scope_from_headers
from .embeddings import ContentKey, Embedding, Embeddings, content_key
from .errors import (
    BatchError,
    BodyTooLargeError,
    BusyError,
    ConfigError,
    DecodeBusyError,
    DownloadBudgetError,
    DownloadBusyError,
    EmbeddingComputeError,
    EmbeddingDeviceError,
    EmbeddingError,
    EmbeddingTimeoutError,
    EmbeddingTooLargeError,
    EmbeddingTypeError,
    EmptyBodyError,
    ImageTooLargeError,
    InvalidEmbeddingError,
    InvalidDataUrlError,
    LoadTimeoutError,
    MmcacheError,
    OriginConnectionError,
    OriginStatusError,
    OriginTimeoutError,
    TooLargeError,
    UnsupportedImageError,
    UrlPolicyError,
)

__all__ = [
    "BatchError",
    "BodyTooLargeError",
    "BusyError",
    "ConfigError",
    "ContentKey",
    "DecodeBusyError",
    "DownloadBudgetError",
    "DownloadBusyError",
    "Embedding",
    "EmbeddingComputeError",
    "EmbeddingDeviceError",
    "EmbeddingError",
    "EmbeddingTimeoutError",
    "EmbeddingTooLargeError",
    "EmbeddingTypeError",
    "Embeddings",
    "EmptyBodyError",
    "ImageTooLargeError",
    "InvalidDataUrlError",
    "InvalidEmbeddingError",
    "LoadTimeoutError",
    "Loader",
    "MmcacheError",
    "OriginConnectionError",
    "OriginStatusError",
    "OriginTimeoutError",
    "Pixels",
    "TooLargeError",
    "UnsupportedImageError",
    "UrlPolicyError",
    "__version__",
    "content_key",
    "errors",
    "metrics_text",
    "scope_from_headers",
]


class Loader(_native.Loader):
    """Loads image URLs through every cache layer: the decoded-image cache, a load in flight,
    the host's disk tier, the shared cache, the origin; all in Rust, without the GIL.

    ``Loader(**settings)`` starts from the defaults (the environment is not read);
    ``Loader.from_env(**settings)`` reads the ``DYN_MM_*``/``MMCACHE_*`` variables first, then
    applies ``settings``. Settings (all optional): one keyword per environment variable, e.g.
    ``shared_cache_url``, ``shared_cache_ttl_secs``, ``shared_cache_hedge``,
    ``shared_cache_breaker_failures``, ``disk_cache_dir``, ``jpeg_decoder``,
    ``image_formats`` (``"jpeg,png,webp"`` or a list), ``max_file_size_bytes``;
    ``mmcache._native.SETTINGS`` maps every keyword to its variable and
    docs/configuration.md lists them with their types.
    A bad value raises :class:`ConfigError` (a ``ValueError``) naming it.

    Loads return a read-only ``numpy.ndarray`` of shape (H, W, 3), dtype uint8, viewing the
    decoded pixels without a copy (a cache hit shares the cached pixels). The loader keeps
    Pillow's layout, 4 bytes a pixel (``pixel_layout="rgbx"``, the default here), so the
    array is a strided view (strides ``(4 * W, 4, 1)``), not C-contiguous:
    ``numpy.ascontiguousarray`` copies it to 3 bytes a pixel; ``pixel_layout="rgb"`` keeps
    3 bytes a pixel and gives C-contiguous arrays (then ``mmcache.dynamo`` copies its PIL
    images). Failures raise a
    :class:`MmcacheError` subclass with ``http_status``. Cancelling an awaiting task never
    cancels the load other callers wait for; the load still fills the caches.

    A loader belongs to the process that built it: after ``fork`` build a new one in the child
    (a loader from the parent raises ``RuntimeError`` there).
    """

    @classmethod
    def from_env(cls, **settings: Any) -> "Loader":
        """A loader configured by the environment, then by ``settings``."""
        return cls(env=True, **settings)

    async def load(self, url: str, scope: str | None = None) -> numpy.ndarray:
        """The image at ``url``, within the session ``scope`` (used when session scoping is
        on; ``None`` or blank: no scope). A memory hit returns without suspending: no task,
        no thread hop."""
        hit = self._cached(url, scope)
        if hit is not None:
            return hit
        return await super().load(url, scope)

    async def load_detailed(self, url: str, scope: str | None = None) -> tuple[numpy.ndarray, str]:
        """``(array, source)``: source is ``"memory"``, ``"inflight"``, ``"host"``, ``"disk"``,
        ``"shared"``, ``"origin"`` or ``"data"``."""
        hit = self._cached(url, scope)
        if hit is not None:
            return hit, "memory"
        return await super().load_detailed(url, scope)

    async def load_batch(self, urls: list[str], scope: str | None = None) -> list[numpy.ndarray]:
        """Every URL, loaded concurrently, in order. A failure raises the first error with an
        origin status, else the first URL-policy refusal (scheme, address, allowlist; a redirect
        error, though a :class:`UrlPolicyError`, is not one), else the only error, else a
        :class:`BatchError` listing ``(index, error)`` for each: the Rust loader's rule, plus
        the only error raised as itself."""
        return await super().load_batch(urls, scope)

    @property
    def embeddings(self) -> Embeddings:
        """The embedding caches: ``await loader.embeddings.get_or_compute(key, compute,
        model=...)`` (see :mod:`mmcache.embeddings`)."""
        return Embeddings(super().embeddings)

    async def flush_async(self, timeout_secs: float = 5.0) -> bool:
        """Waits up to ``timeout_secs`` for queued shared-cache writes; whether all landed."""
        return await super().flush_async(timeout_secs)

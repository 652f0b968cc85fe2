"""A drop-in for Dynamo's Python ``ImageLoader`` (``dynamo.common.multimodal.image_loader``).

Switch a worker by changing one import::

    from mmcache.dynamo import ImageLoader   # was: from dynamo.common.multimodal.image_loader ...

Same constructor arguments, methods, return type (``PIL.Image.Image``, mode RGB), exceptions
and HTTP statuses; the same ``DYN_MM_*`` variables; the same shared-cache keys and values, so
a fleet can mix both. Inside Dynamo the exceptions are Dynamo's own classes
(``dynamo.common.http.HttpStatusError``, ``UrlValidationError``); elsewhere this module
defines classes of the same names and attributes. Every raised exception also carries
``http_status``.

Differences, all deliberate (listed in crates/python/README.md): a memory hit returns a new
``PIL.Image`` over the cached pixels (Dynamo returns one shared, mutable object), mapped
without a copy and read-only to the caller: a write (``putpixel``, ``paste``, ``ImageDraw``,
``image.load()[x, y] = ...``) copies the image's pixels first, so it changes that image only,
never the cache (see :func:`pil_image`); decoding,
caching and HTTP run in Rust without the GIL; the local cache is bounded in bytes as well as
in entries; a shared-cache write never holds a load past the hedge budget; images over the
pixel limit are 413; ``enable_frontend_decoding=True`` (NIXL) is refused.

Metrics: ``shared_image_cache_stats`` is, as in Dynamo, ``None`` when the shared cache is off
and otherwise a buffer whose ``snapshot_and_drain()`` gives the latency samples of the shared
cache's GETs and SETs, ``{(operation, outcome, size_bucket): [seconds, ...]}``, so Dynamo's
``register_image_loader_metrics`` fills its histograms on the worker's ``/metrics``. Labels
are Dynamo's; what Dynamo has no name for (lease commands, deletes, operations skipped by a
breaker or a size cap) is not sampled, and a GET of an entry over the read cap is a ``hit``
of size ``unknown`` (docs/dynamo-differences.md). The same histograms are also in
``mmcache.metrics_text()``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from PIL import Image

from . import _native
from . import errors as _errors
from . import Loader
from ._pil import rgb_image

logger = logging.getLogger(__name__)

URL_VARIANT_KEY: Final = "Url"
DECODED_VARIANT_KEY: Final = "Decoded"
UUID_ONLY_VARIANT_KEY: Final = "UuidOnly"
IMAGE_CACHE_SCOPE_KEY: Final = "image_cache_scope"

try:  # Inside Dynamo: raise its own classes, so existing `except` clauses keep working.
    from dynamo.common.http import (  # type: ignore[import-not-found]
        HttpConnectionError,
        HttpError,
        HttpStatusError,
        HttpTimeoutError,
    )
    from dynamo.common.http.url_validator import (  # type: ignore[import-not-found]
        UrlValidationError,
    )
except Exception:  # Dynamo is absent (or only partly importable): classes of the same shape.

    class HttpError(Exception):  # type: ignore[no-redef]
        """Base class of HTTP fetch failures (as ``dynamo.common.http.HttpError``)."""

    class HttpTimeoutError(HttpError):  # type: ignore[no-redef]
        """A timeout (as Dynamo's; loads report it as ``HttpStatusError`` 408)."""

    class HttpConnectionError(HttpError):  # type: ignore[no-redef]
        """A network failure (as Dynamo's; loads report it as ``HttpStatusError`` 400)."""

    class HttpStatusError(HttpError):  # type: ignore[no-redef]
        """A failed load with an HTTP status: ``status``, ``message``, ``url``."""

        def __init__(self, status: int, message: str, url: str) -> None:
            super().__init__(f"HTTP {status} for {_describe(url)}: {message}")
            self.status = status
            self.message = message
            self.url = url

    class UrlValidationError(ValueError):  # type: ignore[no-redef]
        """A URL refused by the URL policy or a size limit (a ``ValueError``)."""


def _describe(url: str) -> str:
    """A URL for messages and logs, without what may be secret: a data URL's payload, the
    user and password, the query (signed URLs carry tokens there) and the fragment. The full
    URL stays in ``HttpStatusError.url``, as in Dynamo."""
    if url[:5].lower() == "data:":
        return f"data URL ({len(url)} characters)"
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        shown = f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else "")
    except ValueError:
        shown = "unparsable URL"
    return repr(shown[:256])


def _dynamo_environ() -> dict[str, str]:
    """The process environment, read the way Dynamo reads it where Dynamo is more lenient than
    mmcache's strict parsing: a bad ``DYN_MM_MAX_FILE_SIZE_MB`` warns and uses the default,
    ``DYN_MM_ALLOW_INTERNAL`` is on only for ``1``, and ``DYN_MM_IMAGE_CACHE_SIZE`` is the
    ``cache_size`` argument's default (a value of 0 or less turns the cache off)."""
    env = {}
    for name, value in os.environ.items():
        if not name.startswith(("DYN_MM_", "MMCACHE_")):
            continue  # only what mmcache reads: other variables may not even be valid UTF-8
        try:
            value.encode()
        except UnicodeEncodeError:
            continue
        env[name] = value
    raw = env.get("DYN_MM_MAX_FILE_SIZE_MB")
    if raw is not None and raw.strip():
        try:
            mib = int(raw)  # Python's int(): " 64 ", "+64" and "6_4" are all 64, as in Dynamo
        except ValueError:
            mib = 0
        if mib > 0:
            env["DYN_MM_MAX_FILE_SIZE_MB"] = str(min(mib, 1 << 40))
        else:
            logger.warning("Ignoring invalid DYN_MM_MAX_FILE_SIZE_MB=%r; using 64 MB", raw)
            del env["DYN_MM_MAX_FILE_SIZE_MB"]
    env["DYN_MM_ALLOW_INTERNAL"] = "1" if env.get("DYN_MM_ALLOW_INTERNAL") == "1" else "0"
    env.pop("DYN_MM_IMAGE_CACHE_SIZE", None)
    return env


def image_cache_scope_from_request(request: Mapping[str, Any]) -> str | None:
    """The request's ``image_cache_scope`` when it is a non-blank string, stripped."""
    scope = request.get(IMAGE_CACHE_SCOPE_KEY)
    if not isinstance(scope, str):
        return None
    return scope.strip() or None


def _http_timeout(default: float) -> float:
    """``DYN_MM_HTTP_TIMEOUT`` overrides the constructor's timeout when set and valid."""
    raw = os.environ.get("DYN_MM_HTTP_TIMEOUT", "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        logger.warning("Ignoring invalid DYN_MM_HTTP_TIMEOUT=%r; using %ss", raw, default)
        return default
    return value


_fallback_logged = False


def pil_image(pixels: _native.Pixels) -> Image.Image:
    """A ``PIL.Image`` (mode ``RGB``) of an image's pixels, mapped without a copy and read-only
    to its caller where Pillow can map them (see :func:`mmcache._pil.rgb_image`); otherwise a
    copy of the same pixels, said once in the log."""
    global _fallback_logged
    image, copied_because = rgb_image(pixels)
    if copied_because is not None and not _fallback_logged:
        _fallback_logged = True
        logger.info("mmcache.dynamo copies each PIL image: %s", copied_because)
    return image


def _with_status(exc: BaseException, status: int) -> BaseException:
    try:
        exc.http_status = status  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return exc


class ImageLoader:
    """Dynamo's ``ImageLoader`` API over the mmcache loader."""

    CACHE_SIZE_MAXIMUM = int(os.environ.get("DYN_MM_IMAGE_CACHE_SIZE", "8"))

    def __init__(
        self,
        cache_size: int = CACHE_SIZE_MAXIMUM,
        http_timeout: float = 30.0,
        enable_frontend_decoding: bool = False,
        url_policy: Any = None,
        max_bytes: int | None = None,
        session_scoped_cache: bool | None = None,
    ) -> None:
        if enable_frontend_decoding:
            raise ValueError(
                "mmcache.dynamo.ImageLoader does not support enable_frontend_decoding=True "
                "(NIXL transfer of frontend-decoded images); use Dynamo's ImageLoader there"
            )
        self._http_timeout = _http_timeout(float(http_timeout))
        settings: dict[str, Any] = {
            # Dynamo's cache counts images; zero or less turns it off.
            "decoded_cache_entries": max(int(cache_size), 0),
            "origin_timeout_secs": self._http_timeout,
        }
        environ = _dynamo_environ()
        if not environ.get("MMCACHE_IMAGE_FORMATS", "").strip():
            # Dynamo opens JPEG, PNG and WebP only: a GIF is 415 there, so it is here unless
            # the operator opts in with MMCACHE_IMAGE_FORMATS.
            settings["image_formats"] = "jpeg,png,webp"
        if url_policy is not None:
            allow_http = bool(getattr(url_policy, "allow_http", False))
            allow_private = bool(getattr(url_policy, "allow_private_ips", False))
            if allow_http != allow_private:
                raise ValueError(
                    "mmcache supports url_policy with allow_http == allow_private_ips only "
                    f"(got allow_http={allow_http}, allow_private_ips={allow_private})"
                )
            settings["allow_internal"] = allow_http
        if max_bytes is not None:
            if int(max_bytes) <= 0:
                raise ValueError(f"max_bytes must be positive, got {max_bytes!r}")
            settings["max_file_size_bytes"] = int(max_bytes)
        if session_scoped_cache is not None:
            settings["session_scoped"] = bool(session_scoped_cache)
        try:
            self._loader = Loader(environ=environ, **settings)
        except _errors.ConfigError as exc:
            raise ValueError(str(exc)) from None
        # Sampling starts with the loader, as Dynamo's buffer does with its cache.
        self._shared_stats = self._loader.shared_cache_stats()

    @property
    def cache_entries(self) -> int:
        """Images in the local decoded cache (read by metrics export)."""
        return self._loader.cache_entries

    @property
    def session_scoped_cache(self) -> bool:
        """Whether every cache key needs a request scope."""
        return self._loader.session_scoped

    @property
    def shared_image_cache_stats(self) -> _native.SharedCacheStats | None:
        """Latency samples of the shared encoded-image cache (``snapshot_and_drain()``, read
        by Dynamo's metrics export); ``None`` when the shared cache is off."""
        return self._shared_stats

    @property
    def loader(self) -> Loader:
        """The underlying ``mmcache.Loader`` (numpy arrays, sources, ``flush``)."""
        return self._loader

    async def load_image(self, image_url: str, *, cache_scope: str | None = None) -> Image.Image:
        """Loads one image URL (https, or http when internal URLs are allowed, or data).

        A memory hit returns without suspending (no task, no thread hop); every image is a
        read-only view of the cached pixels (see :func:`pil_image`)."""
        # Only http(s) URLs are ever cached, so a hit needs no scheme check.
        pixels = self._loader._cached_pixels(image_url, cache_scope)
        if pixels is None:
            if urlsplit(image_url).scheme in ("", "file"):
                raise ValueError("Invalid image source scheme: local file access is not allowed")
            try:
                pixels = await self._loader._load_pixels(image_url, cache_scope)
            except _errors.MmcacheError as exc:
                out = self._translate(exc, image_url)
                if out is exc:
                    raise
                raise out from exc
        return pil_image(pixels)

    async def load_image_batch(
        self,
        image_mm_items: list[dict[str, Any]],
        *,
        preserve_uuid_slots: bool = False,
        cache_scope: str | None = None,
    ) -> list[Any]:
        """Loads a batch of multimodal items concurrently, keeping slots in order.

        ``{"Url": url}`` loads; ``{"UuidOnly": ...}`` keeps a ``None`` slot when
        ``preserve_uuid_slots``; ``{"Decoded": ...}`` needs frontend decoding (refused). On
        failure raises the first ``HttpStatusError``, else the first ``UrlValidationError``,
        else the first ``ValueError``, else one ``Exception`` listing every failure.
        """
        loads = []
        slots: list[int | None] = []
        for idx, item in enumerate(image_mm_items):
            if isinstance(item, dict) and URL_VARIANT_KEY in item:
                slots.append(len(loads))
                loads.append(self.load_image(item[URL_VARIANT_KEY], cache_scope=cache_scope))
            elif isinstance(item, dict) and DECODED_VARIANT_KEY in item:
                logger.error(
                    "Received Decoded multimodal data but enable_frontend_decoding=False."
                )
                _close(loads)
                raise ValueError("Could not load decoded media from frontend")
            elif isinstance(item, dict) and UUID_ONLY_VARIANT_KEY in item:
                if not preserve_uuid_slots:
                    _close(loads)
                    raise ValueError("UUID-only image slots require preserve_uuid_slots=True")
                slots.append(None)
            else:
                _close(loads)
                raise ValueError(
                    f"Invalid image multimodal item at index {idx}. "
                    "Expected dict with 'Url', 'Decoded', or 'UuidOnly' key."
                )
        results = await asyncio.gather(*loads, return_exceptions=True)
        images: list[Any] = []
        failures = ""
        first: dict[type, BaseException] = {}
        for item, slot in zip(image_mm_items, slots):
            if slot is None:
                images.append(None)
                continue
            result = results[slot]
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation stays cancellation
                source = str(item.get(URL_VARIANT_KEY, "decoded"))[:80]
                logger.error("Failed to load image from %s...: %s", source, result)
                failures += f"Failed to load image from {source}...: {result}\n"
                for kind in (HttpStatusError, UrlValidationError, ValueError):
                    if isinstance(result, kind):
                        first.setdefault(kind, result)
                        break
                continue
            images.append(result)
        for kind in (HttpStatusError, UrlValidationError, ValueError):
            if kind in first:
                raise first[kind]
        if failures:
            raise Exception(failures)
        return images

    def _translate(self, exc: _errors.MmcacheError, url: str) -> BaseException:
        """The exception Dynamo raises for the same failure, with ``http_status``."""
        status = exc.http_status
        if isinstance(exc, _errors.OriginStatusError):
            out: BaseException = HttpStatusError(status, str(exc), url)
        elif isinstance(exc, _errors.OriginTimeoutError):
            out = HttpStatusError(
                408,
                f"Timeout loading image: {_describe(url)} (timeout={self._http_timeout}s)",
                url,
            )
        elif isinstance(exc, _errors.OriginConnectionError):
            out = HttpStatusError(400, f"Connection error loading image: {_describe(url)}: {exc}", url)
        elif isinstance(exc, _errors.UnsupportedImageError):
            out = HttpStatusError(415, "Unsupported Media Type", url)
        elif isinstance(exc, (_errors.UrlPolicyError, _errors.BodyTooLargeError)):
            out = UrlValidationError(str(exc))
        elif isinstance(exc, _errors.EmptyBodyError):
            out = ValueError(
                f"Failed to load image: {_describe(url)}: Empty response content from image URL"
            )
        elif isinstance(exc, _errors.InvalidDataUrlError):
            reason = {
                "not_image": "Data URL must be an image type",
                "not_base64": "Data URL must be base64 encoded",
                "bad_base64": "Invalid base64 encoding",
            }.get(getattr(exc, "reason", ""), str(exc))
            out = ValueError(f"Failed to decoding image: {_describe(url)}: {reason}")
        elif isinstance(
            exc, (_errors.ImageTooLargeError, _errors.DownloadBudgetError, _errors.BusyError)
        ):
            out = HttpStatusError(status, str(exc), url)
        elif status >= 500:
            # A fault of this worker, not of the request: Dynamo lets such exceptions through
            # unchanged (a ValueError would reach the client as a 4xx).
            out = exc
        else:
            out = ValueError(f"Failed to load image: {_describe(url)}: {exc}")
        logger.error("%s loading image: %s: %s", type(out).__name__, _describe(url), exc)
        return _with_status(out, status)


def _close(coroutines: list[Any]) -> None:
    """Closes coroutines that will never be awaited (no 'never awaited' warnings)."""
    for c in coroutines:
        c.close()
from .dynamo_embeddings import CachedEmbedding, EmbeddingCache  # noqa: E402,F401  (embeddings)

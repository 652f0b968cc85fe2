"""mmcache as vLLM's media layer: ``VLLM_MEDIA_CONNECTOR=mmcache vllm serve ...``.

Installing the wheel registers the connector: its ``vllm.general_plugins`` entry point
(:func:`register`) runs in every vLLM process before the connector is looked up. Importing
``mmcache`` never imports vLLM; this module is imported by vLLM's plugin loader (or by hand).

:class:`MmcacheMediaConnector` is vLLM's own ``MediaConnector`` with its image loads (http(s)
URLs, data URLs, local files) going through one process-wide mmcache loader: the decoded
cache, a load in flight, the host's disk tier, the fleet's shared cache, the origin. The
pixels are vLLM's (EXIF orientation applied, transparency composited onto
``rgba_background_color``, or the original mode with ``image_mode=None``), and every image is
vLLM's ``MediaWithBytes`` with the encoded bytes and ``io_config`` vLLM would give, so its
``mm_hash`` is vLLM's own. Bytes this loader does not decode exactly as vLLM would (TIFF, BMP,
an animated PNG, metadata it does not follow, files its decoders refuse) are decoded by vLLM's
own ``ImageMediaIO``. Video and audio from http(s) URLs get their bytes through the same byte
tiers and are decoded by vLLM's own decoders; over the download cap they are fetched by vLLM's
connector (within its ``download_budget``) and cached nowhere. Image embeddings and everything
else are vLLM's.

Settings: the ``DYN_MM_*``/``MMCACHE_*`` variables of ``mmcache.Loader.from_env``; this module
turns ``MMCACHE_ALLOW_HTTP`` on unless it is set (vLLM fetches ``http://`` URLs). Session
scoping: :class:`ScopeMiddleware` (``--middleware mmcache.vllm.ScopeMiddleware``). See
docs/vllm.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Any, Optional

import aiohttp
import vllm.envs as envs
from multidict import CIMultiDict, CIMultiDictProxy
from urllib3.util import parse_url
from vllm.exceptions import VLLMUnprocessableEntityError
from vllm.multimodal.media import (
    MEDIA_CONNECTOR_REGISTRY,
    ImageMediaIO,
    MediaConnector,
    MediaWithBytes,
)
from vllm.multimodal.media.connector import _wrap_media_fetch_error, global_thread_pool
from yarl import URL

from . import Loader, _native
from . import errors as _errors
from ._engines import MetricsCollector, ProcessLoader
from ._pil import image_of

logger = logging.getLogger(__name__)

#: The name ``VLLM_MEDIA_CONNECTOR`` selects.
CONNECTOR_NAME = "mmcache"

#: The session scope of the request being handled (set by :class:`ScopeMiddleware`).
current_scope: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "mmcache_vllm_scope", default=None
)


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: registers the connector as ``mmcache``.
    Cheap and idempotent (vLLM calls it in every process); no loader is built here."""
    if CONNECTOR_NAME not in MEDIA_CONNECTOR_REGISTRY.name2class:
        MEDIA_CONNECTOR_REGISTRY.register(CONNECTOR_NAME)(MmcacheMediaConnector)


def _profile(loader: Loader, image_mode: Any, background: tuple[int, int, int]) -> Any:
    """vLLM's decode profile for `image_mode` and `background`; `None` for an `image_mode`
    vLLM's own code converts (other than ``"RGB"`` and ``None``)."""
    if image_mode == "RGB":
        return loader._profiled("rgb", background=background, exif_orientation=True,
                                keep_source=True, fallback=True)
    if image_mode is None:
        return loader._profiled("original", exif_orientation=True, keep_source=True,
                                fallback=True)
    if image_mode == _ENCODED:
        return loader._profiled("encoded", keep_source=True, fallback=True)
    return None


#: The key of the view that gives the bytes alone (video, audio, image modes vLLM converts).
_ENCODED = object()

# vLLM fetches http:// URLs; internal addresses stay refused unless DYN_MM_ALLOW_INTERNAL=1.
_process = ProcessLoader({"MMCACHE_ALLOW_HTTP": "1"})


def _profiled(image_mode: Any, background: tuple[int, int, int] = (0, 0, 0)) -> Any:
    _export_metrics()
    return _process.profiled((image_mode, background),
                             lambda loader: _profile(loader, image_mode, background))


_exported = False


def _export_metrics() -> None:
    """Puts mmcache's metrics on vLLM's ``/metrics`` (prometheus_client's default registry, the
    one vLLM serves with a single API server), once, in the process that loads media."""
    global _exported
    if _exported:
        return
    _exported = True
    try:
        from prometheus_client import REGISTRY
    except ImportError:  # vLLM without prometheus_client: nothing serves metrics
        return
    REGISTRY.register(MetricsCollector())


def loader() -> Loader:
    """The process-wide loader every connector instance shares."""
    return _process.loader()


def _is_http(url: str) -> bool:
    return url[:7].lower() == "http://" or url[:8].lower() == "https://"


class _ImageIO(ImageMediaIO):
    """vLLM's ``ImageMediaIO`` (same arguments, checks and results), decoding through mmcache:
    what it decodes exactly as vLLM would, it decodes; the rest goes to vLLM's own code."""

    def __init__(self, base: ImageMediaIO) -> None:
        self.__dict__.update(base.__dict__)  # vLLM's validated settings, as they are
        self.profiled = _profiled(self.image_mode, self.rgba_background_color)

    def load_bytes(self, data: bytes) -> MediaWithBytes:  # type: ignore[override]
        if self.profiled is None:
            return super().load_bytes(data)
        try:
            pixels = self.profiled.decode(data)
        except _errors.ImageTooLargeError as exc:
            raise ValueError(f"Failed to load image: {exc}") from exc
        except _errors.BodyTooLargeError as exc:
            raise ValueError(f"Failed to load image: {exc}") from exc
        return self.wrap(pixels, data)

    def wrap(self, pixels: _native.Pixels, data: Optional[bytes] = None) -> MediaWithBytes:
        """``pixels`` as vLLM's ``load_bytes`` returns them: its pixel limit and decoded
        budget checked, a ``MediaWithBytes`` of the PIL image, the encoded bytes and the
        ``io_config`` of a conversion."""
        if data is None:
            data = pixels.source
        if pixels.mode == "":  # handed back: vLLM's own decode
            return super().load_bytes(data)
        w, h = pixels.width, pixels.height
        if pixels.orientation in (5, 6, 7, 8):
            w, h = h, w  # vLLM checks the size before it transposes
        max_pixels = envs.VLLM_MAX_IMAGE_PIXELS
        if max_pixels > 0 and w * h > max_pixels:
            raise ValueError(
                f"Image dimensions {w}x{h} ({w * h} pixels) exceed "
                f"the maximum of {max_pixels} pixels. Set "
                f"VLLM_MAX_IMAGE_PIXELS to increase this limit."
            )
        if self.decoded_budget is not None:
            self.decoded_budget.charge(w * h * 4)
        converted = self.image_mode is not None and (
            pixels.opened_mode != self.image_mode or pixels.opened_transparent
        )
        io_config = None
        if converted:
            io_config = {
                "image_mode": self.image_mode,
                "rgba_background_color": self.rgba_background_color,
            }
        return MediaWithBytes(image_of(pixels), data, io_config)


def _response_error(url: str, status: int) -> aiohttp.ClientResponseError:
    """The error aiohttp raises for an error status (vLLM's connector raises it as is for
    408, 429 and 5xx, and turns the rest into a 422)."""
    info = aiohttp.RequestInfo(URL(url), "GET", CIMultiDictProxy(CIMultiDict()), URL(url))
    return aiohttp.ClientResponseError(info, (), status=status, message=_reason(status))


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _connector_error(url: str, exc: BaseException) -> aiohttp.ClientConnectorError:
    """The error aiohttp raises when the origin cannot be reached."""
    from aiohttp.client_reqrep import ConnectionKey

    spec = parse_url(url)
    is_ssl = (spec.scheme or "").lower() == "https"
    key = ConnectionKey(spec.host or "", spec.port or (443 if is_ssl else 80), is_ssl, True,
                        None, None, None)
    return aiohttp.ClientConnectorError(key, OSError(str(exc)))


def _retryable(exc: BaseException) -> bool:
    """vLLM's rule (``vllm.connections._is_retryable``) for the failures a load can have."""
    if isinstance(exc, (TimeoutError, _errors.OriginTimeoutError, _errors.OriginConnectionError)):
        return True
    return isinstance(exc, _errors.OriginStatusError) and exc.http_status >= 500


class MmcacheMediaConnector(MediaConnector):
    """vLLM's media connector with images, video and audio bytes through mmcache's tiers
    (see the module's documentation). Built by vLLM for every request, with the request's
    ``media_io_kwargs``, allowed local path and domains, and budgets: cheap to build, and
    every instance shares the process's loader."""

    def _image_io(self, image_mode: Optional[str] = "RGB") -> ImageMediaIO:
        return _ImageIO(super()._image_io(image_mode))

    # -- images (and the bytes of video and audio) from http(s) URLs -----------------------

    async def load_from_url_async(self, url: str, media_io: Any, *, fetch_timeout: Any = None):
        if not _is_http(url):
            # data: and file: URLs, parsed and checked by vLLM; an image's bytes are decoded
            # by _ImageIO.load_bytes.
            return await super().load_from_url_async(url, media_io, fetch_timeout=fetch_timeout)
        spec = parse_url(url)
        self._assert_url_in_allowed_media_domains(spec)
        if isinstance(media_io, _ImageIO) and media_io.profiled is not None:
            pixels = await self._load(url, media_io.profiled, fetch_timeout, media_io)
            self._charge_download(url, pixels)
            return media_io.wrap(pixels)
        # Video, audio, and image modes vLLM converts itself: the bytes through the tiers,
        # decoded by vLLM's own code.
        encoded = _profiled(_ENCODED)
        try:
            pixels = await self._load(url, encoded, fetch_timeout, media_io)
        except VLLMUnprocessableEntityError as exc:
            if not isinstance(exc.__cause__, _errors.BodyTooLargeError) or isinstance(
                media_io, ImageMediaIO
            ):
                raise
            # Video or audio over the download cap: fetched the way vLLM fetches it, and cached
            # nowhere.
            return await super().load_from_url_async(url, media_io, fetch_timeout=fetch_timeout)
        self._charge_download(url, pixels)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(global_thread_pool, media_io.load_bytes, pixels.source)

    def load_from_url(self, url: str, media_io: Any, *, fetch_timeout: Any = None):
        if not _is_http(url):
            return super().load_from_url(url, media_io, fetch_timeout=fetch_timeout)
        spec = parse_url(url)
        self._assert_url_in_allowed_media_domains(spec)
        pixel_path = isinstance(media_io, _ImageIO) and media_io.profiled is not None
        profiled = media_io.profiled if pixel_path else _profiled(_ENCODED)
        try:
            pixels = self._load_sync(url, profiled, fetch_timeout, media_io)
        except VLLMUnprocessableEntityError as exc:
            if not isinstance(exc.__cause__, _errors.BodyTooLargeError) or isinstance(
                media_io, ImageMediaIO
            ):
                raise
            return super().load_from_url(url, media_io, fetch_timeout=fetch_timeout)
        self._charge_download(url, pixels)
        if pixel_path:
            return media_io.wrap(pixels)
        return media_io.load_bytes(pixels.source)

    async def _load(self, url: str, profiled: Any, fetch_timeout: Any, media_io: Any) -> Any:
        """The pixels (or bytes) of ``url``: a memory hit at once; else the load, with vLLM's
        retries of its transient failures (each attempt ``fetch_timeout`` times 4 to the
        attempt's number, backoff 4 to it in seconds)."""
        scope = current_scope.get()
        hit = profiled.cached(url, scope)
        if hit is not None:
            return hit
        attempts = max(envs.VLLM_MEDIA_FETCH_MAX_RETRIES, 1)
        for attempt in range(attempts):
            timeout = fetch_timeout * 4**attempt if fetch_timeout is not None else None
            try:
                pixels, _ = await asyncio.wait_for(profiled.load(url, scope), timeout)
                return pixels
            except asyncio.TimeoutError as exc:  # the attempt's deadline: the load goes on
                error: BaseException = exc
            except _errors.MmcacheError as exc:
                error = exc
            if not _retryable(error) or attempt + 1 >= attempts:
                raise self._vllm_error(url, error, media_io) from error
            logger.warning("mmcache: fetch of %s failed (attempt %d/%d): %s; retrying in %ds",
                           _errors_url(url), attempt + 1, attempts, error, 4**attempt)
            await asyncio.sleep(4**attempt)
        raise AssertionError("unreachable")

    def _load_sync(self, url: str, profiled: Any, fetch_timeout: Any, media_io: Any) -> Any:
        """:meth:`_load` for a thread without an event loop (the GIL released while it
        waits). The attempt's timeout is the loader's own."""
        scope = current_scope.get()
        attempts = max(envs.VLLM_MEDIA_FETCH_MAX_RETRIES, 1)
        for attempt in range(attempts):
            try:
                pixels, _ = profiled.load_sync(url, scope)
                return pixels
            except _errors.MmcacheError as exc:
                if not _retryable(exc) or attempt + 1 >= attempts:
                    raise self._vllm_error(url, exc, media_io) from exc
                time.sleep(4**attempt)
        raise AssertionError("unreachable")

    def _charge_download(self, url: str, pixels: Any) -> None:
        """vLLM's per-request download budget, charged with the encoded bytes of every http(s)
        load, whichever tier served them (the outcome of a request does not depend on what
        the caches hold)."""
        if self.download_budget is None:
            return
        data = pixels.source
        try:
            self.download_budget.charge(len(data) if data is not None else 0)
        except Exception as exc:
            wrapped = _wrap_media_fetch_error(url, exc)
            if wrapped is exc:
                raise
            raise wrapped from exc

    def _vllm_error(self, url: str, exc: BaseException, media_io: Any) -> BaseException:
        """The exception vLLM's connector raises for the same failure (the HTTP statuses
        its server answers with follow from it)."""
        if isinstance(exc, (asyncio.TimeoutError, _errors.OriginTimeoutError)):
            return TimeoutError(f"Timed out fetching {_errors_url(url)}")
        if isinstance(exc, _errors.OriginStatusError):
            error = _response_error(url, exc.http_status)
            return _wrap_media_fetch_error(url, error)
        if isinstance(exc, _errors.OriginConnectionError):
            return _connector_error(url, exc)
        if isinstance(exc, _errors.EmptyBodyError):
            # vLLM decodes the empty body: its own error for it.
            try:
                media_io.load_bytes(b"")
            except Exception as decoded:  # noqa: BLE001 -- vLLM's, whatever it is
                return decoded
        if isinstance(exc, _errors.ImageTooLargeError):
            # mmcache's pixel limit (MMCACHE_MAX_PIXELS): vLLM's type for its own.
            return ValueError(f"Failed to load image: {exc}")
        if isinstance(exc, (_errors.UrlPolicyError, _errors.TooLargeError)):
            # mmcache's own protections (docs/vllm.md): a 422, as vLLM's own refusals of a URL.
            return VLLMUnprocessableEntityError(
                f"Failed to fetch media from URL: {exc}", parameter="image_url", value=url
            )
        return exc


def _errors_url(url: str) -> str:
    """A URL for logs, without its query (signed URLs carry tokens there)."""
    return url.split("?", 1)[0][:256]


class ScopeMiddleware:
    """An ASGI middleware for vLLM's ``--middleware``: the session scope of each request
    (from its headers, with the precedence of ``mmcache.scope_from_headers``:
    ``x-dynamo-session-id``, ``x-claude-code-session-id``, ``thread-id``, ...) scopes the image
    and embedding keys of every load the request makes, when session scoping is on
    (``DYN_MM_IMAGE_CACHE_SESSION_SCOPED=1``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        session = _native.scope_from_headers(scope.get("headers") or [])
        token = current_scope.set(session)
        try:
            await self.app(scope, receive, send)
        finally:
            current_scope.reset(token)

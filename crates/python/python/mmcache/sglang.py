"""mmcache as SGLang's image loader: installing the wheel is the whole recipe.

The wheel's ``sglang.srt.plugins`` entry point (:func:`register`) hooks SGLang's
``sglang.srt.utils.common.load_image`` (SGLang's hook registry also replaces the name in every
module that imported it, ``base_processor`` among them). ``SGLANG_PLUGINS`` can leave it out.
Importing ``mmcache`` never imports SGLang.

http(s) and ``data:`` URLs go through one process-wide mmcache loader (decoded cache, load in
flight, disk tier, shared cache, origin for URLs; a data URL is decoded and cached nowhere),
giving what SGLang's own CPU path gives: ``(image, None)``, the PIL image in the mode Pillow
opens it in (``RGB``, ``RGBA``, ``L``, ``P`` with its palette, ``LA``, ``1``, ``I;16``,
``CMYK``), fully loaded, with ``info["transparency"]``, ``info["exif"]`` and ``info["xmp"]``
where Pillow has them; read-only to the caller (a write copies first). Bytes mmcache does not
decode exactly as Pillow opens them go to SGLang's own code. Every other input (PIL images,
bytes, paths, ``file://``, bare base64) is SGLang's own. With GPU decoding asked for and CUDA
present, the bytes come through mmcache's tiers and SGLang decodes them (on the GPU).

Loads from SGLang's I/O thread pool release the GIL while they wait and decode. Settings: the
``DYN_MM_*``/``MMCACHE_*`` variables (``mmcache.Loader.from_env``); this module fetches
``http://`` URLs (``MMCACHE_ALLOW_HTTP``) and waits for an origin ``REQUEST_TIMEOUT`` seconds
(SGLang's, 3 by default; ``MMCACHE_ORIGIN_TIMEOUT_SECS``) unless those are set. See
docs/sglang.md.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Optional

from . import errors as _errors
from ._engines import MetricsCollector, ProcessLoader
from ._pil import image_of

logger = logging.getLogger(__name__)

#: SGLang's function the plugin hooks.
TARGET = "sglang.srt.utils.common.load_image"


def register() -> None:
    """SGLang's ``sglang.srt.plugins`` entry point: hooks ``load_image`` (SGLang applies the
    hook, and replaces every imported name of it, once its plugins have run)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, load_image, HookType.AROUND)
    HookRegistry.register(METRICS_TARGET, _add_metrics, HookType.AFTER)


#: SGLang's function that mounts ``/metrics`` on its server (``--enable-metrics``).
METRICS_TARGET = "sglang.srt.utils.common.add_prometheus_middleware"


def _add_metrics(_result: Any, app: Any, *args: Any, **kwargs: Any) -> None:
    """After SGLang mounted ``/metrics`` (its multiprocess files), serves mmcache's metrics of
    this process there too."""
    from prometheus_client import CollectorRegistry, make_asgi_app, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(MetricsCollector())
    for route in getattr(app, "routes", ()):
        if getattr(route, "path", None) == "/metrics":
            route.app = make_asgi_app(registry=registry)
    return None


def _defaults(policy: tuple[frozenset, int]) -> dict[str, str]:
    """The loader's settings under the ``DYN_MM_*``/``MMCACHE_*`` variables: SGLang's
    timeout, and its URL policy (`policy`: allowed domains and download limit in bytes)."""
    domains, max_bytes = policy
    defaults = {
        "MMCACHE_ALLOW_HTTP": "1",
        "MMCACHE_ORIGIN_TIMEOUT_SECS": os.environ.get("REQUEST_TIMEOUT", "").strip() or "3",
    }
    if domains:
        defaults["MMCACHE_ALLOWED_MEDIA_DOMAINS"] = ",".join(sorted(domains))
    if max_bytes > 0:  # SGLang's 0 is "no limit": mmcache's cap stays
        defaults["DYN_MM_MAX_FILE_SIZE_MB"] = str(max(1, -(-max_bytes // (1024 * 1024))))
    return defaults


_lock = threading.Lock()
_policy: Optional[tuple[frozenset, int]] = None  # SGLang's, once read
_process = ProcessLoader(_defaults((frozenset(), 0)))


def _process_for(common: Any) -> ProcessLoader:
    """The process loader, built again when SGLang's URL policy changed (SGLang configures it
    once, as its processor starts: the loader is built for it)."""
    global _policy, _process
    policy = (common._allowed_media_domains, common._media_url_max_file_size_bytes)
    if policy != _policy:
        with _lock:
            if policy != _policy:
                _process = ProcessLoader(_defaults(policy))
                _policy = policy
    return _process


def _original_mode(process: ProcessLoader) -> Any:
    return process.profiled(
        "original", lambda loader: loader._profiled("original", fallback=True)
    )


def _encoded(process: ProcessLoader) -> Any:
    return process.profiled(
        "encoded", lambda loader: loader._profiled("encoded", keep_source=True, fallback=True)
    )


def loader() -> Any:
    """The process-wide loader (built for SGLang's URL policy when SGLang is imported)."""
    import sys

    common = sys.modules.get("sglang.srt.utils.common")
    return (_process if common is None else _process_for(common)).loader()


def load_image(original: Any, image_file: Any, gpu_image_decode: Any = True) -> Any:
    """SGLang's ``load_image(image_file, gpu_image_decode)``, its http(s) and data URLs
    through mmcache (the AROUND hook: ``original`` is SGLang's own function)."""
    from sglang.srt.utils import common

    url = image_file.url if isinstance(image_file, common.ImageData) else image_file
    if not isinstance(url, str):
        return original(image_file, gpu_image_decode)
    is_http = url.startswith(("http://", "https://"))
    if is_http:
        url = _prepared(url)  # the URL requests would fetch, as SGLang checks it
    if not is_http and not url.startswith("data:") or url is None:
        # Not a URL mmcache loads (requests' InvalidURL comes from SGLang's own code).
        return original(image_file, gpu_image_decode)
    process = _process_for(common)
    if gpu_image_decode and common.is_cuda():
        # The bytes through the tiers; SGLang's GPU decode of a JPEG, as its own would do.
        data = _bytes_of(common, process, url, is_http)
        if common.is_jpeg_with_cuda(data, gpu_image_decode):
            return original(data, gpu_image_decode)
        pixels = _decode(common, process, url, data)
    elif is_http:
        common._assert_media_url_allowed(url)
        pixels = _load(common, url, _original_mode(process))
    else:
        pixels = _decode(common, process, url, common.get_image_bytes(url))  # SGLang's parsing
    if pixels is None or pixels.mode == "":  # not decoded here: SGLang's own decode of the same bytes
        source = None if pixels is None else pixels.source
        if source is None:
            source = _bytes_of(common, process, url, is_http)
        return original(source, gpu_image_decode)
    return image_of(pixels), None


def _prepared(url: str) -> str | None:
    """`url` as requests sends it (SGLang checks its policy on that form), or None where
    requests refuses it (no host, a bad port, a space in the host ...)."""
    import requests

    try:
        prepared = requests.Request("GET", url).prepare().url
    except (requests.exceptions.RequestException, ValueError):
        return None
    return prepared if prepared.startswith(("http://", "https://")) else None


def _decode(common: Any, process: ProcessLoader, url: str, data: bytes) -> Any:
    """The pixels of bytes in hand (a data URL's, or bytes SGLang would decode on its CPU
    path); None where SGLang's own decode must run (bytes over mmcache's cap, which SGLang
    decodes whatever their size)."""
    try:
        return _original_mode(process).decode(data)
    except _errors.BodyTooLargeError:
        return None
    except _errors.MmcacheError as exc:
        raise _sglang_error(common, url, exc) from exc


def _bytes_of(common: Any, process: ProcessLoader, url: str, is_http: bool) -> bytes:
    if not is_http:
        return common.get_image_bytes(url)
    common._assert_media_url_allowed(url)
    return _load(common, url, _encoded(process)).source


def _load(common: Any, url: str, profiled: Any) -> Any:
    """The pixels of `url` (a memory hit at once, else a load without the GIL), within
    SGLang's download limit."""
    try:
        pixels, _ = profiled.load_sync(url)
    except _errors.EmptyBodyError:
        # SGLang decodes the empty body: its own error for it.
        common.load_image(b"", False)
        raise
    except _errors.BodyTooLargeError as exc:
        raise _too_large(common) from exc
    except _errors.MmcacheError as exc:
        raise _sglang_error(common, url, exc) from exc
    limit = common._media_url_max_file_size_bytes
    if limit and pixels.encoded_len > limit:
        raise _too_large(common)
    return pixels


def _too_large(common: Any) -> ValueError:
    limit = common._media_url_max_file_size_bytes
    if not limit:  # mmcache's cap, where SGLang has none
        return ValueError("Remote media exceeds mmcache's download limit (DYN_MM_MAX_FILE_SIZE_MB)")
    return ValueError(f"Remote media exceeds the {limit} byte download limit")


def _sglang_error(common: Any, url: str, exc: BaseException) -> BaseException:
    """The exception SGLang's download raises for the same failure (``requests``'s, or a
    ``ValueError``: its ``CLIENT_MEDIA_EXCEPTIONS``)."""
    import requests

    if isinstance(exc, _errors.OriginStatusError):
        response = requests.Response()
        response.status_code = exc.http_status
        response.url = url
        return requests.exceptions.HTTPError(
            f"{exc.http_status} Error for url: {url.split('?', 1)[0]}", response=response
        )
    if isinstance(exc, _errors.OriginTimeoutError):
        # What requests raises for a slow origin (mmcache's deadline covers the connect too;
        # ReadTimeout is a requests.exceptions.Timeout either way).
        return requests.exceptions.ReadTimeout(f"Timed out while downloading media URL: {url}")
    if isinstance(exc, _errors.OriginConnectionError):
        return requests.exceptions.ConnectionError(str(exc))
    if isinstance(exc, _errors.UrlPolicyError) and (
            "too many redirects" in str(exc) or "redirect loop" in str(exc)):
        return requests.exceptions.TooManyRedirects(str(exc))
    if isinstance(exc, (_errors.UrlPolicyError, _errors.TooLargeError,
                        _errors.InvalidDataUrlError, _errors.UnsupportedImageError)):
        return ValueError(f"Could not load image: {exc}")
    return exc


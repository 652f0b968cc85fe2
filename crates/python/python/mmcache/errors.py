"""Exceptions of mmcache loads: one class per kind, each with ``http_status``.

Every class derives from :class:`MmcacheError`. Messages name the image's host, never its
path, query or credentials, and never a cache URL.

The native module (crates/python/src/errors.rs) imports every class here by name once, when it
loads, and maps each Rust error to one with a match the compiler checks; a class added here
needs its entry there (tests/python/test_errors.py checks that both lists agree).
"""

from __future__ import annotations


class MmcacheError(Exception):
    """A failed load or a bad setting. ``http_status`` is the status a worker can return."""

    def __init__(self, message: str, http_status: int = 500) -> None:
        super().__init__(message)
        self.http_status = http_status


class ConfigError(MmcacheError, ValueError):
    """A setting or environment variable is invalid; the message names it."""


class UrlPolicyError(MmcacheError, ValueError):
    """The URL or a redirect broke the URL policy (scheme, internal address, allowlist,
    redirect limit): 400 or 403."""


class OriginStatusError(MmcacheError):
    """The origin answered with an error status; ``http_status`` and ``origin_status`` are it."""

    origin_status: int


class OriginTimeoutError(MmcacheError, TimeoutError):
    """The origin did not answer within the timeout: 408."""


class LoadTimeoutError(OriginTimeoutError):
    """The whole load passed ``MMCACHE_LOAD_TIMEOUT_SECS``: 408. Every caller waiting for the
    same image gets it, and the next load starts afresh."""


class OriginConnectionError(MmcacheError, ConnectionError):
    """The origin could not be reached, or the connection broke: 400."""


class TooLargeError(MmcacheError, ValueError):
    """A size limit: 413."""


class BodyTooLargeError(TooLargeError):
    """The download (or data URL) is larger than ``max_file_size_bytes``."""


class ImageTooLargeError(TooLargeError):
    """The image has more pixels than ``max_pixels``, or needs more memory than the decode
    budget."""


class DownloadBudgetError(TooLargeError):
    """The body is larger than the download memory budget may hold at once
    (``MMCACHE_DOWNLOAD_MEMORY_BYTES``)."""


class UnsupportedImageError(MmcacheError, ValueError):
    """The bytes are not a supported image (JPEG, PNG, WebP, GIF), or are corrupt: 415."""


class EmptyBodyError(MmcacheError, ValueError):
    """The origin answered with an empty body: 400."""


class InvalidDataUrlError(MmcacheError, ValueError):
    """A malformed ``data:`` URL: 400 (415 when its media type is not an image).

    ``reason`` is ``"not_image"``, ``"not_base64"``, ``"bad_base64"`` or ``"malformed"``.
    """

    reason: str


class BusyError(MmcacheError):
    """A memory budget of this worker stayed taken for the whole wait: 503."""


class DecodeBusyError(BusyError):
    """Other decodes held the decode budget for the whole wait: 503."""


class DownloadBusyError(BusyError):
    """Other downloads held the download memory budget for the whole wait: 503."""


class BatchError(MmcacheError):
    """Several loads of a batch failed; ``failures`` lists ``(index, error)``."""

    failures: list[tuple[int, MmcacheError]]


class EmbeddingError(MmcacheError):
    """An embedding call failed (``loader.embeddings``); a compute's own exception is raised
    as it is, not wrapped."""


class EmbeddingTypeError(EmbeddingError, TypeError):
    """A key or model is not a string, ``compute`` is not an async callable, or it returned
    something that is neither an array nor ``(array, metadata bytes)``."""


class InvalidEmbeddingError(EmbeddingError, ValueError):
    """The array has an unsupported dtype (not float32, float16 or bfloat16), is not
    C-contiguous, or its shape is invalid; or the tensor requires grad (return
    ``tensor.detach()``)."""


class EmbeddingDeviceError(InvalidEmbeddingError):
    """The tensor is not in host memory (a GPU tensor): move it with ``tensor.cpu()``."""


class EmbeddingTooLargeError(EmbeddingError, TooLargeError):
    """The metadata is over its 64 KiB cap: 413."""


class EmbeddingComputeError(EmbeddingError):
    """The compute task panicked or was cancelled by a runtime shutdown (not cached)."""


class EmbeddingTimeoutError(EmbeddingError, TimeoutError):
    """The compute ran past ``MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`` (default 60 s):
    408. Every caller waiting for the same key gets it, the compute task is cancelled,
    and the next call computes again."""

"""``loader.embeddings``: encoder outputs cached in Rust, computed once per key per process.

>>> entry = await loader.embeddings.get_or_compute(uuid, encode, model=model_id)  # doctest: +SKIP
>>> entry.array, entry.metadata, entry.source                                    # doctest: +SKIP

``compute`` is an async callable returning a numpy array or a DLPack CPU tensor (torch),
float32, float16 or bfloat16, C-contiguous; or ``(array, metadata bytes)``. It runs on the
event loop of the call that starts it, as a task of its own: concurrent callers (any loop,
any thread) join it, and cancelling any of them cancels nothing. Its exception reaches every
waiter, each as a copy of its own (same type, args, attributes, cause and the compute's
traceback), and is not cached. Past ``MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS``
(default 60 s) the task is cancelled and every waiter gets
``EmbeddingTimeoutError`` (408). See docs/embeddings.md.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from . import _native
from ._native import Embedding

__all__ = ["ContentKey", "Embedding", "Embeddings", "content_key"]


class Embeddings:
    """The embedding caches of one loader (``loader.embeddings``)."""

    def __init__(self, native: _native.Embeddings) -> None:
        self._native = native

    async def get_or_compute(
        self,
        key: str,
        compute: Callable[[], Awaitable[Any]],
        *,
        model: str,
        scope: str | None = None,
    ) -> Embedding:
        """The cached embedding of ``key`` under ``model`` (within ``scope`` when session
        scoping is on), else a compute of it in flight (joined), else ``await compute()``.
        ``model`` names everything that changes the embedding (model, revision, processor
        settings such as ``max_pixels``). A memory hit returns without suspending."""
        hit = self._native._cached(key, model=model, scope=scope)
        if hit is not None:
            return hit
        return await self._native.get_or_compute(key, compute, model=model, scope=scope)

    async def get(self, key: str, *, model: str, scope: str | None = None) -> Embedding | None:
        """The cached embedding of ``key`` under ``model``, or ``None``: memory, then the disk
        and shared tiers when they are on (a tier hit is kept in memory). It never computes.
        A memory hit returns without suspending (no task, no thread hop)."""
        hit = self._native._cached(key, model=model, scope=scope)
        if hit is not None:
            return hit
        return await self._native.get(key, model=model, scope=scope)

    @property
    def stats(self) -> dict[str, int]:
        """``entries``, ``current_bytes`` (weighed), ``capacity_bytes`` and ``inflight`` now."""
        return self._native.stats

    @property
    def compute_timeout_secs(self) -> float:
        """The compute deadline this loader has, in seconds (read-only): set by
        ``MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS`` or the keyword
        ``embedding_compute_timeout_secs``; default 60 s."""
        return self._native.compute_timeout_secs

    def __repr__(self) -> str:
        return repr(self._native)


class ContentKey(str):
    """An image's content key: blake3 of its encoded bytes, 64 hex digits.

    Used as an embedding key, it keys by content, exactly as Rust's
    ``EmbeddingKeyInput::content`` does: one image under two URLs gets one embedding, and Rust
    and Python workers share it. Get one from :func:`content_key`.
    """

    __slots__ = ()
    __mmcache_content_key__ = True


def content_key(image: Any) -> ContentKey:
    """The content key of an image array a load returned (or of its ``Pixels`` owner).

    It is read from the array's owner, taken once when the encoded bytes arrived, never
    recomputed; an array that is not (a view of) a loaded image raises ``TypeError``.
    """
    owner = image
    # numpy views keep their source as `.base`: follow the chain to our owner.
    for _ in range(64):
        if isinstance(owner, _native.Pixels):
            return ContentKey(owner.content_key)
        owner = getattr(owner, "base", None)
        if owner is None:
            break
    raise TypeError(
        "content_key() takes an image array returned by an mmcache load (or a view of one); "
        f"got {type(image).__name__}, which no load returned"
    )



class _Compute:
    """One compute's task, which the native module may cancel from any thread: it drives
    ``awaitable`` on ``loop`` through :meth:`run`, and :meth:`cancel` cancels that task (at
    the compute deadline)."""

    def __init__(self, awaitable: Awaitable[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._awaitable, self._loop = awaitable, loop
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    async def run(self) -> Any:
        self._task = asyncio.current_task()
        if self._cancelled:
            # Cancelled before its first step: the compute never starts.
            if inspect.iscoroutine(self._awaitable):
                self._awaitable.close()
            raise asyncio.CancelledError
        return await self._awaitable

    def cancel(self) -> None:
        """Thread-safe: cancels the task on its loop (nothing when the loop is closed)."""
        try:
            self._loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:
            pass

    def _cancel(self) -> None:
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()
        elif inspect.iscoroutine(self._awaitable):
            # Not started, and perhaps never to be (its task may not have been made): closed
            # here, so it is never left unawaited. `run` closes it again if it starts: harmless.
            self._awaitable.close()


def _for_waiter(exc: BaseException) -> BaseException:
    """One waiter's copy of a failed compute's exception (the native module asks for one per
    waiter): same type, args, attributes, ``__cause__`` and ``__context__``, and the compute's
    traceback, so each waiter's raise starts from the compute's frames instead of adding to
    one object every waiter holds. A class whose ``__init__`` does not take its own ``args``
    is copied without calling it."""
    try:
        new = copy.copy(exc)
    except Exception:  # any failure of the class's own __init__
        new = type(exc).__new__(type(exc), *exc.args)
        new.__dict__.update(exc.__dict__)
    new.__cause__, new.__context__ = exc.__cause__, exc.__context__
    new.__suppress_context__ = exc.__suppress_context__
    return new.with_traceback(exc.__traceback__)

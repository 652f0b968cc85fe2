"""A Python compute never outlives the call that gave up on it.

At the compute deadline every waiter gets ``EmbeddingTimeoutError`` and the compute's task is
cancelled, even when the deadline passes while ``compute()`` is still being called (its
synchronous part). On the bypass path (scoped mode, no scope) the compute belongs to its one
caller: cancelling that caller cancels it, and the deadline holds there too.
"""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

import mmcache
from mmcache import errors

MODEL = "test-model@max_pixels=1003520"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Hung:
    """A compute that never returns; records its start and its cancellation. With
    `call_secs`, calling it (before the coroutine exists) takes that long."""

    def __init__(self, call_secs: float = 0.0):
        self.call_secs = call_secs
        self.started = self.cancelled = 0
        self.coros = []

    def __call__(self):
        time.sleep(self.call_secs)  # on the native module's blocking thread, not the loop
        coro = self._never()
        self.coros.append(coro)
        return coro

    async def _never(self):
        self.started += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    def ended(self) -> bool:
        """Its coroutine exists and is over (cancelled, or closed before its first step)."""
        return bool(self.coros) and all(
            inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in self.coros
        )


async def until_ended(compute: Hung, secs: float = 5.0) -> None:
    """Bounded wait (count and time) for the compute to end."""
    for _ in range(int(secs / 0.01)):
        if compute.ended():
            return
        await asyncio.sleep(0.01)


def assert_cancelled(compute: Hung) -> None:
    assert compute.coros, "compute() was called"
    assert compute.ended(), (
        f"the compute still runs after its caller gave up (started {compute.started}, "
        f"cancelled {compute.cancelled})"
    )
    # Started, it saw CancelledError; else it was closed before its first step.
    assert compute.cancelled == compute.started <= 1


def test_a_compute_whose_call_outlasts_the_deadline_is_cancelled_once_it_exists():
    loader = mmcache.Loader(embedding_compute_timeout_secs=0.2)
    compute = Hung(call_secs=0.6)  # the deadline passes while compute() is being called

    async def main():
        with pytest.raises(errors.EmbeddingTimeoutError):
            await loader.embeddings.get_or_compute("late", compute, model=MODEL)
        await until_ended(compute)
        assert_cancelled(compute)  # before asyncio.run's shutdown cancels what is left

    run(main())


def test_cancelling_a_bypass_caller_cancels_its_compute():
    loader = mmcache.Loader(session_scoped=True)  # no scope below: the bypass path
    compute = Hung()

    async def main():
        caller = asyncio.create_task(loader.embeddings.get_or_compute("b", compute, model=MODEL))
        for _ in range(500):  # bounded: until the compute started
            if compute.started:
                break
            await asyncio.sleep(0.01)
        assert compute.started == 1
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await until_ended(compute)
        assert_cancelled(compute)  # before asyncio.run's shutdown cancels what is left

    run(main())
    assert compute.started == 1


def test_the_compute_deadline_holds_on_the_bypass_path():
    loader = mmcache.Loader(session_scoped=True, embedding_compute_timeout_secs=0.2)
    compute = Hung()

    async def main():
        with pytest.raises(errors.EmbeddingTimeoutError) as raised:
            await loader.embeddings.get_or_compute("b", compute, model=MODEL)
        await until_ended(compute)
        assert_cancelled(compute)  # before asyncio.run's shutdown cancels what is left
        return raised.value

    assert run(main()).http_status == 408

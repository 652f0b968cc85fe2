"""loader.embeddings from Python: once per key, joins, cancellation, errors, no-copy views."""

from __future__ import annotations

import asyncio
import pathlib

import ml_dtypes
import numpy as np
import pytest

import mmcache
from mmcache import _native, errors

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = "test-model@max_pixels=1003520"


def ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Counter:
    """An async compute that counts its runs, optionally gated by an event."""

    def __init__(self, value, gate: asyncio.Event | None = None, fail: BaseException | None = None):
        self.value, self.gate, self.fail, self.runs = value, gate, fail, 0
        self.loop = None

    async def __call__(self):
        self.runs += 1
        self.loop = asyncio.get_running_loop()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.value


def test_compute_once_then_memory_hit_without_copy():
    loader = mmcache.Loader()
    value = np.arange(12, dtype=np.float32).reshape(3, 4)

    async def main():
        compute = Counter(value)
        first = await loader.embeddings.get_or_compute("k", compute, model=MODEL)
        again = await loader.embeddings.get_or_compute("k", compute, model=MODEL)
        got = await loader.embeddings.get("k", model=MODEL)
        other = await loader.embeddings.get("k", model="another-model")
        return compute, first, again, got, other

    compute, first, again, got, other = run(main())
    assert compute.runs == 1
    assert (first.source, again.source, got.source) == ("computed", "memory", "memory")
    assert other is None
    np.testing.assert_array_equal(got.array, value)
    assert got.array.dtype == np.float32 and got.array.shape == (3, 4)
    assert not got.array.flags.writeable
    # One cached allocation: every view points at it (and not at the compute's array).
    assert ptr(first.array) == ptr(again.array) == ptr(got.array)
    assert ptr(got.array) != ptr(value)
    assert got.metadata is None and got.dtype == "float32" and got.shape == (3, 4)


def test_concurrent_callers_join_one_compute_on_the_callers_loop():
    loader = mmcache.Loader()

    async def main():
        gate = asyncio.Event()
        compute = Counter(np.ones(8, dtype=np.float16), gate)
        tasks = [
            asyncio.create_task(loader.embeddings.get_or_compute("j", compute, model=MODEL))
            for _ in range(5)
        ]
        for _ in range(200):  # bounded: until the compute started
            if compute.runs:
                break
            await asyncio.sleep(0.01)
        gate.set()
        results = await asyncio.gather(*tasks)
        return compute, results, asyncio.get_running_loop()

    compute, results, loop = run(main())
    assert compute.runs == 1
    assert compute.loop is loop
    assert sorted(r.source for r in results) == ["computed"] + ["inflight"] * 4
    assert len({ptr(r.array) for r in results}) == 1


def test_cancelling_the_first_caller_cancels_nothing():
    loader = mmcache.Loader()

    async def main():
        gate = asyncio.Event()
        compute = Counter(np.zeros((2, 2), dtype=np.float32), gate)
        first = asyncio.create_task(loader.embeddings.get_or_compute("c", compute, model=MODEL))
        for _ in range(200):
            if compute.runs:
                break
            await asyncio.sleep(0.01)
        second = asyncio.create_task(loader.embeddings.get_or_compute("c", compute, model=MODEL))
        await asyncio.sleep(0.05)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        gate.set()
        joined = await second
        cached = await loader.embeddings.get("c", model=MODEL)
        return compute, joined, cached

    compute, joined, cached = run(main())
    assert compute.runs == 1
    assert joined.source == "inflight"
    assert cached is not None and cached.source == "memory"


def test_an_exception_reaches_every_waiter_and_is_not_cached():
    loader = mmcache.Loader()

    class EncoderDown(RuntimeError):
        pass

    async def main():
        gate = asyncio.Event()
        failing = Counter(None, gate, fail=EncoderDown("gpu fell off"))
        tasks = [
            asyncio.create_task(loader.embeddings.get_or_compute("e", failing, model=MODEL))
            for _ in range(3)
        ]
        for _ in range(200):
            if failing.runs:
                break
            await asyncio.sleep(0.01)
        gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert await loader.embeddings.get("e", model=MODEL) is None
        retry = Counter(np.ones(4, dtype=np.float32))
        fresh = await loader.embeddings.get_or_compute("e", retry, model=MODEL)
        return failing, outcomes, retry, fresh

    failing, outcomes, retry, fresh = run(main())
    assert failing.runs == 1
    assert all(isinstance(o, EncoderDown) and str(o) == "gpu fell off" for o in outcomes)
    assert retry.runs == 1 and fresh.source == "computed"


def test_metadata_round_trips_and_is_capped():
    loader = mmcache.Loader()

    async def main():
        meta = b'{"image_grid_thw":[[1,36,52]]}'
        arr = np.ones((3, 2), dtype=np.float32)
        first = await loader.embeddings.get_or_compute(
            "m", lambda: Counter((arr, meta))(), model=MODEL
        )
        hit = await loader.embeddings.get("m", model=MODEL)
        with pytest.raises(errors.EmbeddingTooLargeError) as too_big:
            await loader.embeddings.get_or_compute(
                "m2", Counter((arr, b"x" * (64 * 1024 + 1))), model=MODEL
            )
        with pytest.raises(errors.EmbeddingTypeError):
            await loader.embeddings.get_or_compute("m3", Counter((arr, "text")), model=MODEL)
        return meta, first, hit, too_big.value

    meta, first, hit, too_big = run(main())
    assert first.metadata == meta and hit.metadata == meta
    assert too_big.http_status == 413 and "cap" in str(too_big)


def test_bfloat16_round_trips_through_ml_dtypes_without_a_copy():
    loader = mmcache.Loader()
    value = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=ml_dtypes.bfloat16)

    async def main():
        await loader.embeddings.get_or_compute("b", Counter(value), model=MODEL)
        return await loader.embeddings.get("b", model=MODEL), await loader.embeddings.get(
            "b", model=MODEL
        )

    a, b = run(main())
    assert a.dtype == "bfloat16" and a.array.dtype == ml_dtypes.bfloat16
    assert a.array.tobytes() == value.tobytes()
    assert ptr(a.array) == ptr(b.array)
    assert not a.array.flags.writeable


class DLPackOnly:
    """A tensor known only by the DLPack protocol (as torch's), backed by a numpy array."""

    def __init__(self, array, device=(1, 0)):
        self.array, self.device = array, device

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.device


def test_dlpack_tensors_in_and_out():
    loader = mmcache.Loader()
    value = np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4)

    async def main():
        await loader.embeddings.get_or_compute("d", Counter(DLPackOnly(value)), model=MODEL)
        return await loader.embeddings.get("d", model=MODEL)

    got = run(main())
    np.testing.assert_array_equal(got.array, value)
    assert got.__dlpack_device__() == (1, 0)
    # Out: a copy of its own by default (test_embeddings_export.py says what each gets).
    np.testing.assert_array_equal(np.from_dlpack(got), value)


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (DLPackOnly(np.ones(4, np.float32), device=(2, 0)), errors.EmbeddingDeviceError, "CPU"),
        (np.ones(4, dtype=np.float64), errors.InvalidEmbeddingError, "float64"),
        (np.ones(4, dtype=np.int32), errors.InvalidEmbeddingError, "int32"),
        (np.ones(4, dtype=">f4"), errors.InvalidEmbeddingError, "byte order"),
        (np.ones((4, 4), dtype=np.float32)[:, ::2], errors.InvalidEmbeddingError, "contiguous"),
        (DLPackOnly(np.ones((4, 4), np.float32)[:, ::2]), errors.InvalidEmbeddingError, "contiguous"),
        (DLPackOnly(np.ones(4, np.int16)), errors.InvalidEmbeddingError, "dtype"),
        ([1.0, 2.0], errors.EmbeddingTypeError, "numpy array"),
        ("not an array", errors.EmbeddingTypeError, "numpy array"),
        ((np.ones(2, np.float32), b"", b""), errors.EmbeddingTypeError, "tuple"),
    ],
)
def test_bad_compute_results_are_typed_errors_and_not_cached(bad, error, words):
    loader = mmcache.Loader()

    async def main():
        compute = Counter(bad)
        with pytest.raises(error) as raised:
            await loader.embeddings.get_or_compute("x", compute, model=MODEL)
        return raised.value, await loader.embeddings.get("x", model=MODEL)

    raised, cached = run(main())
    assert words in str(raised)
    assert isinstance(raised, errors.EmbeddingError)
    assert cached is None


def test_bad_calls_are_typed_errors():
    loader = mmcache.Loader()

    async def main():
        compute = Counter(np.ones(2, np.float32))
        with pytest.raises(errors.EmbeddingTypeError, match="key must be a str"):
            await loader.embeddings.get_or_compute(b"bytes-key", compute, model=MODEL)
        with pytest.raises(errors.EmbeddingTypeError, match="model must be a str"):
            await loader.embeddings.get("k", model=7)
        with pytest.raises(errors.EmbeddingTypeError, match="async callable"):
            await loader.embeddings.get_or_compute("k", lambda: np.ones(2, np.float32), model=MODEL)
        with pytest.raises(errors.EmbeddingTypeError, match="async callable"):
            await loader.embeddings.get_or_compute("k", "not callable", model=MODEL)
        assert compute.runs == 0

    run(main())
    assert issubclass(errors.EmbeddingTypeError, TypeError)
    assert issubclass(errors.InvalidEmbeddingError, ValueError)


def test_scoped_mode_partitions_and_bypasses_without_scope():
    loader = mmcache.Loader(session_scoped=True)

    async def main():
        compute = Counter(np.ones(2, np.float32))
        a = await loader.embeddings.get_or_compute("s", compute, model=MODEL, scope="session-a")
        a2 = await loader.embeddings.get_or_compute("s", compute, model=MODEL, scope="session-a")
        b = await loader.embeddings.get_or_compute("s", compute, model=MODEL, scope="session-b")
        none1 = await loader.embeddings.get_or_compute("s", compute, model=MODEL)
        none2 = await loader.embeddings.get_or_compute("s", compute, model=MODEL, scope="  ")
        return compute, [x.source for x in (a, a2, b, none1, none2)]

    compute, sources = run(main())
    assert sources == ["computed", "memory", "computed", "computed", "computed"]
    assert compute.runs == 4


def test_an_entry_over_the_budget_is_returned_not_stored():
    loader = mmcache.Loader(embedding_cache_bytes=1024)

    async def main():
        big = np.ones(4096, dtype=np.float32)
        got = await loader.embeddings.get_or_compute("big", Counter(big), model=MODEL)
        return got, await loader.embeddings.get("big", model=MODEL)

    got, cached = run(main())
    assert got.source == "computed" and got.array.shape == (4096,)
    assert cached is None
    assert loader.embeddings.stats["entries"] == 0


def test_a_caller_on_another_thread_and_loop_joins_the_compute():
    import threading

    loader = mmcache.Loader()
    started, release = threading.Event(), threading.Event()
    runs = []

    async def compute():
        runs.append(threading.get_ident())
        started.set()
        while not release.is_set():  # bounded by the 60 s wait_for of its caller
            await asyncio.sleep(0.01)
        return np.full(16, 3.0, dtype=np.float32)

    results = {}

    def coalesced() -> float:
        for line in mmcache.metrics_text().splitlines():
            if line.startswith("mmcache_embedding_coalesced_total"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = coalesced()

    def other_thread():
        assert started.wait(30)
        results["other"] = run(loader.embeddings.get_or_compute("t", compute, model=MODEL))

    thread = threading.Thread(target=other_thread)
    thread.start()

    async def main():
        first = asyncio.create_task(loader.embeddings.get_or_compute("t", compute, model=MODEL))
        for _ in range(3000):  # bounded (30 s): until the other thread's call has joined
            if coalesced() > before:
                break
            await asyncio.sleep(0.01)
        release.set()
        return await first

    results["main"] = run(main())
    thread.join(60)
    assert not thread.is_alive()
    assert runs == [threading.get_ident()]  # on the first caller's loop, once
    assert results["main"].source == "computed"
    assert results["other"].source == "inflight"
    assert ptr(results["main"].array) == ptr(results["other"].array)


def test_a_cancelled_compute_is_an_error_for_the_waiters_not_their_cancellation():
    import threading

    loader = mmcache.Loader()
    started = threading.Event()
    joined = threading.Event()
    results = {}

    async def compute():
        started.set()
        await asyncio.sleep(60)  # cancelled long before: its loop ends below
        return np.ones(4, dtype=np.float32)

    def other_thread():
        assert started.wait(30)

        async def wait():
            call = asyncio.ensure_future(loader.embeddings.get_or_compute("c", compute, model=MODEL))
            joined.set()
            return await call

        try:
            results["other"] = run(wait())
        except BaseException as e:  # noqa: BLE001 - the test inspects what was raised
            results["other"] = e

    thread = threading.Thread(target=other_thread)
    thread.start()

    async def main():
        task = asyncio.ensure_future(loader.embeddings.get_or_compute("c", compute, model=MODEL))
        assert await asyncio.to_thread(joined.wait, 30)
        await asyncio.sleep(0.2)  # the other caller has joined the compute
        task.cancel()  # this caller leaves; asyncio.run then cancels the compute's task

    asyncio.run(main())
    thread.join(60)
    assert not thread.is_alive()
    raised = results["other"]
    assert isinstance(raised, mmcache.EmbeddingComputeError), repr(raised)
    assert not isinstance(raised, asyncio.CancelledError)
    assert "cancelled" in str(raised)


def test_get_reads_the_shared_tier_of_another_worker(cluster):
    """`get` looks in memory, then the fleet tiers: a value another worker computed is found
    without a compute, then kept in memory; what no tier has is None."""
    value = np.arange(24, dtype=np.float32).reshape(4, 6)
    writer = mmcache.Loader(shared_cache=True, shared_cache_url=cluster.url)
    reader = mmcache.Loader(shared_cache=True, shared_cache_url=cluster.url)

    async def body():
        computed = Counter(value)
        first = await writer.embeddings.get_or_compute("fleet-get", computed, model=MODEL)
        assert (first.source, computed.runs) == ("computed", 1)
        assert await writer.flush_async(20)
        found = await reader.embeddings.get("fleet-get", model=MODEL)
        assert found is not None and found.source == "shared"
        np.testing.assert_array_equal(found.array, value)
        again = await reader.embeddings.get("fleet-get", model=MODEL)
        assert again.source == "memory"
        assert await reader.embeddings.get("never-computed", model=MODEL) is None

    run(body())


LYING_SUBCLASS = r"""
import asyncio, sys
import numpy as np
import mmcache

class Liar(np.ndarray):
    # Python-level attributes an ndarray subclass can override: none may be trusted for the
    # memory read, only numpy's own view of the array.
    @property
    def nbytes(self):
        return 4 << 30
    @property
    def shape(self):
        return (1 << 15, 1 << 15)
    @property
    def __array_interface__(self):
        d = dict(np.asarray(self).__array_interface__)
        d["data"] = (8, True)
        return d

real = np.arange(12, dtype=np.float32).reshape(3, 4)
liar = real.view(Liar)

async def compute():
    return liar

async def main():
    loader = mmcache.Loader()
    got = await loader.embeddings.get_or_compute("liar", compute, model="m")
    np.testing.assert_array_equal(got.array, real)
    print("cached the real bytes", got.array.shape)

asyncio.run(main())
"""


def test_an_ndarray_subclass_that_lies_about_its_memory_is_read_as_numpy_sees_it(tmp_path):
    """A subclass's `nbytes`, `shape` or `__array_interface__` properties are Python code: read
    through them, a hostile tensor would make the cache read arbitrary memory (a crash, in a
    child process here). The array is read as numpy itself holds it."""
    import subprocess
    import sys

    script = tmp_path / "liar.py"
    script.write_text(LYING_SUBCLASS)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "cached the real bytes (3, 4)" in done.stdout


def test_an_object_that_fakes_its_class_is_not_an_array():
    """`isinstance` follows a `__class__` property; the type check does not."""

    class Faker:
        @property
        def __class__(self):
            return np.ndarray

    fake = Faker()
    assert isinstance(fake, np.ndarray)

    async def compute():
        return fake

    loader = mmcache.Loader()
    with pytest.raises(errors.EmbeddingTypeError, match="numpy array or a DLPack tensor"):
        run(loader.embeddings.get_or_compute("faker", compute, model=MODEL))


def test_a_compute_past_the_deadline_is_a_408_for_every_waiter_and_is_cancelled():
    loader = mmcache.Loader(embedding_compute_timeout_secs=0.3)
    seen = {"cancelled": 0}

    async def never():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["cancelled"] += 1
            raise

    async def main():
        tasks = [
            asyncio.create_task(loader.embeddings.get_or_compute("t", never, model=MODEL))
            for _ in range(3)
        ]
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        # The compute task is cancelled on its loop (bounded wait for the cancellation).
        for _ in range(200):
            if seen["cancelled"]:
                break
            await asyncio.sleep(0.01)
        inflight = loader.embeddings.stats["inflight"]
        retry = Counter(np.ones(4, dtype=np.float32))
        fresh = await loader.embeddings.get_or_compute("t", retry, model=MODEL)
        return outcomes, inflight, retry, fresh

    outcomes, inflight, retry, fresh = run(main())
    for o in outcomes:
        assert isinstance(o, errors.EmbeddingTimeoutError), repr(o)
        assert isinstance(o, TimeoutError) and isinstance(o, errors.EmbeddingError)
        assert o.http_status == 408
        assert "MMCACHE_EMBEDDING_COMPUTE_TIMEOUT_SECS" in str(o)
    assert seen["cancelled"] == 1, "the compute task was cancelled once"
    assert inflight == 0
    assert retry.runs == 1 and fresh.source == "computed"


def test_the_default_compute_deadline_is_60_s_as_documented_and_leaves_a_normal_compute_alone():
    loader = mmcache.Loader()
    # The deadline the loader actually has, read back (not assumed): 60 s by default, what
    # the keyword and the variable set otherwise.
    default = loader.embeddings.compute_timeout_secs
    assert default == 60.0
    assert mmcache.Loader(embedding_compute_timeout_secs=2.5).embeddings.compute_timeout_secs == 2.5
    var = _native.SETTINGS["embedding_compute_timeout_secs"]
    assert mmcache.Loader(environ={var: "7"}).embeddings.compute_timeout_secs == 7.0
    # Every Python-facing text that states the default states this one.
    said = f"default {default:g} s"
    readme = (ROOT / "crates/python/README.md").read_text()
    row = next(line for line in readme.splitlines() if "`EmbeddingTimeoutError`" in line)
    for where, text in [
        ("README", row),
        ("EmbeddingTimeoutError", errors.EmbeddingTimeoutError.__doc__),
        ("mmcache.embeddings", mmcache.embeddings.__doc__),
        ("compute_timeout_secs", type(loader.embeddings).compute_timeout_secs.__doc__),
        ("docs/embeddings.md", (ROOT / "docs/embeddings.md").read_text()),
    ]:
        assert said in " ".join(text.split()), (where, said)

    async def main():
        slow = Counter(np.ones(4, dtype=np.float32))

        async def compute():
            await asyncio.sleep(0.2)
            return await slow()

        return await loader.embeddings.get_or_compute("d", compute, model=MODEL)

    assert run(main()).source == "computed"

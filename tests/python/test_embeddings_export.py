"""What a consumer of a cached embedding gets, and what a waiter of a failed compute gets.

- DLPack (`numpy.from_dlpack`, `torch.from_dlpack`): a private copy by default, so
  no consumer can write into the cache; the shared bytes, flagged read-only, only when the
  caller asks with `copy=False`. torch 2.15 ignores the read-only flag (measured: see
  docs/embeddings.md), which is why sharing is not the default.
- A torch tensor that requires grad is refused with the package's typed error.
- Each waiter of a failed compute gets its own exception object.

The torch tests run only where torch is installed and say they skipped elsewhere: CI never
installs it (PyPI's wheel pulls gigabytes of CUDA libraries).
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
import traceback
import warnings

import ml_dtypes
import numpy as np
import pytest

import mmcache
from mmcache import errors

MODEL = "test-model@max_pixels=1003520"
NUMPY_HAS_COPY = np.lib.NumpyVersion(np.__version__) >= "2.1.0"  # max_version and copy=
READ_ONLY, IS_COPIED = 1, 2  # DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED
TORCH_SKIP = "torch is not installed (CI never installs it: its PyPI wheel pulls CUDA)"


def ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def cached(loader, key: str, value):
    """`value` computed into `loader` under `key`, then read back as a memory hit."""

    async def main():
        async def compute():
            return value

        await loader.embeddings.get_or_compute(key, compute, model=MODEL)
        return await loader.embeddings.get(key, model=MODEL)

    return run(main())


def reread(loader, key: str):
    return run(loader.embeddings.get(key, model=MODEL)).array


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


def read_capsule(capsule) -> dict:
    """A DLPack capsule read as a consumer reads it (DLPack 1.0 ABI for `dltensor_versioned`:
    version, manager_ctx, deleter, flags, then the DLTensor; `dltensor`: the DLTensor first)."""
    name = _get_name(capsule)
    base = _get_pointer(capsule, name)
    flags = 0
    if name == b"dltensor_versioned":
        flags = ctypes.c_uint64.from_address(base + 24).value
        base += 32
    ndim = ctypes.c_int32.from_address(base + 16).value
    shape_ptr = ctypes.c_void_p.from_address(base + 24).value
    return {
        "name": name,
        "flags": flags,
        "data": ctypes.c_void_p.from_address(base).value,
        "device": ctypes.c_int32.from_address(base + 8).value,
        "dtype": tuple(ctypes.c_uint8.from_address(base + i).value for i in (20, 21)),
        "shape": tuple(ctypes.c_int64.from_address(shape_ptr + 8 * i).value for i in range(ndim)),
    }


def test_numpy_from_dlpack_gets_a_writable_copy_and_the_cache_keeps_its_values():
    loader = mmcache.Loader()
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    entry = cached(loader, "np", value)
    got = np.from_dlpack(entry)
    assert ptr(got) != ptr(entry.array)
    np.testing.assert_array_equal(got, value)
    if NUMPY_HAS_COPY:
        assert got.flags.writeable
        got += 100  # numpy writes its own copy
        forced = np.from_dlpack(entry, copy=True)
        assert forced.flags.writeable and ptr(forced) != ptr(entry.array)
    else:
        # numpy before 2.1 asks for DLPack 0.x (a `dltensor` capsule, our copy) and marks
        # every array it imports read-only, as that DLPack cannot say.
        assert not got.flags.writeable
    np.testing.assert_array_equal(reread(loader, "np"), value)


def test_copy_false_is_the_shared_bytes_flagged_read_only_and_numpy_keeps_it_so():
    loader = mmcache.Loader()
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    entry = cached(loader, "shared", value)
    capsule = read_capsule(entry.__dlpack__(max_version=(1, 0), copy=False))
    assert capsule["flags"] & READ_ONLY and not capsule["flags"] & IS_COPIED
    assert capsule["data"] == ptr(entry.array)  # the cached bytes, no copy
    # A consumer before DLPack 1.0 could not see the flag: the shared bytes are refused.
    with pytest.raises(BufferError, match="max_version"):
        entry.__dlpack__(copy=False)
    if NUMPY_HAS_COPY:
        view = np.from_dlpack(entry, copy=False)
        assert ptr(view) == ptr(entry.array) and not view.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            view += 1
        with pytest.raises(ValueError):
            view.flags.writeable = True
    np.testing.assert_array_equal(reread(loader, "shared"), value)


@pytest.mark.parametrize(
    "dtype, code_bits",
    [(np.float32, (2, 32)), (np.float16, (2, 16)), (ml_dtypes.bfloat16, (4, 16))],
)
def test_the_default_export_is_a_copy_in_both_dlpack_versions(dtype, code_bits):
    loader = mmcache.Loader()
    value = np.arange(6, dtype=np.float32).astype(dtype).reshape(2, 3)
    entry = cached(loader, "d", value)
    versioned = read_capsule(entry.__dlpack__(max_version=(1, 0)))
    assert versioned["name"] == b"dltensor_versioned"
    assert versioned["flags"] == IS_COPIED  # writable, and says it was copied
    legacy = read_capsule(entry.__dlpack__())  # pre-1.0 consumer: nothing to flag on a copy
    assert legacy["name"] == b"dltensor"
    for c in (versioned, legacy, read_capsule(entry.__dlpack__(max_version=(1, 0), copy=True))):
        assert c["data"] != ptr(entry.array)
        assert (c["device"], c["dtype"], c["shape"]) == (1, code_bits, (2, 3))
    with pytest.raises(BufferError, match="host memory"):
        entry.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    # Capsules never consumed free their copies (no leak, no crash); the cache is intact.
    assert reread(loader, "d").tobytes() == value.tobytes()


def test_torch_from_dlpack_gets_a_copy_that_add_cannot_push_into_the_cache():
    torch = pytest.importorskip("torch", reason=TORCH_SKIP)
    loader = mmcache.Loader()
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        value = np.arange(4, dtype=np.float32).astype(dtype)
        key = f"t-{np.dtype(dtype).name}"
        entry = cached(loader, key, value)
        tensor = torch.from_dlpack(entry)
        assert tensor.data_ptr() != ptr(entry.array)
        tensor.add_(1)
        assert reread(loader, key).tobytes() == value.tobytes()
        assert torch.from_dlpack(entry).float().tolist() == [0.0, 1.0, 2.0, 3.0]
        # Asked for, the shared bytes: torch ignores the read-only flag (the docs say so).
        assert torch.from_dlpack(entry, copy=False).data_ptr() == ptr(entry.array)
    # The rows of docs/embeddings.md for torch over `entry.array`: these share the cache's
    # bytes (torch ignores numpy's read-only flag too); torch.tensor copies.
    entry = cached(loader, "t-array", np.arange(4, dtype=np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        shared = [torch.from_numpy(entry.array), torch.as_tensor(entry.array)]
    shared.append(torch.from_dlpack(entry.array))
    assert all(t.data_ptr() == ptr(entry.array) for t in shared)
    assert torch.tensor(entry.array).data_ptr() != ptr(entry.array)


class GradTensor:
    """A stand-in for a torch tensor with `requires_grad=True`, as torch 2.15 shows one to a
    DLPack consumer (measured): `requires_grad` is True and `__dlpack__` raises BufferError
    (older torch: RuntimeError) with this message. mmcache checks `requires_grad` before
    it calls `__dlpack__`, so this object takes the same path as the real tensor, which the
    torch test below covers where torch is installed."""

    requires_grad = True

    def __dlpack__(self, **kwargs):
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")

    def __dlpack_device__(self):
        return (1, 0)


def refused(value):
    loader = mmcache.Loader()
    runs = []

    async def main():
        async def compute():
            runs.append(1)
            return value

        with pytest.raises(errors.InvalidEmbeddingError) as raised:
            await loader.embeddings.get_or_compute("grad", compute, model=MODEL)
        return raised.value, await loader.embeddings.get("grad", model=MODEL)

    raised, hit = run(main())
    assert runs == [1] and hit is None
    return raised


def test_a_tensor_that_requires_grad_is_a_typed_error_saying_to_detach():
    raised = refused(GradTensor())
    assert "requires grad" in str(raised) and "detach()" in str(raised)


def test_a_torch_tensor_that_requires_grad_is_a_typed_error_saying_to_detach():
    torch = pytest.importorskip("torch", reason=TORCH_SKIP)
    raised = refused(torch.ones(4, requires_grad=True))
    assert "requires grad" in str(raised) and "detach()" in str(raised)
    loader = mmcache.Loader()
    entry = cached(loader, "detached", torch.ones(4, requires_grad=True).detach())
    assert entry.array.tolist() == [1.0] * 4


class EncoderDown(RuntimeError):
    def __init__(self, message: str, gpu: int) -> None:
        super().__init__(message, gpu)
        self.gpu = gpu


class Picky(Exception):
    """Its `__init__` does not take its own `args`, so `copy.copy` cannot rebuild it."""

    def __init__(self, code: int, where: str) -> None:
        super().__init__(f"{code} at {where}")
        self.code = code


def coalesced() -> float:
    for line in mmcache.metrics_text().splitlines():
        if line.startswith("mmcache_embedding_coalesced_total"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def waiters_of_one_failure(loader, key: str, fail, n: int):
    """`(exception, its traceback's length when caught)` for each of `n` callers, each on an
    event loop of its own in a thread, joined to one compute that raises `fail()`: a fresh
    exception (one raised again would carry the frames of its earlier raises). Loops of their
    own, as a worker's threads have: a shared object's traceback then grows while the waiters
    raise it one after another."""
    started, release = threading.Event(), threading.Event()
    runs, caught = [], {}

    async def compute():
        runs.append(1)
        started.set()
        while not release.is_set():  # bounded by the 60 s wait_for of its caller
            await asyncio.sleep(0.01)
        raise fail()

    def waiter(i: int) -> None:
        async def main():
            try:
                await loader.embeddings.get_or_compute(key, compute, model=MODEL)
            except Exception as e:  # what each waiter got is the point
                caught[i] = (e, len(frames(e)))

        run(main())

    before = coalesced()
    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(n)]
    threads[0].start()
    assert started.wait(30)
    for t in threads[1:]:
        t.start()
    for _ in range(3000):  # bounded (30 s): until every other caller has joined
        if coalesced() >= before + n - 1:
            break
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert runs == [1] and len(caught) == n
    return [caught[i] for i in range(n)]


def frames(e: BaseException) -> list[str]:
    return [f.name for f in traceback.extract_tb(e.__traceback__)]


def test_each_waiter_gets_its_own_exception_and_tracebacks_do_not_grow():
    loader = mmcache.Loader()
    cause = KeyError("batch 7")

    def fail():
        down = EncoderDown("gpu fell off", 3)
        down.__cause__ = cause
        return down

    caught = [c for i in range(2) for c in waiters_of_one_failure(loader, f"e{i}", fail, 4)]
    outcomes = [e for e, _ in caught]
    assert len({id(o) for o in outcomes}) == len(outcomes) == 8
    for o in outcomes:
        assert type(o) is EncoderDown
        assert (str(o), o.args, o.gpu) == ("('gpu fell off', 3)", ("gpu fell off", 3), 3)
        assert o.__cause__ is cause
        # The compute's own frames are kept, under each waiter's own.
        assert "compute" in frames(o)
    # Each waiter's traceback is its frames plus the compute's: one length for every waiter
    # in both rounds, the same when caught and after the others raised theirs (one shared
    # object had 4 to 8 frames, changing under a waiter as the others raised it).
    lengths = {n for _, n in caught} | {len(frames(o)) for o in outcomes}
    assert len(lengths) == 1, [(n, len(frames(o))) for o, n in caught]


def test_an_exception_copy_cannot_rebuild_is_still_one_per_waiter():
    loader = mmcache.Loader()
    caught = waiters_of_one_failure(loader, "p", lambda: Picky(503, "encoder"), 3)
    assert len({id(o) for o, _ in caught}) == 3
    for o, _ in caught:
        assert type(o) is Picky and str(o) == "503 at encoder" and o.code == 503
    assert len({n for _, n in caught} | {len(frames(o)) for o, _ in caught}) == 1

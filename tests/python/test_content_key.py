"""mmcache.content_key: the content key of a loaded image, read from its owner, never rehashed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from blake3 import blake3
from conftest import png

import mmcache

MODEL = "test-model@max_pixels=1003520"


def test_same_bytes_under_two_urls_have_one_content_key_and_one_embedding(origin, path):
    loader = mmcache.Loader(allow_internal=True)
    body = png(24, 16, seed=7)
    a = loader.load_sync(origin.image(path(), body))
    b = loader.load_sync(origin.image(path(), body))
    other = loader.load_sync(origin.image(path(), png(24, 16, seed=8)))

    key = mmcache.content_key(a)
    assert isinstance(key, mmcache.ContentKey) and isinstance(key, str)
    assert key == blake3(body).hexdigest()
    assert mmcache.content_key(b) == key
    assert mmcache.content_key(a[2:, 1:]) == key, "a view of the array keeps its owner"
    assert mmcache.content_key(other) != key

    runs = 0

    async def encode():
        nonlocal runs
        runs += 1
        return np.ones((4, 8), dtype=np.float32)

    async def both():
        first = await loader.embeddings.get_or_compute(
            mmcache.content_key(a), encode, model=MODEL
        )
        second = await loader.embeddings.get_or_compute(
            mmcache.content_key(b), encode, model=MODEL
        )
        # The same hex as a plain str is a caller key: another entry.
        third = await loader.embeddings.get_or_compute(str(key), encode, model=MODEL)
        return first, second, third

    first, second, third = asyncio.run(asyncio.wait_for(both(), 60))
    assert (first.source, second.source, third.source) == ("computed", "memory", "computed")
    assert runs == 2


def test_content_key_refuses_arrays_no_load_returned():
    with pytest.raises(TypeError, match="no load returned"):
        mmcache.content_key(np.zeros((2, 2, 3), dtype=np.uint8))
    with pytest.raises(TypeError):
        mmcache.content_key("not an image")


def test_a_malformed_content_key_is_a_typed_error():
    loader = mmcache.Loader()

    async def encode():
        return np.ones(2, dtype=np.float32)

    with pytest.raises(mmcache.EmbeddingTypeError, match="64 hex digits"):
        asyncio.run(
            loader.embeddings.get_or_compute(mmcache.ContentKey("zz" * 32), encode, model=MODEL)
        )

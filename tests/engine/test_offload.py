"""The offload thread (engine/offload.py) and values pickled on their own (Pickled).

An Offloader runs (de)serialisation off the event loop, one value after another,
each within a time limit; these tests drive it with functions that block on events
the test controls, so no verdict depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import numpy as np
import pytest

from kernel_cluster.engine.comm import (
    Pickled,
    SerializationError,
    dumps,
    loads,
    pickle_value,
    unpickle,
)
from kernel_cluster.engine.offload import Offloader


def run(coro):
    return asyncio.run(coro)


def test_results_come_back_in_order_with_errors_in_place() -> None:
    offloader = Offloader("test-offload", limit=30)

    def fn(x: int) -> int:
        if x == 2:
            raise ValueError("two")
        return x * 10

    try:
        out = run(offloader.map(fn, [1, 2, 3]))
    finally:
        offloader.close()
    assert out[0] == (True, 10) and out[2] == (True, 30)
    assert out[1][0] is False and str(out[1][1]) == "two"


def test_work_runs_on_the_offload_thread_unless_inline() -> None:
    offloader = Offloader("test-offload", limit=30)
    here = threading.get_ident()
    try:
        threads = run(offloader.map(lambda _: threading.get_ident(), [0, 1]))
        inline = run(offloader.map(lambda _: threading.get_ident(), [0], inline=lambda _: True))
    finally:
        offloader.close()
    assert {t for _, t in threads} != {here}
    assert inline == [(True, here)]


def test_a_value_over_the_limit_is_given_up_and_the_rest_go_on() -> None:
    offloader = Offloader("test-offload", limit=0.2)
    release = threading.Event()

    def fn(x: int) -> int:
        if x == 1:
            release.wait(30)  # stuck until the test ends
        return x

    async def main() -> tuple[list, list]:
        first = await offloader.map(fn, [0, 1, 2])
        # the next request does not wait behind the stuck value
        second = await offloader.map(fn, [3])
        return first, second

    try:
        first, second = run(main())
        assert first[0] == (True, 0) and first[2] == (True, 2)
        assert first[1][0] is False and isinstance(first[1][1], TimeoutError)
        assert second == [(True, 3)]
        assert offloader.stuck == 1
    finally:
        release.set()
        offloader.close()


def test_the_loop_runs_while_a_value_is_worked_on() -> None:
    offloader = Offloader("test-offload", limit=30)
    started, release = threading.Event(), threading.Event()

    def slow(x: int) -> int:
        started.set()
        if not release.wait(10):  # on the loop, it would wait for itself
            raise AssertionError("the loop did not run while the value was worked on")
        return x

    async def main() -> list:
        work = asyncio.ensure_future(offloader.map(slow, [7]))
        while not started.is_set():
            await asyncio.sleep(0.001)
        # the loop turns while the value is in work: it lets the value go itself
        release.set()
        return await work

    try:
        assert run(main()) == [(True, 7)]
    finally:
        release.set()
        offloader.close()


def test_a_pickled_value_travels_packed_and_comes_back_exact() -> None:
    value = [1, (2, 3), {"a": [4]}, np.arange(100_000), b"x" * 100_000, bytearray(10)]
    packed = pickle_value(value)
    msg = loads(dumps({"data": {"k": packed}}))
    got = msg["data"]["k"]
    assert type(got) is Pickled  # not unpickled by the message's reader
    out = unpickle(got)
    assert out[:3] == value[:3] and type(out[0]) is int and type(out[2]["a"]) is list
    assert (out[3] == value[3]).all()
    assert out[4] == value[4] and type(out[5]) is bytearray


def test_a_large_pickle_and_compressed_buffers_round_trip() -> None:
    value = {"zeros": np.zeros(1_000_000), "text": ["word"] * 50_000}
    packed = pickle_value(value)
    assert packed.nbytes < 2_000_000  # the zeros went compressed
    out = unpickle(loads(dumps(packed)))
    assert (out["zeros"] == 0).all() and out["text"] == value["text"]


class _Unloadable:
    def __reduce__(self):
        return (_fail, ())


def _fail() -> None:
    raise ImportError("not here")


def test_unpickling_errors_name_the_value() -> None:
    packed = loads(dumps(pickle_value(_Unloadable())))
    with pytest.raises(SerializationError, match=r"Cannot deserialize the thing.*not here"):
        unpickle(packed, "the thing")
    with pytest.raises(SerializationError, match="lock"):
        pickle_value(threading.Lock(), "a lock")


def test_a_large_compressible_buffer_travels_in_chunks_and_comes_back_exact() -> None:
    """Compressed in 8 MiB chunks, a frame each: the receiver decompresses them one by
    one (python-lz4 holds the GIL while it copies what it decompressed; one 1.5 GB
    block held it long enough for a worker to be taken for dead)."""
    value = np.arange(20 << 20, dtype=np.uint8)  # 20 MiB, repetitive
    packed = pickle_value(value)
    assert len(packed.buffers) == 3 and packed.nbytes < value.nbytes // 10
    frames = dumps({"v": packed})
    assert len(frames) == 1 + 3  # the body (with the short pickle), a frame per chunk
    back = unpickle(loads(frames)["v"])
    assert (back == value).all()
    # and when the message itself carries the array (pickled by the comm layer)
    eager = loads(dumps({"v": value}))["v"]
    assert (eager == value).all()
    eager[0] = 1  # writable, as received buffers are


class _Value:
    pass


def test_the_offload_thread_keeps_nothing_of_the_work_it_did() -> None:
    """A reply's values must go when their owner lets go of them: the thread, waiting
    for its next batch, held the last one (and a worker stayed over its memory limit)."""
    offloader = Offloader("test-offload", limit=30)
    value = _Value()
    ref = weakref.ref(value)
    try:
        assert run(offloader.map(lambda _, v=value: v is not None, [0])) == [(True, True)]
        del value
        gc.collect()
        assert ref() is None
    finally:
        offloader.close()

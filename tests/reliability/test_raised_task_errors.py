"""A task's error raised to the user must not keep the futures of the frames it passes.

Before the fix, ``get``/``result``/``gather`` raised the exception object the future's
state keeps: Python then hangs every frame it crosses on that object's traceback, and
those frames keep their locals. A persisted dask collection with one failed piece,
computed further (dask's ``compute`` holds the collection in its frame), or a future
whose ``result()`` raised inside a function, was held for good through its own state:
its tasks and the good pieces' data stayed on the cluster after the user let go of it.
"""

from __future__ import annotations

import gc

import pytest

from tests.engine.helpers import is_idle, wait_for

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")


class BlockError(Exception):
    pass


def fail_on_first(block, block_info=None):
    if block_info[0]["chunk-location"] == (0, 0):
        raise BlockError("the first block is bad")
    return block


def bad(x):
    raise BlockError(f"bad {x}")


class TwoPartError(Exception):
    """An exception whose __init__ does not take its ``args`` back."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")
        self.why = why


def two_part(x):
    raise TwoPartError(f"bad {x}", "reasons")


def test_a_persisted_collection_with_a_failed_piece_is_released(client, cluster):
    pieces = client.persist(da.ones((40, 40), chunks=10).map_blocks(fail_on_first, dtype=float))
    with pytest.raises(BlockError, match="first block"):
        pieces.sum().compute(scheduler=client)
    with pytest.raises(BlockError, match="first block"):
        client.compute(pieces.sum(), sync=True)
    del pieces
    gc.collect()
    wait_for(lambda: is_idle(cluster), what="the engine to forget the persisted pieces")


def test_a_future_whose_result_raised_in_a_function_is_released(client, cluster):
    def run() -> str:
        future = client.submit(bad, 1)
        try:
            future.result(timeout=30)
        except BlockError as exc:
            return str(exc)
        return "no error"

    assert run() == "bad 1"

    def run_two_part() -> str:
        future = client.submit(two_part, 1)
        try:
            future.result(timeout=30)
        except TwoPartError as exc:
            return f"{exc} ({exc.why})"
        return "no error"

    assert run_two_part() == "bad 1: reasons (reasons)"
    futures = client.map(bad, [2, 3])

    def gather(fs: list) -> None:
        client.gather(fs)

    with pytest.raises(BlockError):
        gather(futures)
    del futures
    gc.collect()
    wait_for(lambda: is_idle(cluster), what="the engine to forget the erred tasks")


def test_the_raised_error_is_the_tasks_with_its_traceback(client):
    future = client.submit(bad, 4)
    with pytest.raises(BlockError, match="bad 4") as info:
        future.result(timeout=30)
    assert type(future.exception()) is BlockError and str(future.exception()) == "bad 4"
    assert "bad" in [entry.name for entry in info.traceback]  # the task's own frame

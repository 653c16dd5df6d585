"""Issue 17: nothing on a worker keeps a task's inputs or result once they are released.

Before the fix, each task thread kept its last task's function, arguments and result
in the locals of its loop while it slept: a 500 MB result stayed resident after the
user let go of it, until that thread happened to run something else.
"""

from __future__ import annotations

import gc
import weakref

from tests.engine.helpers import is_idle, on_workers, wait_for


class Blob:
    """A result that can be weakly referenced (as a numpy array can)."""

    def __init__(self, n: int) -> None:
        self.payload = bytes(n)


def make_blob(n: int) -> Blob:
    return Blob(n)


def _watch(key, dask_worker=None):
    """Keep a weak reference to the value the worker holds for ``key``."""
    if key not in dask_worker.data:
        return False
    dask_worker._released_watch = weakref.ref(dask_worker.data[key])
    return True


def _watched_alive(dask_worker=None):
    ref = getattr(dask_worker, "_released_watch", None)
    if ref is None:
        return None
    gc.collect()
    return ref() is not None


def _forget_watch(dask_worker=None):
    dask_worker.__dict__.pop("_released_watch", None)


def test_a_released_result_dies_on_the_worker(client, cluster):
    blob = client.submit(make_blob, 1_000_000)
    blob.result(timeout=30)
    key = blob.key
    watching = on_workers(cluster, lambda dask_worker: _watch(key, dask_worker))
    assert sum(watching.values()) == 1
    try:
        del blob
        gc.collect()
        wait_for(lambda: is_idle(cluster), what="the engine to forget both tasks")
        alive = {a: v for a, v in on_workers(cluster, _watched_alive).items() if v is not None}
        assert list(alive.values()) == [False], f"the released result is still alive: {alive}"
    finally:
        on_workers(cluster, _forget_watch)


def size_of(blob: Blob) -> int:
    return len(blob.payload)


def test_a_released_input_dies_on_the_worker(client, cluster):
    blob = client.submit(make_blob, 1_000_000)
    blob.result(timeout=30)
    key = blob.key
    watching = on_workers(cluster, lambda dask_worker: _watch(key, dask_worker))
    assert sum(watching.values()) == 1
    try:
        # the input passes through a task thread, which then has nothing else to do
        size = client.submit(size_of, blob)
        assert size.result(timeout=30) == 1_000_000
        del blob, size
        gc.collect()
        wait_for(lambda: is_idle(cluster), what="the engine to forget both tasks")
        alive = {a: v for a, v in on_workers(cluster, _watched_alive).items() if v is not None}
        assert list(alive.values()) == [False], f"the released input is still alive: {alive}"
    finally:
        on_workers(cluster, _forget_watch)

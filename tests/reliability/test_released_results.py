"""Issue 17: nothing on a worker keeps a task's inputs or result once they are released.

Before the fix, each task thread kept its last task's function, arguments and result
in the locals of its loop while it slept: a 500 MB result stayed resident after the
user let go of it, until that thread happened to run something else.
"""

from __future__ import annotations

import gc
import weakref

from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
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


def test_a_released_input_dies_on_the_worker(processes):
    """Without a memory limit a worker's data is a plain dict, and a task's inputs are
    handed to its thread as a dict of values: the thread must not keep that either."""
    with (
        KernelCluster(
            n_workers=1, threads_per_worker=1, processes=processes, memory_limit=0
        ) as cluster,
        Client(cluster) as client,
    ):
        blob = client.submit(make_blob, 1_000_000)
        blob.result(timeout=30)
        key = blob.key
        assert on_workers(cluster, lambda dask_worker: _watch(key, dask_worker))
        # the input passes through the one task thread, which then has nothing to do
        size = client.submit(size_of, blob)
        assert size.result(timeout=30) == 1_000_000
        del blob, size
        gc.collect()
        wait_for(lambda: is_idle(cluster), what="the engine to forget both tasks")
        alive = list(on_workers(cluster, _watched_alive).values())
        assert alive == [False], "the released input is still alive"

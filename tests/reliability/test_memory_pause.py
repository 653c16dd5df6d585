"""Issue 17: a worker paused for memory must not hang the computation.

Before the fix, 6 runs in 10 of the workload below hung: a worker paused with its
values on disk and nothing left in memory, yet its process stayed above the pause
threshold (freed buffers stayed in the C heap; a task thread held its last result),
and the scheduler, which did not know it was paused, kept giving it tasks.

Now the worker tells the scheduler when it pauses and resumes (a paused worker gets
nothing new), trims the C heap when it spills or is paused, and a worker process
stuck paused with nothing to spill and nothing running exits, so that its nanny
replaces it and its tasks run again.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import cloudpickle
import numpy as np
import pytest

from kernel_cluster.client.client import Client
from kernel_cluster.client.futures import wait
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import wait_for

N = 60
ITEMS = 10 * 2**20 // 8  # float64s in 10 MiB


def make(i: int) -> np.ndarray:
    return np.full(ITEMS, i, dtype=np.float64)


def use(a: np.ndarray) -> float:
    return float(a[0]) + a.size


@pytest.fixture(scope="module")
def small_cluster() -> Iterator[KernelCluster]:
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        # a limit this small is half the worker's own memory: past the terminate
        # fraction its nanny would end it (tested in test_memory_limits.py); here the
        # workers are to pause, spill and recover by themselves
        with KernelCluster(
            processes=True,
            n_workers=2,
            threads_per_worker=1,
            memory_limit="100MB",
            memory_terminate_fraction=0,
        ) as cluster:
            yield cluster
    finally:
        cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.timeout(600)  # 20 rounds of spilling: 100 s beside busy processes
def test_twenty_runs_over_the_memory_limit_all_finish_exactly(small_cluster):
    pids = small_cluster.worker_pids()
    with Client(small_cluster) as client:
        for run in range(20):
            xs = client.map(make, range(N), key=[f"make-{run}-{i}" for i in range(N)])
            ys = client.map(use, xs, key=[f"use-{run}-{i}" for i in range(N)])
            done, not_done = wait(ys, timeout=30)
            assert not not_done, f"run {run}: {len(not_done)} tasks hang"
            assert client.gather(ys) == [i + ITEMS for i in range(N)], f"run {run}"
            del xs, ys, done, not_done
    # the workers got their memory back by themselves: none had to be replaced
    assert small_cluster.worker_pids() == pids


def leak_and_linger(n: int, seconds: float) -> int:
    """Keep ``n`` bytes that no spilling can free, then run long enough to be paused."""
    sys.__dict__.setdefault("_kernel_cluster_test_leak", []).append(b"\x01" * n)
    time.sleep(seconds)
    return n


def pid_now(i: int) -> int:
    import os

    return os.getpid()


def _stuck_after(seconds: float, dask_worker=None) -> None:
    dask_worker.memory_stuck_seconds = seconds


@pytest.mark.timeout(120)
def test_a_worker_stuck_over_its_limit_is_replaced_and_its_tasks_run_again(small_cluster):
    with Client(small_cluster) as client:
        before = small_cluster.worker_pids()
        leaky = sorted(before)[0]
        client.run(_stuck_after, 1.0, workers=[leaky])
        # the leak pauses the worker while it runs; the tasks queued behind it there
        # cannot start, and it can never resume: nothing it holds can be spilled
        leak = client.submit(leak_and_linger, 90_000_000, 0.5, workers=[leaky], pure=False)
        behind = client.map(
            pid_now, range(4), workers=[leaky], allow_other_workers=True, pure=False
        )
        assert leak.result(timeout=30) == 90_000_000
        del leak
        _, not_done = wait(behind, timeout=60)
        assert not not_done, "tasks on the stuck worker hang"
        assert before[leaky] not in client.gather(behind)
        pids = small_cluster.worker_pids
        wait_for(
            lambda: len(pids()) == 2 and before[leaky] not in pids().values(),
            timeout=30,
            what="a new worker in place of the stuck one",
        )


class Unspillable:
    """A result the worker counts as ``n`` bytes and cannot write to disk."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.lock = threading.Lock()  # does not pickle

    def __sizeof__(self) -> int:
        return self.n


def inc(x: int) -> int:
    return x + 1


@pytest.mark.timeout(60)
def test_an_embedded_worker_that_cannot_spill_runs_its_tasks_anyway():
    """No nanny can replace an embedded worker: stuck paused, it resumes with a warning."""
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, memory_limit="100MB") as cluster,
        Client(cluster) as client,
    ):
        (address,) = client.scheduler_info()["workers"]
        client.run(_stuck_after, 1.0)
        big = client.submit(Unspillable, 90_000_000)
        big.result(timeout=10)
        wait_for(
            lambda: client.scheduler_info()["workers"][address]["paused"],
            timeout=5,
            what="the worker to pause",
        )
        later = client.map(inc, range(3))
        _, not_done = wait(later, timeout=30)
        assert not not_done, "tasks on a worker stuck paused hang"
        assert client.gather(later) == [1, 2, 3]
        del big

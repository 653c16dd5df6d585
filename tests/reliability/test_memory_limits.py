"""Issues 26.2 and 32.8: memory limits that end, and that limit.

26.2, before: results that cannot be pickled (so cannot be spilled) piling past
``memory_limit`` on a worker process got the worker restarted as stuck, the same
values computed again, and the worker restarted again, for ever. Now a value held
unspilled through ``allowed_failures`` + 1 such restarts fails its task with
``UnspillableMemoryError``, which names the cause and what to do; a worker its nanny
ends first (past ``memory_terminate_fraction``) counts too, for the values it last
reported it could not spill.

32.8, before: one task allocating three times the limit ran to the end, with only a
"paused" line in the log. Now the nanny ends a worker process whose memory passes
``memory_terminate_fraction`` (0.95) of its limit, and the task running there fails,
after ``allowed_failures``, with ``KilledWorker`` naming the limit and the peak.
Embedded workers cannot be held to a limit: the cluster warns once when the kernel's
memory passes what their limits add up to.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from kernel_cluster import Client, KilledWorker, wait
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import on_loop, pickled_by_value, wait_for

MiB = 2**20


@pytest.fixture(autouse=True)
def _by_value() -> Iterator[None]:
    with pickled_by_value(sys.modules[__name__]):
        yield


class Unspillable:
    """``n`` bytes of memory that cannot be written to disk (a lock does not pickle)."""

    def __init__(self, n: int) -> None:
        self.payload = np.ones(n, dtype=np.uint8)
        self.lock = threading.Lock()

    def __sizeof__(self) -> int:
        return self.payload.nbytes


def unspillable(i: int) -> Unspillable:
    value = Unspillable(20 * MiB)
    time.sleep(0.2)  # the memory monitor sees the worker grow, and pauses it in time
    return value


def total_bytes(xs: list[Unspillable]) -> int:
    return sum(x.payload.nbytes for x in xs)


@pytest.mark.timeout(150)
def test_values_that_cannot_spill_fail_after_bounded_restarts() -> None:
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit="200 MiB",
            memory_stuck_seconds=1.0,
            # between pause (80%) and the limit: stuck, not ended by its nanny
            memory_terminate_fraction=1.0,
            allowed_failures=1,
        ) as cluster,
        Client(cluster) as client,
    ):
        # held on the worker and never gathered: they pile up past its limit before the
        # task that sums them up can run
        futures = client.map(unspillable, range(12))
        total = client.submit(total_bytes, futures)
        with pytest.raises(MemoryError) as info:
            total.result(timeout=120)
        text = str(info.value)
        assert "cannot be spilled" in text and "memory_limit" in text, text
        assert "cannot pickle '_thread.lock'" in text, text
        assert "restarted 2 times" in text, text
        failed = [f for f in futures if f.status == "error"]
        assert failed, [f.status for f in futures]
        assert all(isinstance(f.exception(), MemoryError) for f in failed)
        # the cluster works on, with a worker of its own
        wait_for(lambda: len(cluster.worker_pids()) == 1, 30, "a worker to be back")
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3


def unspillable_large(i: int) -> Unspillable:
    # two of them at once (two threads) pass 95% of 200 MiB before a pause can stop
    # the second: the nanny ends the worker before it could call itself stuck
    return Unspillable(80 * MiB)


@pytest.mark.timeout(180)
def test_unpicklable_values_past_a_small_limit_end_and_the_cluster_goes_on() -> None:
    """Issue 26.2 with the default terminate fraction: the nanny ended the worker
    before it could call itself stuck, so the scheduler never learnt that its values
    could not spill, and computed them again for ever. The worker now reports them as
    they pile up, and its death counts as a restart for each of them."""
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            memory_limit="200 MiB",
            allowed_failures=1,
        ) as cluster,
        Client(cluster) as client,
    ):
        # 640 MiB that the task summing them needs at once: it can never run
        futures = client.map(unspillable_large, range(8))
        total = client.submit(total_bytes, futures)
        with pytest.raises(MemoryError) as info:
            total.result(timeout=150)
        text = str(info.value)
        assert "cannot be spilled" in text and "memory_limit" in text, text
        assert "cannot pickle '_thread.lock'" in text, text
        # every one ends: failed (those held are at fault; one running when the nanny
        # struck may be blamed for it), or held on a worker that can hold it
        wait(futures, timeout=120)
        failed = [f for f in futures if f.status == "error"]
        assert failed, [f.status for f in futures]
        for f in failed:
            error = f.exception()
            assert isinstance(error, MemoryError | KilledWorker), error
            assert "memory_limit" in str(error), error
        wait_for(lambda: len(cluster.worker_pids()) == 1, 30, "a worker to be back")
        assert client.submit(sum, [1, 2]).result(timeout=60) == 3


def allocate(n: int) -> int:
    block = np.ones(n, dtype=np.uint8)  # touches every page: resident at once
    return int(block[::4096].sum())


def allocate_and_hold(n: int) -> int:
    """A task working on three times its worker's limit for a minute.

    The nanny samples memory every ``memory_monitor_interval``: a block allocated,
    summed and freed in between two samples (``allocate`` on a busy machine did so in
    2 runs of 6) is never seen, which is what a sampler is.
    """
    block = np.ones(n, dtype=np.uint8)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
        block[::4096] += 1  # still in use
    return int(block[::4096].sum())


@pytest.mark.timeout(120)
def test_a_task_allocating_past_the_limit_fails_naming_the_limit_and_the_peak() -> None:
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit="200 MiB",
            allowed_failures=1,
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = cluster.worker_pids()
        future = client.submit(allocate_and_hold, 600 * MiB)
        with pytest.raises(KilledWorker) as info:
            future.result(timeout=90)
        text = str(info.value)
        assert "memory_limit" in text and "200 MiB" in text and "95%" in text, text
        assert "peak" in text, text
        # the worker it ran on was replaced, and the cluster goes on
        wait_for(
            lambda: len(cluster.worker_pids()) == 1 and cluster.worker_pids() != pids,
            30,
            "a new worker",
        )
        assert client.submit(allocate, 10 * MiB).result(timeout=30) == 10 * MiB // 4096


def test_the_terminate_fraction_is_a_checked_setting() -> None:
    from kernel_cluster.engine.config import WorkerConfig

    assert WorkerConfig().memory_terminate_fraction == 0.95
    assert WorkerConfig(memory_terminate_fraction=0).memory_terminate_fraction == 0  # never
    for bad in (-0.1, 1.5, float("nan"), "0.9", True):
        with pytest.raises(ValueError, match="memory_terminate_fraction"):
            WorkerConfig(memory_terminate_fraction=bad)
    config = WorkerConfig(memory_terminate_fraction=0.9)
    assert WorkerConfig.from_argv(config.to_argv()) == config


def test_embedded_workers_warn_once_when_the_kernel_passes_their_limits(caplog) -> None:
    with KernelCluster(n_workers=1, threads_per_worker=1, memory_limit="40 MiB") as cluster:
        # this process (pytest, numpy, the engine) is well over 40 MiB already
        with caplog.at_level(logging.WARNING, logger="kernel_cluster"):
            on_loop(cluster, cluster.check_kernel_memory)
            on_loop(cluster, cluster.check_kernel_memory)
        warned = [r for r in caplog.records if "cannot hold" in r.getMessage()]
        assert len(warned) == 1, [r.getMessage() for r in caplog.records]
        text = warned[0].getMessage()
        assert "40 MiB" in text and "processes=True" in text, text

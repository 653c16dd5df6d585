"""Issue 32.2: every wait honours its timeout, and a task that may only run on workers
that are not there says so and fails after ``no_workers_timeout``.

Before: ``result(timeout=20)`` blocked for over 60 s when the task's pinned worker was
killed after the task finished (the result was being computed again, for ever, since
it could only run there), and a task pinned to an address that is not a worker never
ended and never said why.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from kernel_cluster.client.client import Client
from kernel_cluster.core.restrictions import NoValidWorkerError
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import on_loop, wait_for


def inc(x: int) -> int:
    return x + 1


def task_state(cluster: KernelCluster, key) -> str | None:
    return on_loop(cluster, lambda: getattr(cluster.scheduler.state.tasks.get(key), "state", None))


def bounded(fn, bound: float = 30.0):
    """``fn()`` in a thread; what it returned or raised, or AssertionError if it is still
    blocked after ``bound`` seconds."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"still blocked after {bound} s"
    return out


def test_result_timeout_holds_when_the_pinned_worker_was_killed(caplog):
    with (
        KernelCluster(
            n_workers=2, threads_per_worker=1, processes=True, no_workers_timeout=3
        ) as cluster,
        Client(cluster) as client,
        caplog.at_level(logging.WARNING, logger="kernel_cluster"),
    ):
        pinned = sorted(cluster.worker_pids())[0]
        f = client.submit(inc, 1, workers=[pinned])
        assert f.result(timeout=10) == 2
        os.kill(cluster.worker_pids()[pinned], signal.SIGKILL)
        out = bounded(lambda: f.result(timeout=1))
        assert isinstance(out.get("error"), TimeoutError), out
        # it cannot run anywhere: it says so, then fails naming the address
        out = bounded(lambda: f.exception(timeout=20))
        assert isinstance(out.get("value"), NoValidWorkerError), out
        assert pinned in str(out["value"]) and "no_workers_timeout" in str(out["value"])
        assert any(
            pinned in r.getMessage() and "no-worker" in r.getMessage() for r in caplog.records
        )
        assert client.submit(inc, 2).result(timeout=10) == 3  # the cluster works on


def test_a_task_pinned_to_an_address_that_is_no_worker_fails_after_the_timeout(processes):
    with (
        KernelCluster(
            n_workers=1, threads_per_worker=1, processes=processes, no_workers_timeout=1
        ) as cluster,
        Client(cluster) as client,
    ):
        f = client.submit(inc, 1, workers=["tcp://10.0.0.1:1"])
        wait_for(lambda: task_state(cluster, f.key) is not None, what="the submission")
        assert task_state(cluster, f.key) in ("no-worker", "erred")
        out = bounded(lambda: f.exception(timeout=20))
        assert isinstance(out.get("value"), NoValidWorkerError), out
        assert "tcp://10.0.0.1:1" in str(out["value"])
        with pytest.raises(NoValidWorkerError):
            f.result(timeout=5)
        assert client.submit(inc, 2).result(timeout=10) == 3


def test_a_worker_that_joins_in_time_takes_a_task_waiting_for_it():
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, no_workers_timeout=60) as cluster,
        Client(cluster) as client,
    ):
        future_worker = f"inproc://{cluster.name}/worker-1"  # the next one started
        f = client.submit(inc, 1, workers=[future_worker])
        wait_for(lambda: task_state(cluster, f.key) == "no-worker", what="no-worker")
        cluster.scale(2)
        assert f.result(timeout=10) == 2


def test_a_task_whose_worker_left_while_it_waited_for_it_is_no_worker():
    """Queued for a paused worker, which then leaves: no-worker, not queued for ever."""
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, no_workers_timeout=1) as cluster,
        Client(cluster) as client,
    ):
        address = sorted(cluster.workers)[1]
        on_loop(cluster, lambda: cluster.scheduler.handle_worker_messages(address, [_paused()]))
        f = client.submit(inc, 1, workers=[address])
        wait_for(lambda: task_state(cluster, f.key) == "queued", what="queued for the worker")
        cluster.scale(1)
        assert isinstance(bounded(lambda: f.exception(timeout=20)).get("value"), NoValidWorkerError)


def _paused():
    from kernel_cluster.engine.wire import WorkerPaused

    return WorkerPaused(True)

"""Plumbing shared by the end-to-end engine tests: polling and reading engine state.

Engine state belongs to the loop thread, so every read goes through
``cluster.loop_thread.run`` rather than peeking at dicts another thread mutates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kernel_cluster.engine.cluster import KernelCluster

T = TypeVar("T")


def wait_for(predicate: Callable[[], Any], timeout: float = 10, what: str = "") -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.005)


def on_loop(cluster: KernelCluster, fn: Callable[[], T]) -> T:
    """Run ``fn`` on the engine's loop thread, between two engine events."""
    return cluster.loop_thread.run(fn, timeout=30)


def scheduler_keys(cluster: KernelCluster) -> set:
    return on_loop(cluster, lambda: set(cluster.scheduler.state.tasks))


def keys_in_memory(cluster: KernelCluster) -> set:
    """Keys the scheduler believes some worker holds."""
    return on_loop(
        cluster,
        lambda: {k for k, ts in cluster.scheduler.state.tasks.items() if ts.state == "memory"},
    )


def held_keys(cluster: KernelCluster) -> set:
    """Keys whose values some worker holds in memory."""
    return on_loop(cluster, lambda: {k for w in cluster.workers.values() for k in w.data})


def worker_task_records(cluster: KernelCluster) -> dict:
    """Key -> state of every task record the workers keep."""

    def read() -> dict:
        return {
            key: ts.state for w in cluster.workers.values() for key, ts in w.state.tasks.items()
        }

    return on_loop(cluster, read)


def is_idle(cluster: KernelCluster) -> bool:
    """The scheduler has forgotten every task and no worker holds or tracks one."""
    if scheduler_keys(cluster) or held_keys(cluster):
        return False
    return not worker_task_records(cluster)


def check_engine_state(cluster: KernelCluster) -> None:
    """Validate the scheduler's and every worker's invariants, and that they agree."""

    def check() -> None:
        state = cluster.scheduler.state
        state.validate_state()
        for worker in cluster.workers.values():
            worker.state.validate_state()
        for ts in state.tasks.values():
            for ws in ts.who_has:
                worker = cluster.workers.get(ws.address)
                assert worker is not None, f"{ts} is held by {ws.address}, which is gone"
                assert ts.key in worker.data, f"{ts}: {ws.address} does not hold it"

    on_loop(cluster, check)


def assert_no_new_threads(before: set[threading.Thread], timeout: float = 10) -> None:
    """Every thread started since ``before`` was taken has ended."""

    def leftover() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in before and t.is_alive()]

    try:
        wait_for(lambda: not leftover(), timeout, "engine threads to end")
    except AssertionError:
        names = sorted(t.name for t in leftover())
        raise AssertionError(f"threads left running: {names}") from None

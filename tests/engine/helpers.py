"""Plumbing shared by the end-to-end engine tests: polling and reading engine state.

The same tests run against embedded workers and against worker subprocesses, so
nothing here touches a Worker object directly. Scheduler state belongs to the loop
thread and is read through ``cluster.loop_thread.run``; worker state is read by
running a function on each worker, in its own process (``on_workers``).

Reads of worker state in process mode travel on another connection than the
scheduler's instructions do, so a free-keys message may still be on its way when a
test looks: ``settled`` polls there, and asserts at once where the engine is
embedded (there, an instruction is handled in the same loop iteration it is sent).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

import cloudpickle
import psutil

from kernel_cluster.engine.cluster import KernelCluster


@contextlib.contextmanager
def pickled_by_value(*modules: ModuleType) -> Iterator[None]:
    """Worker processes need not import ``tests``: while the block runs, functions of
    ``modules`` and of these helpers (which tests hand to tasks) travel by value.
    A module registered already (by an outer block) is left to it."""
    mine = [
        m
        for m in dict.fromkeys([sys.modules[__name__], *modules])
        if m.__name__ not in cloudpickle.list_registry_pickle_by_value()
    ]
    for module in mine:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in mine:
            cloudpickle.unregister_pickle_by_value(module)


T = TypeVar("T")


def _polls(predicate: Callable[[], Any], timeout: float, what: str) -> Iterator[None]:
    """Yields after each failed check of ``predicate``; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        yield


def wait_for(predicate: Callable[[], Any], timeout: float = 10, what: str = "") -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    for _ in _polls(predicate, timeout, what):
        time.sleep(0.005)


async def wait_for_async(predicate: Callable[[], Any], timeout: float = 5, what: str = "") -> None:
    """``wait_for`` inside a coroutine: the event loop runs between the checks."""
    for _ in _polls(predicate, timeout, what):
        await asyncio.sleep(0.005)


def settled(cluster: KernelCluster, read: Callable[[], T], expected: T, what: str = "") -> None:
    """``read()`` equals ``expected``: at once if embedded, within 10 s with subprocesses."""
    if not cluster.processes:
        value = read()
        assert value == expected, f"{what}: {value!r} != {expected!r}"
        return
    seen: list = []

    def agrees() -> bool:
        seen[:] = [read()]
        return seen[0] == expected

    try:
        wait_for(agrees, what=what)
    except AssertionError:
        raise AssertionError(f"{what}: {seen[0]!r} != {expected!r} after 10 s") from None


# -- cross-process signals for tasks ------------------------------------------------------


class FileEvent:
    """A ``threading.Event`` that tasks in any process can see: set means the file exists.

    It pickles as its path, so a task can block on it in a worker subprocess.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)

    def set(self) -> None:
        with open(self.path, "a"):
            pass

    def clear(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not os.path.exists(self.path):
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def __repr__(self) -> str:
        return f"<FileEvent {self.path} {'set' if self.is_set() else 'unset'}>"


class CallLog:
    """Values that tasks record, in whichever process they run: one ``repr`` per line."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)

    def append(self, value: Any) -> None:
        with open(self.path, "a") as f:
            f.write(repr(value) + "\n")

    def read(self) -> list:
        try:
            with open(self.path) as f:
                return [ast.literal_eval(line) for line in f]
        except FileNotFoundError:
            return []


def blocked_until(event: FileEvent, value: Any) -> Any:
    assert event.wait(30), "the test never released this task"
    return value


# -- the scheduler's state (always in this process) -----------------------------------------


def on_loop(cluster: KernelCluster, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on the engine's loop thread, between two engine events."""
    return cluster.loop_thread.run(fn, *args, timeout=30)


def scheduler_keys(cluster: KernelCluster) -> set:
    return on_loop(cluster, lambda: set(cluster.scheduler.state.tasks))


def keys_in_memory(cluster: KernelCluster) -> set:
    """Keys the scheduler believes some worker holds."""
    return on_loop(
        cluster,
        lambda: {k for k, ts in cluster.scheduler.state.tasks.items() if ts.state == "memory"},
    )


# -- the workers' state (in this process or in theirs) ---------------------------------------


def on_workers(cluster: KernelCluster, fn: Callable[..., T]) -> dict[str, T]:
    """``fn(dask_worker=worker)`` on every worker, where the worker runs; by address."""
    return on_loop(cluster, cluster.scheduler.run_on_workers, fn)


def _data_keys(dask_worker: Any) -> list:
    return list(dask_worker.data)


def _task_records(dask_worker: Any) -> dict:
    return {key: ts.state for key, ts in dask_worker.state.tasks.items()}


def _validate(dask_worker: Any) -> None:
    dask_worker.state.validate_state()


def data_by_worker(cluster: KernelCluster) -> dict[str, set]:
    """Worker address -> keys whose values it holds."""
    return {a: set(keys) for a, keys in on_workers(cluster, _data_keys).items()}


def held_keys(cluster: KernelCluster) -> set:
    """Keys whose values some worker holds in memory."""
    return set().union(*data_by_worker(cluster).values())


def worker_task_records(cluster: KernelCluster) -> dict:
    """Key -> state of every task record the workers keep."""
    out: dict = {}
    for records in on_workers(cluster, _task_records).values():
        out.update(records)
    return out


def is_idle(cluster: KernelCluster) -> bool:
    """The scheduler has forgotten every task and no worker holds or tracks one."""
    if scheduler_keys(cluster) or held_keys(cluster):
        return False
    return not worker_task_records(cluster)


def _replica_claims(cluster: KernelCluster) -> set[tuple]:
    return on_loop(
        cluster,
        lambda: {
            (ts.key, ws.address)
            for ts in cluster.scheduler.state.tasks.values()
            for ws in ts.who_has
        },
    )


def replica_disagreements(cluster: KernelCluster) -> list[str]:
    """Replicas the scheduler records, before and after a look at the workers, that their
    worker does not hold (a claim dropped meanwhile was a release crossing the look)."""
    claims = _replica_claims(cluster)
    if not claims:
        return []
    held = data_by_worker(cluster)
    claims &= _replica_claims(cluster)
    wrong = []
    for key, address in sorted(claims, key=repr):
        if address not in held:
            wrong.append(f"{key!r} is held by {address}, which is gone")
        elif key not in held[address]:
            wrong.append(f"{key!r}: {address} does not hold it")
    return wrong


def check_engine_state(cluster: KernelCluster) -> None:
    """Validate the scheduler's and every worker's invariants, and that they agree."""
    on_loop(cluster, cluster.scheduler.state.validate_state)
    on_workers(cluster, _validate)
    wrong: list[str] = []

    def agree() -> bool:
        wrong[:] = replica_disagreements(cluster)
        return not wrong

    try:
        # a persistent disagreement is a bug; one that a message in flight ends is not
        wait_for(agree, timeout=5)
    except AssertionError:
        raise AssertionError(f"scheduler and workers disagree: {wrong}") from None


# -- what the engine leaves behind ----------------------------------------------------------


class ErrorRecords(logging.Handler):
    """Collects the errors a logger emits (handlers that fail are only logged)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def texts(self) -> list[str]:
        return [self.format(r) for r in self.records]


def _record_errors(dask_worker: Any) -> None:
    handler = ErrorRecords()
    logging.getLogger("kernel_cluster").addHandler(handler)
    dask_worker.test_error_records = handler


def _recorded_errors(dask_worker: Any, clear: bool = False) -> list[str]:
    handler = getattr(dask_worker, "test_error_records", None)
    if handler is None:
        return []
    texts = handler.texts()
    if clear:
        handler.records.clear()
    return texts


def record_worker_errors(cluster: KernelCluster) -> None:
    """Worker subprocesses log to their own stderr: collect their errors there too."""
    on_workers(cluster, _record_errors)


def worker_errors(cluster: KernelCluster, clear: bool = False) -> dict[str, list[str]]:
    """Errors logged in each worker process since ``record_worker_errors`` (or the last
    ``clear``)."""
    found = on_workers(cluster, functools.partial(_recorded_errors, clear=clear))
    return {a: e for a, e in found.items() if e}


def child_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def running_now() -> tuple[set[threading.Thread], set[int]]:
    """This process's threads and child processes, to compare with after a test."""
    return set(threading.enumerate()), child_pids()


def assert_nothing_left(before: tuple[set[threading.Thread], set[int]]) -> None:
    threads, children = before
    assert_no_new_threads(threads)
    assert_no_new_children(children)


def assert_no_new_children(before: set[int], timeout: float = 10) -> None:
    """Every child process started since ``before`` was taken has exited."""
    seen: dict[int, str] = {}  # described while they lived: one may go just after

    def none_left() -> bool:
        left = child_pids() - before
        for pid in left - seen.keys():
            seen[pid] = _describe_process(pid)
        return not left

    try:
        wait_for(none_left, timeout, "worker processes to exit")
    except AssertionError:
        left = [seen.get(pid) or _describe_process(pid) for pid in sorted(child_pids() - before)]
        gone = [seen[pid] for pid in sorted(seen.keys() - child_pids())]
        raise AssertionError(
            f"child processes left after {timeout} s: {left}; gone meanwhile: {gone}"
        ) from None


def _describe_process(pid: int) -> str:
    """A leftover child, as a reader of the failure needs it: what it runs, its state."""
    try:
        proc = psutil.Process(pid)
        status, parent, name = proc.status(), proc.ppid(), proc.name()
    except psutil.Error:
        return f"{pid} (gone since)"
    try:
        command = " ".join(proc.cmdline())[:300]
    except psutil.Error:  # a zombie: exited, not yet waited for by its parent (us)
        command = "?"
    return f"{pid} {name} ({status}, parent {parent}): {command}"


def assert_no_new_threads(before: set[threading.Thread], timeout: float = 10) -> None:
    """Every thread started since ``before`` was taken has ended."""

    def leftover() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in before and t.is_alive()]

    try:
        wait_for(lambda: not leftover(), timeout, "engine threads to end")
    except AssertionError:
        names = sorted(t.name for t in leftover())
        raise AssertionError(f"threads left running: {names}") from None

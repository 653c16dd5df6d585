"""``secede`` / ``rejoin``: a task that waits for other tasks lets another task use its
thread's slot meanwhile.

A task that submits work and waits for it (``get_client().gather(...)`` in a task)
holds its thread while it waits; with every thread so held, the work it waits for
has nowhere to run, and nothing ever ends. So a task thread that blocks on the
cluster's futures secedes for the wait and rejoins after (``while_waiting``: the
client's waits use it, so users need not know), and ``secede()`` / ``rejoin()`` are
there for those who do (Dask's names). Seceding gives the thread's slot to another
thread of its worker's pool (engine/pool.py) and tells the scheduler, which counts
the task as taking no thread (``long-running``) and may send another in its place;
rejoining takes a slot back, waiting for one if all are in use.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ..core.keys import Key
from ..core.thread_accounts import ThreadTimeline
from ..core.worker_messages import ExecuteSeceded

if TYPE_CHECKING:
    from .pool import TaskThreadPool


class _Seceding(Protocol):
    def secede_current(self) -> bool: ...
    def rejoin_current(self) -> None: ...


# task thread ident -> the threads of the worker whose pool it belongs to (each thread
# registers as it starts; a worker forgets its own as it closes)
_workers_by_thread: dict[int, _Seceding] = {}


class WorkerThreads:
    """A worker's task threads as ``secede`` sees them. The worker makes it before its
    pool, whose threads call ``on_thread`` as they start or take a slot, and sets
    ``pool`` right after; a task that secedes is told to the worker's state machine
    (``handle`` on its ``loop``) unless the worker closed."""

    __slots__ = ("executing", "handle", "is_closed", "loop", "pool", "timeline")

    def __init__(
        self,
        timeline: ThreadTimeline,
        executing: dict[int, tuple[Key, str]],
        loop: asyncio.AbstractEventLoop,
        handle: Callable[..., None],
        is_closed: Callable[[], bool],
    ):
        self.timeline = timeline
        self.executing = executing  # the worker's executing_by_thread
        self.loop = loop
        self.handle = handle
        self.is_closed = is_closed
        self.pool: TaskThreadPool | None = None

    def on_thread(self) -> None:
        """A task thread starts, or a spare one takes a slot: it may secede, and its
        time so far is no task's, nor idle."""
        register_thread(self)
        ident = threading.get_ident()
        now = time.perf_counter()
        account = self.timeline.accounts.get(ident)
        if account is None:
            self.timeline.add_threads([ident], now)
        elif now > account.mark:
            account.mark = now

    def secede_current(self) -> bool:
        """On a task thread: give its slot to another thread while its task waits.
        False if it had seceded already (or runs no task)."""
        entry = self.executing.get(threading.get_ident())
        if entry is None or self.pool is None or not self.pool.secede():
            return False
        if not self.is_closed():
            self.loop.call_soon_threadsafe(self.handle, ExecuteSeceded(entry[0]))
        return True

    def rejoin_current(self) -> None:
        """On a task thread that seceded: take a slot back (waits for one)."""
        if self.pool is not None:
            self.pool.rejoin()


def register_thread(worker: _Seceding) -> None:
    """The calling thread is a task thread of ``worker``."""
    _workers_by_thread[threading.get_ident()] = worker


def forget_worker(worker: Any) -> None:
    for ident, w in list(_workers_by_thread.items()):
        if w is worker:
            _workers_by_thread.pop(ident, None)


def _current() -> _Seceding:
    worker = _workers_by_thread.get(threading.get_ident())
    if worker is None:
        raise ValueError(
            "secede() and rejoin() are for a task running on a worker: call them inside "
            "a function you submit (worker_client() does both around its block)."
        )
    return worker


def secede() -> None:
    """Give this task's thread slot to another task while this one waits for work it
    submitted; ``rejoin()`` takes one back. The task goes on running meanwhile."""
    _current().secede_current()


def rejoin() -> None:
    """Take a thread slot back after ``secede()``, waiting for one if all are in use."""
    _current().rejoin_current()


@contextmanager
def while_waiting() -> Iterator[None]:
    """Seceded for the block if the calling thread is a task thread (and had not
    seceded already); nothing otherwise. The client's waits on futures use it."""
    worker = _workers_by_thread.get(threading.get_ident())
    if worker is None:
        yield
        return
    seceded = worker.secede_current()
    try:
        yield
    finally:
        if seceded:
            worker.rejoin_current()

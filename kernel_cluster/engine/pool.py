"""Task threads: one pool per worker, each thread running one task at a time.

Not a ``ThreadPoolExecutor``: the worker needs to know which thread runs what
(task stream rows, per-thread CPU time, the profiler's sampling) and to hand
results back in batches. Finished work is appended to a deque and the owner is
woken once per batch, not once per task.

Idle threads wait on a stack, and new work goes to the one that went idle last:
in a chain of tasks the same thread runs them all, warm, and the other threads
stay asleep instead of taking turns (each turn costs extra wake-ups and GIL
hand-offs between threads that all want to run).
"""

from __future__ import annotations

import _thread
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

_STOP = object()

# idents of every pool's task threads, alive now: code asks ``in_task_thread()`` to
# tell a computation started from inside a task (updated once per thread, not per task)
_task_threads: set[int] = set()


def in_task_thread() -> bool:
    """Whether the calling thread is a task thread of some worker in this process."""
    return threading.get_ident() in _task_threads


class TaskThreadPool:
    def __init__(self, nthreads: int, name: str, wake: Callable[[], None]):
        """``wake`` is called (from a task thread) when results wait in ``done``."""
        self.nthreads = nthreads
        self.done: deque = deque()
        self._wake = wake
        self._wake_pending = False
        self._pending: deque = deque()
        self._idle: list = []  # locks of sleeping threads, held until work arrives
        self._mutex = threading.Lock()
        self.running: set[int] = set()  # idents of threads inside a task right now
        self.threads = [
            threading.Thread(target=self._work, name=f"{name}-task-{i}", daemon=True)
            for i in range(nthreads)
        ]
        for t in self.threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a free thread; its return value lands in ``done``
        (unless it is None)."""
        self._put((fn, args))

    def _put(self, item: Any) -> None:
        self._pending.append(item)
        if self._idle:
            with self._mutex:
                if self._idle:
                    self._idle.pop().release()

    @property
    def idents(self) -> list[int]:
        return [t.ident for t in self.threads if t.ident is not None]

    def drain(self) -> list:
        """Everything finished since the last drain (call from the owner's thread)."""
        self._wake_pending = False
        done = self.done
        out = []
        while done:
            out.append(done.popleft())
        return out

    def _work(self) -> None:
        pending, idle, mutex = self._pending, self._idle, self._mutex
        asleep = _thread.allocate_lock()
        asleep.acquire()
        # Tasks run in a context of their own, which keeps what they leave in context
        # variables (the task runner's metrics listener stays installed for good) out
        # of the owner's wake-up callbacks: those copy the calling thread's context.
        run = contextvars.copy_context().run
        me = threading.get_ident()
        _task_threads.add(me)
        try:
            while True:
                try:
                    item = pending.popleft()
                except IndexError:
                    with mutex:
                        if pending:
                            continue
                        idle.append(asleep)
                    asleep.acquire()  # released by submit, which hands this thread work
                    continue
                if item is _STOP:
                    return
                fn, args = item
                ident = threading.get_ident()
                self.running.add(ident)
                try:
                    result = run(fn, *args)
                finally:
                    self.running.discard(ident)
                # let go of the task's inputs and result before the next task or a sleep:
                # locals here would keep them alive after the worker released them
                item = fn = args = None
                if result is not None:  # None: the work was withdrawn, nothing to say
                    self.emit(result)
                result = None
        finally:
            _task_threads.discard(me)

    def emit(self, result: Any) -> None:
        """Hand a result to the owner (from a task thread); ``fn`` may call it for
        results it has before its own return value."""
        self.done.append(result)
        if not self._wake_pending:
            # the owner clears the flag before draining, so a result appended after its
            # drain always triggers a new wake
            self._wake_pending = True
            self._wake()

    def stop(self, timeout: float = 10) -> None:
        for _ in self.threads:
            self._put(_STOP)
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(timeout)

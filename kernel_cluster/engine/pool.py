"""Task threads: one pool per worker, each thread running one task at a time.

Not a ``ThreadPoolExecutor``: the worker needs to know which thread runs what
(task stream rows, per-thread CPU time, the profiler's sampling) and to hand
results back in batches. Finished work is appended to a deque and the owner is
woken once per batch, not once per task.

Idle threads wait on a stack, and new work goes to the one that went idle last:
in a chain of tasks the same thread runs them all, warm, and the other threads
stay asleep instead of taking turns (each turn costs extra wake-ups and GIL
hand-offs between threads that all want to run).

Slots. ``nthreads`` threads take work: each holds a slot. A task that waits for
other tasks (``secede``) gives its thread's slot to another thread, so the pool
still runs ``nthreads`` tasks at once while it waits: a spare thread takes it, or a
new one is started. ``rejoin`` takes a slot back, waiting until a thread that holds
one lets it go (it goes idle or finishes a task); that thread becomes a spare.
A thread that finishes a task it seceded from without rejoining becomes a spare too.
Spares sleep until a slot comes their way; the pool never has fewer than
``nthreads`` threads, nor more than that plus the most tasks ever seceded at once.
"""

from __future__ import annotations

import _thread
import contextvars
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

_STOP = object()

# idents of every pool's task threads, alive now: code asks ``in_task_thread()`` to
# tell a computation started from inside a task (updated once per thread, not per task)
_task_threads: set[int] = set()


def in_task_thread() -> bool:
    """Whether the calling thread is a task thread of some worker in this process."""
    return threading.get_ident() in _task_threads


class TaskThreadPool:
    def __init__(
        self,
        nthreads: int,
        name: str,
        wake: Callable[[], None],
        on_thread: Callable[[], None] | None = None,
    ):
        """``wake`` is called (from a task thread) when results wait in ``done``;
        ``on_thread`` on each thread as it starts, and as a spare takes a slot: its
        time until then belongs to no task, nor is it idle."""
        self.nthreads = nthreads
        self.name = name
        self.done: deque = deque()
        self._wake = wake
        self._on_thread = on_thread
        self._wake_pending = False
        self._pending: deque = deque()
        self._idle: list = []  # locks of sleeping threads that hold a slot
        self._mutex = threading.Lock()
        self.running: set[int] = set()  # idents of threads inside a task right now
        self._spares: list = []  # locks of sleeping threads without a slot
        self._rejoining: deque = deque()  # locks of seceded threads waiting for a slot
        self._demoted: set = set()  # locks of idle threads whose slot a rejoin took
        self.seceded: set[int] = set()  # idents of threads that gave their slot away
        self._stopping = False
        self._numbers = itertools.count()
        self.threads: list[threading.Thread] = []
        for _ in range(nthreads):
            self._start_thread()

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"{self.name}-task-{next(self._numbers)}", daemon=True
        )
        self.threads.append(thread)
        thread.start()

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

    # -- seceding ----------------------------------------------------------------------

    def secede(self) -> bool:
        """The calling task thread gives its slot to another thread while its task waits
        (see the module's docstring). False if it is no thread of this pool, or has
        seceded already."""
        me = threading.get_ident()
        with self._mutex:
            if me in self.seceded or me not in self.running:
                return False
            self.seceded.add(me)
            self._give_slot()
        return True

    def rejoin(self) -> None:
        """Take a slot back after ``secede``: at once if a thread holding one is idle,
        else when one lets go of its slot. Nothing if the thread had not seceded."""
        me = threading.get_ident()
        with self._mutex:
            if me not in self.seceded:
                return
            self.seceded.discard(me)
            if self._stopping:
                return
            if self._idle:  # an idle thread holds a slot it does not use: take it
                lock = self._idle.pop()
                self._demoted.add(lock)
                lock.release()
                return
            mine = _thread.allocate_lock()
            mine.acquire()
            self._rejoining.append(mine)
        mine.acquire()  # released by a thread handing its slot over (or by stop)

    def _give_slot(self) -> None:
        """A slot is free (mutex held): to a thread rejoining, else a spare, else a new
        thread."""
        if self._rejoining:
            self._rejoining.popleft().release()
        elif self._spares:
            self._spares.pop().release()
        elif not self._stopping:
            self._start_thread()

    def _let_go(self, me: int) -> bool:
        """After a task: whether this thread must give up its slot (mutex held): it
        seceded from the task it ran, or a seceded thread wants a slot back."""
        if me in self.seceded:  # it had given its slot away already
            self.seceded.discard(me)
            return not self._stopping  # stopping: it goes on to take a _STOP
        if self._rejoining and not self._stopping:
            self._rejoining.popleft().release()
            return True
        return False

    # -- the threads -------------------------------------------------------------------

    def _work(self) -> None:
        pending, idle, mutex = self._pending, self._idle, self._mutex
        spares, demoted = self._spares, self._demoted
        asleep = _thread.allocate_lock()
        asleep.acquire()
        # Tasks run in a context of their own, which keeps what they leave in context
        # variables (the task runner's metrics listener stays installed for good) out
        # of the owner's wake-up callbacks: those copy the calling thread's context.
        run = contextvars.copy_context().run
        me = threading.get_ident()
        _task_threads.add(me)
        if self._on_thread is not None:
            self._on_thread()
        try:
            while True:
                try:
                    item = pending.popleft()
                except IndexError:
                    with mutex:
                        if pending:
                            continue
                        spare = bool(self._rejoining) and not self._stopping
                        if spare:  # idle, and its slot is wanted: hand it over
                            self._rejoining.popleft().release()
                            spares.append(asleep)
                        else:
                            idle.append(asleep)
                    asleep.acquire()  # released by submit (work), rejoin or _give_slot
                    if not spare and demoted:
                        with mutex:
                            if asleep in demoted:  # a rejoining thread took its slot
                                demoted.discard(asleep)
                                spares.append(asleep)
                                spare = True
                        if spare:
                            asleep.acquire()  # a spare until _give_slot
                    if spare and self._on_thread is not None:
                        self._on_thread()
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
                if self._rejoining or self.seceded:
                    with mutex:
                        spare = self._let_go(me)
                        if spare:
                            spares.append(asleep)
                    if spare:
                        asleep.acquire()  # until _give_slot hands it one (or stop)
                        if self._on_thread is not None:
                            self._on_thread()
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
        with self._mutex:
            self._stopping = True
            threads = list(self.threads)
            for lock in self._spares + list(self._rejoining):
                lock.release()  # spares go on to take a _STOP; rejoiners back to their task
            self._spares.clear()
            self._rejoining.clear()
        for _ in threads:
            self._put(_STOP)
        deadline = time.monotonic() + timeout  # one bound for all threads, not each
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive() and t is not threading.current_thread()]
        if stuck:
            # Python cannot stop a thread: a task that ignores cancellation runs on
            logger.warning(
                "%s: %d task thread(s) still ran a task %.0f s after the close began (%s): "
                "Python cannot stop a thread, so they go on in the background (daemon "
                "threads: they end with the process) and their results are dropped. Let "
                "long tasks check a stop condition, or use worker processes "
                "(KernelCluster(processes=True)), whose tasks end with their process.",
                self.name,
                len(stuck),
                timeout,
                ", ".join(stuck),
            )

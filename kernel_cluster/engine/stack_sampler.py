"""The statistical profiler: a thread per worker that samples its task threads' stacks.

About every ``interval`` seconds it reads the frame each task thread is executing
(``sys._current_frames()``), keeps the part that belongs to the task (from the
task's function inward) and counts it in a ``core.profile_tree.ProfileLog`` under the
task's prefix; every ``cycle_interval`` seconds the log closes a cycle stamped with
the scheduler's clock. The worker tells which thread runs which task through
``Worker.executing_by_thread`` (thread ident -> (key, prefix)).

Per sample the cost is one step per frame: frame descriptions (file, function,
line, source text) are computed once per code object and instruction, and adding a
stack to the tree does not look at the rest of the tree. Looks come at random
moments, less often while they catch no task in its own code, each then counting
for several samples (``core.sampling``): a stream of tiny tasks costs a few looks a
second, not one per ``interval``. A worker with no task running for a while lets the
thread rest until one starts (``StackSampler.wake``).
"""

from __future__ import annotations

import linecache
import math
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..core import spec as spec_module
from ..core.profile_tree import Frame, ProfileLog, Tree, describe, new_tree, to_flat
from ..core.sampling import SampleSchedule

# A task's function is called by one of these (core/spec.py); the frames outside it
# (spec, execute.py, the worker's _run, the pool's loop, threading) are the engine's.
_BOUNDARY = frozenset(id(f.__code__) for f in (spec_module.evaluate, spec_module._substitute))
_CACHE_LIMIT = 20_000
_REST_AFTER = 0.1  # seconds without a task before the sampler rests
# mean seconds between looks while tasks run but none is caught in its own code, and
# while none runs at all (see core.sampling)
_BACKOFF = 0.05
_REST = 0.2


class FrameCache:
    """``(identifier, description)`` per code object and instruction, computed once.

    Entries keep their code object alive, so an id in the cache always means the same
    code; past ``limit`` entries the cache starts over.
    """

    def __init__(self, limit: int = _CACHE_LIMIT):
        self.limit = limit
        self.entries: dict[tuple[int, int], tuple[Frame, Any]] = {}

    def task_stack(self, frame: FrameType | None) -> list[Frame] | None:
        """The task's part of a thread's stack, outermost first; None when the thread is
        not inside a task's function (the engine's own work before or after it)."""
        # find the boundary first: frames are described only once they are known to be
        # the task's (a thread caught in the engine between tasks costs a bare walk)
        inner: list[FrameType] = []
        while frame is not None:
            if id(frame.f_code) in _BOUNDARY:
                break
            inner.append(frame)
            frame = frame.f_back
        else:
            return None
        entries = self.entries
        out: list[Frame] = []
        append = out.append
        for frame in reversed(inner):
            code = frame.f_code
            # the instruction offset is free to read; the line number is worked out from
            # the code's line table, so only on a miss
            where = (id(code), frame.f_lasti)
            entry = entries.get(where)
            if entry is None:
                entry = self._describe(frame, code, where)
            append(entry[0])
        return out

    def _describe(self, frame: FrameType, code: Any, where: tuple) -> tuple[Frame, Any]:
        if len(self.entries) >= self.limit:
            self.entries = {}
        lineno = frame.f_lineno
        line_number = lineno if lineno is not None else code.co_firstlineno
        filename = code.co_filename
        line = linecache.getline(filename, line_number, frame.f_globals).strip()
        entry = (describe(filename, code.co_name, line_number, line), code)
        self.entries[where] = entry
        return entry


class StackSampler:
    """Samples the threads in ``executing`` (ident -> (key, prefix)) on a thread of its
    own, between ``start()`` and ``stop()``; ``now`` is the scheduler's clock.

    ``sample()`` and ``cycle()`` are what that thread calls; tests may call them by hand
    without starting it. Reads (``get``, ``metadata``) may come from any thread.
    """

    def __init__(
        self,
        executing: dict[int, tuple],
        now: Callable[[], float],
        *,
        interval: float = 0.01,
        cycle_interval: float = 1.0,
        max_cycles: int = 1000,
        name: str = "worker",
        rest_after: float = _REST_AFTER,
    ):
        if not interval > 0 or not cycle_interval > 0:
            raise ValueError(
                f"profile intervals must be positive seconds, got interval={interval!r} "
                f"and cycle_interval={cycle_interval!r}."
            )
        self.executing = executing
        self.now = now
        self.interval = interval
        self.cycle_interval = cycle_interval
        self.name = name
        self.rest_after = rest_after  # seconds without a task before the thread rests
        self.log = ProfileLog(now(), max_cycles)
        self.frames = FrameCache()
        self.lock = threading.Lock()
        self._cpu_at_exit = 0.0
        # the sampling thread sleeps by trying to acquire this lock (cheaper per wake-up
        # than Event.wait); wake() and stop() release it to cut the sleep short
        self._signal = threading.Lock()
        self._signal.acquire()
        self._stopping = False
        self.resting = False  # no task has run for a while: a starting task wakes us
        self.schedule = SampleSchedule(interval, _BACKOFF, _REST)
        self.looks = 0  # how often the sampling thread has looked (each costs a wake-up)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        with self.lock:
            self.log.recent_start = self.now()
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-profile", daemon=True)
        self._thread.start()

    @property
    def cpu_seconds(self) -> float:
        """CPU time the sampling thread has used: what profiling costs. Read from the
        thread's own CPU clock by whoever asks, so the sampler pays nothing for it."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread.ident is None:
            return self._cpu_at_exit
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):  # it ended just now, or not a POSIX system
            return self._cpu_at_exit

    def wake(self) -> None:
        """A task started on a worker that had none running: end the sampler's rest.

        Once no task has run for ``rest_after`` seconds the thread looks only about
        every ``_REST`` seconds (in case this call crossed its last look) and closes
        cycles; a busy worker never rests, so its tasks never wake the thread."""
        if self.resting:
            self.resting = False
            try:
                self._signal.release()
            except RuntimeError:  # released by another task thread meanwhile
                pass

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        if self._signal.locked():
            try:
                self._signal.release()
            except RuntimeError:
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._cpu_at_exit = time.thread_time()

    def _loop(self) -> None:
        clock = time.monotonic
        cycle_interval = self.cycle_interval
        schedule = self.schedule
        signalled = self._signal.acquire
        executing = self.executing
        rest_after = self.rest_after
        now = clock()
        last_busy = now - rest_after
        next_look = schedule.first(now)
        next_cycle = now + cycle_interval
        rest = True  # no task has run for rest_after: sleep until one starts
        while True:
            woken = False
            if rest:
                self.resting = True  # before checking: a task starting after this wakes us
                woken = bool(executing)  # one started before it could see the flag
            if not woken:
                woken = signalled(True, max(0.0, min(next_look, next_cycle) - clock()))
            if self._stopping:
                return
            now = clock()
            if woken:
                # a task started on an idle worker; no look now (that would favour what
                # tasks do first), but the next one comes at the full rate
                rest = self.resting = False
                last_busy = now
                next_look = schedule.woken(now)
            elif now >= next_look:
                self.looks += 1
                hits = self.sample(schedule.weight) if executing else 0
                if executing:
                    last_busy = now
                rest = now - last_busy >= rest_after
                next_look = schedule.seen(hits, not rest, next_look, now)
            if now >= next_cycle:
                self.cycle()
                next_cycle += (math.floor((now - next_cycle) / cycle_interval) + 1) * cycle_interval

    def sample(self, weight: int = 1) -> int:
        """Count the current stack of every thread running a task, ``weight`` times
        (see core.sampling); returns how many threads were inside a task's code."""
        executing = self.executing
        if not executing:
            return 0
        running = executing.copy()  # task threads add and remove entries meanwhile
        frames = sys._current_frames()
        try:
            task_stack = self.frames.task_stack
            n = 0
            with self.lock:
                add = self.log.add
                for ident, (_key, prefix) in running.items():
                    stack = task_stack(frames.get(ident))
                    if stack is not None:
                        add(stack, prefix, weight)
                        n += 1
            return n
        finally:
            # The snapshot holds this very frame, which holds the snapshot: a cycle that
            # would keep every thread's frames, and the user's objects in them, alive
            # until the next garbage collection. Break it before returning.
            frames.clear()

    def cycle(self) -> None:
        now = self.now()
        with self.lock:
            self.log.cycle(now)

    def get(
        self, start: float | None = None, stop: float | None = None, prefix: str | None = None
    ) -> Tree:
        now = self.now()
        with self.lock:
            return self.log.get(start, stop, prefix, now=now)

    def metadata(self, start: float | None = None, stop: float | None = None) -> dict:
        now = self.now()
        with self.lock:
            meta = self.log.metadata(start, stop, now=now)
        meta["cycle_interval"] = self.cycle_interval
        return meta


# -- read on a worker by client.profile (through Scheduler.run_on_workers) --------------


def read_profile(
    dask_worker: Any,
    start: float | None = None,
    stop: float | None = None,
    prefix: str | None = None,
) -> list:
    """A worker's profile over the window, in the flat form (see core.profile_tree.to_flat)."""
    profiler = getattr(dask_worker, "profiler", None)
    tree = new_tree() if profiler is None else profiler.get(start, stop, prefix)
    return to_flat(tree)


def read_profile_metadata(
    dask_worker: Any, start: float | None = None, stop: float | None = None
) -> dict:
    """A worker's samples per cycle (``ProfileLog.metadata``) and its cycle length."""
    profiler = getattr(dask_worker, "profiler", None)
    if profiler is None:
        return {"counts": [], "keys": {}, "cycle_interval": None}
    return profiler.metadata(start, stop)


def read_profiler_cost(dask_worker: Any) -> float:
    """CPU seconds the worker's sampling thread has used so far (0 when off)."""
    profiler = getattr(dask_worker, "profiler", None)
    return 0.0 if profiler is None else profiler.cpu_seconds

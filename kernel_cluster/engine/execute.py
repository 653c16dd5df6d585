"""Running one task on a task thread and describing the outcome as an event."""

from __future__ import annotations

import os
import threading
import time
import traceback as tb_module
from collections.abc import Callable
from types import TracebackType
from typing import Any, overload

import cloudpickle
import tblib

from ..core import spec as spec_module
from ..core.keys import Key
from ..core.metrics import MeterFrame
from ..core.sizeof import sizeof
from ..core.thread_accounts import GroupTotals, TaskTiming, ThreadAccount
from ..core.worker_messages import ExecuteFailed, ExecuteSucceeded
from .process_meter import context_meter

# Frames from these files sit between the engine and the user's function; a
# traceback shown to the user starts below them.
_ENGINE_FILES = frozenset({os.path.abspath(__file__), os.path.abspath(spec_module.__file__)})
# A task shorter than this (wall seconds) is taken to have run on the CPU all along,
# and so is a gap between two tasks shorter than _SHORT_GAP (the engine's own steps);
# a thread reads its CPU clock at least every _STALE_READING seconds while it works.
_SHORT_TASK = 20e-6
_SHORT_GAP = 50e-6
_STALE_READING = 10e-3
_evaluate = spec_module.evaluate


def _cpu_of(thread: int) -> float:
    return time.clock_gettime(time.pthread_getcpuclockid(thread))


class Clocks:
    """The clocks a task runner reads: passed in, so that tests script them.

    - ``wall``: seconds on a fine monotonic clock (``time.perf_counter``): every
      interval of a run, and the marks of the thread's account (the worker sets
      those with the same clock);
    - ``thread_cpu``: the calling thread's CPU seconds (``time.thread_time``);
    - ``cpu_of``: a thread's CPU seconds by its ident, read from another thread;
      raises OSError or AttributeError where the platform has no such clock;
    - ``epoch``: seconds since the epoch (``time.time``), the scheduler's kind of
      clock: the task stream's times are the wall clock plus ``epoch() - wall()``.

    The runner binds these functions to itself once: a task reads no attribute of
    this object.
    """

    __slots__ = ("cpu_of", "epoch", "thread_cpu", "wall")

    def __init__(
        self,
        wall: Callable[[], float] = time.perf_counter,
        thread_cpu: Callable[[], float] = time.thread_time,
        cpu_of: Callable[[int], float] = _cpu_of,
        epoch: Callable[[], float] = time.time,
    ) -> None:
        self.wall = wall
        self.thread_cpu = thread_cpu
        self.cpu_of = cpu_of
        self.epoch = epoch


REAL_CLOCKS = Clocks()


class TaskRunner:
    """Runs tasks on one task thread with fine metrics; made on that thread, once.

    It holds the thread's ``account`` (where the metrics are summed), its
    ``context_meter`` listener (installed for good: a trivial task's whole cost is a
    few microseconds), an estimate of the thread's CPU clock, and the clocks it
    reads (``Clocks``, bound to slots: a task loads none of them through the
    ``Clocks`` object).

    How a run's time is spent, summed here on the task thread so that the worker's
    loop does nothing per task for metrics (into the ``GroupTotals`` fields of
    core/thread_accounts.py; core/metrics.py traces where they go from there):

    - ``thread-cpu``: the thread's CPU time inside the task's own code; a task of a
      few microseconds counts its wall time, as reading the CPU clock would cost
      more than the task;
    - ``thread-noncpu``: its wall time there minus CPU time (I/O, sleeping, waiting
      for the GIL);
    - whatever ``context_meter`` recorded meanwhile (user labels such as "I/O", and
      the engine's own: "deserialize", "disk-read", ...), taken out of the two above;
    - ``other``: the rest of the run (unpacking inputs, measuring the result);
    - ``executor``: from ``submitted`` (handed to the pool) until it started.

    Two accounting paths: a task whose inputs are in hand and that ran shorter than
    ``_SHORT_TASK`` is summed in ``run`` (the short path: no CPU reading, no call
    but ``sizeof``); every other run in ``_succeeded`` (the full path, which
    dependent tasks take whenever the worker can spill). Both add the run's parts,
    named, to the totals that ``ThreadAccount.totals_for`` returns; they give the
    same totals for the same clock readings (tests/engine/test_task_runner.py). A
    failed run is a ``TaskTiming`` for ``ThreadAccount.add``: filling that record
    for every run cost the full path 1,000 instructions a task (5%, counted by
    valgrind), so it is kept to the rare path.

    The CPU clock is a system call, read only after a task that was not short, or
    once every ``_STALE_READING``. In between it is estimated as the wall clock plus
    ``cpu_offset``: the thread is taken to be on the CPU, except in a gap of at least
    ``_SHORT_GAP`` between two tasks (it slept, or waited for the GIL), which moves
    the offset back by the gap. What that gets wrong lasts until the next reading.
    """

    __slots__ = (
        "_cpu",
        "_cpu_of",
        "_epoch",
        "_wall",
        "account",
        "cpu_offset",
        "digests",
        "frame",
        "mark_at",
        "read_by",
        "thread",
        "to_time",
    )

    def __init__(self, account: ThreadAccount, clocks: Clocks = REAL_CLOCKS) -> None:
        self.account = account
        self._wall = clocks.wall
        self._cpu = clocks.thread_cpu
        self._cpu_of = clocks.cpu_of
        self._epoch = clocks.epoch
        self.thread = threading.get_ident()
        self.cpu_offset = 0.0  # the thread's CPU clock minus the wall clock (see above)
        self.read_by = 0.0  # when the CPU clock is to be read again, at the latest
        self.to_time = 0.0  # epoch() - wall(), kept up to date
        self.mark_at = self._wall()  # when the last task's code ended (wall clock)
        self._read_cpu(self.mark_at)
        self.frame = MeterFrame()
        # what context_meter recorded in the running task; emptied once accounted
        self.digests: list[tuple] = []
        append = self.digests.append
        context_meter.listen_here(
            lambda label, value, unit: append((label, value, unit)), self.frame
        )

    def reread_cpu_clock(self) -> None:
        """After a time with metrics off, whose tasks kept no estimate: read the
        thread's CPU clock afresh (callable from any thread)."""
        now = self._wall()
        try:
            cpu = self._cpu_of(self.thread)
        except (AttributeError, OSError):  # no such clock here: read at the next task
            self.read_by = -1.0
            return
        self.cpu_offset = cpu - now
        self.mark_at = now
        self.read_by = now + _STALE_READING

    def run(
        self, key: Key, spec: Any, data: Any, submitted: float, group: tuple
    ) -> ExecuteSucceeded | ExecuteFailed:
        """Evaluate a task with its inputs; never raises (the outcome is the event).

        ``spec`` is a TaskSpec, or its cloudpickled bytes when it came from another
        process; ``data`` its inputs, or a callable that reads them (from disk,
        perhaps). The run's time goes into the account under ``group`` (span,
        prefix).
        """
        wall = self._wall  # one attribute load; a call through the slot costs more
        t_got = wall()
        gap = t_got - self.mark_at
        if gap >= _SHORT_GAP:  # the thread waited: its CPU clock stood still
            self.cpu_offset -= gap
        if callable(data):
            return self._run_in_full(key, spec, data, submitted, group, t_got, wall)
        # The common case, kept short: the inputs in hand. The meter frame is zero
        # between tasks (the paths that meter reset it), and every meter also leaves
        # a digest.
        t0 = t_got  # when the task's own code starts
        try:
            if type(spec) is bytes:  # from another process: unpickling is not the task's
                spec, t0 = self._load(key, spec, t_got)
            value = _evaluate(spec.expr, data)
        except BaseException as exc:
            return self._failed(key, exc, submitted, group, t_got, t0 - t_got)
        w1 = self.mark_at = wall()
        took = w1 - t0
        if took < _SHORT_TASK and not self.digests:
            # A reading (a system call) costs more than a task this short, which had
            # no time to wait for anything: its wall time is its CPU time (and so is
            # unpickling's). Now and then, read anyway, to correct the estimate.
            if w1 > self.read_by:
                self._read_cpu(w1)
            nbytes = sizeof(value)
            t_end = wall()
            # The short path's accounting (noncpu is 0)
            account = self.account
            mark = account.mark
            if submitted <= mark and mark < t_got and group == account.last_group:
                # a task of the same group as the one before, picked up after it (no
                # idle in between): a stream of tiny tasks, where a call would cost a
                # third of it
                account.mark = t_end
                # set with last_group: not None here (a check would cost a test per task)
                totals: GroupTotals = account.last_totals  # type: ignore[assignment]
                totals.executor += t_got - mark
            else:
                totals = account.totals_for(group, submitted, t_got, t_end)
            totals.cpu += took
            totals.other += t_end - w1
            totals.count += 1
            totals.nbytes += nbytes
            anchor = t_got + self.to_time
            if t0 == t_got:
                startstops = [("compute", anchor, anchor + took)]
            else:
                totals.deserialize += t0 - t_got
                frame = self.frame  # _load left the unpickling there: zero between tasks
                frame.inner_wall = frame.inner_cpu = 0.0
                startstops = [
                    ("compute", anchor + (t0 - t_got), anchor + (w1 - t_got)),
                    ("deserialize", anchor, anchor + (t0 - t_got)),
                ]
            return ExecuteSucceeded(
                key, value, nbytes, type(value).__qualname__, startstops, self.thread
            )
        # a longer task: the full account, unpickling metered as _run_in_full does
        deserialize = t0 - t_got
        return self._succeeded(key, value, submitted, group, t_got, t0, t0, deserialize, w1, wall)

    def _load(self, key: Key, payload: bytes, t_got: float) -> tuple[Any, float]:
        """Unpickle a task from another process; returns it and when that ended.

        Unpickling is ``deserialize`` time, kept out of the task's own time as a
        meter's would be. Its CPU time is read from the thread's clock, not taken to
        be its wall time: unpickling a function may import its module, which can
        take the CPU for long (or wait on the disk), and the task's ``thread-cpu``
        and ``thread-noncpu`` must hold neither. The estimate of the CPU clock as of
        ``t_got`` becomes that reading, and the clock is read again after the task.
        """
        c0 = self._cpu()
        self.cpu_offset = c0 - t_got
        self.read_by = t_got  # read the clock after the task, whatever its length
        spec = load_task(key, payload)
        t_loaded = self._wall()
        frame = self.frame
        frame.inner_wall += t_loaded - t_got
        spent = self._cpu() - c0
        frame.inner_cpu += spent if spent > 0.0 else 0.0
        return spec, t_loaded

    def _read_cpu(self, now: float) -> float:
        """Read the thread's CPU clock (a system call) as of ``now`` (wall clock)."""
        cpu = self._cpu()
        self.cpu_offset = cpu - now
        self.read_by = now + _STALE_READING
        self.to_time = self._epoch() - self._wall()
        return cpu

    def _run_in_full(
        self,
        key: Key,
        spec: Any,
        data: Any,
        submitted: float,
        group: tuple,
        t_got: float,
        wall: Callable[[], float],
    ) -> ExecuteSucceeded | ExecuteFailed:
        frame = self.frame
        frame.inner_wall = frame.inner_cpu = 0.0
        deserialize = 0.0
        try:
            if type(spec) is bytes:
                spec, t_loaded = self._load(key, spec, t_got)
                deserialize = t_loaded - t_got
            else:
                t_loaded = t_got
            if callable(data):  # inputs that may have to come back from disk
                inputs = data()
                t_inputs = wall()
            else:
                inputs = data
                t_inputs = t_loaded
            inner_wall0 = frame.inner_wall  # metered before the task's own code
            value = _evaluate(spec.expr, inputs)
            w1 = self.mark_at = wall()
        except BaseException as exc:
            return self._failed(key, exc, submitted, group, t_got, deserialize)
        return self._succeeded(
            key, value, submitted, group, t_got, t_loaded, t_inputs, inner_wall0, w1, wall
        )

    def _task_cpu(self, t_got: float, w1: float, task_wall: float) -> float:
        """The CPU time of a task's own code (``task_wall`` seconds of wall time, bar
        meters) in a run from ``t_got`` to ``w1``: with the CPU clock read at ``w1``
        unless the run was short; the meters' CPU is left out."""
        if w1 - t_got < _SHORT_TASK and w1 <= self.read_by:
            return task_wall
        c0 = t_got + self.cpu_offset  # the estimate as of the start
        c1 = self._read_cpu(w1)
        cpu = (c1 - c0) - self.frame.inner_cpu
        return task_wall if cpu > task_wall else cpu if cpu > 0.0 else 0.0

    def _succeeded(
        self,
        key: Key,
        value: Any,
        submitted: float,
        group: tuple,
        t_got: float,
        t_loaded: float,
        t_inputs: float,
        inner_wall0: float,
        w1: float,
        wall: Callable[[], float],
    ) -> ExecuteSucceeded:
        """Account a run that returned ``value``: its task code ran from ``t_inputs``
        to ``w1``, after unpickling until ``t_loaded`` and reading inputs; meters had
        taken ``inner_wall0`` seconds before the task code. ``wall``: the runner's
        wall clock, in hand (cheaper than through ``self``)."""
        frame = self.frame
        task_wall = (w1 - t_inputs) - (frame.inner_wall - inner_wall0)
        if task_wall < 0.0:
            task_wall = 0.0
        # the CPU time of the task's own code: _task_cpu's, written out (a call fewer)
        if w1 - t_got < _SHORT_TASK and w1 <= self.read_by:
            cpu = task_wall
        else:
            c0 = t_got + self.cpu_offset  # the estimate as of the start
            cpu = (self._read_cpu(w1) - c0) - frame.inner_cpu
            if cpu > task_wall:
                cpu = task_wall
            elif not cpu > 0.0:
                cpu = 0.0
        nbytes = sizeof(value)
        t_end = wall()
        other = (t_end - t_got) - (w1 - t_inputs) - inner_wall0
        totals = self.account.totals_for(group, submitted, t_got, t_end)
        totals.cpu += cpu
        noncpu = task_wall - cpu
        if noncpu:
            totals.noncpu += noncpu
        totals.other += other if other > 0.0 else 0.0
        totals.count += 1
        totals.nbytes += nbytes
        if t_loaded != t_got:
            totals.deserialize += t_loaded - t_got
        anchor = t_got + self.to_time  # the scheduler's kind of clock, for the task stream
        startstops = [("compute", anchor + (t_inputs - t_got), anchor + (w1 - t_got))]
        if t_loaded != t_got:
            startstops.append(("deserialize", anchor, anchor + (t_loaded - t_got)))
        digests = self.digests
        if digests:
            self.account.add_extra(group, digests)
            if any(d[0] == "disk-read" for d in digests):
                startstops.append(
                    ("disk-read", anchor + (t_loaded - t_got), anchor + (t_inputs - t_got))
                )
            digests.clear()
        frame.inner_wall = frame.inner_cpu = 0.0
        return ExecuteSucceeded(
            key, value, nbytes, type(value).__qualname__, startstops, self.thread
        )

    def _failed(
        self,
        key: Key,
        exc: BaseException,
        submitted: float,
        group: tuple,
        t_got: float,
        deserialize: float,
    ) -> ExecuteFailed:
        """Account a run that raised: its CPU time as for one that returned (the clock
        read at the failure); formatting the traceback after is other."""
        w1 = self.mark_at = self._wall()
        task_wall = w1 - t_got - self.frame.inner_wall
        if task_wall < 0.0:
            task_wall = 0.0
        cpu = self._task_cpu(t_got, w1, task_wall)
        tb = user_traceback(exc.__traceback__)
        text = "".join(tb_module.format_exception(type(exc), exc, tb))
        exc.__traceback__ = tb
        stop = self._wall()
        timing = TaskTiming(
            submitted=submitted,
            start=t_got,
            stop=stop,
            cpu=cpu,
            noncpu=task_wall - cpu,
            other=stop - w1,
            deserialize=deserialize,
            nbytes=0,
        )
        self.account.add(group, timing)
        if self.digests:
            self.account.add_extra(group, self.digests)
            self.digests.clear()
        self.frame.inner_wall = self.frame.inner_cpu = 0.0
        anchor = t_got + self.to_time
        startstops = [("compute", anchor, anchor + (w1 - t_got))]
        return ExecuteFailed(key, exc, tb, text, startstops, self.thread)


def run_task_unmetered(key: Key, spec: Any, data: Any) -> ExecuteSucceeded | ExecuteFailed:
    """``TaskRunner.run`` with fine metrics switched off: only the task stream's times."""
    thread = threading.get_ident()
    start = time.time()
    try:
        if type(spec) is bytes:
            spec = load_task(key, spec)
        value = spec_module.evaluate(spec.expr, data() if callable(data) else data)
    except BaseException as exc:
        stop = time.time()
        tb = user_traceback(exc.__traceback__)
        text = "".join(tb_module.format_exception(type(exc), exc, tb))
        exc.__traceback__ = tb
        return ExecuteFailed(key, exc, tb, text, [("compute", start, stop)], thread)
    stop = time.time()
    return ExecuteSucceeded(
        key, value, sizeof(value), type(value).__qualname__, [("compute", start, stop)], thread
    )


class TaskDeserializationError(RuntimeError):
    """A task arrived but could not be unpickled on the worker."""

    def __init__(self, key: Key, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(
            f"Task {key!r} could not be loaded on the worker: {reason}. Make sure the modules "
            "its function needs are importable in the worker's environment."
        )

    def __reduce__(self):
        return (TaskDeserializationError, (self.key, self.reason))


def load_task(key: Key, payload: bytes) -> Any:
    try:
        return cloudpickle.loads(payload)
    except Exception as exc:
        raise TaskDeserializationError(key, f"{type(exc).__name__}: {exc}") from None


def pack_exception(exc: BaseException, tb: TracebackType | None) -> tuple[bytes, dict | None]:
    """An exception as bytes and its traceback as plain data, for another process.

    The kernel unpickles them only when the user asks for the error; an exception
    that will not pickle is replaced by a RuntimeError carrying its text.
    """
    try:
        payload = cloudpickle.dumps(exc)
        # an exception pickles as its class and ``args``; one whose __init__ takes other
        # arguments would fail to load in the kernel: rebuild it without calling __init__
        cloudpickle.loads(payload)
    except Exception:
        try:
            payload = cloudpickle.dumps(_ExceptionCopy(exc))
            cloudpickle.loads(payload)
        except Exception:
            text = "".join(tb_module.format_exception_only(type(exc), exc)).strip()
            payload = cloudpickle.dumps(RuntimeError(f"(unpicklable exception) {text}"))
    tb_data = None
    if tb is not None:
        try:
            tb_data = tblib.Traceback(tb).as_dict()
        except Exception:
            tb_data = None
    return payload, tb_data


def _rebuild_exception(cls: type, args: tuple, state: dict | None) -> BaseException:
    exc = cls.__new__(cls, *args)  # BaseException.__new__ sets ``args``; no __init__
    exc.args = args
    if state:
        exc.__dict__.update(state)
    return exc


class _ExceptionCopy:
    """Pickles an exception as its class, ``args`` and attributes, bypassing __init__."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self) -> tuple:
        exc = self.exc
        return (_rebuild_exception, (type(exc), exc.args, getattr(exc, "__dict__", None)))


# None (no exception) passes through; anything else comes back as an exception
@overload
def unpack_exception(payload: None, tb_data: Any, text: str = "") -> tuple[None, Any]: ...
@overload
def unpack_exception(
    payload: object, tb_data: Any, text: str = ""
) -> tuple[BaseException, Any]: ...
def unpack_exception(
    payload: Any, tb_data: Any, text: str = ""
) -> tuple[BaseException | None, Any]:
    """The inverse of ``pack_exception``; objects made in this process pass through."""
    if isinstance(payload, BaseException) or payload is None:
        return payload, tb_data
    try:
        exc = cloudpickle.loads(payload)
    except Exception as err:
        exc = RuntimeError(
            f"The task failed, and its exception could not be loaded ({err}):\n{text}"
        )
    tb = None
    if isinstance(tb_data, dict):
        try:
            tb = tblib.Traceback.from_dict(tb_data).as_traceback()
        except Exception:
            tb = None
    return exc, tb


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the engine's own frames from the top of a task's traceback."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in _ENGINE_FILES:
        tb = tb.tb_next
    return tb

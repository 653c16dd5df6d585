"""Running one task on a task thread and describing the outcome as an event."""

from __future__ import annotations

import os
import threading
import time
import traceback as tb_module
import weakref
from types import TracebackType
from typing import Any

import cloudpickle
import tblib

from ..core import spec as spec_module
from ..core.keys import Key
from ..core.metrics import MeterFrame, ThreadAccount
from ..core.sizeof import sizeof
from ..core.worker_messages import ExecuteFailed, ExecuteSucceeded
from .meter import context_meter

# Frames from these files sit between the engine and the user's function; a
# traceback shown to the user starts below them.
_ENGINE_FILES = frozenset({os.path.abspath(__file__), os.path.abspath(spec_module.__file__)})
# A task shorter than this (wall seconds), ending less than _STALE_READING after the
# thread's last CPU reading, is taken to have run on the CPU all along.
_SHORT_TASK = 20e-6
_STALE_READING = 1e-3


def run_task(
    key: Key, spec: Any, data: Any, submitted: float, account: ThreadAccount, group: tuple
) -> ExecuteSucceeded | ExecuteFailed:
    """Evaluate a task with its inputs; never raises (the outcome is the event).

    ``spec`` is a TaskSpec, or its cloudpickled bytes when it came from another
    process. How the run's time was spent goes into this thread's ``account``
    under ``group`` (span, prefix), here on the task thread, so the worker's loop
    does nothing per task for metrics:

    - ``thread-cpu``: the thread's CPU time inside the task's own code (and the few
      instructions since the thread's previous task, within the task's wall time);
      a task of a few microseconds counts its wall time, as reading the CPU clock
      would cost more than the task;
    - ``thread-noncpu``: its wall time there minus CPU time (I/O, sleeping, waiting
      for the GIL);
    - whatever ``context_meter`` recorded meanwhile (user labels such as "I/O", and
      the engine's own: "deserialize", "disk-read", ...), taken out of the two above;
    - ``other``: the rest of the run (unpacking inputs, measuring the result);
    - ``executor``: from ``submitted`` (handed to the pool) until it started.

    Call it on task threads only: the first call makes the thread's context listen
    to ``context_meter`` for good (see ``_Collector``).
    """
    wall, cpu = time.perf_counter, time.thread_time
    t_got = wall()
    try:
        collector = _local.collector
    except AttributeError:
        collector = _local.collector = _Collector()
    anchor = t_got + collector.to_time  # the scheduler's kind of clock, for the task stream
    frame = collector.frame
    frame.inner_wall = frame.inner_cpu = 0.0
    digests = collector.digests
    if digests:
        digests.clear()
    deserialize = 0.0
    try:
        if type(spec) is bytes:
            # unpickling is CPU work: timed by wall clock alone, it costs no CPU readings
            spec = load_task(key, spec)
            t_loaded = wall()
            deserialize = t_loaded - t_got
            frame.inner_wall += deserialize
            frame.inner_cpu += deserialize
        else:
            t_loaded = t_got
        if callable(data):  # inputs that may have to come back from disk
            inputs = data()
            t_inputs = wall()
        else:
            inputs = data
            t_inputs = t_loaded
        inner_wall0 = frame.inner_wall
        w0 = t_inputs  # the task's own code starts now
        # At most one CPU reading per task: it starts where the previous task's left
        # off, so the pool's few instructions between two tasks count as this one's
        # (bounded by its wall time below).
        c0 = collector.cpu_mark
        if c0 < 0.0:  # this thread's first task, or the one after a failure
            c0 = cpu()
            collector.read_at = w0
            cpu_metered0 = frame.inner_cpu
        else:
            cpu_metered0 = 0.0  # c0 predates all of this task's meters
        value = spec_module.evaluate(spec.expr, inputs)
        w1 = wall()
        if w1 - w0 < _SHORT_TASK and w1 - collector.read_at < _STALE_READING:
            # A reading (a system call) costs more than a task this short, which had
            # no time to wait for anything: its wall time is its CPU time. What that
            # misses shows in the next reading, at most _STALE_READING later.
            c1 = collector.cpu_mark = c0 + (w1 - w0)
        else:
            c1 = collector.cpu_mark = cpu()
            collector.read_at = w1
            collector.to_time = time.time() - wall()
    except BaseException as exc:
        w1 = wall()
        collector.cpu_mark = -1.0
        tb = user_traceback(exc.__traceback__)
        text = "".join(tb_module.format_exception(type(exc), exc, tb))
        exc.__traceback__ = tb
        noncpu = w1 - t_got - frame.inner_wall
        account.add(group, submitted, t_got, wall(), 0.0, max(0.0, noncpu), 0.0, deserialize, 0)
        if digests:
            account.add_extra(group, digests)
        startstops = [("compute", anchor, anchor + (w1 - t_got))]
        return ExecuteFailed(key, exc, tb, text, startstops, collector.thread)
    nbytes = sizeof(value)
    t_end = wall()
    task_wall = (w1 - w0) - (frame.inner_wall - inner_wall0)
    thread_cpu = (c1 - c0) - (frame.inner_cpu - cpu_metered0)
    if thread_cpu > task_wall:
        thread_cpu = task_wall
    elif thread_cpu < 0.0:
        thread_cpu = 0.0
    thread_noncpu = task_wall - thread_cpu
    other = (t_end - t_got) - (w1 - w0) - inner_wall0
    account.add(
        group,
        submitted,
        t_got,
        t_end,
        thread_cpu,
        thread_noncpu if thread_noncpu > 0.0 else 0.0,
        other if other > 0.0 else 0.0,
        deserialize,
        nbytes,
    )
    if t_loaded == t_got:
        startstops = [("compute", anchor + (w0 - t_got), anchor + (w1 - t_got))]
    else:
        startstops = [
            ("compute", anchor + (w0 - t_got), anchor + (w1 - t_got)),
            ("deserialize", anchor, anchor + (t_loaded - t_got)),
        ]
    if digests:
        account.add_extra(group, digests)
        if any(d[0] == "disk-read" for d in digests):
            startstops.append(
                ("disk-read", anchor + (t_loaded - t_got), anchor + (t_inputs - t_got))
            )
    return ExecuteSucceeded(
        key, value, nbytes, type(value).__qualname__, startstops, collector.thread
    )


class _Collector:
    """A task thread's listener for ``context_meter``, installed once for all the tasks
    it runs, since a trivial task's whole cost is a few microseconds."""

    def __init__(self) -> None:
        _collectors.add(self)
        self.thread = threading.get_ident()
        self.cpu_mark = -1.0  # the thread's CPU time at the end of its last task
        self.read_at = 0.0  # when the CPU clock was last read (wall clock)
        # time.time() - time.perf_counter(), brought up to date at each CPU reading
        self.to_time = time.time() - time.perf_counter()
        self.frame = MeterFrame()
        self.digests: list[tuple] = []
        append = self.digests.append
        context_meter.listen_here(
            lambda label, value, unit: append((label, value, unit)), self.frame
        )


_local = threading.local()
_collectors: weakref.WeakSet[_Collector] = weakref.WeakSet()


def forget_cpu_marks() -> None:
    """Task threads read their CPU clock afresh at their next task: after a time with
    metrics off, the CPU used since a thread's last metered task is not that task's."""
    for collector in list(_collectors):
        collector.cpu_mark = -1.0


def run_task_unmetered(key: Key, spec: Any, data: Any) -> ExecuteSucceeded | ExecuteFailed:
    """``run_task`` with fine metrics switched off: only the task stream's times."""
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


def unpack_exception(payload: Any, tb_data: Any, text: str = "") -> tuple[BaseException, Any]:
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

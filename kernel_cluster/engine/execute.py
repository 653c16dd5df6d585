"""Running one task on a task thread and describing the outcome as an event."""

from __future__ import annotations

import os
import threading
import time
import traceback as tb_module
from types import TracebackType
from typing import Any

import cloudpickle
import tblib

from ..core import spec as spec_module
from ..core.keys import Key
from ..core.metrics import MeterFrame
from ..core.sizeof import sizeof
from ..core.worker_messages import ExecuteFailed, ExecuteSucceeded
from .meter import context_meter

# Frames from these files sit between the engine and the user's function; a
# traceback shown to the user starts below them.
_ENGINE_FILES = frozenset({os.path.abspath(__file__), os.path.abspath(spec_module.__file__)})


def run_task(key: Key, spec: Any, data: Any) -> ExecuteSucceeded | ExecuteFailed:
    """Evaluate a task with its inputs; never raises (the outcome is the event).

    ``spec`` is a TaskSpec, or its cloudpickled bytes when it came from another
    process. The event's ``run`` field says which thread ran it and when (monotonic
    clock), and ``metrics`` how that time was spent, as (thread-cpu, thread-noncpu,
    other, [(label, value, unit), ...] for everything else):

    - ``thread-cpu``: the thread's CPU time inside the task's own code;
    - ``thread-noncpu``: its wall time there minus CPU time (I/O, sleeping, waiting
      for the GIL);
    - whatever ``context_meter`` recorded meanwhile (user labels such as "I/O", and
      the engine's own: "deserialize", "disk-read", ...), taken out of the two above;
    - ``other``: the rest of the run (unpacking inputs, measuring the result).
    """
    wall, cpu = time.perf_counter, time.thread_time
    t_got = wall()
    anchor = time.time()  # the scheduler's kind of clock, for the task stream
    collector = _collector()
    thread = collector.thread
    frame = collector.frame
    frame.inner_wall = frame.inner_cpu = 0.0
    digests = collector.digests
    digests.clear()
    with collector.scope:
        try:
            if type(spec) is bytes:
                with context_meter.meter("deserialize"):
                    spec = load_task(key, spec)
                t_loaded = wall()
            else:
                t_loaded = t_got
            if callable(data):  # inputs that may have to come back from disk
                inputs = data()
                t_inputs = wall()
            else:
                inputs = data
                t_inputs = t_loaded
            inner_wall0, inner_cpu0 = frame.inner_wall, frame.inner_cpu
            w0, c0 = wall(), cpu()
            value = spec_module.evaluate(spec.expr, inputs)
            w1, c1 = wall(), cpu()
        except BaseException as exc:
            w1 = wall()
            tb = user_traceback(exc.__traceback__)
            text = "".join(tb_module.format_exception(type(exc), exc, tb))
            exc.__traceback__ = tb
            startstops = [("compute", anchor, anchor + (w1 - t_got))]
            metrics = (0.0, max(0.0, w1 - t_got - frame.inner_wall), 0.0, digests[:])
            return ExecuteFailed(
                key, exc, tb, text, startstops, thread, run=(t_got, wall()), metrics=metrics
            )
    nbytes = sizeof(value)
    t_end = wall()
    metered_wall = frame.inner_wall - inner_wall0
    metered_cpu = frame.inner_cpu - inner_cpu0
    thread_cpu = max(0.0, (c1 - c0) - metered_cpu)
    thread_noncpu = max(0.0, (w1 - w0) - metered_wall - thread_cpu)
    other = max(0.0, (t_end - t_got) - (w1 - w0) - inner_wall0)
    startstops = [("compute", anchor + (w0 - t_got), anchor + (w1 - t_got))]
    if t_loaded > t_got:
        startstops.append(("deserialize", anchor, anchor + (t_loaded - t_got)))
    if digests and any(d[0] == "disk-read" for d in digests):
        startstops.append(("disk-read", anchor + (t_loaded - t_got), anchor + (t_inputs - t_got)))
    return ExecuteSucceeded(
        key,
        value,
        nbytes,
        type(value).__qualname__,
        startstops,
        thread,
        run=(t_got, t_end),
        metrics=(thread_cpu, thread_noncpu, other, digests[:] if digests else None),
    )


class _Collector:
    """What a task thread reuses for every task it meters: allocated once per thread,
    since a trivial task's whole cost is a few microseconds."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.frame = MeterFrame()
        self.digests: list[tuple] = []
        append = self.digests.append
        self.scope = context_meter.scope(
            lambda label, value, unit: append((label, value, unit)), self.frame
        )


_local = threading.local()


def _collector() -> _Collector:
    try:
        return _local.collector
    except AttributeError:
        _local.collector = c = _Collector()
        return c


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

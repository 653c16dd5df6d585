"""Fine performance metrics: recording, attributing and summing them.

Three parts, kept apart on purpose:

- ``ContextMeter`` records. Low-level code (a task, a serialiser, the spill
  buffer) says ``with context_meter.meter("disk-write")`` or
  ``digest_metric(label, value, unit)`` without knowing who listens; whoever
  runs that code (the task runner, a transfer) installs a callback in the
  context and decides what the numbers belong to.
- ``ThreadAccount`` (core/thread_accounts.py) sums one worker thread's tasks as
  they end, on that thread, and the time *between* them, so that every second of
  every thread is attributed once: a task's run, the executor hand-off before it,
  or idle. ``ThreadTimeline`` holds a worker's accounts and whether the cluster
  is busy.
- ``MetricsLedger`` holds a worker's running totals and the delta since the
  last heartbeat; ``add_metrics`` sums deltas on the scheduler.

Clocks are parameters: tests drive them by hand.

Where a task's metric goes, as file:function hops from where it is measured to
where it is drawn (``thread-noncpu``, say; every ``TASK_FIELDS`` metric goes the
same way):

1. measured: engine/execute.py ``TaskRunner._succeeded`` (``noncpu``), or
   ``TaskRunner._failed`` (``TaskTiming.noncpu``); a tiny task has none (its
   ``thread-cpu`` and the like: ``TaskRunner.run``'s short path);
2. summed per thread and group into core/thread_accounts.py ``GroupTotals.noncpu``
   (named ``("thread-noncpu", "seconds")`` by ``TASK_FIELDS``): on the task thread,
   by ``TaskRunner._succeeded`` in the totals that ``ThreadAccount.totals_for``
   returns (``run``'s short path adds the other fields only), or by
   ``ThreadAccount.add`` (failed runs);
3. taken per heartbeat: engine/worker.py ``Worker.metrics_delta`` passes
   ``MetricsLedger.add`` (here) to ``ThreadTimeline.take`` -> ``ThreadAccount.take`` ->
   ``ThreadAccount._take_totals``, which calls it with the key
   ``("execute", span_id, prefix, "thread-noncpu", "seconds")``: into ``total`` and
   into the delta, which ``Worker.heartbeat`` sends as engine/wire.py ``Heartbeat``
   (``MetricsLedger.take_delta``; as it is over engine/local_channels.py, encoded by
   wire.py ``encode_batch`` over TCP);
4. summed on the scheduler: engine/scheduler.py ``Scheduler.handle_worker_messages``
   -> ``Scheduler._heartbeat`` -> ``Scheduler.add_worker_metrics``: core/spans.py
   ``SpanTree.fold_keys`` (old default spans fold), then ``add_metrics`` (here) into
   ``worker_metrics``, and ``SpanTree.add_metrics`` per span;
5. read: diagnostics/sources/engine_source.py ``EngineSource.fine_metrics`` (after
   ``Scheduler.refresh_metrics`` with ``refresh=True``, as ``Client.fine_metrics``
   reads it for diagnostics/fine_metrics.py ``to_frame``; the widgets' publisher
   reads it with ``refresh=False``);
6. fed: jupyter/publisher.py ``Publisher.tick`` (``READERS["metrics"]``) ->
   diagnostics/feeds/tables.py ``MetricsFeed.update``: deltas against what was sent,
   sent by ``Publisher._emit`` (``pack``) -> jupyter/widgets.py
   ``_LiveWidget._send_update``;
7. drawn: widgets/src/widget.ts ``initialize`` (the comm message) ->
   widgets/src/store.ts ``Store.applyUpdate`` -> ``MetricsTable.apply``, whose
   listeners run widgets/src/fineMetrics.ts ``FineMetricsView.render``
   (widgets/src/aggregate.ts ``computePanels``, then widgets/src/chart.ts
   ``drawBars``: the "by function" segments and the "by activity" bar).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

Metrics = dict[tuple[Any, ...], float]
Callback = Callable[[Hashable, float, str], None]


class MeterFrame:
    """A ``seconds`` meter in progress: nested meters report their time to it.

    ``inner_wall`` and ``inner_cpu`` are what nested meters took, so the frame's
    own time excludes them and nothing is counted twice.
    """

    __slots__ = ("inner_cpu", "inner_wall")

    def __init__(self) -> None:
        self.inner_wall = 0.0
        self.inner_cpu = 0.0


class ContextMeter:
    """Where metrics are digested, and who listens to them, per context.

    ``pickle_as``: a function (importable by reference) returning the meter that
    stands for this one in another process. Task code captures the process-wide
    ``context_meter`` (a function of a notebook or script is pickled by value, with
    what it refers to); its ContextVars cannot travel, so the worker's own meter
    takes its place there. A meter without ``pickle_as`` refuses to be pickled.
    """

    def __init__(
        self,
        wall: Callable[[], float],
        cpu: Callable[[], float],
        pickle_as: Callable[[], ContextMeter] | None = None,
        elsewhere: Callable[[], Any] | None = None,
    ):
        """``elsewhere``: where metrics go when nobody here listens, or None: a function
        returning another engine's meter (with ``meter`` and ``digest_metric``, as
        Dask's ``distributed.metrics.context_meter``) while that one listens; task
        code run by a Dask worker then records into Dask's metrics."""
        self.wall = wall
        self.cpu = cpu
        self._pickle_as = pickle_as
        self._elsewhere = elsewhere
        self._callbacks: ContextVar[tuple[Callback, ...]] = ContextVar(
            "kernel_cluster_metric_callbacks", default=()
        )
        self._frame: ContextVar[MeterFrame | None] = ContextVar(
            "kernel_cluster_meter_frame", default=None
        )

    def __reduce__(self) -> tuple[Any, ...]:
        if self._pickle_as is None:
            raise TypeError(
                "This ContextMeter belongs to the process that made it and cannot be pickled; "
                "in task code use kernel_cluster.context_meter, which travels to workers."
            )
        return (self._pickle_as, ())

    @contextmanager
    def add_callback(self, callback: Callback) -> Iterator[None]:
        """Receive every metric digested in this context (nested callbacks all receive)."""
        token = self._callbacks.set((*self._callbacks.get(), callback))
        try:
            yield
        finally:
            self._callbacks.reset(token)

    def scope(self, callback: Callback, frame: MeterFrame) -> _Scope:
        """Listen with ``callback`` only, and let ``frame`` collect the time of meters.

        What a task runner opens around each task: a class, not a generator, since
        it runs once per task.
        """
        return _Scope(self, callback, frame)

    def listen_here(self, callback: Callback, frame: MeterFrame) -> None:
        """Make ``callback`` and ``frame`` this context's listener for good.

        For a thread that does nothing but run tasks: entering a scope per task would
        cost more than a trivial task's own work.
        """
        self._callbacks.set((callback,))
        self._frame.set(frame)

    @property
    def active(self) -> bool:
        """Whether anybody listens here (inside a task or a transfer)."""
        return bool(self._callbacks.get())

    def digest_metric(self, label: Hashable, value: float, unit: str) -> None:
        """Report ``value`` in ``unit`` under ``label``; a no-op where nobody listens."""
        callbacks = self._callbacks.get()
        if not callbacks:
            other = self._elsewhere() if self._elsewhere is not None else None
            if other is not None:
                other.digest_metric(label, value, unit)
            return
        check_metric(label, value, unit)
        for cb in callbacks:
            cb(label, value, unit)

    def record(self, label: str, value: float, unit: str) -> None:
        """``digest_metric`` for the engine's own numbers, which need no checking: some
        are recorded for every value a task reads."""
        for cb in self._callbacks.get():
            cb(label, value, unit)

    def meter(
        self,
        label: Hashable,
        unit: str = "seconds",
        func: Callable[[], float] | None = None,
        floor: float | Literal[False] = 0.0,
    ) -> Meter:
        """Measure the block with ``func`` (default: this meter's wall clock, i.e.
        ``time.perf_counter``) and report the difference as ``label`` in ``unit``.

        In ``seconds``, time spent in meters nested inside is reported under their own
        label and left out of this one, and the enclosing task's CPU and non-CPU time
        leave out the whole block. ``floor``: the least the difference may be (False:
        no floor). ``with ... as m`` gives a ``MeterOutput`` (``m.start`` at once,
        ``m.stop`` and ``m.delta`` once the block ends). Usable as a decorator too.
        """
        if floor is not False and (isinstance(floor, bool) or not isinstance(floor, int | float)):
            raise TypeError(f"floor={floor!r}: give a number, or False for no floor.")
        if func is not None and not callable(func):
            raise TypeError(
                f"func={func!r}: give a function of no arguments returning a number "
                "(time.perf_counter, say)."
            )
        return Meter(self, label, unit, func, floor)


class MeterOutput:
    """What ``with context_meter.meter(...) as m`` gives: ``start`` (``func()`` as the
    block began), then ``stop`` and ``delta`` once it ended (nan until then; ``delta``
    less what nested meters took, for seconds, and at least the floor)."""

    __slots__ = ("delta", "start", "stop")

    def __init__(self, start: float, stop: float = math.nan, delta: float = math.nan):
        self.start = start
        self.stop = stop
        self.delta = delta

    def __repr__(self) -> str:
        return f"MeterOutput(start={self.start!r}, stop={self.stop!r}, delta={self.delta!r})"


class Meter:
    """``context_meter.meter(label)``: a context manager, or a decorator.

    A class rather than a generator: it pickles (a decorated function of a script
    travels to worker processes with it), and costs less per use inside tasks. One
    ``with`` at a time; as a decorator, each call times itself with a new one.
    """

    __slots__ = ("_state", "context", "floor", "func", "label", "unit")

    def __init__(
        self,
        context: ContextMeter,
        label: Hashable,
        unit: str = "seconds",
        func: Callable[[], float] | None = None,
        floor: float | Literal[False] = 0.0,
    ):
        self.context = context
        self.label = label
        self.unit = unit
        self.func = func
        self.floor = floor
        self._state: tuple[Any, ...] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (Meter, (self.context, self.label, self.unit, self.func, self.floor))

    def __enter__(self) -> MeterOutput:
        m = self.context
        func = self.func or m.wall
        if not m._callbacks.get():  # nobody listens here
            other = m._elsewhere() if m._elsewhere is not None else None
            if other is not None:  # another engine's task (Dask's): its meter measures
                manager = other.meter(self.label, self.unit, func, self.floor)
                self._state = (manager, None, None, 0.0, 0.0, None, False)
                return manager.__enter__()  # type: ignore[no-any-return]
            out = MeterOutput(func())  # the numbers for ``as m`` only
            self._state = (None, None, None, 0.0, 0.0, out, False)
            return out
        hash(self.label)  # fail here, inside the task, rather than later on the worker
        nested = self.unit == "seconds"
        frame = parent = token = None
        if nested:
            frame = MeterFrame()
            parent = m._frame.get()
            token = m._frame.set(frame)
        wall0 = m.wall()
        out = MeterOutput(func() if self.func is not None else wall0)
        self._state = (parent, frame, token, wall0, m.cpu(), out, True)
        return out

    def __exit__(self, *exc: object) -> None:
        state = self._state
        if state is None:
            return
        self._state = None
        parent, frame, token, wall0, cpu0, out, listened = state
        m = self.context
        floor = self.floor
        if not listened:
            if parent is not None:  # the other engine's meter
                parent.__exit__(*exc)
                return
            out.stop = (self.func or m.wall)()
            delta = out.stop - out.start
            out.delta = delta if floor is False else max(floor, delta)
            return
        wall_now = m.wall()
        out.stop = self.func() if self.func is not None else wall_now
        delta = out.stop - out.start
        if frame is not None:
            wall = wall_now - wall0
            cpu = m.cpu() - cpu0
            m._frame.reset(token)
            if parent is not None:
                parent.inner_wall += wall
                parent.inner_cpu += cpu
            delta -= frame.inner_wall
        out.delta = delta if floor is False else max(floor, delta)
        m.digest_metric(self.label, out.delta, self.unit)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        context, label, unit, clock, floor = (
            self.context,
            self.label,
            self.unit,
            self.func,
            self.floor,
        )

        @functools.wraps(func)
        def metered(*args: Any, **kwargs: Any) -> Any:
            with Meter(context, label, unit, clock, floor):
                return func(*args, **kwargs)

        return metered


class _Scope:
    """Reusable, but not re-entrant: one ``with`` at a time (a task thread's tasks)."""

    __slots__ = ("_callbacks", "_frame", "_meter", "_tokens")

    def __init__(self, meter: ContextMeter, callback: Callback, frame: MeterFrame):
        self._meter, self._callbacks, self._frame = meter, (callback,), frame

    def __enter__(self) -> MeterFrame:
        m = self._meter
        self._tokens = (m._callbacks.set(self._callbacks), m._frame.set(self._frame))
        return self._frame

    def __exit__(self, *exc: object) -> None:
        m = self._meter
        m._frame.reset(self._tokens[1])
        m._callbacks.reset(self._tokens[0])


# units whose totals mean a duration or a size: a negative digest would corrupt them
NON_NEGATIVE_UNITS = frozenset({"seconds", "bytes"})


def check_metric(label: Any, value: Any, unit: Any) -> None:
    """Bad input gets a clear error where it happens, not a corrupt total later."""
    try:
        hash(label)
    except TypeError:
        raise TypeError(
            f"Metric label {label!r} cannot be used: labels must be hashable (a str or a "
            f"tuple of str), not {type(label).__name__}."
        ) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"Metric {label!r} got {value!r} ({type(value).__name__}); values must be int or "
            "float numbers."
        )
    if not math.isfinite(value):
        raise ValueError(f"Metric {label!r} got {value!r}; values must be finite numbers.")
    if not isinstance(unit, str) or not unit:
        raise TypeError(f"Metric {label!r} needs a unit such as 'seconds' or 'bytes'.")
    if value < 0 and unit in NON_NEGATIVE_UNITS:
        raise ValueError(
            f"Metric {label!r} got {value!r} {unit}; a duration or a size cannot be negative "
            "(check the subtraction that computed it)."
        )


# -- running totals and deltas --------------------------------------------------------


class MetricsLedger:
    """A worker's metrics: running totals, and the delta the next heartbeat carries.

    Everything is added on the worker's event loop thread; the heartbeat takes the
    delta by swapping the dict, so nothing is copied or locked.

    ``total`` (``Worker.digests_total``) keeps the detail of the latest
    ``max_spans`` spans; the execute metrics of older ones are summed under the span
    ``"folded"``, so a kernel that runs a million ``submit().result()`` calls (a
    default span each) does not keep a million spans' worth of keys. The scheduler
    has had every delta by then: nothing it shows is folded here.
    """

    def __init__(self, max_spans: int = 1000) -> None:
        self.total: Metrics = {}
        self._delta: Metrics = {}
        self.max_spans = max_spans
        self._by_span: dict[
            Any, list[tuple[Any, ...]]
        ] = {}  # span id -> its keys in total, oldest first

    def add(self, key: tuple[Any, ...], value: float) -> None:
        if not value:
            return
        total, delta = self.total, self._delta
        old = total.get(key)
        if old is None:
            old = 0
            if len(key) == 5 and key[0] == "execute" and key[1] is not None:
                self._new_span_key(key)
        total[key] = old + value
        delta[key] = delta.get(key, 0) + value

    def _new_span_key(self, key: tuple[Any, ...]) -> None:
        keys = self._by_span.get(key[1])
        if keys is None:
            keys = self._by_span[key[1]] = []
            if len(self._by_span) > self.max_spans:
                self._fold(next(iter(self._by_span)))
        keys.append(key)

    def _fold(self, span_id: Any) -> None:
        total = self.total
        for key in self._by_span.pop(span_id):
            folded = ("execute", "folded", *key[2:])
            total[folded] = total.get(folded, 0) + total.pop(key)

    def add_many(self, metrics: Metrics) -> None:
        for key, value in metrics.items():
            self.add(key, value)

    def take_delta(self) -> Metrics:
        delta, self._delta = self._delta, {}
        return delta


def add_metrics(into: Metrics, delta: Metrics) -> None:
    """``into += delta``, keeping integers integers."""
    for key, value in delta.items():
        into[key] = into.get(key, 0) + value

"""Profiler, ResourceProfiler, CacheProfiler: local callbacks that keep records.

Each is a ``Callback``: active in a ``with`` block (entering it again clears its
``results``) or after ``register()``; several combine in one ``with`` statement.
``results`` is a list of ``records`` tuples; ``visualize()`` draws them
(``local_plots``). Times are seconds since the epoch on this machine.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..core.sizeof import sizeof
from .callbacks import Callback, RemoteValue
from .records import CacheData, ResourceData, TaskData

__all__ = ["CacheProfiler", "Profiler", "ResourceProfiler"]


class _Recorder(Callback):
    """What the three share: ``results``, cleared on entering, and ``visualize``."""

    results: list[Any]

    def __enter__(self) -> Any:
        self.clear()
        return super().__enter__()

    def clear(self) -> None:
        """Forget the records kept so far (entering a ``with`` block does it too)."""
        self.results = []

    def visualize(self, **kwargs: Any) -> Any:
        """Draw ``results`` (see ``kernel_cluster.local_diagnostics.plots.visualize``)."""
        from .plots import visualize  # the plots' module loads on first use

        return visualize([self], **kwargs)


class Profiler(_Recorder):
    """One ``TaskData(key, task, start_time, end_time, worker_id)`` per task run.

    >>> with Profiler() as prof:
    ...     client.get(dsk, "c")  # or x.compute(scheduler=client), get_sync(dsk, "c")
    >>> prof.results[0]
    TaskData(key='a', task=(add, 1, 2), start_time=..., end_time=..., worker_id=0)
    >>> prof.visualize()  # writes profile.html (a widget in a notebook)

    The times are those the worker measured around the task's own run (not the
    times the hooks were called at); ``worker_id`` numbers the (worker, thread)
    pairs of the computation from 0 (``state["workers"]`` maps them back).
    """

    uses_result = False

    def __init__(self) -> None:
        super().__init__()
        self.results: list[TaskData] = []
        self._starts: dict[Any, float] = {}

    def _pretask(self, key: Any, dsk: Any, state: dict[str, Any]) -> None:
        self._starts[key] = time.time()

    def _posttask(self, key: Any, result: Any, dsk: Any, state: dict[str, Any], id: Any) -> None:
        times = state.get("task_times", {}).get(key)
        if times is None:
            end = time.time()
            times = (self._starts.get(key, end), end)
        self._starts.pop(key, None)
        self.results.append(TaskData(key, _task(dsk, key), times[0], times[1], id))

    def _finish(self, dsk: Any, state: dict[str, Any], errored: bool) -> None:
        self._starts.clear()

    def clear(self) -> None:
        self.results = []
        self._starts = {}


def _task(dsk: Any, key: Any) -> Any:
    try:
        return dsk[key]
    except Exception:  # a graph that cannot be indexed by key
        return None


class ResourceProfiler(_Recorder):
    """``ResourceData(time, mem, cpu)`` every ``dt`` seconds: memory (MB) and CPU
    (percent, 100 per busy core) of this process and its worker processes together.

    >>> with ResourceProfiler(dt=0.25) as rprof:
    ...     client.get(dsk, "c")
    >>> rprof.results[0]
    ResourceData(time=..., mem=74.1, cpu=0.0)

    A separate process samples them (``resource_sampler``), so a computation holding
    the GIL here cannot delay or skew the samples. It runs from entering the ``with``
    block to leaving it (registered: from each computation's start to its finish),
    and ends however the block ends, or if this process dies.
    """

    uses_result = False

    def __init__(self, dt: float = 1) -> None:
        if not (isinstance(dt, int | float) and dt > 0 and math.isfinite(dt)):
            raise ValueError(f"ResourceProfiler(dt={dt!r}): give seconds between samples, > 0.")
        super().__init__()
        self.dt = float(dt)
        self.results: list[ResourceData] = []
        self._starter: threading.Thread | None = None  # starts the sampler's process
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._entered = 0
        self._computing: set[int] = set()  # id(state) of the computations followed
        self._lock = threading.Lock()

    def __enter__(self) -> Any:
        out = super().__enter__()
        self._entered += 1
        try:
            self._start_sampling()
        except BaseException:  # a Ctrl-C while the sampler starts: the block never ran
            self.__exit__(None, None, None)
            raise
        return out

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._entered -= 1
            if not self._entered:  # (an inner ``with`` of the same one: the outer goes on)
                self._stop_sampling()

    def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
        self._computing.add(id(state))
        self._start_sampling()

    def _finish(self, dsk: Any, state: dict[str, Any], errored: bool) -> None:
        # (registered: computations overlap, e.g. client.compute; the last one stops)
        self._computing.discard(id(state))
        if not self._entered and not self._computing:
            self._stop_sampling()

    def close(self) -> None:
        """Stop sampling now."""
        self._stop_sampling()

    @property
    def sampling(self) -> bool:
        return self._starter is not None

    def _start_sampling(self) -> None:
        with self._lock:
            if self._starter is not None:
                return
            first = threading.Event()
            # the process starts on a thread of its own: a Ctrl-C, raised in the main
            # thread only, cannot then stop Popen half-way and leave a sampler that
            # nobody waits for (a zombie for the life of the kernel)
            self._starter = threading.Thread(
                target=self._spawn, args=(first,), name="ResourceProfiler-start", daemon=True
            )
            self._starter.start()
        # the samples cover what follows only once the sampler has taken its first
        # (its start-up, a Python process's, takes a tenth of a second or so)
        first.wait(timeout=10)

    def _spawn(self, first: threading.Event) -> None:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resource_sampler.py")
        try:
            proc = subprocess.Popen(
                [sys.executable, script, str(os.getpid()), repr(self.dt)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal is not for it
            )
        except OSError as exc:
            warnings.warn(f"ResourceProfiler: cannot start its sampler: {exc}", stacklevel=1)
            first.set()
            return
        self._proc = proc
        self._reader = threading.Thread(
            target=self._read, args=(proc, first), name="ResourceProfiler-reader", daemon=True
        )
        self._reader.start()

    def _read(self, proc: subprocess.Popen[bytes], first: threading.Event) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                try:
                    t, mem, cpu = (float(x) for x in line.split())
                except ValueError:
                    continue
                self.results.append(ResourceData(t, mem, cpu))  # (the list clear() made)
                first.set()
        finally:
            first.set()  # (the sampler could not start: nobody waits for ever)

    def _stop_sampling(self) -> None:
        with self._lock:
            starter, self._starter = self._starter, None
        if starter is None:
            return
        starter.join()  # Popen returns in a moment; its process is then ours to end
        proc, reader = self._proc, self._reader
        self._proc = self._reader = None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # end of file: the sampler takes a last sample and ends
            proc.wait(timeout=max(5.0, 2 * self.dt))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            if reader is not None:
                reader.join(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()

    def clear(self) -> None:
        self.results = []


def _run_id(state: Any) -> int:
    """A computation's identity (posttask's ``id`` argument hides the builtin)."""
    return id(state)


def _count(value: Any) -> int:
    return 1


class CacheProfiler(_Recorder):
    """``CacheData(key, task, metric, cache_time, free_time)`` per result held in
    memory: when the task made it, when the engine freed it (or the computation
    ended), and ``metric(value)`` (1 by default: the plots count results).
    ``metric_name`` labels the plot (the function's name by default).

    >>> with CacheProfiler(metric=kernel_cluster.sizeof, metric_name="bytes") as cprof:
    ...     client.get(dsk, "c")
    >>> cprof.results[0]
    CacheData(key='a', task=(add, 1, 2), metric=28.0, cache_time=..., free_time=...)

    With worker processes the values stay there, and so does the metric's work: a
    ``metric`` other than ``kernel_cluster.sizeof`` is computed in the worker as each
    task ends and collected when the computation ends (NaN for a value whose worker
    died first, or where the metric raised); ``sizeof`` uses the sizes the engine
    measures anyway. With embedded workers the metric runs here, on the value, as the
    hook is called (NaN for a value spilled to disk by then: it is not read back, or
    where the metric raised).
    """

    def __init__(
        self, metric: Callable[[Any], Any] | None = None, metric_name: str | None = None
    ) -> None:
        if metric is not None and not callable(metric):
            raise TypeError(
                f"CacheProfiler(metric=...) takes a function of a value (e.g. "
                f"kernel_cluster.sizeof), got {type(metric).__name__} {metric!r}."
            )
        super().__init__()
        self.results: list[CacheData] = []
        self._metric = metric if metric is not None else _count
        if metric_name is not None:
            self._metric_name = metric_name
        elif metric is not None:
            self._metric_name = getattr(metric, "__name__", type(metric).__name__)
        else:
            self._metric_name = "count"
        # what the engine must do for it: read values (embedded), or have the metric
        # computed where they live (processes); neither for a count or sizeof
        custom = metric is not None and metric is not sizeof
        self.uses_result = custom
        self.value_metric: Callable[[Any], Any] | None = metric if custom else None
        # id(state) of each computation -> key -> (metric, cache time)
        self._cache: dict[int, dict[Any, tuple[float | None, float]]] = {}
        self._warned = False  # about a metric that raised (once per profiler)

    @property
    def metric_name(self) -> str:
        return self._metric_name

    def _posttask(self, key: Any, value: Any, dsk: Any, state: dict[str, Any], id: Any) -> None:
        # when the engine had it (the clock its frees are timed on), else now
        t = state.get("stored_times", {}).get(key) or time.time()
        metric: float | None
        if self._metric is _count:
            metric = 1
        elif self._metric is sizeof:  # the engine measured it already
            nbytes = state.get("nbytes", {}).get(key)
            metric = float(nbytes if nbytes is not None else sizeof(value))
        elif type(value) is RemoteValue:
            metric = None  # computed where the value lives, handed over at the finish
        else:
            try:
                metric = float(self._metric(value))
            except Exception as exc:  # NaN, as where the values live: the other keys go on
                metric = math.nan
                self._warn(f"{type(exc).__name__}: {exc}", key)
        # per computation: several may overlap (client.compute), each ends on its own
        self._cache.setdefault(_run_id(state), {})[key] = (metric, t)

    def _finish(self, dsk: Any, state: dict[str, Any], errored: bool) -> None:
        now = time.time()
        frees = state.get("free_times", {})
        measured = state.get("value_metrics", {})
        error = state.get("value_metric_errors", {}).get(self._metric)
        if error is not None:
            self._warn(error, None)
        out = []
        for key, (metric, t) in self._cache.pop(_run_id(state), {}).items():
            if metric is None:
                metric = measured.get(key, {}).get(self._metric, math.nan)
            out.append(CacheData(key, _task(dsk, key), metric, t, frees.get(key, now)))
        out.sort(key=lambda r: (r.free_time, r.cache_time))
        self.results.extend(out)

    def _warn(self, error: str, key: Any) -> None:
        """Once per profiler: its metric raised, and NaN stands for it in the results."""
        if self._warned:
            return
        self._warned = True
        on = f" on the value of {key!r}" if key is not None else " on a task's value"
        warnings.warn(
            f"CacheProfiler's metric {self._metric_name!r} raised {error}{on}; its results "
            "hold NaN where it raised (this is said once per profiler).",
            RuntimeWarning,
            stacklevel=2,
        )

    def clear(self) -> None:
        self.results = []
        self._cache = {}

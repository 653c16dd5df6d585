"""Two runs side by side: where did the time go, this time?

``compare(a, b, source)`` resolves ``a`` (the baseline) and ``b`` to spans, live
(read through ``source``, any DiagnosticsSource) or stored (the run history),
and lines up their fine metrics by (function, activity, unit): ``a``, ``b``,
``delta = b - a`` and ``ratio = b / a``, sorted by the size of the change (units
in the order seconds, bytes, count, others; in each, the idle time of the
threads, which is no function's, comes last). Two
normalisations make runs of different sizes comparable: per task of that
function (``*_per_task``; idle, which belongs to no function, per task of the
run) and per second of wall clock (``*_per_wall``: how many threads, on
average, did that). The functions' task counts and result bytes sit beside them.

A reference is a live span's id or name (the latest span of that name in the
cluster), a stored span's id, ``name@-k`` (the k-th latest *stored* span of that
name, not counting the span on the other side: so ``compare("etl@-1", "etl")``
right after a run of ``etl`` compares it with the one before, even once it is
stored itself), a ``StoredRun`` or a ``SpanInfo``. A name is a span's own tag or
its full name (``"etl / load"``). Live names are looked up before stored ones.

The verdict is one line: the change of wall clock, then the few (function,
activity) pairs that moved by more than ``TOLERANCE`` of the thread-seconds of
the larger run, largest first. When the runs' task counts differ by more than
``TOLERANCE`` the changes are judged per task.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from ...core.span_folding import IDLE
from ..queries.fine_metrics import check_unit
from ..snapshots import Metrics, SpanInfo
from ..source import DiagnosticsSource
from .store import known_names
from .stored import HistoryOff, StoredRun, find, history_path, not_found, parse_back, reading

TOLERANCE = 0.05  # changes under 5% of the larger run's thread-seconds are "within 5%"
VERDICT_ITEMS = 3  # changes named in the verdict at most
UNIT_ORDER = ("seconds", "bytes", "count")
COLUMNS = [
    "function",
    "activity",
    "unit",
    "a",
    "b",
    "delta",
    "ratio",
    "a_per_task",
    "b_per_task",
    "delta_per_task",
    "a_per_wall",
    "b_per_wall",
    "a_tasks",
    "b_tasks",
    "a_bytes",
    "b_bytes",
]

# (function, activity, unit): function None is the idle time of the span's threads
Key = tuple[str | None, str, str]


def _label(v: object) -> str:
    return v if isinstance(v, str) else str(v)


@dataclass(frozen=True)
class Side:
    """One side of a comparison, resolved: what it is and its numbers."""

    ref: str
    id: str
    name: str
    where: Literal["live", "history"]
    start: float
    stop: float
    wall: float
    tasks: int
    nbytes: int
    done: bool
    metrics: dict[Key, float]
    tasks_by_function: dict[str, float]
    bytes_by_function: dict[str, float]
    thread_seconds: float  # every function's seconds (not the threads' idle time)
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.where} {self.id[:8]})"

    def summary(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "id": self.id,
            "name": self.name,
            "label": self.label,
            "where": self.where,
            "start": self.start,
            "stop": self.stop,
            "wall": self.wall,
            "tasks": self.tasks,
            "nbytes": self.nbytes,
            "thread_seconds": self.thread_seconds,
            "done": self.done,
            "source": self.context.get("source"),
        }


def _keyed(metrics: Metrics) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for key, value in metrics.items():
        if len(key) != 4 or key[0] != "execute":
            continue
        # the span's unused thread time (Dask's "N/A", "idle or other spans") is no
        # function's: function None, as compare ranks it
        f = None if key[1] is None or key[:3] == IDLE[:3] else _label(key[1])
        k = (f, _label(key[2]), _label(key[3]))
        out[k] = out.get(k, 0.0) + float(value)
    return out


def _by_function(metrics: dict[Key, float]) -> tuple[dict[str, float], dict[str, float], float]:
    """Each function's tasks and result bytes, from the engine's metrics for them, and
    the seconds of all functions: one pass over a run's thousands of metrics."""
    tasks: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    busy = 0.0
    for (f, a, u), v in metrics.items():
        if f is None:
            continue
        if u == "seconds":
            busy += v
        elif a == "tasks" and u == "count":
            tasks[f] = v
        elif a == "output" and u == "bytes":
            nbytes[f] = v
    return tasks, nbytes, busy


def side_of_span(span: SpanInfo, ref: str) -> Side:
    metrics = _keyed(span.metrics)
    tasks, nbytes, busy = _by_function(metrics)
    begin = span.start or span.enqueued
    return Side(
        ref=ref,
        id=span.id,
        name=" / ".join(span.name),
        where="live",
        start=span.start,
        stop=span.stop,
        wall=max(0.0, span.stop - begin),
        tasks=sum(span.states.values()),
        nbytes=span.nbytes_total,
        done=span.done,
        metrics=metrics,
        tasks_by_function=tasks,
        bytes_by_function=nbytes,
        thread_seconds=busy,
    )


def side_of_stored(run: StoredRun, ref: str) -> Side:
    metrics = run.keyed_metrics()
    tasks, nbytes, busy = _by_function(metrics)
    tasks = tasks or {p: float(sum(d["states"].values())) for p, d in run.prefixes.items()}
    nbytes = nbytes or {p: float(d["nbytes"]) for p, d in run.prefixes.items()}
    return Side(
        ref=ref,
        id=run.id,
        name=run.name,
        where="history",
        start=run.start,
        stop=run.stop,
        wall=run.wall,
        tasks=run.tasks,
        nbytes=run.nbytes,
        done=True,
        metrics=metrics,
        tasks_by_function=tasks,
        bytes_by_function=nbytes,
        thread_seconds=busy,
        context=run.context,
    )


# -- naming a run ------------------------------------------------------------------------------


def _matches(span: SpanInfo, name: str) -> bool:
    return bool(span.name) and (span.name[-1] == name or " / ".join(span.name) == name)


class _Resolver:
    """Resolves both references of one comparison, reading each place once."""

    def __init__(self, source: DiagnosticsSource | None) -> None:
        self.source = source
        self._live: list[SpanInfo] | None = None

    def live(self) -> list[SpanInfo]:
        if self._live is None:
            self._live = [] if self.source is None else self.source.spans(refresh=True)
        return self._live

    def resolve(self, ref: object, exclude: Iterable[str] = ()) -> Side:
        if isinstance(ref, Side):
            return ref
        if isinstance(ref, StoredRun):
            return side_of_stored(ref, ref.id)
        if isinstance(ref, SpanInfo):
            return side_of_span(ref, ref.id)
        if not isinstance(ref, str) or not ref:
            raise TypeError(
                f"compare() takes span ids, names, 'name@-k' or stored runs; got {ref!r}."
            )
        if parse_back(ref) is not None:
            return self.stored(ref, exclude)
        live = self.live()
        for span in live:
            if span.id == ref:
                return side_of_span(span, ref)
        named = [s for s in live if _matches(s, ref)]
        if named:
            return side_of_span(max(named, key=lambda s: (s.enqueued, s.start)), ref)
        try:
            return self.stored(ref, exclude)
        except HistoryOff:
            tags = sorted({t for s in live for t in s.name})[:10]
            raise KeyError(
                f"No span {ref!r} in the cluster (its tags: {tags}), and the run history is "
                "off, so no stored run either."
            ) from None

    def stored(self, ref: str, exclude: Iterable[str]) -> Side:
        with reading() as conn:
            row = find(conn, ref, exclude) if conn is not None else None
            if row is None:
                known = known_names(conn) if conn is not None else []
                message = not_found(ref, known, history_path())
                if parse_back(ref) is None and self.source is not None:
                    tags = sorted({t for s in self.live() for t in s.name})[:10]
                    message += f" No live span has that name either (tags: {tags})."
                raise KeyError(message)
        return side_of_stored(StoredRun(row, history_path()), ref)


def resolve(ref: object, source: DiagnosticsSource | None, exclude: Iterable[str] = ()) -> Side:
    """One side (see the module's docstring), resolved now."""
    return _Resolver(source).resolve(ref, exclude)


def side_of_metrics(
    metrics: Metrics, ref: str, name: str, start: float, stop: float, done: bool = True
) -> Side:
    """A side made of worker metrics (``("execute", span, prefix, activity, unit)``
    keys, summed over spans): a block of work that is no span, as a performance
    report records it."""
    merged: Metrics = {}
    for key, value in metrics.items():
        if len(key) == 5 and key[0] == "execute":
            k = ("execute", key[2], key[3], key[4])
            merged[k] = merged.get(k, 0.0) + value
    keyed = _keyed(merged)
    tasks, nbytes, busy = _by_function(keyed)
    return Side(
        ref=ref,
        id=ref,
        name=name,
        where="live",
        start=start,
        stop=stop,
        wall=max(0.0, stop - start),
        tasks=int(sum(tasks.values())),
        nbytes=int(sum(nbytes.values())),
        done=done,
        metrics=keyed,
        tasks_by_function=tasks,
        bytes_by_function=nbytes,
        thread_seconds=busy,
    )


def resolve_pair(a: object, b: object, source: DiagnosticsSource | None) -> tuple[Side, Side]:
    """Both sides; a ``name@-k`` side skips the span the other side resolved to."""
    resolver = _Resolver(source)

    def backward(ref: object) -> bool:
        return isinstance(ref, str) and parse_back(ref) is not None

    if backward(a) and not backward(b):
        side_b = resolver.resolve(b)
        return resolver.resolve(a, exclude=[side_b.id]), side_b
    side_a = resolver.resolve(a)
    return side_a, resolver.resolve(b, exclude=[] if backward(a) else [side_a.id])


# -- the comparison --------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    if a:
        return b / a
    return math.nan if not b else math.inf


def _per(value: float, n: float) -> float:
    return value / n if n else math.nan


class Comparison:
    """Two resolved sides; ``table(unit)`` is what ``compare`` returns. The table is
    built once, with numpy's columns (a run of 1,000 prefixes has some 6,000 rows)."""

    def __init__(self, a: Side, b: Side) -> None:
        self.a = a
        self.b = b
        self._verdict: str | None = None
        self._frame: pd.DataFrame | None = None

    def __repr__(self) -> str:
        return f"<Comparison {self.a.label} -> {self.b.label}: {self.verdict}>"

    def _units(self) -> set[str]:
        return {k[2] for k in self.a.metrics} | {k[2] for k in self.b.metrics}

    @property
    def frame(self) -> pd.DataFrame:
        """Every unit's rows, sorted (see the module's docstring); built once."""
        if self._frame is None:
            self._frame = self._line_up()
        return self._frame

    def _line_up(self) -> pd.DataFrame:
        """The rows, aligned and sorted with numpy: Python touches each key once."""
        a, b = self.a, self.b
        index: dict[Key, int] = {k: i for i, k in enumerate(a.metrics)}
        keys = list(a.metrics)
        for k in b.metrics:
            if k not in index:
                index[k] = len(keys)
                keys.append(k)
        n = len(keys)
        va = np.zeros(n)
        va[: len(a.metrics)] = list(a.metrics.values())
        vb = np.zeros(n)
        vb[[index[k] for k in b.metrics]] = list(b.metrics.values())
        functions = np.array([k[0] for k in keys], dtype=object)
        activities = np.array([k[1] for k in keys], dtype=object)
        units = np.array([k[2] for k in keys], dtype=object)
        # every name as a small int, in sorted order: lookups and sorting in numpy
        fn_names = sorted({f for f in functions if f is not None})
        m = len(fn_names)  # idle's code: after every function's
        fn_code = {f: i for i, f in enumerate(fn_names)}
        codes = np.fromiter((fn_code.get(f, m) for f in functions), int, n)
        idle = codes == m
        nan = math.nan

        def per_function(values: dict[str, float], missing: float, for_idle: float) -> Any:
            table = [values.get(f, missing) for f in fn_names]
            return np.array([*table, for_idle], dtype=float)[codes]

        ta = per_function(a.tasks_by_function, 0.0, float(a.tasks))  # idle: per task of the run
        tb = per_function(b.tasks_by_function, 0.0, float(b.tasks))
        ba = per_function(a.bytes_by_function, nan, nan)
        bb = per_function(b.bytes_by_function, nan, nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            pa = np.where(ta > 0, va / ta, nan)
            pb = np.where(tb > 0, vb / tb, nan)
            ratio = np.where(va != 0, vb / va, np.where(vb != 0, np.inf, nan))
        delta = vb - va
        # units in UNIT_ORDER, then by name; in a unit, idle (no function: the time the
        # threads were not used) after the rest; then the size of the change; then names
        unit_names = [*UNIT_ORDER, *sorted(set(units) - set(UNIT_ORDER))]
        unit_code = {u: i for i, u in enumerate(unit_names)}
        act_code = {x: i for i, x in enumerate(sorted(set(activities)))}
        order = np.lexsort(
            (
                np.fromiter((act_code[x] for x in activities), int, n),
                codes,
                -np.abs(delta),
                idle,
                np.fromiter((unit_code[u] for u in units), int, n),
            )
        )
        columns: dict[str, Any] = {
            "function": functions[order],
            "activity": activities[order],
            "unit": units[order],
        }
        for name, values in zip(
            COLUMNS[3:], (va, vb, delta, ratio, pa, pb, pb - pa, va, vb, ta, tb, ba, bb)
        ):
            columns[name] = values[order]
        columns["a_per_wall"] = va[order] / a.wall if a.wall else np.full(n, nan)
        columns["b_per_wall"] = vb[order] / b.wall if b.wall else np.full(n, nan)
        return pd.DataFrame(columns, columns=COLUMNS)

    def rows(self, unit: str | None = "seconds") -> list[tuple[Any, ...]]:
        """The table's rows (``COLUMNS``) as tuples, of one unit or all."""
        return list(self.table(unit, check=False).itertuples(index=False, name=None))

    def table(self, unit: str | None = "seconds", check: bool = True) -> pd.DataFrame:
        if check and unit is not None and unit not in self._units():
            # a typo, or a unit nothing of either run is measured in: say which there are
            check_unit(unit, {("execute", u): 0.0 for u in self._units()})
        frame = self.frame
        if unit is not None:
            frame = frame[frame["unit"] == unit].reset_index(drop=True)
        else:
            frame = frame.copy()
        frame.attrs["a"] = self.a.summary()
        frame.attrs["b"] = self.b.summary()
        frame.attrs["verdict"] = self.verdict
        return frame

    @property
    def per_task(self) -> bool:
        """The runs did different amounts of work: judge them per task."""
        a, b = self.a.tasks, self.b.tasks
        return bool(a and b) and abs(b - a) > TOLERANCE * a

    @property
    def verdict(self) -> str:
        if self._verdict is None:
            self._verdict = make_verdict(self)
        return self._verdict

    def to_data(self) -> dict[str, Any]:
        """What the Compare widget, panel and report section draw (JSON-able)."""
        f = self.frame
        cols = [
            f[c].tolist() for c in ("function", "activity", "unit", "a", "b", "a_tasks", "b_tasks")
        ]
        rows = [[_json_number(v) for v in row] for row in zip(*cols)]
        return {
            "a": self.a.summary(),
            "b": self.b.summary(),
            "verdict": self.verdict,
            "perTask": self.per_task,
            "rows": rows,
        }


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def format_seconds(x: float, sign: bool = True) -> str:
    s = "+" if sign and x > 0 else "-" if x < 0 else ""
    x = abs(x)
    if x >= 100:
        return f"{s}{x:.0f} s"
    if x >= 1:
        return f"{s}{x:.1f} s"
    if x >= 1e-3:
        return f"{s}{x * 1e3:.0f} ms"
    return f"{s}{x * 1e6:.0f} µs"


def make_verdict(c: Comparison) -> str:
    a, b = c.a, c.b
    if a.wall > 0:
        head = f"wall {(b.wall - a.wall) / a.wall:+.0%}"
    else:
        head = f"wall {format_seconds(b.wall, sign=False)} (the baseline has none)"
    per_task = c.per_task
    if per_task:
        head += f" for {b.tasks:,} tasks instead of {a.tasks:,}; per task"
    f = c.frame
    function = f["function"].to_numpy()
    sec = (f["unit"].to_numpy() == "seconds") & np.array([x is not None for x in function])
    if per_task:  # idle is left out: what the threads did not do
        va, vb = (
            np.nan_to_num(f["a_per_task"].to_numpy()),
            np.nan_to_num(f["b_per_task"].to_numpy()),
        )
        d = np.nan_to_num(f["delta_per_task"].to_numpy())
    else:
        va, vb, d = f["a"].to_numpy(), f["b"].to_numpy(), f["delta"].to_numpy()
    # a change counts if it is over TOLERANCE of the larger run's thread-seconds
    threshold = TOLERANCE * max(float(va[sec].sum()), float(vb[sec].sum()))
    size = np.abs(d)
    chosen = np.flatnonzero(sec & (size > threshold) & (size > 0))
    if not len(chosen):
        return f"{head}: every function and activity within {TOLERANCE:.0%}"
    activity = f["activity"].to_numpy()
    big = sorted(chosen, key=lambda i: (-size[i], function[i], activity[i]))
    named = ", ".join(
        f"`{function[i]}` {activity[i]} {format_seconds(float(d[i]))}" for i in big[:VERDICT_ITEMS]
    )
    rest = len(big) - VERDICT_ITEMS
    if rest > 0:
        tail = f"; {rest} more change{'s' if rest > 1 else ''} over {TOLERANCE:.0%}"
    elif int(sec.sum()) > len(big):
        tail = f"; everything else within {TOLERANCE:.0%}"
    else:
        tail = ""
    return f"{head}: {named}{tail}"


def compare(
    a: object, b: object, source: DiagnosticsSource | None, unit: str | None = "seconds"
) -> pd.DataFrame:
    """The comparison table of ``a`` (baseline) and ``b`` (see the module docstring)."""
    return comparison(a, b, source).table(unit)


# the ids of the last pair compared in this process: what a Compare panel opened without
# a choice shows first
last_pair: tuple[str, str] | None = None


def comparison(a: object, b: object, source: DiagnosticsSource | None) -> Comparison:
    global last_pair
    side_a, side_b = resolve_pair(a, b, source)
    last_pair = (side_a.id, side_b.id)
    return Comparison(side_a, side_b)

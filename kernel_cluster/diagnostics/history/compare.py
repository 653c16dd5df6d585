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

import pandas as pd

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
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.where} {self.id[:8]})"

    @property
    def thread_seconds(self) -> float:
        return sum(v for (f, _, u), v in self.metrics.items() if u == "seconds" and f is not None)

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
        f = None if key[1] is None else _label(key[1])
        k = (f, _label(key[2]), _label(key[3]))
        out[k] = out.get(k, 0.0) + float(value)
    return out


def _by_function(metrics: dict[Key, float], activity: str, unit: str) -> dict[str, float]:
    return {
        f: v for (f, a, u), v in metrics.items() if f is not None and a == activity and u == unit
    }


def side_of_span(span: SpanInfo, ref: str) -> Side:
    metrics = _keyed(span.metrics)
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
        tasks_by_function=_by_function(metrics, "tasks", "count"),
        bytes_by_function=_by_function(metrics, "output", "bytes"),
    )


def side_of_stored(run: StoredRun, ref: str) -> Side:
    metrics = _keyed(run.metrics)
    tasks = _by_function(metrics, "tasks", "count") or {
        p: float(sum(d["states"].values())) for p, d in run.prefixes.items()
    }
    nbytes = _by_function(metrics, "output", "bytes") or {
        p: float(d["nbytes"]) for p, d in run.prefixes.items()
    }
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
    tasks = _by_function(keyed, "tasks", "count")
    nbytes = _by_function(keyed, "output", "bytes")
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
    """Two resolved sides; ``table(unit)`` is what ``compare`` returns."""

    def __init__(self, a: Side, b: Side) -> None:
        self.a = a
        self.b = b
        self._verdict: str | None = None

    def __repr__(self) -> str:
        return f"<Comparison {self.a.label} -> {self.b.label}: {self.verdict}>"

    def _units(self) -> set[str]:
        return {k[2] for k in self.a.metrics} | {k[2] for k in self.b.metrics}

    def rows(self, unit: str | None = "seconds") -> list[tuple[Any, ...]]:
        a, b = self.a, self.b
        keys = set(a.metrics) | set(b.metrics)
        if unit is not None:
            keys = {k for k in keys if k[2] == unit}
        out = []
        for key in keys:
            f, activity, u = key
            va, vb = a.metrics.get(key, 0.0), b.metrics.get(key, 0.0)
            if f is None:
                ta, tb, ba, bb = float(a.tasks), float(b.tasks), math.nan, math.nan
            else:
                ta = a.tasks_by_function.get(f, 0.0)
                tb = b.tasks_by_function.get(f, 0.0)
                ba = a.bytes_by_function.get(f, math.nan)
                bb = b.bytes_by_function.get(f, math.nan)
            pa, pb = _per(va, ta), _per(vb, tb)
            out.append(
                (
                    f,
                    activity,
                    u,
                    va,
                    vb,
                    vb - va,
                    _ratio(va, vb),
                    pa,
                    pb,
                    pb - pa,
                    _per(va, a.wall),
                    _per(vb, b.wall),
                    ta,
                    tb,
                    ba,
                    bb,
                )
            )
        order = {u: i for i, u in enumerate(UNIT_ORDER)}
        # idle (no function: the time the threads were not used) after the rest of its unit
        out.sort(
            key=lambda r: (
                order.get(r[2], len(order)),
                r[2],
                r[0] is None,
                -abs(r[5]),
                r[0] or "",
                r[1],
            )
        )
        return out

    def table(self, unit: str | None = "seconds") -> pd.DataFrame:
        if unit is not None:
            check_unit(unit, {("execute", *k): 0.0 for k in self.a.metrics | self.b.metrics})
        frame = pd.DataFrame(self.rows(unit), columns=COLUMNS)
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
        rows = []
        for r in self.rows(None):
            f, activity, unit, va, vb = r[:5]
            rows.append([f, activity, unit, va, vb, r[12], r[13]])
        return {
            "a": self.a.summary(),
            "b": self.b.summary(),
            "verdict": self.verdict,
            "perTask": self.per_task,
            "rows": [[_json_number(v) for v in row] for row in rows],
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
    changes = []
    budget_a = budget_b = 0.0
    for f, activity, _, va, vb, delta, _, pa, pb, dpt, *_ in c.rows("seconds"):
        if f is None:
            continue  # idle: what the threads did not do
        if per_task:
            budget_a += 0.0 if math.isnan(pa) else pa
            budget_b += 0.0 if math.isnan(pb) else pb
            d = 0.0 if math.isnan(dpt) else dpt
        else:
            budget_a += va
            budget_b += vb
            d = delta
        changes.append((abs(d), d, f, activity))
    # a change counts if it is over TOLERANCE of the larger run's thread-seconds
    threshold = TOLERANCE * max(budget_a, budget_b)
    big = sorted((c for c in changes if c[0] > threshold and c[0] > 0), reverse=True)
    if not big:
        return f"{head}: every function and activity within {TOLERANCE:.0%}"
    named = ", ".join(
        f"`{f}` {activity} {format_seconds(d)}" for _, d, f, activity in big[:VERDICT_ITEMS]
    )
    rest = len(big) - VERDICT_ITEMS
    if rest > 0:
        tail = f"; {rest} more change{'s' if rest > 1 else ''} over {TOLERANCE:.0%}"
    elif len(changes) > len(big):
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

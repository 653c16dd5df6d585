"""Folding old default spans into one: which fold, and what the fold adds up to.

Work submitted outside any span goes to a default span, one per stretch of work
(core/spans.py): a loop of ``submit(...).result()`` makes one per iteration. So that
such a loop cannot grow what every view reads without bound, only the latest
``KEEP_DEFAULT_SPANS`` finished default spans stay apart; older ones fold, oldest
first, into one span named ``DEFAULT`` with id ``FOLDED_ID``, whose numbers are the
sums of theirs (``FoldTotals``).

Two span trees fold this way: the engine's (core/spans.py) and a Dask scheduler's,
read by the plugin that ``DaskSource`` installs there
(diagnostics/sources/dask_plugin.py). The plugin is pickled by value onto a
scheduler that may not have this package, and this module with it: so it imports
the standard library alone, and only plain values cross its functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT = ("default",)
DEFAULT_ID_PREFIX = "default-"
FOLDED_ID = "default-folded"
KEEP_DEFAULT_SPANS = 100  # finished default spans kept apart before the oldest fold
MAX_INTERVALS = 64  # thread-time intervals a fold keeps (see FoldTotals.add_span)
MAX_CODE = 10  # code snippets a fold keeps
# the thread-seconds the cluster offered while a span ran that its tasks did not use:
# threads idle, or busy with other spans' tasks. Dask's key and wording: no task prefix
# ("N/A"), and not the workers' own ``idle`` (a free thread while the cluster is busy)
IDLE = ("execute", "N/A", "idle or other spans", "seconds")


def is_default_span_id(span_id: object) -> bool:
    """Whether ``span_id`` names a default span (one that may fold)."""
    return type(span_id) is str and span_id.startswith(DEFAULT_ID_PREFIX)


def how_many_to_fold(finished: int, keep: int) -> int:
    """Of ``finished`` default spans not folded yet, how many fold (the oldest): all
    but the latest ``keep``."""
    return max(0, finished - max(0, keep))


def add_into(target: dict[Any, Any], source: Mapping[Any, Any]) -> None:
    """Add ``source``'s values into ``target``, key by key."""
    for key, value in source.items():
        target[key] = target.get(key, 0) + value


def with_idle(
    metrics: Mapping[Any, float], active_cpu_seconds: float, copy: bool = True
) -> dict[Any, float]:
    """A span's metrics plus ``IDLE``: the thread-seconds it had (``active_cpu_seconds``)
    and spent on none of its tasks (idle or on other spans' tasks) nor on the workers'
    idle already filed under it by reason (``idle: ...``, core/idle_reasons.py), so
    that its seconds add up to them. ``copy=False``: into ``metrics`` itself (a dict of
    the caller's own).

    Idle filed under a span by reason may begin before the span did, or end after the
    scheduler saw it end (a worker hears of it a moment later): what passes the span's
    thread-seconds is taken back from those parts in proportion, so that they still
    add up exactly."""
    out = metrics if not copy and isinstance(metrics, dict) else dict(metrics)
    used = sum(v for k, v in out.items() if k[-1] == "seconds")
    idle = active_cpu_seconds - used
    if idle > 0:
        out[IDLE] = out.get(IDLE, 0) + idle
    elif idle < 0:
        split = [k for k, v in out.items() if _is_split_idle(k) and v > 0]
        filed = sum(out[k] for k in split)
        if filed > 0:
            keep = max(0.0, 1 + idle / filed)
            for k in split:
                out[k] *= keep
    return out


def _is_split_idle(key: tuple[Any, ...]) -> bool:
    """A span metric's key of idle split by reason (core/idle_reasons.IDLE_PREFIX)."""
    return key[-1] == "seconds" and type(key[-2]) is str and key[-2].startswith("idle: ")


class FoldTotals:
    """What the folded spans add up to, as plain numbers.

    ``add_span`` once per span folded: when it was enqueued, the thread time the
    cluster offered while it ran, its metrics, its code. ``add_tasks`` for what its
    tasks did (a tree that keeps a task group live until its tasks are forgotten adds
    each group once it is). Thread time is kept as intervals ``(begin, end,
    threads)``, at most ``MAX_INTERVALS``: beyond, the oldest two merge into one with
    the same thread-seconds.
    """

    __slots__ = (
        "code",
        "durations",
        "enqueued",
        "folded",
        "intervals",
        "metrics",
        "n_computed",
        "nbytes_total",
        "start",
        "states",
        "stop",
    )

    def __init__(self, enqueued: float) -> None:
        self.folded = 0  # spans folded in
        self.enqueued = enqueued
        self.start = 0.0  # when the first task started; 0 before any did
        self.stop = 0.0
        self.durations: dict[str, float] = {}  # action -> seconds
        self.nbytes_total = 0
        self.n_computed = 0
        self.states: dict[str, int] = {}  # task state -> tasks
        self.metrics: dict[tuple[Any, ...], float] = {}  # the spans' own, as they key them
        self.code: list[Any] = []
        self.intervals: list[tuple[float, float, float]] = []

    def add_span(
        self,
        enqueued: float,
        intervals: Iterable[tuple[float, float, float]],
        metrics: Mapping[tuple[Any, ...], float],
        code: Iterable[Any] = (),
    ) -> None:
        self.folded += 1
        self.enqueued = min(self.enqueued, enqueued)
        add_into(self.metrics, metrics)
        for snippet in code:
            if snippet not in self.code and len(self.code) < MAX_CODE:
                self.code.append(snippet)
        out = self.intervals
        for lo, hi, n in intervals:
            if out and out[-1][1] == lo and out[-1][2] == n:
                out[-1] = (out[-1][0], hi, n)
            else:
                out.append((lo, hi, n))
        while len(out) > MAX_INTERVALS:
            (lo1, hi1, n1), (lo2, hi2, n2) = out[0], out[1]
            area = (hi1 - lo1) * n1 + (hi2 - lo2) * n2
            out[:2] = [(lo1, hi2, area / (hi2 - lo1) if hi2 > lo1 else 0.0)]

    def add_tasks(
        self,
        start: float,
        stop: float,
        durations: Mapping[str, float],
        nbytes_total: int,
        states: Mapping[str, int],
        n_computed: int = 0,
    ) -> None:
        if start and (not self.start or start < self.start):
            self.start = start
        self.stop = max(self.stop, stop)
        add_into(self.durations, durations)
        add_into(self.states, states)
        self.nbytes_total += nbytes_total
        self.n_computed += n_computed

    @property
    def active_cpu_seconds(self) -> float:
        """Thread-seconds the cluster offered while the folded spans ran."""
        return sum((hi - lo) * n for lo, hi, n in self.intervals)

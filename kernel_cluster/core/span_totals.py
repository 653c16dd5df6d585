"""A span's numbers over its whole subtree, for every span of a tree at once.

``Span``'s properties each walk the span's subtree: read for every span of a chain
N deep they cost N squared (3,000 nested spans took 21 s). ``subtree_totals`` adds
up the tree once, from the leaves up, so ``client.spans()`` costs the same for
nested spans as for flat ones (benchmarks/nested_spans.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .metrics import add_metrics
from .scheduler_tasks import ALL_STATES
from .span_folding import with_idle
from .spans import FoldedSpan, Span

# a subtree's (start, stop, done, durations, nbytes, states, metrics), before ``now``
_Partial = tuple[
    float, float, bool, dict[str, float], int, dict[str, int], dict[tuple[Any, ...], float]
]


@dataclass(slots=True)
class SubtreeTotals:
    """A span's numbers over its whole subtree, as ``Span``'s properties give them one
    span at a time (``subtree_totals`` makes them for every span at once)."""

    start: float
    stop: float
    done: bool
    all_durations: dict[str, float]
    nbytes_total: int
    states: dict[str, int]
    active_cpu_seconds: float
    metrics: dict[tuple[Any, ...], float]  # cumulative_worker_metrics, idle included

    @property
    def duration(self) -> float:
        return sum(self.all_durations.values())


def subtree_totals(spans: Iterable[Span], now: float) -> dict[str, SubtreeTotals]:
    """``SubtreeTotals`` of every span of ``spans`` (a whole tree: every child of a
    span among them is among them), by id, in one pass from the leaves up.

    Each span's properties walk its subtree: reading them for every span of a chain
    N deep costs N squared (21 s for 3,000 nested spans). Here a span adds up its own
    task groups and metrics and its children's totals, so the cost is that of the
    tree, nested or flat. ``now``: the clock reading a running span stops at."""
    spans = list(spans)
    partial: dict[str, _Partial] = {}
    order: list[Span] = []
    ids = {s.id for s in spans}
    stack = [s for s in spans if s.parent is None or s.parent.id not in ids]
    while stack:  # parents before children; read backwards: children first
        span = stack.pop()
        order.append(span)
        stack.extend(span.children)
    for span in reversed(order):
        start, stop, done, nbytes = 0.0, 0.0, True, 0
        durations: dict[str, float] = {}
        states: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
        metrics: dict[tuple[Any, ...], float] = dict(span._metrics)
        if isinstance(span, FoldedSpan):  # the groups it let go are in its totals
            fold = span.totals
            start, stop, nbytes = fold.start, fold.stop, fold.nbytes_total
            durations.update(fold.durations)
            for state, n in fold.states.items():
                states[state] = states.get(state, 0) + n
        for g in span.groups:
            if g.start and (not start or g.start < start):
                start = g.start
            if g.stop > stop:
                stop = g.stop
            if done and not g.done:
                done = False
            for action, seconds in g.all_durations.items():
                durations[action] = durations.get(action, 0.0) + seconds
            nbytes += g.nbytes_total
            for state, n in g.states.items():
                states[state] += n
        for child in span.children:
            c = partial.get(child.id)
            if c is None:  # not among ``spans``: its own properties
                c = (
                    child.start,
                    0.0,
                    child.done,
                    child.all_durations,
                    child.nbytes_total,
                    child.states,
                    _own_and_below(child),
                )
            c_start, c_stop, c_done, c_durations, c_nbytes, c_states, c_metrics = c
            if c_start and (not start or c_start < start):
                start = c_start
            stop = max(stop, c_stop)
            done = done and c_done
            for action, seconds in c_durations.items():
                durations[action] = durations.get(action, 0.0) + seconds
            nbytes += c_nbytes
            for state, n in c_states.items():
                states[state] = states.get(state, 0) + n
            add_metrics(metrics, c_metrics)
        partial[span.id] = (start, stop, done, durations, nbytes, states, metrics)
    out: dict[str, SubtreeTotals] = {}
    for span in spans:
        start, stop, done, durations, nbytes, states, metrics = partial[span.id]
        end = (stop or span.enqueued) if done else now
        if type(span).nthreads_intervals is Span.nthreads_intervals:
            intervals = span.intervals_until(end)
        else:  # a fold keeps its own
            intervals = span.nthreads_intervals
        active = sum((hi - lo) * n for lo, hi, n in intervals)
        cumulative = with_idle(metrics, active)  # as Span.cumulative_worker_metrics
        out[span.id] = SubtreeTotals(
            start, end, done, durations, nbytes, states, active, cumulative
        )
    return out


def _own_and_below(span: Span) -> dict[tuple[Any, ...], float]:
    out: dict[tuple[Any, ...], float] = {}
    for s in span.traverse_spans():
        add_metrics(out, s._metrics)
    return out

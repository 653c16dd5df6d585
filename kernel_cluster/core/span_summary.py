"""A span's numbers read in one pass over its subtree.

``Span``'s properties (start, stop, states, bytes, durations, thread-seconds,
metrics) each walk the subtree again, and some call each other (stop asks done,
the thread-seconds ask stop, the metrics ask the thread-seconds): reading them
all walks a span's groups about ten times. The run history reads every span
that finishes, so ``summarize`` reads them together, with the tasks and result
bytes per task prefix the history keeps beside them.

In two steps: ``capture`` on the engine's loop copies the subtree's dicts (a span
that finished still changes: its tasks are forgotten, a heartbeat brings metrics,
it may get tasks again, so it cannot be read from another thread), and
``summarize_capture`` sums the copies on the reader's thread, off the loop.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .metrics import add_metrics
from .scheduler_tasks import ALL_STATES
from .span_folding import with_idle
from .spans import Span


class SpanSummary(NamedTuple):
    done: bool
    start: float
    stop: float
    all_durations: dict[str, float]
    nbytes_total: int
    states: dict[str, int]
    active_cpu_seconds: float
    metrics: dict[tuple[Any, ...], float]  # as cumulative_worker_metrics
    tasks_by_prefix: dict[str, dict[str, int]]  # prefix -> state -> tasks (not zero)
    nbytes_by_prefix: dict[str, int]


class GroupCapture(NamedTuple):
    """One task group's numbers as of a capture (its dicts copied)."""

    prefix: str
    states: dict[str, int]
    start: float
    stop: float
    durations: dict[str, float]
    nbytes_total: int


class SpanCapture(NamedTuple):
    """What ``summarize_capture`` needs of a span, copied on the engine's loop
    (``capture``): plain copies only, so that the summing and the rest run on the
    reader's thread, away from the loop."""

    metrics: list[dict[tuple[Any, ...], float]]  # each node's own, as copied
    groups: list[GroupCapture]
    enqueued: float
    nthreads_history: list[tuple[float, int]]  # the tree's: only ever appended to
    nthreads_len: int  # its entries as of the capture
    now: float


def capture(span: Span) -> SpanCapture:
    """Copy what ``span``'s numbers come from, for ``summarize_capture`` elsewhere.

    On the loop, as a span that finished still changes (its tasks are released and
    forgotten, a heartbeat adds metrics, it may get tasks again): the copies are one
    consistent state. ``dict(d)`` of a plain dict is one C call; nothing is summed."""
    if type(span) is not Span:
        raise TypeError(f"capture() reads a plain Span, not a {type(span).__name__}")
    metrics = []
    groups = []
    for node in span.traverse_spans():
        metrics.append(dict(node._metrics))
        for g in node.groups:
            groups.append(
                GroupCapture(
                    g.prefix.name,
                    dict(g.states),
                    g.start,
                    g.stop,
                    dict(g.all_durations),
                    g.nbytes_total,
                )
            )
    history = span._nthreads_history
    return SpanCapture(metrics, groups, span.enqueued, history, len(history), span._now())


def summarize(span: Span) -> SpanSummary:
    """What ``span``'s properties give (see the module's docstring); a plain Span's
    only: a fold or a merge reads its numbers its own way."""
    if type(span) is not Span:
        raise TypeError(f"summarize() reads a plain Span, not a {type(span).__name__}")
    return summarize_capture(capture(span))


def _intervals(c: SpanCapture, end: float) -> float:
    """Thread-seconds from the span's enqueueing to ``end`` (``Span.intervals_until``,
    over the history as captured)."""
    history = c.nthreads_history
    n = c.nthreads_len
    total = 0.0
    for i in range(n):
        t, threads = history[i]
        t_next = history[i + 1][0] if i + 1 < n else end
        lo, hi = max(t, c.enqueued), min(t_next, end)
        if hi > lo:
            total += (hi - lo) * threads
    return total


def summarize_capture(c: SpanCapture) -> SpanSummary:
    """A span's summary from its capture: runs on any thread, once per capture (the
    summary takes the capture's copies as its own)."""
    if len(c.metrics) == 1:
        metrics = c.metrics[0]  # a copy already, and the summary's own
    else:
        metrics = {}
        for node_metrics in c.metrics:
            add_metrics(metrics, node_metrics)
    done = True
    start = stop = 0.0
    nbytes_total = 0
    durations: dict[str, float] = {}
    states: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
    tasks: dict[str, dict[str, int]] = {}
    nbytes: dict[str, int] = {}
    for g in c.groups:
        s = g.states
        if s["waiting"] or s["queued"] or s["processing"]:  # as TaskGroup.done
            done = False
        if g.start and (not start or g.start < start):
            start = g.start
        if g.stop > stop:
            stop = g.stop
        for action, seconds in g.durations.items():
            durations[action] = durations.get(action, 0.0) + seconds
        nbytes_total += g.nbytes_total
        name = g.prefix
        counts = tasks.setdefault(name, {})
        for state, n in s.items():
            if n:
                states[state] += n
                counts[state] = counts.get(state, 0) + n
        nbytes[name] = nbytes.get(name, 0) + g.nbytes_total
    if not done:
        stop = c.now
    elif not stop:
        stop = c.enqueued
    active = _intervals(c, stop)
    return SpanSummary(
        done,
        start,
        stop,
        durations,
        nbytes_total,
        states,
        active,
        with_idle(metrics, active, copy=False),
        tasks,
        nbytes,
    )

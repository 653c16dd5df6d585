"""A span's numbers read in one pass over its subtree.

``Span``'s properties (start, stop, states, bytes, durations, thread-seconds,
metrics) each walk the subtree again, and some call each other (stop asks done,
the thread-seconds ask stop, the metrics ask the thread-seconds): reading them
all walks a span's groups about ten times. The run history reads every span
that finishes, on the engine's loop, so ``summarize`` reads them together, with
the tasks and result bytes per task prefix the history keeps beside them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from .metrics import add_metrics
from .scheduler_tasks import ALL_STATES, TaskGroup
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


def summarize(span: Span) -> SpanSummary:
    """What ``span``'s properties give (see the module's docstring); a plain Span's
    only: a fold or a merge reads its numbers its own way."""
    if type(span) is not Span:
        raise TypeError(f"summarize() reads a plain Span, not a {type(span).__name__}")
    metrics: dict[tuple[Any, ...], float] = {}
    groups: list[TaskGroup] = []
    for node in span.traverse_spans():
        add_metrics(metrics, node._metrics)
        groups.extend(node.groups)
    done = True
    start = stop = 0.0
    nbytes_total = 0
    durations: defaultdict[str, float] = defaultdict(float)
    states: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
    tasks: dict[str, dict[str, int]] = {}
    nbytes: dict[str, int] = {}
    for g in groups:
        s = g.states
        if s["waiting"] or s["queued"] or s["processing"]:  # as TaskGroup.done
            done = False
        if g.start and (not start or g.start < start):
            start = g.start
        stop = max(stop, g.stop)
        for action, seconds in g.all_durations.items():
            durations[action] += seconds
        nbytes_total += g.nbytes_total
        name = g.prefix.name
        counts = tasks.setdefault(name, {})
        for state, n in s.items():
            if n:
                states[state] += n
                counts[state] = counts.get(state, 0) + n
        nbytes[name] = nbytes.get(name, 0) + g.nbytes_total
    if not done:
        stop = span._now()
    elif not stop:
        stop = span.enqueued
    active = sum((hi - lo) * n for lo, hi, n in span.intervals_until(stop))
    return SpanSummary(
        done,
        start,
        stop,
        dict(durations),
        nbytes_total,
        states,
        active,
        with_idle(metrics, active),
        tasks,
        nbytes,
    )

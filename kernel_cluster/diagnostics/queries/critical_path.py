"""A span's critical path, read from the task stream (core/critical_path.py walks it).

``span_critical_path(source, span)`` picks the span (an id, a tag or tags, or None for
the latest top-level span), takes the task-stream records of its subtree and walks
back from its last task. ``span_critical_paths(source, ids)`` walks several spans from
one read of the spans and one of the task stream (what the Span Tree's path lengths
ask for, every finished span of a session at once). ``path_frame`` lays the steps out
as a table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ...core.critical_path import PARTS, CriticalPath, TaskRun, critical_path
from ..snapshots import SpanInfo, TaskStreamRecord
from ..source import DiagnosticsSource

if TYPE_CHECKING:
    import pandas as pd


def span_critical_path(
    source: DiagnosticsSource, span: Any = None, runs: Sequence[TaskRun] | None = None
) -> CriticalPath:
    """The critical path of ``span`` (see ``select_spans``) through its tasks' runs
    (``runs``, if the caller read them already: the span's subtree's, ended well)."""
    chosen, ids = select_spans(source.spans(), span)
    enqueued = min(s.enqueued for s in chosen)
    stop = max(s.stop for s in chosen)
    if runs is None:
        runs = source.task_runs(ids, start=enqueued)  # tasks that ended since it began
    return _walk(runs, enqueued, stop)


def span_critical_paths(
    source: DiagnosticsSource, span_ids: Iterable[str]
) -> dict[str, CriticalPath | str]:
    """The critical paths of the spans with these ids, each as ``span_critical_path``
    walks it, from one read of the spans and one of the task stream (from the
    earliest span's start): a read per span held the engine's loop once per span. A
    span that cannot be walked (unknown id, a stream without dependencies) gets the
    reason instead, as a str."""
    ids = list(dict.fromkeys(span_ids))
    by_id = {s.id: s for s in source.spans(refresh=False)}
    out: dict[str, CriticalPath | str] = {
        i: f"span={i!r}: no span has this id (it may have been forgotten)"
        for i in ids
        if i not in by_id
    }
    wanted = [by_id[i] for i in ids if i in by_id]
    if not wanted:
        return out
    subtrees = {s.id: subtree_ids(by_id, [s.id]) for s in wanted}
    needed = set().union(*subtrees.values())
    by_span: defaultdict[str | None, list[TaskStreamRecord]] = defaultdict(list)
    for r in source.task_stream(start=min(s.enqueued for s in wanted)):
        if r.status == "OK" and r.span_id in needed:
            by_span[r.span_id].append(r)
    for s in wanted:
        # what task_runs(subtree, start=s.enqueued) would have given
        records = [
            r
            for i in subtrees[s.id]
            for r in by_span.get(i, ())
            if max((ss.stop for ss in r.startstops), default=s.enqueued) >= s.enqueued
        ]
        records.sort(key=lambda r: r.index)
        try:
            out[s.id] = _walk(task_runs(records), s.enqueued, s.stop)
        except ValueError as exc:
            out[s.id] = str(exc)
    return out


def _walk(runs: Sequence[TaskRun], enqueued: float, stop: float) -> CriticalPath:
    if runs and all(r.sent is None and not r.dependencies for r in runs):
        raise ValueError(
            "This cluster's task stream does not say which tasks each task depended on "
            "nor when it was sent (a Dask cluster's does not): no critical path can be "
            "walked; fine_metrics() and spans() still tell where the time went."
        )
    return critical_path(runs, enqueued, stop)


def select_spans(spans: Sequence[SpanInfo], span: Any) -> tuple[list[SpanInfo], set[str]]:
    """The spans ``span`` names and the ids of their subtrees: an id; a tag or tuple
    of tags (every span with any of them in its name, a matching child under a
    matching parent counted once); None: the top-level span enqueued last."""
    by_id = {s.id: s for s in spans}
    if span is None:
        roots = [s for s in spans if s.parent is None and s.start > 0]
        if not roots:
            raise ValueError("No span has run a task yet: nothing to walk.")
        chosen = [max(roots, key=lambda s: s.enqueued)]
    elif isinstance(span, str) and span in by_id:
        chosen = [by_id[span]]
    elif isinstance(span, str) or (
        isinstance(span, tuple) and all(isinstance(t, str) for t in span)
    ):
        tags = {span} if isinstance(span, str) else set(span)
        matching = {s.id for s in spans if tags & set(s.name)}
        chosen = [s for s in spans if s.id in matching and s.parent not in matching]
        if not chosen:
            known = sorted({t for s in spans for t in s.name})
            raise KeyError(f"span={span!r}: no span has this id or tag; tags seen: {known[:10]!r}.")
    else:
        raise TypeError(
            f"span={span!r}: give a span's id, a tag or a tuple of tags (a str or "
            "tuple of str), or None for the latest top-level span."
        )
    return chosen, subtree_ids(by_id, [s.id for s in chosen])


def subtree_ids(by_id: dict[str, SpanInfo], roots: Iterable[str]) -> set[str]:
    """The ids of these spans and of every span under them."""
    ids: set[str] = set()
    todo = list(roots)
    while todo:
        i = todo.pop()
        if i not in ids and i in by_id:
            ids.add(i)
            todo.extend(by_id[i].children)
    return ids


def task_runs(records: Iterable[TaskStreamRecord]) -> list[TaskRun]:
    """Task-stream records as the runs the walk reads (records without a compute
    action are left out)."""
    return [run for r in records if (run := r.compute_run()) is not None]


def path_frame(path: CriticalPath) -> pd.DataFrame:
    """One row per step, in the order they ran: key, worker, how it followed the step
    before (``via``), its seconds by part and in all."""
    import pandas as pd  # on first use: importing the package does not import pandas

    rows = [(s.key, s.worker, s.via, *(getattr(s, p) for p in PARTS), s.total) for s in path.steps]
    return pd.DataFrame(rows, columns=["key", "worker", "via", *PARTS, "total"])


def describe(path: CriticalPath) -> str:
    """A few lines for a terminal: the path's length against the wall, by part."""
    if not path.steps:
        return "Critical path: no task ran."
    parts = path.totals()
    split = ", ".join(f"{p} {parts[p]:.3g} s" for p in PARTS if parts[p] > 0)
    return (
        f"Critical path: {len(path.steps)} tasks, {path.length:.3g} s of "
        f"{path.wall:.3g} s wall ({path.covered:.0%}): {split}; "
        f"from {path.steps[0].key!r} to {path.steps[-1].key!r}."
    )

"""``EngineSource.changes_since``: what changed in the engine since a cursor, read on
the engine's loop in short calls.

The scheduler keeps a change log (``core/changes.py``); a read asks it what was
touched since the cursor and copies only that: the metric rows touched, the span
subtrees under the roots of spans touched or running, the prefixes touched, the
task-stream records appended. Each copy is one short call on the loop, of at most
``CHUNK`` items (spans or records), so no read holds the loop long, however large
the history: the loop runs other callbacks between two calls. What changes between
two calls of one read has a later sequence number than the cursor the read hands
out, so the next read picks it up.

A full read (no cursor, or one the log let go) copies everything the same way, in
chunks. Snapshots (``SpanInfo``, ``TaskStreamRecord``) are made off the loop where
the engine's objects need not be read (task records); span numbers are summed on
the loop (``core/span_totals.py``), one chunk of subtrees at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ...core.span_totals import SubtreeTotals, subtree_totals
from ...core.spans import Span
from ..snapshots import Changes, Metrics, SpanInfo, StartStop, TaskStreamRecord

CHUNK = 2_000  # task records or metric rows copied per call on the loop
PREFIXES = 200  # task prefixes copied per call
ROOTS = 10  # span subtrees summed per call


class EngineChanges:
    """Reads changes of one cluster's scheduler; remembers which spans were running
    at its last read (they are read again: their ``stop`` is now)."""

    def __init__(self, cluster: Any) -> None:
        """``cluster``: a ``KernelCluster`` (not imported: only engine_source may)."""
        self.cluster = cluster
        self._running: set[str] = set()
        self._lock = threading.Lock()  # one read at a time updates ``_running``

    def since(self, cursor: int) -> Changes:
        with self._lock:
            return self._since(cursor)

    def _since(self, cursor: int) -> Changes:
        run = self.cluster.loop_thread.run
        scheduler = self.cluster.scheduler
        tree, state = scheduler.spans, scheduler.state
        worker_metrics = scheduler.worker_metrics

        def first() -> tuple[Any, ...]:
            changed = tree.changes.since(cursor)
            if changed.resync:
                roots = [s.id for s in tree.root_spans]
                if tree.folded is not None and tree.folded.id not in roots:
                    roots.append(tree.folded.id)
                keys = list(worker_metrics)
                prefixes = list(state.task_prefixes)
                return changed, keys, roots, prefixes
            metrics = {k: worker_metrics.get(k, 0) for k in changed.metrics}
            prefixes = state.task_prefixes
            progress = {p: dict(prefixes[p].states) for p in changed.prefixes if p in prefixes}
            wanted = set(changed.spans) | self._running
            root_ids = {_root(tree.spans[i]).id for i in wanted if i in tree.spans}
            return changed, metrics, list(root_ids), progress

        head = run(first)
        changed = head[0]
        if changed.resync:
            _, keys, roots, prefix_names = head
            metrics = self._metrics(keys)
            progress = self._progress(prefix_names)
            spans = self._spans(roots, None)
            return Changes(changed.cursor, True, metrics, spans, (), progress, (), changed.tasks[1])
        _, metrics, roots, progress = head
        wanted_ids = set(changed.spans) | self._running
        spans = self._spans(roots, wanted_ids)
        start, stop = changed.tasks
        tasks = self._tasks(start, stop)
        return Changes(
            changed.cursor,
            False,
            metrics,
            spans,
            tuple(changed.closed),
            progress,
            tasks,
            stop,
        )

    # -- chunks ---------------------------------------------------------------------------

    def _metrics(self, keys: list[Any]) -> Metrics:
        wm = self.cluster.scheduler.worker_metrics

        def read(part: list[Any]) -> Metrics:
            return {k: wm[k] for k in part if k in wm}

        out: Metrics = {}
        step = CHUNK
        for i in range(0, len(keys), step):
            out.update(self.cluster.loop_thread.run(read, keys[i : i + step]))
        return out

    def _progress(self, names: list[str]) -> dict[str, dict[str, int]]:
        prefixes = self.cluster.scheduler.state.task_prefixes

        def read(part: list[str]) -> dict[str, dict[str, int]]:
            return {n: dict(prefixes[n].states) for n in part if n in prefixes}

        out: dict[str, dict[str, int]] = {}
        for i in range(0, len(names), PREFIXES):
            out.update(self.cluster.loop_thread.run(read, names[i : i + PREFIXES]))
        return out

    def _spans(self, roots: list[str], wanted: set[str] | None) -> tuple[SpanInfo, ...]:
        """Snapshots of the spans of these roots' subtrees (``wanted``: only these ids
        and their parents; None: all), a chunk of subtrees per call."""
        tree = self.cluster.scheduler.spans
        out: list[SpanInfo] = []
        running: set[str] = set()

        def read(part: list[str]) -> list[SpanInfo]:
            spans: list[Span] = []
            for root_id in part:
                root = tree.spans.get(root_id)
                if root is not None:
                    spans.extend(root.traverse_spans())
            totals = subtree_totals(spans, tree.now())
            keep = _with_parents(spans, wanted) if wanted is not None else None
            return [
                snapshot_span(s, totals[s.id])
                for s in spans
                if keep is None or s.id in keep or not totals[s.id].done
            ]

        part: list[str] = []
        size = 0
        for root_id in roots:
            part.append(root_id)
            size += 1  # a root's subtree size is unknown here: chunks count roots
            if size >= ROOTS:
                out.extend(self.cluster.loop_thread.run(read, part))
                part, size = [], 0
        if part:
            out.extend(self.cluster.loop_thread.run(read, part))
        for s in out:
            if not s.done:
                running.add(s.id)
        if wanted is None:
            self._running = running
        else:
            self._running = (self._running - {s.id for s in out}) | running
        return tuple(out)

    def task_records(self, index: int) -> list[TaskStreamRecord]:
        """Task-stream records from ``index`` on, in chunks (a new view's catch-up)."""
        stream = self.cluster.scheduler.task_stream

        def bounds() -> tuple[int, int]:
            return stream.index - len(stream.buffer), stream.index

        first, stop = self.cluster.loop_thread.run(bounds)
        return list(self._tasks(max(index, first), stop))

    def _tasks(self, start: int, stop: int) -> tuple[TaskStreamRecord, ...]:
        stream = self.cluster.scheduler.task_stream
        out: list[TaskStreamRecord] = []
        for i in range(start, stop, CHUNK):
            n = min(CHUNK, stop - i)
            out.extend(raw_records(self.cluster.loop_thread.run(stream.raw_since, i, n)))
        return tuple(out)


def snapshot_span(span: Span, totals: SubtreeTotals | None = None) -> SpanInfo:
    """Read a core Span (on the engine's thread) into plain data; ``totals``: its
    subtree's numbers, if made already (``core.span_totals.subtree_totals``)."""
    if totals is None:
        totals = subtree_totals(span.traverse_spans(), span._now())[span.id]
    return SpanInfo(
        id=span.id,
        name=tuple(span.name),
        parent=span.parent.id if span.parent is not None else None,
        children=tuple(c.id for c in span.children),
        enqueued=span.enqueued,
        start=totals.start,
        stop=totals.stop,
        duration=totals.duration,
        nbytes_total=totals.nbytes_total,
        states=totals.states,
        done=totals.done,
        active_cpu_seconds=totals.active_cpu_seconds,
        metrics=totals.metrics,
        code=tuple(tuple(tuple(frame) for frame in stack) for stack in span.code),
    )


def _root(span: Span) -> Span:
    while span.parent is not None:
        span = span.parent
    return span


def _with_parents(spans: Iterable[Span], wanted: set[str]) -> set[str]:
    keep: set[str] = set()
    for s in spans:
        if s.id in wanted:
            node: Span | None = s
            while node is not None and node.id not in keep:
                keep.add(node.id)
                node = node.parent
    return keep


def raw_records(raw: Iterable[tuple[Any, ...]]) -> list[TaskStreamRecord]:
    """The task stream plugin's raw tuples (``engine/task_stream_plugin.py``) as
    snapshots, made off the loop (the loop only picks the tuples: a window over
    100,000 records took it 0.3 s as dicts). A startstop is (action, start, stop[,
    source]); only a transfer's source is kept."""
    record = TaskStreamRecord
    out = []
    for i, key, prefix, span, worker, thread, status, nbytes, startstops, deps, sent in raw:
        actions = tuple(
            [
                StartStop(*ss) if len(ss) == 3 or ss[0] == "transfer" else StartStop(*ss[:3])
                for ss in startstops
            ]
        )
        out.append(
            record(i, key, prefix, span, worker, thread, status, nbytes, actions, tuple(deps), sent)
        )
    return out

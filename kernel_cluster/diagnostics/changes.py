"""``changes_since`` for any source: the engine's reads its change log; others (the
Dask source, a user's) diff full reads here, so views never ask which.

``Differ`` keeps the last state it read and answers with what differs from it. It
knows one cursor, the last it handed out: a reader with another (two readers, or
one that lost its place) gets a full answer, as a reader who fell off the engine's
log does. ``changes(source, cursor)`` uses the source's own ``changes_since`` if it
has one, else a ``Differ`` kept for that source.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol, runtime_checkable

from .snapshots import Changes, Metrics, SpanInfo, TaskStreamRecord
from .source import DiagnosticsSource

__all__ = ["ChangeSource", "Differ", "changes"]


@runtime_checkable
class ChangeSource(Protocol):
    """A source that can tell what changed since a cursor."""

    def changes_since(self, cursor: int) -> Changes: ...


class Differ:
    """``changes_since`` by comparing a source's full reads with the previous one."""

    def __init__(self, source: DiagnosticsSource) -> None:
        self.source = source
        self._cursor = 0
        self._metrics: Metrics = {}
        self._spans: dict[str, SpanInfo] = {}
        self._progress: dict[str, dict[str, int]] = {}
        self._task_index = 0
        self._lock = threading.Lock()

    def changes_since(self, cursor: int) -> Changes:
        with self._lock:
            src = self.source
            metrics = src.fine_metrics(refresh=False)
            spans = {s.id: s for s in src.spans(refresh=False)}
            progress = src.progress()
            full = cursor <= 0 or cursor != self._cursor
            tasks: list[TaskStreamRecord] = []
            task_index = src.task_stream_index()
            if not full and task_index != self._task_index:  # else: no copy of the tail
                tasks = src.task_stream_since(self._task_index)
                task_index = tasks[-1].index + 1 if tasks else task_index
            old_metrics, old_spans, old_progress = self._metrics, self._spans, self._progress
            self._metrics, self._spans, self._progress = metrics, spans, progress
            self._task_index = task_index
            self._cursor += 1
            if full:
                return Changes(
                    self._cursor,
                    True,
                    dict(metrics),
                    tuple(spans.values()),
                    (),
                    progress,
                    (),
                    task_index,
                )
            changed_metrics = {k: v for k, v in metrics.items() if old_metrics.get(k) != v}
            for k in old_metrics.keys() - metrics.keys():
                changed_metrics[k] = 0
            return Changes(
                self._cursor,
                False,
                changed_metrics,
                tuple(s for i, s in spans.items() if old_spans.get(i) != s or not s.done),
                tuple(i for i in old_spans if i not in spans),
                {p: c for p, c in progress.items() if old_progress.get(p) != c},
                tuple(tasks),
                task_index,
            )


_differs: weakref.WeakKeyDictionary[Any, Differ] = weakref.WeakKeyDictionary()
_differs_lock = threading.Lock()


def changes(source: DiagnosticsSource, cursor: int) -> Changes:
    """What changed in ``source`` since ``cursor`` (0: everything)."""
    if isinstance(source, ChangeSource):
        return source.changes_since(cursor)
    with _differs_lock:
        differ = _differs.get(source)
        if differ is None:
            differ = _differs[source] = Differ(source)
    return differ.changes_since(cursor)

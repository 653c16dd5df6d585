"""``span``: label a part of your code, and every task it submits, with tags.

    with span("Alice's workflow"):
        with span("data load"):
            futures = client.map(load, files)

The spans nest: here the tasks belong to ("Alice's workflow", "data load"), and
the parent span covers them too. Re-entering the same tags makes a new span.

Where dask is loaded, ``span`` is also ``dask.annotate(span=...)``, as
``distributed.span`` is: a dask collection built inside the block carries the span
on its tasks (``dask.get_annotations()["span"]`` shows it), and computing it later,
outside the block, still files its tasks there. dask's optimisation may drop those
annotations (dask-expr dataframes always do; arrays and delayed when tasks fuse,
unless ``dask.config.set({"optimization.fuse.active": False})``): the client then
warns once, naming the span and the fix (compute inside it), through
``spans_lost_by`` below.

When the default source is a Dask cluster's (``kernel_cluster.attach(dask_client)``)
or no kernel_cluster client is open while a ``distributed.Client`` is, ``span``
opens a ``distributed.span`` as well and takes its ids, so the same span shows in
Dask's dashboard and in these views (and tags a kernel_cluster client's tasks too).
"""

from __future__ import annotations

import sys
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ..core.annotations import current_span
from ..core.annotations import get_annotations as _own_annotations
from ..core.span_folding import IDLE
from . import attach as source
from .snapshots import SpanInfo

__all__ = [
    "SpanInfo",
    "SpanTreeView",
    "get_annotations",
    "note_submission",
    "span",
    "spans_lost_by",
]


@contextmanager
def span(*tags: str) -> Iterator[str]:
    """Tag every task submitted inside the block; yields the (innermost) span's id.

    ``span("a", "b")`` is ``span("a")`` with ``span("b")`` inside it.
    """
    if not tags:
        raise ValueError("span() needs at least one tag, e.g. span('data load').")
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise TypeError(
                f"span tags must be non-empty strings; got {tag!r} ({type(tag).__name__})."
            )
        if not tag.isascii():
            try:
                tag.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"span tag {tag!r} holds a lone surrogate, which is not valid Unicode "
                    "text: no view could show it. Give valid text."
                ) from None
    with _dask_span(tags) as dask_ids:
        name, ids = current_span.get() or ((), ())
        for tag in tags:
            name = (*name, tag)
            ids = (*ids, str(uuid.uuid4()))
        if dask_ids is not None and len(dask_ids) == len(ids):
            ids = dask_ids  # one span, one id, in both engines
        token = current_span.set((name, ids))
        record = _OpenSpan(name, ids)
        _open_spans[ids[-1]] = record
        try:
            with _annotating(name, ids, dask_ids is not None):
                yield ids[-1]
        finally:
            current_span.reset(token)
            _open_spans.pop(ids[-1], None)
            if not record.submitted and "dask" in sys.modules:
                _built_only.append(record)


# -- spans whose collections may lose them -------------------------------------------------


class _OpenSpan:
    """A span while its block runs: whether any work was submitted under it."""

    __slots__ = ("ids", "name", "submitted")

    def __init__(self, name: tuple[str, ...], ids: tuple[str, ...]) -> None:
        self.name = name
        self.ids = ids
        self.submitted = False


_open_spans: dict[str, _OpenSpan] = {}
# spans closed with nothing submitted inside, while dask was loaded: collections built
# there may be computed later (the latest few; a warning names each at most once)
_built_only: deque[_OpenSpan] = deque(maxlen=32)


def note_submission(ids: tuple[str, ...]) -> None:
    """The client submitted work under the span ``ids`` (and so under its parents)."""
    for span_id in ids:
        record = _open_spans.get(span_id)
        if record is not None:
            record.submitted = True


def spans_lost_by(annotated_ids: set[str]) -> list[tuple[str, ...]]:
    """The names of spans closed without submitting anything (collections were built
    there, presumably) that a computation may have lost, given the span ids its tasks
    carry. Only a computation carrying no span annotation at all (dask-expr's, or one
    whose tasks all fused) lost any: where some survive, the computation's collection
    was built in those spans, and the others' collections are still to come. A span
    whose tasks were found, or that was named, is forgotten."""
    lost = []
    for record in list(_built_only):
        if record.ids[-1] in annotated_ids:
            _built_only.remove(record)
        elif not annotated_ids:
            _built_only.remove(record)
            lost.append(record.name)
    # a parent whose children are named says nothing more
    names = set(lost)
    return [n for n in lost if not any(o != n and o[: len(n)] == n for o in names)]


def _annotating(
    name: tuple[str, ...], ids: tuple[str, ...], by_dask: bool
) -> AbstractContextManager[object]:
    """``dask.annotate(span=...)`` for the block, where dask is loaded (distributed's
    span, when it was opened, did it already)."""
    if by_dask or "dask" not in sys.modules:
        return nullcontext()
    import dask

    return dask.annotate(span={"name": name, "ids": ids})


def get_annotations() -> dict[str, dict[str, tuple[str, ...]]]:
    """``{"span": {"name": (...), "ids": (...)}}`` where a span is active, else ``{}``:
    in client code, and inside a task of this engine or, when the views are attached
    to a Dask cluster, of a Dask worker (whose span Dask keeps in dask's annotations),
    so that the same task code reads its span on either engine."""
    own = _own_annotations()
    if own or "distributed.worker" not in sys.modules:
        return own
    return _dask_task_span()


def _dask_task_span() -> dict[str, dict[str, tuple[str, ...]]]:
    """The span of the Dask task running on this thread, if one is."""
    import dask
    from distributed import get_worker

    try:
        get_worker()  # only a Dask worker's task threads have one
    except ValueError:
        return {}
    annotation = dask.get_annotations().get("span")
    if not isinstance(annotation, dict) or "name" not in annotation or "ids" not in annotation:
        return {}
    return {"span": {"name": tuple(annotation["name"]), "ids": tuple(annotation["ids"])}}


def _dask_client() -> object | None:
    """The Dask client spans go to: the default source's, else (with no kernel_cluster
    client open) distributed's current client. distributed is not imported here."""
    client = source.default_dask_client()
    if client is not None or source._default_source is not None:
        return client
    if "distributed" not in sys.modules:
        return None
    from distributed import Client

    try:
        current: object = Client.current(allow_global=True)  # type: ignore[no-untyped-call]
    except ValueError:  # no client
        return None
    return current


def _dask_span(tags: tuple[str, ...]) -> AbstractContextManager[tuple[str, ...] | None]:
    """``distributed.span(*tags)`` yielding the full id path, when there is a Dask client."""
    if _dask_client() is None:
        return nullcontext()
    return _open_dask_span(tags)


@contextmanager
def _open_dask_span(tags: tuple[str, ...]) -> Iterator[tuple[str, ...] | None]:
    import dask
    from distributed import span as dask_span

    with dask_span(*tags):
        annotation = dask.get_annotations().get("span") or {}
        yield tuple(annotation.get("ids", ())) or None


# -- reading the span tree: snapshots of plain data -----------------------------------------


SPAN_COLUMNS = [
    "id",
    "name",
    "tags",
    "parent",
    "enqueued",
    "start",
    "stop",
    "duration",
    "active_cpu_seconds",
    "metrics_seconds",
    "nbytes_total",
    "tasks",
    "done",
]


class SpanTreeView:
    """``client.spans()``: every span, nested as on the scheduler."""

    def __init__(self, spans: list[SpanInfo]) -> None:
        self.by_id = {s.id: s for s in spans}
        self.roots = [s for s in spans if s.parent is None]

    def __iter__(self) -> Iterator[SpanInfo]:
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def __getitem__(self, span_id: str) -> SpanInfo:
        return self.by_id[span_id]

    def to_pandas(self) -> Any:
        """A flat table: one row per span with its subtree's totals, columns
        ``SPAN_COLUMNS`` even when there is no span yet. ``active_cpu_seconds``: the
        thread-seconds the cluster offered while the span ran (threads times time, as
        Dask's); ``metrics_seconds``: those its tasks' fine metrics account for (every
        activity of its tasks); the difference is its "idle or other spans" line."""
        import pandas as pd

        rows = []
        for s in self.by_id.values():
            # the thread-seconds its tasks' metrics account for: its "idle or other
            # spans" line is what the span had beyond them (active_cpu_seconds minus this)
            seconds = sum(v for k, v in s.metrics.items() if k[-1] == "seconds" and k != IDLE)
            rows.append(
                {
                    "id": s.id,
                    "name": " / ".join(s.name),
                    "tags": s.name,
                    "parent": s.parent,
                    "enqueued": s.enqueued,
                    "start": s.start,
                    "stop": s.stop,
                    "duration": s.duration,
                    "active_cpu_seconds": s.active_cpu_seconds,
                    "metrics_seconds": seconds,
                    "nbytes_total": s.nbytes_total,
                    "tasks": sum(s.states.values()),  # forgotten ones included
                    "done": s.done,
                }
            )
        return pd.DataFrame(rows, columns=SPAN_COLUMNS)

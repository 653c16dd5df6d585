"""``span``: label a part of your code, and every task it submits, with tags.

    with span("Alice's workflow"):
        with span("data load"):
            futures = client.map(load, files)

The spans nest: here the tasks belong to ("Alice's workflow", "data load"), and
the parent span covers them too. Re-entering the same tags makes a new span.

When the default source is a Dask cluster's (``kernel_cluster.attach(dask_client)``)
or no kernel_cluster client is open while a ``distributed.Client`` is, ``span``
opens a ``distributed.span`` as well and takes its ids, so the same span shows in
Dask's dashboard and in these views (and tags a kernel_cluster client's tasks too).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ..core.annotations import current_span, get_annotations
from . import attach as source
from .snapshots import SpanInfo

__all__ = ["SpanInfo", "SpanTreeView", "get_annotations", "span"]


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
        try:
            yield ids[-1]
        finally:
            current_span.reset(token)


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
        """A flat table: one row per span with its subtree's totals."""
        import pandas as pd

        rows = []
        for s in self.by_id.values():
            seconds = sum(v for k, v in s.metrics.items() if k[-1] == "seconds")
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
        return pd.DataFrame(rows)

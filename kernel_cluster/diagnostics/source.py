"""The one narrow, read-only door through which every view reads an engine.

Views (tables, widgets, reports) take a ``DiagnosticsSource`` and nothing else,
so the same views can be fed by this package's engine or by another one (a Dask
cluster) that implements the protocol. Everything returned is a snapshot of plain
data, never a live engine object.
"""

from __future__ import annotations

from typing import Protocol


class DiagnosticsSource(Protocol):
    def fine_metrics(self) -> dict[tuple, float]:
        """Every worker metric summed so far, as workers key them:
        ``("execute", span_id, prefix, activity, unit)``, ``("gather-dep", activity,
        unit)``, ``("get-data", activity, unit)``, ``("memory-monitor", activity, unit)``."""
        ...

    def spans(self) -> list:
        """Every span as plain data (``SpanInfo``), subtree totals included."""
        ...

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[dict[tuple, float], str]:
        """Execute metrics of the spans a selector picks (a span id, a tag, or a tuple
        of tags), merged, keyed ``("execute", prefix, activity, unit)``; and a label."""
        ...


_default_source: DiagnosticsSource | None = None


def set_default_source(source: DiagnosticsSource | None) -> None:
    """The source views use when given no client (the most recent Client sets itself)."""
    global _default_source
    _default_source = source


def default_source() -> DiagnosticsSource:
    if _default_source is None:
        raise ValueError("No client is open; create one with kernel_cluster.Client().")
    return _default_source

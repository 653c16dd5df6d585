"""The one narrow, read-only door through which every view reads an engine.

Views (tables, widgets, reports) take a ``DiagnosticsSource`` and nothing else,
so the same views can be fed by this package's engine or by another one (a Dask
cluster) that implements the protocol. Everything returned is a snapshot of plain
data, never a live engine object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


class DiagnosticsSource(Protocol):
    def fine_metrics(self, refresh: bool = True) -> dict[tuple, float]:
        """Every worker metric summed so far, as workers key them:
        ``("execute", span_id, prefix, activity, unit)``, ``("gather-dep", activity,
        unit)``, ``("get-data", activity, unit)``, ``("memory-monitor", activity, unit)``.

        ``refresh=False`` skips asking the workers for their latest numbers first:
        cheaper, and up to one heartbeat old (what live views poll with)."""
        ...

    def spans(self, refresh: bool = True) -> list:
        """Every span as plain data (``SpanInfo``), subtree totals included."""
        ...

    def progress(self) -> dict[str, dict[str, int]]:
        """Task state counts per task prefix: ``{"inc": {"memory": 8, "processing": 2,
        ...}}``, every state of ``ALL_STATES`` present."""
        ...

    def info(self) -> dict:
        """Workers and threads: ``{"workers": {address: {...}}, "total_nthreads": n}``."""
        ...

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[dict[tuple, float], str]:
        """Execute metrics of the spans a selector picks (a span id, a tag, or a tuple
        of tags), merged, keyed ``("execute", prefix, activity, unit)``; and a label."""
        ...

    def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list]:
        """Each worker's statistical profile over ``[start, stop]`` (scheduler times,
        None: open), for one task prefix or all, as ``core.profile.to_flat`` rows by
        worker address; ``workers``: addresses, None for all."""
        ...

    def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, dict]:
        """Each worker's samples per profile cycle: ``{"counts": [(time, n)], "keys":
        {prefix: [(time, n)]}, "cycle_interval": seconds}`` by worker address."""
        ...


_default_source: DiagnosticsSource | None = None
_watchers: list[Callable[[DiagnosticsSource | None], None]] = []


def set_default_source(source: DiagnosticsSource | None) -> None:
    """The source views use when given no client (the most recent Client sets itself)."""
    global _default_source
    _default_source = source
    for watcher in list(_watchers):
        try:
            watcher(source)
        except Exception:  # a view's failure must not break Client() or close()
            logger.exception("A default-source watcher failed")


def watch_default_source(
    watcher: Callable[[DiagnosticsSource | None], None],
) -> Callable[[], None]:
    """Call ``watcher(source)`` whenever the default source changes (a Client starts or
    closes), so that a view made before any cluster existed can follow one; returns
    the function that stops watching."""
    _watchers.append(watcher)

    def unwatch() -> None:
        if watcher in _watchers:
            _watchers.remove(watcher)

    return unwatch


def default_source() -> DiagnosticsSource:
    if _default_source is None:
        raise ValueError("No client is open; create one with kernel_cluster.Client().")
    return _default_source

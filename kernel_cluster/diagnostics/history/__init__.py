"""The run history: every finished span, kept across kernel restarts, to compare runs.

    import kernel_cluster
    kernel_cluster.history()                  # the stored runs, a DataFrame
    run = kernel_cluster.history.load("etl@-1")
    run.fine_metrics(); run.spans()           # as a live client's
    kernel_cluster.compare("etl@-1", "etl")   # or client.compare(a, b)

Where each part lives, along the layers:

- captured by the engine's span tree (``core/spans.py``: the spans whose tasks are
  all done, logged with a cursor, at no cost per task) and offered through the
  ``DiagnosticsSource`` protocol (``finished_spans``), so a Dask cluster's spans
  are recorded the same way (its scheduler plugin keeps the same log);
- stored by ``recorder`` (a thread per cluster, started by the client layer:
  ``Client()``, and ``kernel_cluster.attach`` for a Dask client) into SQLite
  (``schema``: the file, its versions and faults; ``store``: writes, bounds,
  reads), with ``context`` (where a run came from) and ``settings`` (the file and
  the bounds);
- read by ``stored`` (``StoredRun``, references like ``name@-1``) and compared by
  ``compare`` (the table and its verdict); drawn by the ``Compare`` widget and
  JupyterLab panel (``jupyter/compare.py``, ``widgets/src/compare.ts``), the
  performance report (``compare_to=``) and ``%%span --compare-to``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import settings as _settings
from .settings import HistorySettings

if TYPE_CHECKING:
    import pandas as pd

    from .compare import Comparison
    from .stored import HistoryOff, StoredRun

# `import kernel_cluster` (in a kernel, and in every worker process) must not import
# pandas and numpy: the reading and comparing modules load when first used
_LAZY = {"Comparison": "compare", "HistoryOff": "stored", "StoredRun": "stored"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "Comparison",
    "History",
    "HistoryOff",
    "HistorySettings",
    "StoredRun",
    "history",
]


class History:
    """``kernel_cluster.history``: call it for the stored runs; ``load`` one."""

    def __call__(self, limit: int | None = None, name: str | None = None) -> pd.DataFrame:
        """The stored runs (top-level spans), oldest first: id, name, start, stop (UTC),
        wall (seconds), tasks, nbytes, thread_seconds, source (notebook or script),
        cluster, kind, workers, threads, git_commit, session. ``limit``: the latest so
        many; ``name``: runs of that name only."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"limit={limit!r}: give how many of the latest runs, an int >= 1.")
        from .stored import runs_frame

        return runs_frame(limit, name)

    def load(self, ref: str) -> StoredRun:
        """A stored span by id, ``name@-k`` (the k-th latest of that name) or name."""
        from .stored import load

        return load(ref)

    def configure(self, **changes: object) -> HistorySettings:
        """Set ``path`` (False or "off": no history), ``max_runs`` and ``max_mb`` for
        this process (see ``kernel_cluster.diagnostics.history.settings``)."""
        return _settings.configure(**changes)

    @property
    def settings(self) -> HistorySettings:
        return _settings.current()

    @property
    def path(self) -> object:
        """The history file (None when the history is off)."""
        return _settings.current().path

    def __repr__(self) -> str:
        s = _settings.current()
        where = s.path if s.path is not None else "off"
        return f"<kernel_cluster.history: {where}, latest {s.max_runs:,} runs, {s.max_mb:g} MB>"


history = History()

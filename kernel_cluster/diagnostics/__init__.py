"""Read-only views over a running engine, through one protocol (``source.py``).

``sources/`` implement the protocol (this engine, a Dask cluster); ``queries/``
turn snapshots into tables and records; ``feeds/`` are what live views send the
browser; ``pages/`` are the self-contained HTML pages.

``from kernel_cluster.diagnostics import ProgressBar, Profiler, ResourceProfiler,
CacheProfiler, Callback, visualize`` works as with ``dask.diagnostics``: those
names live in ``kernel_cluster.local_diagnostics`` (a layer above this one) and
are handed on from there on first use, the one place this layer names a higher
one (a documented import path, declared in the import contracts).
"""

from __future__ import annotations

from typing import Any

_LOCAL = (
    "CacheData",
    "CacheProfiler",
    "Callback",
    "Profiler",
    "ProgressBar",
    "ResourceData",
    "ResourceProfiler",
    "TaskData",
    "visualize",
)

__all__ = sorted(_LOCAL)


def __getattr__(name: str) -> Any:
    if name not in _LOCAL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .. import local_diagnostics

    value = getattr(local_diagnostics, name)
    globals()[name] = value
    return value

"""Read-only views over a running engine, and the local diagnostics.

``from kernel_cluster.diagnostics import ProgressBar, Profiler, ResourceProfiler,
CacheProfiler, Callback, visualize`` works as with ``dask.diagnostics``; those
names are imported on first use (importing a view module costs nothing more).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Callback": "callbacks",
    "CacheProfiler": "local_profilers",
    "Profiler": "local_profilers",
    "ProgressBar": "progress_bar",
    "ResourceProfiler": "local_profilers",
    "CacheData": "local_records",
    "ResourceData": "local_records",
    "TaskData": "local_records",
    "visualize": "local_plots",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

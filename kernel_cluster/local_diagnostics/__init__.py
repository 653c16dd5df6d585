"""``dask.diagnostics`` on this engine: callbacks, local profilers, ``get_sync``,
``visualize`` and ``ProgressBar``.

These wrap one computation (``client.get``, ``client.compute``, ``get_sync``) and
hear of its tasks through the engine's graph events; they sit above ``jupyter/``
so that ``ProgressBar`` and ``visualize`` show notebook widgets where they can.
The names are imported on first use: importing this package costs nothing more.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Callback": "callbacks",
    "CacheProfiler": "profilers",
    "Profiler": "profilers",
    "ProgressBar": "progress_bar",
    "ResourceProfiler": "profilers",
    "CacheData": "records",
    "ResourceData": "records",
    "TaskData": "records",
    "get_sync": "sync",
    "visualize": "plots",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

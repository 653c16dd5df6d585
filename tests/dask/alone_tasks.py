"""Tasks and scheduler calls for test_plugin_alone.py, in a module of their own: the
scheduler there unpickles task graphs, which name these functions, and it may import
this module (it imports nothing of kernel_cluster) but not the test's."""

from __future__ import annotations

import time
from typing import Any


def imports_kernel_cluster(dask_scheduler: Any = None, dask_worker: Any = None) -> str:
    try:
        import kernel_cluster  # noqa: F401
    except ModuleNotFoundError as exc:
        return str(exc)
    return "imported"


def fold_soon(dask_scheduler: Any) -> None:
    """The views plugin folds every finished default span but the latest two, at once."""
    plugin = dask_scheduler.plugins["kernel-cluster-views"]
    plugin.keep_default_spans, plugin.fold_grace = 2, 0.0


def crunch(x: int) -> int:
    total = 0
    deadline = time.monotonic() + 0.4
    while time.monotonic() < deadline:  # pure Python for a while: the profiler sees it
        for i in range(10_000):
            total += i * x
    return total

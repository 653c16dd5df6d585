"""The records the local profilers keep, in the shapes Dask users know.

``Profiler``, ``ResourceProfiler`` and ``CacheProfiler`` fill their ``results`` with
these; ``visualize`` draws them. Times are seconds since the epoch (``time.time()``)
in the process that ran the computation, so the three plots share one time axis.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class TaskData(NamedTuple):
    """One task run: its key, its task (as the graph gave it), when it started and
    ended, and the worker (thread) that ran it."""

    key: Any
    task: Any
    start_time: float
    end_time: float
    worker_id: Any


class ResourceData(NamedTuple):
    """One sample of the computing processes together: memory in MB and CPU in
    percent (100 per fully used core)."""

    time: float
    mem: float
    cpu: float


class CacheData(NamedTuple):
    """One result's stay in memory: its key and task, the size metric of its value
    (1 by default: a count), when it was stored and when it was released."""

    key: Any
    task: Any
    metric: float
    cache_time: float
    free_time: float

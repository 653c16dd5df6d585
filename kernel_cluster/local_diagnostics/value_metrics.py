"""Metrics of task values computed where the values live (a worker process).

``CacheProfiler(metric=...)`` needs ``metric(value)`` for every task; with worker
processes the values never come to the client. While such a profiler is active,
the client wraps each task of the graph (``wrap``): the task's value goes through
``measured``, which computes the metrics right there, keeps them in this module
(in the worker process) under the computation's token, and returns the value
untouched. When the computation ends the client collects them (``take``, called
on every worker with ``client.run``). Nothing of this runs without such a profiler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..core.keys import Key
from ..core.spec import Call, TaskSpec

__all__ = ["measured", "take", "wrap"]

_kept: dict[str, dict[Key, tuple[float, ...] | None]] = {}
_lock = threading.Lock()


def measured(token: str, key: Key, fns: tuple[Callable[[Any], Any], ...], value: Any) -> Any:
    """``value``, after keeping ``fn(value)`` for each metric (None if one raised)."""
    out: tuple[float, ...] | None
    try:
        out = tuple(float(fn(value)) for fn in fns)
    except Exception:
        out = None
    with _lock:
        _kept.setdefault(token, {})[key] = out
    return value


def take(token: str) -> dict[Key, tuple[float, ...] | None]:
    """The metrics kept for ``token`` in this process, forgotten here."""
    with _lock:
        return _kept.pop(token, {})


def wrap(
    specs: Mapping[Key, TaskSpec], token: str, fns: tuple[Callable[[Any], Any], ...]
) -> dict[Key, TaskSpec]:
    """The tasks, each passing its value through ``measured``."""
    return {
        k: TaskSpec(Call(measured, (token, k, fns, s.expr)), s.dependencies)
        for k, s in specs.items()
    }

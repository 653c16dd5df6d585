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

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..core.keys import Key
from ..core.spec import Call, TaskSpec

__all__ = ["measured", "take", "wrap"]

_kept: dict[str, dict[Key, tuple[float, ...]]] = {}
# token -> metric's place in ``fns`` -> the first error it raised, as text
_failed: dict[str, dict[int, str]] = {}
_lock = threading.Lock()


def measured(token: str, key: Key, fns: tuple[Callable[[Any], Any], ...], value: Any) -> Any:
    """``value``, after keeping ``fn(value)`` for each metric (NaN where one raised, and
    its first error, for the profiler to warn about)."""
    out = []
    failed: dict[int, str] = {}
    for i, fn in enumerate(fns):
        try:
            out.append(float(fn(value)))
        except Exception as exc:
            out.append(math.nan)
            failed[i] = f"{type(exc).__name__}: {exc}"
    with _lock:
        _kept.setdefault(token, {})[key] = tuple(out)
        if failed:
            first = _failed.setdefault(token, {})
            for i, text in failed.items():
                first.setdefault(i, text)
    return value


def take(token: str) -> tuple[dict[Key, tuple[float, ...]], dict[int, str]]:
    """The metrics kept for ``token`` in this process, and the first error of each
    metric that raised (by its place in ``fns``), forgotten here."""
    with _lock:
        return _kept.pop(token, {}), _failed.pop(token, {})


def wrap(
    specs: Mapping[Key, TaskSpec], token: str, fns: tuple[Callable[[Any], Any], ...]
) -> dict[Key, TaskSpec]:
    """The tasks, each passing its value through ``measured``."""
    return {
        k: TaskSpec(Call(measured, (token, k, fns, s.expr)), s.dependencies)
        for k, s in specs.items()
    }

"""Estimated memory held by a task's result, without importing numpy or pandas.

Byte counts feed nbytes totals, worker choice and spilling, so they must be cheap
for the common small results and fair for arrays and frames.
"""

from __future__ import annotations

import sys
from typing import Any

_CONTAINER_SAMPLE = 16  # items measured in a large container before extrapolating


def sizeof(obj: Any) -> int:
    t = type(obj)
    if t is int or t is float or t is bool or obj is None:
        return sys.getsizeof(obj)
    if t is bytes or t is bytearray:
        return len(obj) + 33
    if t is memoryview:
        # an int; `t is` does not narrow `obj`, and a cast would cost a call per task
        return obj.nbytes  # type: ignore[no-any-return]
    if t is str:
        return sys.getsizeof(obj)
    if t is list or t is tuple or t is set or t is frozenset:
        return sys.getsizeof(obj) + _items_size(obj)
    if t is dict:
        return sys.getsizeof(obj) + _items_size(obj.keys()) + _items_size(obj.values())
    module = t.__module__
    if module == "numpy":
        nbytes = getattr(obj, "nbytes", None)
        if isinstance(nbytes, int):
            # views share their base's memory; object arrays hold references
            if getattr(obj, "dtype", None) is not None and obj.dtype.kind == "O":
                return nbytes + _items_size(obj.ravel().tolist())
            return nbytes
    if module.startswith("pandas"):
        usage = getattr(obj, "memory_usage", None)
        if usage is not None:
            try:
                total = usage(deep=True)
                return int(total.sum() if hasattr(total, "sum") else total)
            except (TypeError, ValueError):
                pass
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    try:
        return sys.getsizeof(obj)
    except TypeError:
        return 64


def _items_size(items: Any) -> int:
    n = len(items)
    if n == 0:
        return 0
    if n <= _CONTAINER_SAMPLE:
        return sum(sizeof(x) for x in items)
    sample = []
    for i, x in enumerate(items):
        if i >= _CONTAINER_SAMPLE:
            break
        sample.append(sizeof(x))
    return int(sum(sample) / len(sample) * n)

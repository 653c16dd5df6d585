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
        size = _pandas_size(obj)
        if size is not None:
            return size
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


def _pandas_size(obj: Any) -> int | None:
    """A Series' or DataFrame's bytes from its column arrays, in microseconds.

    ``DataFrame.memory_usage`` builds a Series on every call (about 0.35 ms, longer
    than many tasks of a dataframe graph); the arrays' own ``nbytes`` are at hand.
    Python objects in object columns are estimated from a sample. None when ``obj``
    is another pandas object, or pandas' internals are not the ones read here.
    """
    try:
        arrays = obj._mgr.arrays if obj.ndim == 2 else [obj.array]
        index = obj.index
        total = _column_size(index) if getattr(index, "nlevels", 1) == 1 else index.nbytes
        for array in arrays:
            total += _column_size(array)
    except (AttributeError, TypeError):
        return None
    return int(total)


def _column_size(array: Any) -> int:
    """``nbytes`` of a column (a numpy block, an extension array or an index), plus
    the Python objects a numpy object array points to (extension arrays, such as
    strings and categoricals, count their own data in ``nbytes``)."""
    nbytes = int(array.nbytes)
    values = getattr(array, "_values", array)  # an index's array
    if type(values).__module__ != "numpy" or values.dtype.kind != "O" or not values.size:
        return nbytes
    sample = [sys.getsizeof(x) for x in values.ravel()[:_CONTAINER_SAMPLE]]
    return nbytes + int(sum(sample) / len(sample) * values.size)

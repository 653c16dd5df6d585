"""Sets that stay the one shared ``EMPTY`` until something is added to them.

Tasks carry several sets (dependencies, dependents, waiters, ...) that are empty for
most tasks most of the time. An empty ``set()`` is still a container that Python's
cyclic GC traverses in every full collection for as long as the task lives, and
10,000 queued tasks made 60,000 of them. So such an attribute holds ``EMPTY`` while
empty, and changes only through ``added`` and ``discarded`` (or by assigning
``EMPTY``), which put a real set in its place and take it out again.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")

EMPTY: frozenset[Any] = frozenset()


def added(items: set[T] | frozenset[T], item: T) -> set[T]:
    """``items`` with ``item`` in it: the same set, or a new one in place of EMPTY."""
    if type(items) is set:
        items.add(item)
        return items
    return {item}


def discarded(items: set[T] | frozenset[T], item: T) -> set[T] | frozenset[T]:
    """``items`` without ``item``: the same set, or EMPTY once nothing is left."""
    if type(items) is set:
        items.discard(item)
        if items:
            return items
    return EMPTY

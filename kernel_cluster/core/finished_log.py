"""A numbered, bounded log of what finished, read since a cursor.

The run history asks a span tree for the spans that finished since its last look;
the engine's span tree (core/spans.py) and the Dask scheduler plugin keep such a
log the same way, so both use this one. Standard library only: it travels pickled
by value with the Dask plugin (``dask_plugin.PICKLED_WITH``).

Entries are numbered from 0 as they are added; the log keeps the latest
``maxlen``. A reader passes the number after the last entry it read (its cursor)
and gets the entries since, the next cursor, and how many entries fell out of the
log before it read them. A cursor the log never gave (from another log) reads
from the start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import islice
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class FinishedLog(Generic[T]):
    def __init__(self, maxlen: int) -> None:
        self.entries: deque[T] = deque(maxlen=maxlen)
        self.count = 0  # entries ever added: the next one's number

    def append(self, entry: T) -> None:
        self.entries.append(entry)
        self.count += 1

    def since(self, cursor: int) -> tuple[list[T], int, int]:
        """``(entries, next cursor, missed)`` from entry ``cursor`` on."""
        count = self.count
        first = count - len(self.entries)  # the number of the oldest entry kept
        if not 0 <= cursor <= count:
            cursor = 0
        missed = max(0, first - cursor)
        return list(islice(self.entries, max(cursor, first) - first, None)), count, missed


def depth(span: Any) -> int:
    """How many parents ``span`` has (anything with a ``parent``, None at the top)."""
    n = 0
    node = span.parent
    while node is not None:
        n += 1
        node = node.parent
    return n


def children_first(spans: Iterable[T]) -> list[T]:
    """``spans`` ordered deepest first: a child is logged before its parent."""
    return sorted(spans, key=depth, reverse=True)


def root_of(span: Any) -> Any:
    while span.parent is not None:
        span = span.parent
    return span


def by_prefix(groups: Iterable[Any]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Task groups' (``prefix.name``, ``states``, ``nbytes_total``) tasks per state (the
    states with tasks) and result bytes, by task prefix: what the history keeps of a
    span's tasks."""
    tasks: dict[str, dict[str, int]] = {}
    nbytes: dict[str, int] = {}
    for group in groups:
        name = group.prefix.name
        counts = tasks.setdefault(name, {})
        for state, n in group.states.items():
            if n:
                counts[state] = counts.get(state, 0) + int(n)
        nbytes[name] = nbytes.get(name, 0) + int(group.nbytes_total)
    return tasks, nbytes

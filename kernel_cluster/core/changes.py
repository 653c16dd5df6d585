"""What changed in a scheduler since a cursor: the log live views read instead of
copying the whole state on every look.

The scheduler tells the log what it touches: a metric row summed into
(``metric``), a span opened, updated (a task of it moved, metrics came in) or
closed (folded away: ``span_opened`` / ``span_updated`` / ``span_closed``), a task
prefix's counts (``prefix``; a task moving touches its span and its prefix at
once: ``task_moved``) and a task-stream record appended (``task_appended``). Each
event gets the next sequence number. A reader passes the sequence number it read
up to (its cursor) and gets the keys touched since, each once, in an order it need
not care about: the cost of a read is what changed since, never the state's size.

A key remembers only its latest change: touching a key again moves it to the end
(each kind is an OrderedDict kept in sequence order), so the log holds at most one entry
per live key, and a reader walks back from the end until it meets its cursor.

Bounded: past ``capacity`` entries of a kind the oldest go, and the log's
``floor`` rises to the newest sequence number it let go. A reader whose cursor is
below the floor (or is 0, or comes from another log) gets ``resync=True``: it
must read everything again, and nothing else in the answer counts.

Pure: no clock, no thread, no engine; the scheduler calls it on its own thread.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, NamedTuple

__all__ = ["CAPACITY", "ChangeLog", "Changed"]

CAPACITY = 100_000  # entries per kind (metric rows, spans, prefixes, task records)


class Changed(NamedTuple):
    """What ``ChangeLog.since`` returns. ``cursor``: the sequence number to pass
    next time. ``resync``: the reader fell off the log (or never read): it must read
    everything, and the other fields are empty. ``spans``: ids opened or updated
    (and still there); ``closed``: ids closed since; ``tasks``: the task-stream
    indices ``[start, stop)`` appended since."""

    cursor: int
    resync: bool
    metrics: list[Hashable]
    spans: list[str]
    closed: list[str]
    prefixes: list[str]
    tasks: tuple[int, int]


class ChangeLog:
    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity!r}.")
        self.capacity = capacity
        self.seq = 0  # the last sequence number given
        self.floor = 0  # readers below it have missed entries that are gone
        # key -> sequence number of its latest change, in that order
        self._metrics: OrderedDict[Any, int] = OrderedDict()
        self._spans: OrderedDict[Any, int] = OrderedDict()
        self._closed: OrderedDict[Any, int] = OrderedDict()
        self._prefixes: OrderedDict[Any, int] = OrderedDict()
        # task records are appended with consecutive indices: one sequence number per
        # record, in an array (index = _tasks_first + position)
        self._task_seqs = array("q")
        self._tasks_first = 0
        self._tasks_next = 0

    # -- what the scheduler tells --------------------------------------------------------

    def _touch(self, entries: OrderedDict[Any, int], key: Hashable) -> None:
        self.seq += 1
        entries[key] = self.seq
        entries.move_to_end(key)
        if len(entries) > self.capacity:
            self._drop_oldest(entries)

    def _drop_oldest(self, entries: OrderedDict[Any, int]) -> None:
        # an OrderedDict: a plain dict's first item is found past the slots of every
        # item deleted before it (quadratic over a log this size)
        _, seq = entries.popitem(last=False)
        self.floor = max(self.floor, seq)

    def metric(self, key: Hashable) -> None:
        self._touch(self._metrics, key)

    def span_opened(self, span_id: str) -> None:
        self._closed.pop(span_id, None)
        self._touch(self._spans, span_id)

    def span_updated(self, span_id: str) -> None:
        self._touch(self._spans, span_id)

    def span_closed(self, span_id: str) -> None:
        self._spans.pop(span_id, None)
        self._touch(self._closed, span_id)

    def prefix(self, name: str) -> None:
        self._touch(self._prefixes, name)

    def task_moved(self, span_id: str | None, prefix: str) -> None:
        """A task changed state: its span's and its prefix's numbers changed (one
        sequence number for both: this sits on every transition's path)."""
        self.seq = seq = self.seq + 1
        if span_id is not None:
            spans = self._spans
            spans[span_id] = seq
            spans.move_to_end(span_id)
            if len(spans) > self.capacity:
                self._drop_oldest(spans)
        prefixes = self._prefixes
        prefixes[prefix] = seq
        prefixes.move_to_end(prefix)
        if len(prefixes) > self.capacity:
            self._drop_oldest(prefixes)

    def task_appended(self, index: int) -> None:
        """Task-stream record ``index`` was appended (indices only grow by one; a gap
        starts the record numbering over, which readers see as a resync)."""
        self.seq += 1
        seqs = self._task_seqs
        if index != self._tasks_next:
            if seqs:
                self.floor = max(self.floor, seqs[-1])
            del seqs[:]
            self._tasks_first = index
        seqs.append(self.seq)
        self._tasks_next = index + 1
        excess = len(seqs) - self.capacity
        if excess > 0 and (excess >= 1024 or excess >= self.capacity // 4):
            # in chunks: deleting from an array's front moves the rest
            self.floor = max(self.floor, seqs[excess - 1])
            del seqs[:excess]
            self._tasks_first += excess

    # -- what readers ask ----------------------------------------------------------------

    def since(self, cursor: int) -> Changed:
        """The keys touched after sequence number ``cursor`` (see the module's doc)."""
        seq = self.seq
        if cursor <= 0 or cursor > seq or cursor < self.floor:
            return Changed(seq, True, [], [], [], [], (self._tasks_next, self._tasks_next))
        seqs = self._task_seqs
        first = self._tasks_first + bisect_right(seqs, cursor)
        return Changed(
            seq,
            False,
            _after(self._metrics, cursor),
            _after(self._spans, cursor),
            _after(self._closed, cursor),
            _after(self._prefixes, cursor),
            (first, self._tasks_next),
        )

    @property
    def tasks_first(self) -> int:
        """The oldest task-stream index the log still numbers."""
        return self._tasks_first


def _after(entries: OrderedDict[Any, int], cursor: int) -> list[Any]:
    """Keys whose latest change is after ``cursor``: walked from the newest back."""
    out: list[Any] = []
    for key, seq in reversed(entries.items()):
        if seq <= cursor:
            break
        out.append(key)
    return out

"""The task stream as columns and deltas: what the ``TaskStream`` widget and the
performance report send to the browser.

One *task* per task stream record (key, prefix, status, bytes) and one *rectangle*
per entry of its ``startstops`` (row, action, start, stop). A row is a worker
thread: ``(worker, n)`` where ``n`` numbers the worker's threads in the order they
were first seen (thread idents are long, unstable numbers nobody wants to read).

A message carries only what is new since the last one: new strings, new rows, the
new tasks' keys as JSON, and the numbers as typed-array buffers (little-endian, as
``array`` writes them on every platform we run on)::

    task_prefix uint32  task_status uint8  task_nbytes float64
    rect_task uint32    rect_row uint32    rect_action uint8
    rect_start float64  rect_stop float64

Tasks are numbered from the first one the feed ever saw; ``rect_task`` holds those
numbers. The feed keeps at most ``max_tasks`` (the oldest go first, in chunks); a
message's ``drop_before`` tells the browser to forget tasks numbered below it,
before it appends the message's tasks (numbered from ``first_task`` on).

``TaskStreamReader`` applies messages as the browser does; tests check with it that
deltas rebuild the records exactly.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Hashable, Iterable
from typing import Any

from ..snapshots import TaskKey, TaskStreamRecord
from .tables import Message

ACTIONS = ("compute", "transfer", "disk-read", "disk-write", "deserialize")
_ACTION = {a: i for i, a in enumerate(ACTIONS)}
STATUSES = ("OK", "error")
NBUFFERS = 8


class TaskStreamFeed:
    """Task stream records as columnar deltas against what was last sent."""

    name = "tasks"

    def __init__(self, max_tasks: int = 100_000) -> None:
        if max_tasks < 1:
            raise ValueError(f"max_tasks must be at least 1, got {max_tasks!r}.")
        self.max_tasks = max_tasks
        self.seq = 0
        self.next_index = 0  # the engine's number of the next record to read
        self.first_task = 0  # number of the oldest task held
        self._strings: dict[str, int] = {}
        self.strings: list[str] = []
        self._rows: dict[tuple[str, int | None], int] = {}
        self._threads: dict[str, int] = {}  # threads seen per worker
        self.rows: list[tuple[int, int]] = []  # (worker string, thread number)
        self.keys: list[str] = []
        self.task_prefix = array("I")
        self.task_status = array("B")
        self.task_nbytes = array("d")
        self.rect_task = array("I")
        self.rect_row = array("I")
        self.rect_action = array("B")
        self.rect_start = array("d")
        self.rect_stop = array("d")

    @property
    def ntasks(self) -> int:
        return len(self.keys)

    def _string(self, s: str) -> int:
        i = self._strings.get(s)
        if i is None:
            i = self._strings[s] = len(self.strings)
            self.strings.append(s)
        return i

    def _row(self, worker: str, thread: int | None) -> int:
        row = self._rows.get((worker, thread))
        if row is None:
            n = self._threads.get(worker, 0)
            self._threads[worker] = n + 1
            row = self._rows[(worker, thread)] = len(self.rows)
            self.rows.append((self._string(worker), n))
        return row

    def update(self, records: Iterable[TaskStreamRecord], full: bool = False) -> Message | None:
        """The message that brings the browser up to ``records`` (the records made since
        the last call, in order); None when there are none."""
        n_strings, n_rows, n_tasks = len(self.strings), len(self.rows), len(self.keys)
        n_rects = len(self.rect_start)
        for r in records:
            self.next_index = max(self.next_index, r.index + 1)
            self._add(r)
        dropped, cut = self._trim()
        if full:
            return self.full()
        if len(self.keys) + dropped == n_tasks:
            return None  # nothing new (trimming only happens when something was added)
        # the new tasks and rectangles sit at the end, after what trimming left
        return self._message(
            n_strings, n_rows, max(0, n_tasks - dropped), max(0, n_rects - cut), full=False
        )

    def full(self) -> Message:
        """Everything held, for a browser that starts over."""
        return self._message(0, 0, 0, 0, full=True)

    def _add(self, r: TaskStreamRecord) -> None:
        task = self.first_task + len(self.keys)
        self.keys.append(_key_text(r.key))
        self.task_prefix.append(self._string(r.prefix or ""))
        self.task_status.append(0 if r.status == "OK" else 1)
        self.task_nbytes.append(float(r.nbytes or 0))
        row = self._row(r.worker or "", r.thread)
        for ss in r.startstops:
            action = _ACTION.get(ss.action)
            if action is None:
                continue
            self.rect_task.append(task)
            self.rect_row.append(row)
            self.rect_action.append(action)
            self.rect_start.append(float(ss.start))
            self.rect_stop.append(float(ss.stop))

    def _trim(self) -> tuple[int, int]:
        """Forget the oldest tasks once a quarter more than ``max_tasks`` are held (in
        chunks, so that a busy stream does not shift its columns on every message).
        Returns how many tasks and rectangles went."""
        excess = len(self.keys) - self.max_tasks
        if excess <= 0 or (excess < self.max_tasks // 4 and excess < 1000):
            return 0, 0
        self.first_task += excess
        cut = bisect_left(self.rect_task, self.first_task)
        del self.keys[:excess]
        for col in (self.task_prefix, self.task_status, self.task_nbytes):
            del col[:excess]
        for col in (self.rect_task, self.rect_row, self.rect_action, self.rect_start):
            del col[:cut]
        del self.rect_stop[:cut]
        return excess, cut

    def _message(
        self, n_strings: int, n_rows: int, first_new: int, first_rect: int, full: bool
    ) -> Message:
        self.seq += 1
        content = {
            "feed": self.name,
            "seq": self.seq,
            "full": full,
            "strings": self.strings[n_strings:],
            "rows": [list(r) for r in self.rows[n_rows:]],
            "first_task": self.first_task + first_new,
            "drop_before": self.first_task,
            "keys": self.keys[first_new:],
        }
        buffers = [
            self.task_prefix[first_new:].tobytes(),
            self.task_status[first_new:].tobytes(),
            self.task_nbytes[first_new:].tobytes(),
            self.rect_task[first_rect:].tobytes(),
            self.rect_row[first_rect:].tobytes(),
            self.rect_action[first_rect:].tobytes(),
            self.rect_start[first_rect:].tobytes(),
            self.rect_stop[first_rect:].tobytes(),
        ]
        return content, buffers


def _key_text(key: TaskKey | Hashable) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, tuple):
        return "(" + ", ".join(repr(k) for k in key) + ")"
    return str(key)


class TaskStreamReader:
    """Applies task stream messages as the browser does (for tests)."""

    def __init__(self) -> None:
        self.seq = 0
        self.strings: list[str] = []
        self.rows: list[tuple[str, int]] = []
        self.first_task = 0
        self.keys: list[str] = []
        self.tasks: list[dict[str, Any]] = []  # per task held: prefix, status, nbytes
        self.rects: list[dict[str, Any]] = []

    def apply(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        if content["full"]:
            self.__init__()  # type: ignore[misc]
            self.first_task = content["first_task"]
        elif content["seq"] != self.seq + 1:
            raise ValueError(f"tasks message {content['seq']} after {self.seq}: one was lost")
        drop = content["drop_before"] - self.first_task
        if drop > 0:
            del self.keys[:drop]
            del self.tasks[:drop]
            self.rects = [r for r in self.rects if r["task"] >= content["drop_before"]]
            self.first_task = content["drop_before"]
        if content["first_task"] != self.first_task + len(self.keys):
            raise ValueError("tasks out of step")
        self.seq = content["seq"]
        self.strings.extend(content["strings"])
        self.rows.extend((self.strings[w], n) for w, n in content["rows"])
        cols = [array(t, bytes(b)) for t, b in zip("IBdIIBdd", buffers)]
        prefix, status, nbytes, task, row, action, start, stop = cols
        self.keys.extend(content["keys"])
        for p, s, b in zip(prefix, status, nbytes):
            self.tasks.append({"prefix": self.strings[p], "status": STATUSES[s], "nbytes": b})
        for t, rw, a, s0, s1 in zip(task, row, action, start, stop):
            self.rects.append(
                {"task": t, "row": self.rows[rw], "action": ACTIONS[a], "start": s0, "stop": s1}
            )

    def startstops(self) -> dict[str, list[tuple[str, float, float]]]:
        """``{key: [(action, start, stop)]}`` of the tasks held."""
        out: dict[str, list[tuple[str, float, float]]] = {k: [] for k in self.keys}
        for r in self.rects:
            out[self.keys[r["task"] - self.first_task]].append((r["action"], r["start"], r["stop"]))
        return out

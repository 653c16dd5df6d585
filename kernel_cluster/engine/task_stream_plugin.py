"""The task stream: a record of every task that ran, kept by a scheduler plugin.

Each record says where and when a task ran: key, prefix, span, worker, thread,
status, bytes, and ``startstops``: (action, start, stop) for compute, transfer
(with the worker the data came from), disk-read, disk-write and deserialize,
on the scheduler's clock; and what the critical path needs (core/critical_path.py):
the keys of its ``dependencies`` and when the scheduler ``sent`` it to its worker
(the time of the event it was sent in answer to: TaskState.sent).
The history is bounded; ``index`` only grows, so a reader can ask for "everything
since record N".
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Any, ClassVar

from ..core.changes import ChangeLog
from .plugins import SchedulerPlugin, startstop_dicts


class TaskStreamPlugin(SchedulerPlugin):
    name = "task-stream"
    transitions: ClassVar = frozenset({("processing", "memory"), ("processing", "erred")})
    raw_startstops: ClassVar = True

    def __init__(self, maxlen: int = 100_000):
        # raw tuples (see _FIELDS), turned into dicts only when somebody reads them:
        # the scheduler records every task, readers look at a few. Tuples all the way
        # down (startstops too), holding only strings and numbers: the cyclic GC stops
        # tracking such tuples in its first collections, so a full history costs no
        # time in the collections made while later tasks run.
        self.buffer: deque[tuple] = deque(maxlen=maxlen)
        self.index = 0  # records ever made; the next one gets this number
        self.changes: ChangeLog | None = None  # the scheduler's, told of each record

    def start(self, scheduler: Any) -> None:
        self.changes = scheduler.state.changes

    def transition(
        self,
        key: Any,
        start: str,
        finish: str,
        *args: Any,
        worker: str | None = None,
        prefix: str | None = None,
        span_id: str | None = None,
        thread: int | None = None,
        nbytes: int = 0,
        startstops: Any = (),
        dependencies: tuple[Any, ...] = (),
        sent: float | None = None,
        **kw: Any,
    ) -> None:
        if worker is None:  # erred because an input failed: it never ran
            return
        self.buffer.append(
            (
                self.index,
                key,
                prefix,
                span_id,
                worker,
                thread,
                "OK" if finish == "memory" else "error",
                nbytes,
                tuple(startstops) if startstops else (),
                dependencies,
                sent,
            )
        )
        if self.changes is not None:
            self.changes.task_appended(self.index)
        self.index += 1

    def since(self, index: int) -> list[dict]:
        """Records numbered ``index`` or later that are still in the history."""
        return [_record(r) for r in self.raw_since(index)]

    def raw_since(self, index: int, count: int | None = None) -> list[tuple]:
        """The raw records (tuples) numbered ``index`` or later, at most ``count``:
        a cheap copy, for readers that make them into records off the loop."""
        buffer = self.buffer
        if not buffer:
            return []
        skip = max(0, index - buffer[0][0])
        n = len(buffer) - skip
        if count is not None:
            n = min(n, count)
        if n <= 0:
            return []
        if skip > len(buffer) // 2:  # near the end (a live reader's case): walk from there
            tail = len(buffer) - skip - n
            out = list(islice(reversed(buffer), tail, tail + n))
            out.reverse()
            return out
        return list(islice(buffer, skip, skip + n))

    def window(self, start: float | None, stop: float | None, count: int | None) -> list[dict]:
        """Records of tasks that ended in [start, stop]; the last ``count`` of them."""
        return [_record(r) for r in self.window_raw(start, stop, count)]

    # The raw tuples (``_FIELDS``, then startstops, dependencies, sent) for readers on
    # the loop that make their own copies elsewhere: the engine's DiagnosticsSource
    # turns them into snapshots on its caller's thread. The tuples never change.

    def window_raw(self, start: float | None, stop: float | None, count: int | None) -> list[tuple]:
        if start is None and stop is None:
            out = list(self.buffer)
        else:
            lo = float("-inf") if start is None else start
            hi = float("inf") if stop is None else stop
            out = [r for r in self.buffer if lo <= _end(r) <= hi]
        if count:
            out = out[-count:]
        return out


_FIELDS = ("index", "key", "prefix", "span_id", "worker", "thread", "status", "nbytes")


def _end(raw: tuple) -> float:
    """When a record's task ended: its last action's stop."""
    return max((ss[2] for ss in raw[8]), default=0.0)


def _record(raw: tuple) -> dict:
    out = dict(zip(_FIELDS, raw))
    out["startstops"] = startstop_dicts(raw[8])
    out["dependencies"] = raw[9]
    out["sent"] = raw[10]
    return out

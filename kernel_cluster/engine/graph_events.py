"""GraphEvents: one computation's task events, for the local callbacks.

A scheduler plugin registered only while a computation with active callbacks runs
(``Client.get``): the scheduler calls no plugin for transitions nobody asked for,
so with no callback active nothing is added on any task's path. It picks the
transitions of the computation's own keys (other clients' tasks on the same
cluster go by) and appends them, as tuples, to ``events``; the client's thread
drains them and calls the hooks (the engine never waits on a hook).

Runs on the loop thread; ``events`` is a SimpleQueue, safe to read from another.
"""

from __future__ import annotations

import queue
from typing import Any, ClassVar

from .plugins import SchedulerPlugin

# the kinds of events put on the queue
PRE, POST, ERRED, RETRY, FREED = "pre", "post", "erred", "retry", "freed"

_RUN = frozenset({("waiting", "processing"), ("queued", "processing")})
_BACK = frozenset({("processing", "waiting"), ("processing", "released")})
_FREE = frozenset({("memory", "released"), ("memory", "forgotten"), ("memory", "waiting")})


class GraphEvents(SchedulerPlugin):
    """Events of the tasks in ``keys``; with ``read_values`` (embedded workers only)
    the value each task made, read from its worker's memory as it is stored."""

    transitions: ClassVar = (
        _RUN | _BACK | _FREE | {("processing", "memory"), ("processing", "erred")}
    )
    raw_startstops: ClassVar = True

    def __init__(self, keys: Any, read_values: bool, clock: Any) -> None:
        self.keys = keys
        self.read_values = read_values
        self.events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.clock = clock
        self._workers: dict[str, Any] = {}

    def start(self, scheduler: Any) -> None:
        # embedded workers by address (worker processes are not in it)
        self._workers = getattr(scheduler.data_source, "workers", {})

    def transition(
        self,
        key: Any,
        start: str,
        finish: str,
        *args: Any,
        worker: str | None = None,
        startstops: Any = (),
        thread: int | None = None,
        nbytes: int = 0,
        **kw: Any,
    ) -> None:
        if key not in self.keys:
            return
        pair = (start, finish)
        put = self.events.put
        if finish == "memory":
            now = t0 = t1 = self.clock()
            for ss in startstops:
                if ss[0] == "compute":
                    t0, t1 = ss[1], ss[2]
            value: Any = None
            has_value = False
            if self.read_values and worker is not None:
                w = self._workers.get(worker)
                if w is not None:
                    data = w.data
                    fast = getattr(data, "fast", data)  # a spilled value stays on disk
                    if key in fast:
                        value, has_value = fast[key], True
            put((POST, key, worker, thread, t0, t1, now, nbytes, has_value, value))
        elif pair in _RUN:
            put((PRE, key))
        elif finish == "erred":
            put((ERRED, key))
        elif pair in _BACK:
            put((RETRY, key))
        elif pair in _FREE:
            put((FREED, key, self.clock()))

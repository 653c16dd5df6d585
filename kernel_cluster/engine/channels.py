"""Message channels between scheduler and workers living on the same event loop.

The protocol is the plain dicts that travel over TCP to subprocess workers. On
a local channel the hot messages (compute-task, free-keys, task-finished) go as
the core objects themselves instead: the receiver's state machine takes them as
they are, with no dict built and parsed on every task's path.

Delivery is immediate but never re-entrant: a message sent while another is
being handled waits in the dispatcher's queue until that handler returns. A task
finishing therefore reaches the scheduler, and its dependent reaches the worker,
within one loop iteration, and no handler ever runs inside another.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Dispatcher:
    """Runs handlers one at a time, in the order their messages were sent."""

    __slots__ = ("_queue", "_running")

    def __init__(self) -> None:
        self._queue: deque = deque()
        self._running = False

    def post(self, handler: Callable[[list[dict]], None], msgs: list[dict]) -> None:
        self._queue.append((handler, msgs))
        if self._running:
            return
        self._running = True
        try:
            queue = self._queue
            while queue:
                handler, msgs = queue.popleft()
                try:
                    handler(msgs)
                except Exception:
                    logger.exception("A message handler failed; the engine carries on")
        finally:
            self._running = False


class LocalChannel:
    """Delivers to ``handler`` through the loop's dispatcher; use on the loop thread."""

    __slots__ = ("_closed", "_dispatcher", "_handler")
    carries_objects = True  # see the module's docstring

    def __init__(self, dispatcher: Dispatcher, handler: Callable[[list[dict]], None]):
        self._dispatcher = dispatcher
        self._handler = handler
        self._closed = False

    def send(self, msgs: list) -> None:
        if not self._closed:
            self._dispatcher.post(self._handler, msgs)

    def close(self) -> None:
        self._closed = True

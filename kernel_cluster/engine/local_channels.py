"""Message channels between scheduler and workers living on the same event loop.

The messages are the classes of engine/wire.py, most of them the state machines'
own instructions (``ComputeTask``, ``SendTaskFinished``, ...). Over TCP to worker
processes they travel encoded as dicts; a local channel passes the objects as they
are, and the receiver's state machine takes them with nothing built or parsed.

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

    def post(self, handler: Callable[[list], None], msgs: list[dict]) -> None:
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

    def __init__(self, dispatcher: Dispatcher, handler: Callable[[list], None]):
        self._dispatcher = dispatcher
        self._handler = handler
        self._closed = False

    def send(self, msgs: list) -> None:
        if not self._closed:
            self._dispatcher.post(self._handler, msgs)

    def close(self) -> None:
        self._closed = True

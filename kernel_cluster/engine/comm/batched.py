"""Coalesce many small messages into few writes.

Scheduler and workers exchange streams of small messages (task finished,
compute this, release that). One write each would mean one syscall and one
frame header each; ``BatchedSend`` instead queues them and writes the queue
as a single list message, at most once every ``interval`` seconds. The
receiver reads lists (tuples, over TCP) of messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from .core import Comm
from .errors import CommClosedError

__all__ = ["BatchedSend"]

logger = logging.getLogger(__name__)


class BatchedSend:
    """Non-blocking, batching sender over one comm.

    Create it on the comm's event loop and call ``send`` only from that loop's
    thread. The first message after a quiet period goes out on the next loop
    iteration; under load, writes happen at most every ``interval`` seconds,
    each carrying everything queued since the last one.

    A message that cannot be serialised (or is over the size limit) is
    logged and dropped without taking the others down with it; if
    ``on_unsendable(msg, exc)`` returns a message, that one is sent instead
    (say, an error for the peer to act on, so nobody waits for the lost one).
    Once the comm breaks, queued messages are lost and ``send`` raises
    ``CommClosedError``: the owner must reconnect and resend what matters.
    ``close()`` flushes the queue, then closes the comm.
    Values inside a message must not be mutated after ``send`` (large buffers
    are written straight from their memory).
    """

    def __init__(
        self,
        comm: Comm,
        interval: float = 0.002,
        burst: int = 4,
        on_unsendable: Callable[[Any, Exception], Any] | None = None,
    ) -> None:
        """``interval`` only applies under load: after a batch of at least ``burst``
        messages. Sparse traffic (one task finishing after another in a chain) goes out
        at once, so latency stays low while a busy stream still writes in bulk."""
        self.comm = comm
        self.on_unsendable = on_unsendable
        self.interval = interval
        self.burst = burst
        self._last_batch = 0
        self.message_count = 0  # messages handed to the comm
        self.batch_count = 0  # writes made
        self.byte_count = 0
        self._loop = asyncio.get_running_loop()
        self._queue: list[Any] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._close_requested = asyncio.Event()
        self._error: CommClosedError | None = None
        self._last_write = float("-inf")
        self._task = self._loop.create_task(self._run(), name=f"BatchedSend to {comm.peer_address}")

    def __repr__(self) -> str:
        return f"<BatchedSend to {self.comm.peer_address}: {len(self._queue)} queued>"

    def send(self, *msgs: Any) -> None:
        """Queue ``msgs`` for the next batch. Never blocks."""
        if self._error is not None:
            raise CommClosedError(self.comm.peer_address, f"stream broken: {self._error.reason}")
        if self._closing or self.comm.closed():
            raise CommClosedError(self.comm.peer_address, "BatchedSend is closed")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not self._loop:
            raise RuntimeError("BatchedSend.send() must be called from its event loop's thread")
        self._queue.extend(msgs)
        self._wake.set()

    async def _run(self) -> None:
        try:
            while True:
                if not self._queue:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                delay = (
                    self._last_write + self.interval - self._loop.time()
                    if self._last_batch >= self.burst
                    else 0.0
                )
                if delay > 0 and not self._closing:
                    # Let more messages join this batch; close() cuts the wait short.
                    try:
                        async with asyncio.timeout(delay):
                            await self._close_requested.wait()
                    except TimeoutError:
                        pass
                batch, self._queue = self._queue, []
                self._last_write = self._loop.time()
                self._last_batch = len(batch)
                await self._write(batch)
        except CommClosedError as exc:
            self._error = exc
            dropped = len(self._queue)
            self._queue = []
            logger.info(
                "Batched stream to %s broke (%s); %d queued messages dropped",
                self.comm.peer_address,
                exc.reason,
                dropped,
            )
        except Exception as exc:  # a bug: fail loudly rather than queue forever
            logger.exception("BatchedSend to %s failed", self.comm.peer_address)
            self._error = CommClosedError(self.comm.peer_address, f"BatchedSend failed: {exc!r}")
            self._queue = []
            self.comm.abort()

    async def _write(self, batch: list[Any]) -> None:
        try:
            self.byte_count += await self.comm.write(batch)
        except (TypeError, ValueError) as exc:
            # One bad message (unpicklable, too large): send the rest one by
            # one so that only the culprit is lost.
            logger.warning(
                "A batch to %s could not be sent whole (%s); sending its messages one by one",
                self.comm.peer_address,
                exc,
            )
            for msg in batch:
                try:
                    self.byte_count += await self.comm.write([msg])
                except (TypeError, ValueError) as exc_one:
                    if not await self._send_instead(msg, exc_one):
                        continue
                self.batch_count += 1
                self.message_count += 1
            return
        self.batch_count += 1
        self.message_count += len(batch)

    async def _send_instead(self, msg: Any, exc: Exception) -> bool:
        """Send ``on_unsendable``'s replacement for ``msg``; False if none went."""
        text = str(exc)
        shown = text if len(text) <= 1000 else text[:1000] + " [...]"
        replacement = self.on_unsendable(msg, exc) if self.on_unsendable is not None else None
        if replacement is not None:
            try:
                self.byte_count += await self.comm.write([replacement])
            except (TypeError, ValueError) as exc_again:
                logger.error("Dropped a message to %s: %s", self.comm.peer_address, exc_again)
                return False
            logger.warning("A message to %s was replaced: %s", self.comm.peer_address, shown)
            return True
        logger.error("Dropped a message to %s: %s", self.comm.peer_address, shown)
        return False

    async def close(self) -> None:
        """Write everything queued, then close the comm."""
        self._closing = True
        self._close_requested.set()
        self._wake.set()
        try:
            if not self._task.cancelled():
                await self._task
        finally:
            await self.comm.close()

    def abort(self) -> None:
        """Drop the queue and close the comm now."""
        self._closing = True
        self._queue = []
        self._task.cancel()
        self.comm.abort()

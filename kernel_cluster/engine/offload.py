"""Pickling and unpickling values off the event loop, each within a time limit.

A value's ``__reduce__`` or ``__setstate__`` is the user's code, and a large graph of
Python objects takes seconds to pickle: on the event loop either stops everything
else (heartbeats, transfers, results), and a worker once died of it, again and
again (issue 26). An ``Offloader`` runs such work on a thread of its own, one value
after another, while the loop awaits it; the values of one request go as one batch,
so a reply of 10,000 small values costs one hand-over, not 10,000.

A value still in work after ``limit`` seconds is given up: its result is a
``TimeoutError`` (the caller names the task), and the thread, which Python cannot
interrupt, is left to finish that value alone while a fresh thread takes the rest
of the batch and what waits behind it. Its result, when it comes, is dropped. The
threads are daemons: one stuck in a value for good does not keep the process alive.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Offloader", "run_here"]


def run_here(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[tuple[bool, Any]]:
    """What ``Offloader.map`` gives, computed here and now (no thread, no limit)."""
    out: list[tuple[bool, Any]] = []
    for item in items:
        try:
            out.append((True, fn(item)))
        except Exception as exc:
            out.append((False, exc))
    return out


class _Batch:
    """Items to run ``fn`` on, from ``start``, filling ``results``; the thread says
    which item it is on (``position``: its index, and since when) and the loop may
    give it up."""

    __slots__ = (
        "abandoned",
        "context",
        "done",
        "fn",
        "items",
        "loop",
        "position",
        "results",
        "start",
    )

    def __init__(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        start: int,
        results: list[tuple[bool, Any] | None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn = fn
        self.items = items
        self.start = start
        self.results = results
        self.loop = loop
        self.done = asyncio.Event()
        self.context = contextvars.copy_context()  # the caller's metrics scope, say
        # (index, when the thread began it): one tuple, read whole by the loop
        self.position: tuple[int, float] | None = None
        self.abandoned = False

    def run(self) -> None:
        """On the offload thread."""
        try:
            self._run()
        finally:
            # nothing of the work outlives it here: ``fn`` may hold what it read (a
            # reply's values), which must go when their owner lets go of them
            self.fn = self.items = self.context = None  # type: ignore[assignment]

    def _run(self) -> None:
        fn, items, context = self.fn, self.items, self.context
        for i in range(self.start, len(items)):
            if self.abandoned:
                return
            self.position = (i, time.monotonic())
            try:
                result: tuple[bool, Any] = (True, context.run(fn, items[i]))
            except Exception as exc:
                result = (False, exc)
            if self.abandoned:  # given up meanwhile: a fresh thread has the rest
                return
            self.results[i] = result
            del result
        self.loop.call_soon_threadsafe(self.done.set)


class _Thread:
    """A daemon thread running batches in turn; ``retire`` hands back what it has not
    started and lets it end after the batch it is in."""

    def __init__(self, name: str) -> None:
        self._batches: deque[_Batch] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._retired = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, batch: _Batch) -> None:
        with self._wake:
            self._batches.append(batch)
            self._wake.notify()

    def retire(self) -> list[_Batch]:
        with self._wake:
            self._retired = True
            waiting = list(self._batches)
            self._batches.clear()
            self._wake.notify()
        return waiting

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._batches and not self._retired:
                    self._wake.wait()
                if self._retired:
                    return
                batch = self._batches.popleft()
            batch.run()
            del batch  # not kept while waiting for the next one


class Offloader:
    """Runs ``fn`` on values off the loop, each within ``limit`` seconds (``map``)."""

    def __init__(self, name: str, limit: float) -> None:
        self.name = name
        self.limit = limit
        self._thread: _Thread | None = None
        self._count = 0
        self.stuck = 0  # threads given up while in a value

    def start(self) -> None:
        """Start the thread now rather than with the first value."""
        self._current()

    def _current(self) -> _Thread:
        thread = self._thread
        if thread is None:
            self._count += 1
            thread = self._thread = _Thread(f"{self.name}-{self._count}")
        return thread

    async def map(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        inline: Callable[[Any], bool] | None = None,
    ) -> list[tuple[bool, Any]]:
        """``(True, fn(item))``, or ``(False, the exception)``, for each item in order;
        an item still in work after ``limit`` seconds gets ``(False, TimeoutError)``.

        With ``inline``, items it accepts all (plain values, whose pickling runs no
        code of the user's) are done here, on the loop, saving the hand-over.
        """
        if not items:
            return []
        if inline is not None and all(inline(item) for item in items):
            return run_here(fn, items)
        loop = asyncio.get_running_loop()
        n = len(items)
        results: list[tuple[bool, Any] | None] = [None] * n
        start = 0
        while start < n:
            batch = _Batch(fn, items, start, results, loop)
            self._current().submit(batch)
            start = await self._await(batch, n)
        return results  # type: ignore[return-value]  # every slot is filled by now

    async def _await(self, batch: _Batch, n: int) -> int:
        """Wait for ``batch``; the index to go on from (past the end when it is done)."""
        while not batch.done.is_set():
            position = batch.position
            wait = self.limit if position is None else position[1] + self.limit - time.monotonic()
            if wait > 0:
                try:
                    await asyncio.wait_for(batch.done.wait(), wait)
                except TimeoutError:
                    pass
                continue
            # over the limit: give the value up, and its thread with it
            assert position is not None
            batch.abandoned = True
            batch.results[position[0]] = (False, TimeoutError(self.limit))
            self._give_up_thread()
            return position[0] + 1
        return n

    def _give_up_thread(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self.stuck += 1
        fresh = self._current()
        for waiting in thread.retire():
            fresh.submit(waiting)

    def close(self, timeout: float = 5.0) -> None:
        """End the thread (after the batch it is in, waiting ``timeout`` at most)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.retire()
            if thread.thread is not threading.current_thread():
                thread.thread.join(timeout)

"""The least value of a series over the last few seconds, in constant time per value.

Dask calls the unmanaged memory that has stayed put for a while *old* (the least
unmanaged memory of the last ``recent-to-old-time`` seconds, 30 by default) and the
rest *recent*: a spike of temporary allocations shows as recent, a leak as old. The
scheduler feeds this window the cluster's unmanaged memory with every heartbeat.

A monotonic queue: values that a later, smaller one makes irrelevant are dropped as
it arrives, so the front is always the minimum and each value is queued and dropped
once. Times come in as arguments.
"""

from __future__ import annotations

from collections import deque

__all__ = ["RecentMinimum"]


class RecentMinimum:
    """``add(time, value)``; ``minimum(now)``: the least value added in the last
    ``window`` seconds (None if there is none)."""

    def __init__(self, window: float = 30.0) -> None:
        if not window > 0:
            raise ValueError(f"window must be a positive number of seconds, got {window!r}.")
        self.window = window
        self._queue: deque[tuple[float, float]] = deque()

    def add(self, time: float, value: float) -> None:
        queue = self._queue
        while queue and queue[-1][1] >= value:
            queue.pop()
        queue.append((time, value))
        self._expire(time)

    def minimum(self, now: float) -> float | None:
        self._expire(now)
        return self._queue[0][1] if self._queue else None

    def _expire(self, now: float) -> None:
        queue = self._queue
        while queue and queue[0][0] < now - self.window:
            queue.popleft()

    def __len__(self) -> int:
        return len(self._queue)

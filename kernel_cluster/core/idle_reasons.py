"""Why a worker's free thread was idle: the reasons, and a clock of them over time.

A thread's ``idle`` (core/thread_accounts.py: the time between its tasks while the
cluster is busy) is split by why it was idle, so that the parts add up to the idle
they replace and a span's seconds still add up to its thread-seconds:

- ``no-ready-task``: nothing this worker could run. No task of its own was ready and
  the scheduler held none for it: the graph was narrow at that point, the inputs of
  the next tasks were still being computed (here or elsewhere), or the ready work sat
  in another worker's queue;
- ``waiting-for-data``: a task assigned here was waiting for inputs on their way from
  other workers (the worker had fetches pending or in flight);
- ``scheduler-queued``: the scheduler held ready tasks back (queuing for
  ``worker_saturation``) while this thread was free: the round trip to refill it;
- ``paused``: the worker was paused for memory and started nothing;
- ``other``: what cannot be told apart: ready tasks held back on the worker itself (a
  suspect of killing workers runs alone), time before the reasons were first known.

A span's own numbers (``with_idle`` in core/span_folding.py) add, beside the idle
filed under it, Dask's "idle or other spans": the thread time the span had that
neither its tasks nor that idle used (mostly other spans' tasks): no reason of these.

The worker learns the reason from state it has (paused, fetches, tasks held) and from
one flag the scheduler sends with ``SetClusterBusy`` (ready tasks queued there). It
updates a ``ReasonClock`` after each batch of events, on its event loop: a change is
one list append. A task thread, when its idle gap ends (``ThreadAccount.totals_for``),
splits the gap by the clock's history; a gap with no change in it (the common case)
costs one comparison more than an undivided idle. Pure: times come in as arguments.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import MutableSequence
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .worker_state import WorkerState

NO_READY_TASK, WAITING_FOR_DATA, SCHEDULER_QUEUED, PAUSED, OTHER = range(5)
REASONS = ("no-ready-task", "waiting-for-data", "scheduler-queued", "paused", "other")
IDLE = "idle"  # the undivided activity, as Dask and older versions have it
IDLE_PREFIX = "idle: "
# the activities the parts are recorded as, by reason number
IDLE_ACTIVITIES = tuple(IDLE_PREFIX + r for r in REASONS)
NO_IDLE = (0.0,) * len(REASONS)

# changes of reason kept: a thread idle across more changes than this has the oldest
# part of its gap counted as ``other``
HISTORY_LIMIT = 4096

_time = itemgetter(0)


def is_idle(activity: object) -> bool:
    """Whether a metric's activity is idle time, undivided or one of its parts."""
    return activity == IDLE or (type(activity) is str and activity.startswith(IDLE_PREFIX))


def idle_reason(paused: bool, fetching: bool, queued: bool, held: bool) -> int:
    """The reason a free thread of a worker is idle, given what the worker knows:
    ``paused`` for memory; ``fetching`` inputs of its tasks from peers; the scheduler
    has ready tasks ``queued``; ready tasks ``held`` on the worker unstarted.

    A free thread with inputs on the way and queued work on the scheduler both is
    waiting for data: those tasks run here as soon as the data is in."""
    if paused:
        return PAUSED
    if fetching:
        return WAITING_FOR_DATA
    if queued:
        return SCHEDULER_QUEUED
    if held:
        return OTHER
    return NO_READY_TASK


def worker_idle_reason(state: WorkerState, queued: bool) -> int:
    """``idle_reason`` read off a worker's state machine, ``queued``: what the
    scheduler said last (``SetClusterBusy.queued``)."""
    return idle_reason(
        state.paused,
        bool(state.fetch or state.in_flight),
        queued,
        # after the worker started what it could, tasks still ready with room to start
        # them are held back on purpose (a suspect runs alone)
        bool(state.ready) and len(state.executing) < state.nthreads + state.prefetch,
    )


class ReasonClock:
    """A worker's idle reason over time: ``history`` of ``(time, reason)`` changes.

    Set on the worker's loop (``set``), read by its task threads (``split_into``): the
    loop only appends to the history, or swaps in a shorter copy, so a reader that
    took the list works on a consistent one.
    """

    __slots__ = ("history", "limit", "reason")

    def __init__(self, now: float, reason: int = NO_READY_TASK, limit: int = HISTORY_LIMIT):
        self.reason = reason
        self.limit = max(2, limit)
        self.history: list[tuple[float, int]] = [(now, reason)]

    def set(self, reason: int, now: float) -> None:
        """The reason is ``reason`` from ``now`` on."""
        if reason == self.reason:
            return
        self.reason = reason
        history = self.history
        last = history[-1][0]
        if now <= last:  # the same moment (or a clock read earlier): the latest wins
            history[-1] = (last, reason)  # replaced in one step: a reader sees either
            return
        history.append((now, reason))
        if len(history) > self.limit:
            self.history = history[len(history) - self.limit // 2 :]

    def split_into(self, start: float, stop: float, parts: MutableSequence[float]) -> None:
        """Add the seconds from ``start`` to ``stop`` to ``parts`` (by reason number),
        each stretch to the reason in force then. What precedes the history is
        ``other``."""
        if stop <= start:
            return
        history = self.history
        n = len(history)
        t_last, r_last = history[n - 1]
        if t_last <= start:  # no change during the gap
            parts[r_last] += stop - start
            return
        i = bisect_right(history, start, 0, n, key=_time) - 1
        t = start
        if i < 0:  # started before the oldest change kept
            first = history[0][0]
            if stop <= first:
                parts[OTHER] += stop - start
                return
            parts[OTHER] += first - start
            t = first
            i = 0
        while i < n - 1:
            t_next = history[i + 1][0]
            if t_next >= stop:
                break
            parts[history[i][1]] += t_next - t
            t = t_next
            i += 1
        parts[history[i][1]] += stop - t


def split(clock: ReasonClock, start: float, stop: float) -> list[float]:
    """The seconds from ``start`` to ``stop`` by reason number (a new list)."""
    parts = [0.0] * len(REASONS)
    clock.split_into(start, stop, parts)
    return parts

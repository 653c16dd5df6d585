"""Why a worker's free threads are idle, kept up to date on its loop.

The worker's state machine knows whether it is paused, fetching inputs or holding
ready tasks back; the scheduler says with each ``SetClusterBusy`` whether it holds
ready tasks itself. ``IdleReasons`` turns both into the reason its task threads'
accounts split their idle by (core/idle_reasons.py, core/thread_accounts.py).
"""

from __future__ import annotations

import time
from typing import Any

from ..core.idle_reasons import worker_idle_reason
from ..core.scheduler_messages import SetClusterBusy
from ..core.thread_accounts import ThreadTimeline
from ..core.worker_state import WorkerState


class IdleReasons:
    """The worker's side of the idle reasons: call ``note`` after its state changed."""

    __slots__ = ("queued", "state", "timeline")

    def __init__(self, state: WorkerState, timeline: ThreadTimeline) -> None:
        self.state = state
        self.timeline = timeline
        self.queued = False  # the scheduler holds ready tasks (SetClusterBusy.queued)

    def note(self, now: float = 0.0) -> None:
        """The reason a free thread would be idle from now on; ``now``: the clock
        already read, 0 to read it only if the reason changed."""
        reason = worker_idle_reason(self.state, self.queued)
        clock = self.timeline.reasons
        if reason != clock.reason:
            clock.set(reason, now or time.perf_counter())

    def cluster_busy(self, msg: SetClusterBusy, running: Any, record: bool) -> None:
        """The scheduler's ``SetClusterBusy``: free threads count as idle only while the
        cluster is busy; ``record`` (metrics on) files the idle until it went quiet."""
        now = time.perf_counter()
        self.timeline.set_busy(msg.busy, now, running, record, msg.span)
        self.queued = msg.queued
        if record:
            self.note(now)

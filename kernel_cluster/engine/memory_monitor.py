"""The worker's memory monitor: spill past the spill fraction, pause past the pause
fraction, and end a worker process stuck there (its nanny starts a fresh one).

A part of ``engine.worker.Worker`` (a mixin: it reads the worker's state, data, pool
and settings); apart so that the worker module holds the task shell alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..core.metrics import MeterFrame, MetricsLedger
from ..core.worker_messages import PauseChanged
from ..core.worker_state import WorkerState
from .process_meter import context_meter
from .spill import SpillBuffer
from .trim import trim_memory
from .wire import WorkerPaused

if TYPE_CHECKING:
    import psutil

    from .pool import TaskThreadPool

logger = logging.getLogger("kernel_cluster.engine.worker")  # where its warnings always went

__all__ = ["MemoryMonitor"]


def _nothing() -> None:
    pass


class MemoryMonitor:
    """Memory checks of a Worker (set up in ``Worker.__init__``)."""

    # the worker's, read here
    address: str
    memory_limit: int
    memory_target_fraction: float
    memory_spill_fraction: float
    memory_pause_fraction: float
    memory_monitor_interval: float
    memory_stuck_seconds: float
    on_memory_stuck: Callable[[], None] | None
    in_process: bool
    data: MutableMapping
    state: WorkerState
    pool: TaskThreadPool
    metrics: MetricsLedger
    scheduler: Any
    _process: psutil.Process
    _closed: bool
    _stuck_since: float | None
    _pause_waived: bool
    _trimmed_at: float

    if TYPE_CHECKING:  # Worker's method

        def handle(self, *events: Any) -> None: ...

    def managed_bytes(self) -> int:
        """Bytes of the results this worker holds in memory."""
        data = self.data
        if isinstance(data, SpillBuffer):
            return data.memory
        tasks = self.state.tasks
        return sum(tasks[k].nbytes for k in data if k in tasks)

    def memory_used(self) -> int:
        """What the pause and spill thresholds compare: the process's memory for a worker
        process; for an embedded worker, which shares the kernel's process, its data."""
        if self.in_process:
            return getattr(self.data, "memory", 0)
        return self._process.memory_info().rss

    async def _memory_monitor(self) -> None:
        while not self._closed and self.memory_limit:
            self.check_memory()
            await asyncio.sleep(self.memory_monitor_interval)

    def check_memory(self) -> None:
        """Spill past the spill fraction, pause past the pause fraction (and tell the
        scheduler, which then sends this worker nothing new), resume below it."""
        limit = self.memory_limit
        data = self.data
        used = self.memory_used()
        moved = 0
        if used > self.memory_spill_fraction * limit or self.state.paused:
            if isinstance(data, SpillBuffer) and data.memory:
                with context_meter.scope(self._charge_monitor, MeterFrame()):
                    excess = used - int(self.memory_target_fraction * limit)
                    moved = data.evict_until(max(0, data.memory - excess))
            if not self.in_process:
                # what was spilled or released is still the process's until trimmed;
                # with nothing spilled, trim now and then (it walks the whole heap)
                now = time.monotonic()
                if moved or now - self._trimmed_at > 1.0:
                    self._trimmed_at = now
                    trim_memory()
            used = self.memory_used()
        over = used > self.memory_pause_fraction * limit
        if not over:
            self._pause_waived = False
        paused = over and not self._pause_waived
        if paused is not self.state.paused:
            logger.warning(
                "Worker %s %s: memory %d MiB of %d MiB",
                self.address,
                "paused" if paused else "resumed",
                used >> 20,
                limit >> 20,
            )
            self._set_paused(paused)
        if paused:
            self._check_stuck(used, moved)

    def _set_paused(self, paused: bool) -> None:
        self._stuck_since = None
        self.handle(PauseChanged(paused))
        if self.scheduler is not None and not self._closed:
            self.scheduler.send([WorkerPaused(paused)])

    def _check_stuck(self, used: int, moved: int) -> None:
        """Paused, with no task running that could end and free memory, and nothing
        spilled: the worker cannot get out of that by itself."""
        if moved or self.pool.running:
            self._stuck_since = None
            return
        now = time.monotonic()
        if self._stuck_since is None:
            self._stuck_since = now
            return
        if now - self._stuck_since < self.memory_stuck_seconds:
            return
        threshold = int(self.memory_pause_fraction * self.memory_limit) >> 20
        if self.on_memory_stuck is None:  # no nanny to start afresh: better late than never
            logger.warning(
                "Worker %s runs tasks again although its memory (%d MiB) is above the pause "
                "threshold (%d MiB): for %.0f s nothing could be spilled (values that do not "
                "pickle, or a full disk) and no task ran, so waiting would be forever. Raise "
                "memory_limit, or free space in the worker's local directory.",
                self.address,
                used >> 20,
                threshold,
                now - self._stuck_since,
            )
            self._pause_waived = True  # until memory falls below the threshold
            self._set_paused(False)
            return
        logger.error(
            "Worker %s restarts: its memory (%d MiB) has stayed above the pause threshold "
            "(%d MiB) for %.0f s with no task running and nothing left to spill. Its tasks "
            "and data will be computed again; if this recurs, raise memory_limit or find "
            "what holds memory outside the task results (globals, caches, leaks).",
            self.address,
            used >> 20,
            threshold,
            now - self._stuck_since,
        )
        # once: the process is on its way out (not None, which would mean "resume")
        stuck, self.on_memory_stuck = self.on_memory_stuck, _nothing
        self._stuck_since = None
        stuck()

    def _charge_monitor(self, label: Any, value: float, unit: str) -> None:
        self.metrics.add(("memory-monitor", label, unit), value)

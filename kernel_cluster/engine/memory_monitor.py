"""The worker's memory monitor: spill past the spill fraction, pause past the pause
fraction, and end a worker process stuck there (its nanny starts a fresh one).

A part that ``engine.worker.Worker`` owns (``worker.memory``): made with the memory
settings of the worker's config and what the checks touch (the state machine, the
data, the pool, the metrics ledger, the process) and calls (``handle`` to pause or
resume the state machine, ``send_to_scheduler``, ``closed``). The worker starts its
loop (``run``) with the other periodic tasks; the pause state and the stuck timer are
this part's alone. Apart so that the worker module holds the task shell alone.
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
from .wire import MemoryStuck, UnspillableHeld, WorkerPaused

if TYPE_CHECKING:
    import psutil

    from .config import WorkerConfig
    from .pool import TaskThreadPool

logger = logging.getLogger("kernel_cluster.engine.worker")  # where its warnings always went

__all__ = ["MemoryMonitor", "UnspillableMemoryError"]


class UnspillableMemoryError(MemoryError):
    """A task's result cannot be spilled, and such results kept its worker over its
    memory limit through ``restarts`` restarts: computing them again cannot help."""

    def __init__(
        self, key: Any, worker: str, reason: str, held: int, limit: int, restarts: int
    ) -> None:
        self.key = key
        self.worker = worker
        self.reason = reason
        self.held = held
        self.limit = limit
        self.restarts = restarts
        super().__init__(
            f"The result of task {key!r} cannot be spilled to disk ({reason}), and results "
            f"like it ({held >> 20} MiB on worker {worker}) kept the worker over its "
            f"memory_limit ({limit >> 20} MiB): it was restarted {restarts} times, computing "
            "them again each time. Make the results picklable (no locks, open files, "
            "sockets or generators in them), keep fewer of them at once (gather or reduce "
            "them as they come), or raise memory_limit."
        )

    def __reduce__(self) -> tuple:
        return (
            UnspillableMemoryError,
            (self.key, self.worker, self.reason, self.held, self.limit, self.restarts),
        )


def _nothing() -> None:
    pass


class MemoryMonitor:
    """The memory checks of one worker (``Worker.memory``)."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        address: str,
        in_process: bool,
        state: WorkerState,
        data: MutableMapping,
        pool: TaskThreadPool,
        metrics: MetricsLedger,
        process: psutil.Process,
        handle: Callable[..., None],
        send_to_scheduler: Callable[[list], None],
        closed: Callable[[], bool],
    ) -> None:
        """``in_process``: the worker shares the kernel's process, so its data is what
        its memory is (and trimming the heap is not its business); ``handle`` feeds the
        state machine its pause changes; ``closed`` says when the loop is to stop."""
        self.address = address  # in the log messages
        self.in_process = in_process
        self.state = state
        self.data = data
        self.pool = pool
        self.metrics = metrics
        self.process = process
        self.handle = handle
        self.send_to_scheduler = send_to_scheduler
        self.closed = closed
        # values past target go to disk as they are stored; the monitor spills more when
        # the worker's memory passes the spill fraction, and stops new tasks past the
        # pause fraction until memory falls
        self.limit = config.memory_limit
        self.target_fraction = config.memory_target_fraction
        self.spill_fraction = config.memory_spill_fraction
        self.pause_fraction = config.memory_pause_fraction
        self.interval = config.memory_monitor_interval
        # paused this long with no task running and nothing spilled meanwhile, the
        # worker cannot recover by itself: ``on_stuck`` is called (a worker process
        # exits, and its nanny starts a fresh one; its tasks run again elsewhere); with
        # none (an embedded worker) it runs its tasks anyway until memory falls
        self.stuck_seconds = config.memory_stuck_seconds
        self.on_stuck: Callable[[], None] | None = None
        self._stuck_since: float | None = None
        self._pause_waived = False
        self._trimmed_at = 0.0
        # the unspillable keys last reported (UnspillableHeld): sent again on change only
        self._reported: frozenset = frozenset()

    def managed_bytes(self) -> int:
        """Bytes of the results this worker holds in memory."""
        data = self.data
        if isinstance(data, SpillBuffer):
            return data.memory
        tasks = self.state.tasks
        return sum(tasks[k].nbytes for k in data if k in tasks)

    def used(self) -> int:
        """What the pause and spill thresholds compare: the process's memory for a worker
        process; for an embedded worker, which shares the kernel's process, its data."""
        if self.in_process:
            return getattr(self.data, "memory", 0)
        return self.process.memory_info().rss

    async def run(self) -> None:
        """Check every ``interval`` seconds until the worker closes (with a limit)."""
        while not self.closed() and self.limit:
            self.check()
            await asyncio.sleep(self.interval)

    def check(self) -> None:
        """Spill past the spill fraction, pause past the pause fraction (and tell the
        scheduler, which then sends this worker nothing new), resume below it."""
        limit = self.limit
        data = self.data
        used = self.used()
        moved = 0
        if used > self.spill_fraction * limit or self.state.paused:
            if isinstance(data, SpillBuffer) and data.memory:
                with context_meter.scope(self._charge_monitor, MeterFrame()):
                    excess = used - int(self.target_fraction * limit)
                    moved = data.evict_until(max(0, data.memory - excess))
            if not self.in_process:
                # what was spilled or released is still the process's until trimmed;
                # with nothing spilled, trim now and then (it walks the whole heap)
                now = time.monotonic()
                if moved or now - self._trimmed_at > 1.0:
                    self._trimmed_at = now
                    trim_memory()
            used = self.used()
        self.report_unspillable(used)
        over = used > self.pause_fraction * limit
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

    def report_unspillable(self, used: int | None = None) -> None:
        """Tell the scheduler which values could not be spilled while memory is above the
        spill fraction, when that set changes: a nanny that ends this process for its
        memory leaves it no time to say so, and the scheduler would compute them again
        for ever (engine/unspillable.py). ``used``: the memory just read, if it was."""
        data = self.data
        if not self.limit or not isinstance(data, SpillBuffer) or self.on_stuck is _nothing:
            return  # (giving up already: MemoryStuck said it last)
        if not data.unspillable and not self._reported:
            return  # the common case: nothing to tell, no memory reading
        if used is None:
            used = self.used()
        held: dict = {}
        if used > self.spill_fraction * self.limit:
            sizes = data.fast_sizes
            for key, why in dict(data.unspillable).items():  # a copy: task threads store
                size = sizes.get(key)
                if size is not None:
                    held[key] = (size, why)
        keys = frozenset(held)
        if keys == self._reported or self.closed():
            return
        self._reported = keys
        self.send_to_scheduler([UnspillableHeld(held, self.limit)])

    def _set_paused(self, paused: bool) -> None:
        self._stuck_since = None
        self.handle(PauseChanged(paused))
        if not self.closed():
            self.send_to_scheduler([WorkerPaused(paused)])

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
        if now - self._stuck_since < self.stuck_seconds:
            return
        threshold = int(self.pause_fraction * self.limit) >> 20
        if self.on_stuck is None:  # no nanny to start afresh: better late than never
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
        # the values that could not go to disk: the scheduler fails them once restarting
        # has not helped (allowed_failures), instead of computing them for ever
        data = self.data
        if isinstance(data, SpillBuffer) and data.unspillable:
            held = {
                key: (data.fast_sizes[key], why)
                for key, why in data.unspillable.items()
                if key in data.fast_sizes
            }
            if held:
                self.send_to_scheduler([MemoryStuck(held, used, self.limit)])
        # once: the process is on its way out (not None, which would mean "resume")
        stuck, self.on_stuck = self.on_stuck, _nothing
        self._stuck_since = None
        stuck()

    def _charge_monitor(self, label: Any, value: float, unit: str) -> None:
        self.metrics.add(("memory-monitor", label, unit), value)

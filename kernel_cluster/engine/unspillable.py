"""Values that cannot be spilled, and the worker restarts they cause: the scheduler's count.

A worker process holding results that do not pickle cannot spill them: past its memory
limit it is either stuck (its memory monitor gives up and says so, ``MemoryStuck``) or
ended by its nanny first (memory_terminate_fraction), with no time to say anything.
Either way its tasks would be computed again, on a worker that fills up again, for
ever. So each worker also reports those values while its memory is above the spill
fraction (``UnspillableHeld``, on change only); an unexpected death of a worker counts
as a restart for the values of its latest report, as a stuck restart does for the
values it names. A value held through more than ``allowed_failures`` restarts fails
its task with UnspillableMemoryError (its dependents fail with it), which says why and
what to do. Apart from scheduler.py, which feeds it and carries out the events.
"""

from __future__ import annotations

from typing import Any

from ..core.keys import Key
from ..core.scheduler_messages import ResultSerializationFailed
from ..core.scheduler_state import SchedulerState
from .execute import pack_exception
from .memory_monitor import UnspillableMemoryError
from .wire import MemoryStuck, UnspillableHeld

__all__ = ["UnspillableLedger"]


class UnspillableLedger:
    """Per worker, its latest report of values it could not spill; per key, the
    restarts of workers that held its value so."""

    def __init__(self) -> None:
        self.restarts: dict[Key, int] = {}
        # address -> (key -> (bytes, why), the worker's memory limit)
        self.reports: dict[str, tuple[dict[Key, Any], int]] = {}

    def held(self, address: str, msg: UnspillableHeld) -> None:
        """A worker's latest report (an empty one: nothing at risk now)."""
        if msg.unspillable:
            self.reports[address] = (dict(msg.unspillable), msg.limit)
        else:
            self.reports.pop(address, None)

    def stuck(
        self, address: str, msg: MemoryStuck, state: SchedulerState, now: float
    ) -> list[ResultSerializationFailed]:
        """A worker restarts, stuck over its limit: its own list counts, and its death,
        which follows, does not count again."""
        self.reports.pop(address, None)
        return self._count(address, msg.unspillable, msg.limit, state, now)

    def died(
        self, address: str, expected: bool, state: SchedulerState, now: float
    ) -> list[ResultSerializationFailed]:
        """A worker is removed; unless on purpose (scaled down, restarted by the user),
        a death with unspillable values reported counts as a restart for each. To be
        handled before its removal, while those tasks are still in memory there."""
        report = self.reports.pop(address, None)
        if expected or report is None:
            return []
        return self._count(address, report[0], report[1], state, now)

    def _count(
        self, address: str, unspillable: dict, limit: int, state: SchedulerState, now: float
    ) -> list[ResultSerializationFailed]:
        tasks = state.tasks
        counts = self.restarts
        for key in [k for k in counts if k not in tasks]:  # forgotten since
            del counts[key]
        held = sum(nbytes for nbytes, _ in unspillable.values())
        events = []
        for key, (_, why) in unspillable.items():
            ts = tasks.get(key)
            if ts is None or ts.state != "memory":
                continue
            n = counts[key] = counts.get(key, 0) + 1
            if n <= state.allowed_failures:
                continue
            del counts[key]
            error = UnspillableMemoryError(key, address, why, held, limit, n)
            packed = pack_exception(error, None)[0]
            events.append(ResultSerializationFailed(key, address, packed, str(error), "", now))
        return events

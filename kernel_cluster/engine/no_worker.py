"""The scheduler shell's side of the ``no-worker`` state (core/restrictions.py): a
warning naming the addresses a task may run on, none of which is a worker, and a
timer per batch that fails the tasks still waiting after ``no_workers_timeout``."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from ..core.scheduler_messages import NoWorkerTimedOut

logger = logging.getLogger("kernel_cluster.engine.scheduler")


class NoWorkerTimers:
    """``report`` warns and arms the timers; ``timed_out`` events go to ``handle``
    (with a stimulus id from ``stimulus`` and the time from ``clock``)."""

    def __init__(
        self,
        timeout: float | None,
        handle: Callable[..., None],
        stimulus: Callable[[str], str],
        clock: Callable[[], float],
    ) -> None:
        self.timeout = timeout
        self._handle = handle
        self._stimulus = stimulus
        self._clock = clock
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._numbers = itertools.count()

    def report(self, batches: dict[frozenset[str], list[Any]]) -> None:
        """Warn about tasks that may only run on workers that are not there, and fail
        those still waiting after ``timeout``."""
        timeout = self.timeout
        for workers, keys in batches.items():
            first = keys[0][0]
            more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
            then = (
                f"they fail in {timeout:g} s (no_workers_timeout) unless one joins"
                if timeout is not None
                else "they wait until one joins (no_workers_timeout=None)"
            )
            logger.warning(
                "Task %r%s may only run on %s, none of which is a worker of this cluster "
                "(state no-worker); %s",
                first,
                more,
                ", ".join(sorted(workers)),
                then,
            )
            if timeout is None:
                continue
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # driven without a loop (tests of the shell): no timer
                continue
            number = next(self._numbers)
            self._timers[number] = loop.call_later(timeout, self._timed_out, number, keys, timeout)

    def _timed_out(self, number: int, keys: list[Any], timeout: float) -> None:
        self._timers.pop(number, None)
        self._handle(NoWorkerTimedOut(keys, timeout, self._stimulus("no-worker"), self._clock()))

    def cancel(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

"""Tasks that may only run on workers that are not there: the ``no-worker`` state.

A task restricted to some workers (``submit(..., workers=[...])`` without
``allow_other_workers``) whose allowed workers have all left (or never were) cannot
run. The scheduler puts it in the state ``no-worker`` and says so once
(``ReportNoWorker``: its shell logs a warning naming the addresses and arms a timer);
if none of them joins within the cluster's ``no_workers_timeout``, the shell's
``NoWorkerTimedOut`` fails it with ``NoValidWorkerError``. A worker that joins meanwhile
takes it as any other task. Each spell in the state has its own number (``mark``), so
a timer armed for an earlier spell cannot fail a task that came back to it since.
Both messages are in scheduler_messages.py, with the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .keys import Key


class NoValidWorkerError(RuntimeError):
    """A task may only run on workers none of which joined the cluster in time."""

    def __init__(self, key: Key, workers: Iterable[str], timeout: float):
        self.key = key
        self.workers = tuple(sorted(workers))
        self.timeout = timeout
        super().__init__(
            f"Task {key!r} may only run on {', '.join(self.workers)}, and none of them is a "
            f"worker of this cluster: it waited {timeout:g} s (no_workers_timeout) for one to "
            "join. Give addresses from client.scheduler_info()['workers'], or pass "
            "allow_other_workers=True to let it run elsewhere."
        )

    def __reduce__(self) -> tuple[type[NoValidWorkerError], tuple[Key, tuple[str, ...], float]]:
        return (NoValidWorkerError, (self.key, self.workers, self.timeout))


def none_present(restrictions: Any, workers: dict[str, Any]) -> bool:
    """Whether none of the addresses in ``restrictions`` is among ``workers``."""
    return not any(address in workers for address in restrictions)

"""The critical path of a span: the chain of tasks whose ends decided when it ended.

Walking back from the task that ended last, each task's start was decided by whichever
ended later of two things: the dependency that finished last (it could not start
before its inputs existed), or the task before it on the same worker thread (it
waited for the thread, in the worker's queue or on the scheduler's). That one is the
step before it; a task with neither is where the path begins.

Each step covers the time from its predecessor's end (the span's ``enqueued`` for the
first step) to its own end, split into:

- ``scheduler``: until the scheduler sent it to its worker (reporting the
  predecessor's end, deciding, queuing for a free slot);
- ``transfer``: fetching its inputs from other workers, after that;
- ``queued``: the rest before it started on its worker (waiting for a thread, reading
  inputs back from disk, deserializing);
- ``compute``: running it.

The steps are back to back, so their times add up to the path's length; ``covered``
is that length over the span's wall time (``enqueued`` to ``stop``). Pure: the runs
come in as plain values (``TaskRun``), read from the task stream by
diagnostics/queries/critical_path.py.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

PARTS = ("scheduler", "transfer", "queued", "compute")


class TaskRun(NamedTuple):
    """One task's run, as the task stream saw it (times on the scheduler's clock).

    ``sent``: when the scheduler sent it to ``worker`` (None: unknown, counted as no
    scheduler time); ``transfers``: ``(start, stop)`` of fetching its inputs."""

    key: Hashable
    dependencies: tuple[Hashable, ...]
    worker: str
    thread: int | None
    start: float
    stop: float
    sent: float | None = None
    transfers: tuple[tuple[float, float], ...] = ()


class Step(NamedTuple):
    """One task of the path: ``via`` says how it followed the step before it
    (``"dependency"``, ``"thread"``, or ``"start"`` for the first); the seconds from
    the previous step's end (``begin``) to its own end (``end``), by part."""

    key: Hashable
    worker: str
    via: str
    begin: float
    end: float
    scheduler: float
    transfer: float
    queued: float
    compute: float

    @property
    def total(self) -> float:
        return self.end - self.begin


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """``steps`` in the order they ran; ``wall``: the span's wall time; ``length``:
    what the steps add up to; ``covered``: length over wall (0 with no wall)."""

    steps: tuple[Step, ...]
    wall: float

    @property
    def length(self) -> float:
        return sum(s.total for s in self.steps)

    @property
    def covered(self) -> float:
        return self.length / self.wall if self.wall > 0 else 0.0

    def totals(self) -> dict[str, float]:
        """The path's seconds by part (``PARTS``)."""
        out = dict.fromkeys(PARTS, 0.0)
        for s in self.steps:
            out["scheduler"] += s.scheduler
            out["transfer"] += s.transfer
            out["queued"] += s.queued
            out["compute"] += s.compute
        return out


def critical_path(runs: Iterable[TaskRun], enqueued: float, stop: float) -> CriticalPath:
    """The critical path through ``runs`` (a span's tasks; a key run twice counts by
    its last run), of a span enqueued at ``enqueued`` that ended at ``stop``."""
    by_key: dict[Hashable, TaskRun] = {}
    for r in runs:
        if r.stop >= r.start:
            old = by_key.get(r.key)
            if old is None or r.stop >= old.stop:
                by_key[r.key] = r
    wall = max(0.0, stop - enqueued)
    if not by_key:
        return CriticalPath((), wall)
    # each thread's runs by end, to find the one before a task on its thread
    threads: dict[tuple[str, int | None], list[tuple[float, Hashable]]] = {}
    for r in by_key.values():
        threads.setdefault((r.worker, r.thread), []).append((r.stop, r.key))
    ends: dict[tuple[str, int | None], list[float]] = {}
    for place, runs_there in threads.items():
        runs_there.sort(key=lambda e: e[0])
        ends[place] = [e[0] for e in runs_there]

    last = max(by_key.values(), key=lambda r: r.stop)
    chain: list[tuple[TaskRun, str, TaskRun | None]] = []
    seen: set[Hashable] = set()
    run: TaskRun | None = last
    while run is not None and run.key not in seen:
        seen.add(run.key)
        before: TaskRun | None = None
        via = "start"
        for dep in run.dependencies:
            d = by_key.get(dep)
            if d is not None and d.key not in seen and (before is None or d.stop > before.stop):
                before, via = d, "dependency"
        place = (run.worker, run.thread)
        i = bisect_right(ends[place], run.start) - 1
        while i >= 0 and threads[place][i][1] in seen:
            i -= 1
        if i >= 0:
            t = by_key[threads[place][i][1]]
            if before is None or t.stop > before.stop:
                before, via = t, "thread"
        chain.append((run, via, before))
        run = before

    steps = []
    for done, via, before in reversed(chain):
        begin = enqueued if before is None else before.stop
        steps.append(_step(done, via, min(begin, done.start)))
    return CriticalPath(tuple(steps), wall)


def _step(run: TaskRun, via: str, begin: float) -> Step:
    """``run``'s time from ``begin`` (its predecessor's end) to its end, by part."""
    start = run.start
    waited = start - begin
    scheduler = 0.0
    if run.sent is not None:
        scheduler = min(waited, max(0.0, run.sent - begin))
    after = begin + scheduler
    transfer = 0.0
    reached = after  # inputs fetched side by side count once
    for lo, hi in sorted(run.transfers):
        lo, hi = max(lo, reached), min(hi, start)
        if hi > lo:
            transfer += hi - lo
            reached = hi
    transfer = min(transfer, waited - scheduler)
    return Step(
        key=run.key,
        worker=run.worker,
        via=via,
        begin=begin,
        end=run.stop,
        scheduler=scheduler,
        transfer=transfer,
        queued=waited - scheduler - transfer,
        compute=run.stop - start,
    )

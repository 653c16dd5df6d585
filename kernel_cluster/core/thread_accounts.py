"""A task thread's time: every second of every worker thread attributed once.

``ThreadAccount`` sums one worker thread's tasks as they end, on that thread, and
the time *between* them: a task's run (``TASK_FIELDS``, per span and prefix), the
executor hand-off before it, or idle. ``ThreadTimeline`` holds a worker's accounts
and whether the cluster is busy. What they sum goes out through the worker's
``MetricsLedger`` (core/metrics.py, which also tells a metric's whole way from where
it is measured to where it is drawn). Clocks are parameters: tests drive them by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# What a thread's account sums per (span, prefix), in this order.
TASK_FIELDS = (
    ("thread-cpu", "seconds"),
    ("thread-noncpu", "seconds"),
    ("executor", "seconds"),
    ("other", "seconds"),
    ("tasks", "count"),
    ("output", "bytes"),
    ("deserialize", "seconds"),  # of the task itself, in a worker process
)
_NO_TASKS = (0.0, 0.0, 0.0, 0.0, 0, 0, 0.0)


class TaskTiming:
    """One run of a task on a task thread, named as the task runner measures it
    (engine/execute.py, ``TaskRunner``): wall-clock seconds, but ``nbytes``.

    - ``submitted``: when the task was handed to the pool (0: the moment the thread
      was free, a continuation); ``start``: when the thread picked it up; ``stop``:
      when the run ended. With the thread's previous ``stop`` they give ``executor``
      and idle;
    - ``cpu``, ``noncpu``: the task's own code on and off the CPU (``thread-cpu``,
      ``thread-noncpu``), meters left out;
    - ``other``: the rest of the run (reading inputs, measuring the result, a
      traceback); ``deserialize``: unpickling the task;
    - ``nbytes``: the result's size (``output``).

    ``ThreadAccount.add`` reads it and keeps nothing of it. The task runner makes
    one for a failed run only: the runs that succeed add the same parts straight to
    the totals ``ThreadAccount.totals_for`` returns (an object per task costs).
    """

    __slots__ = ("cpu", "deserialize", "nbytes", "noncpu", "other", "start", "stop", "submitted")

    def __init__(
        self,
        submitted: float = 0.0,
        start: float = 0.0,
        stop: float = 0.0,
        cpu: float = 0.0,
        noncpu: float = 0.0,
        other: float = 0.0,
        deserialize: float = 0.0,
        nbytes: int = 0,
    ) -> None:
        self.submitted = submitted
        self.start = start
        self.stop = stop
        self.cpu = cpu
        self.noncpu = noncpu
        self.other = other
        self.deserialize = deserialize
        self.nbytes = nbytes


class GroupTotals:
    """What one (span, prefix) ran on one thread: ``TASK_FIELDS``, as attributes.

    The thread adds to the fields in place, one by one; they only grow, so a reader
    that compares ``values()`` with what it saw before gets every part exactly once,
    some of a task's parts perhaps a look later than the others.
    """

    __slots__ = ("count", "cpu", "deserialize", "executor", "nbytes", "noncpu", "other")

    def __init__(self) -> None:
        self.cpu = self.noncpu = self.executor = self.other = self.deserialize = 0.0
        self.count = self.nbytes = 0

    def values(self) -> tuple[Any, ...]:
        """In ``TASK_FIELDS`` order."""
        return (
            self.cpu,
            self.noncpu,
            self.executor,
            self.other,
            self.count,
            self.nbytes,
            self.deserialize,
        )


class _Total:
    """One running total of ``ThreadAccount.extra``: an object, so it is seen by identity."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0


class ThreadAccount:
    """One task thread's running totals, added to by that thread as its tasks end.

    The thread adds; the worker's loop reads (``take``). Nothing is locked or
    swapped: the loop compares the totals with what it saw at its previous look.
    Totals only grow, so a look that lands in the middle of a task's update (its
    sums in, its idle or context_meter metrics not yet) moves that part to the next
    look, and nothing is lost or counted twice.

    ``mark`` is how far the thread's time has been accounted: a task picked up at
    ``start`` closes the gap ``[mark, start]``: idle until the task was handed to
    the pool (``submitted``), executor hand-off after. The loop moves ``mark`` only
    while the thread runs no task (``ThreadTimeline.set_busy``).

    Groups come and go (a new default span after every ``submit().result()``), so
    the account forgets the ones that stopped changing: the loop names them
    (``stale``, groups unchanged over a whole look), and the thread itself moves
    them out at its next ``add`` (``retired``), never the group it is adding to, so
    no addition can land in totals that were already let go. The loop reads each
    retired group one last time. What the loop saw is kept by totals object, not by
    group, so a group that comes back starts afresh.
    """

    __slots__ = (
        "_seen",
        "_seen_idle",
        "extra",
        "idle",
        "last_group",
        "last_totals",
        "mark",
        "retired",
        "stale",
        "sums",
        "timeline",
    )

    def __init__(self, timeline: ThreadTimeline, now: float):
        self.timeline = timeline
        self.mark = now
        self.sums: dict[tuple[Any, ...], GroupTotals] = {}  # by (span, prefix)
        self.extra: dict[tuple[Any, ...], _Total] = {}  # (span, prefix, label, unit) -> total
        self.idle = 0.0
        # the group of the last add and its totals: the task runner's short path adds
        # to them inline (engine/execute.py)
        self.last_group: tuple[Any, ...] | None = None
        self.last_totals: GroupTotals | None = None
        self.stale: frozenset[Any] | None = None  # set by the loop, taken by the thread
        self.retired: list[tuple[Any, ...]] = []  # (group or extra key, its totals) let go
        self._seen: dict[object, Any] = {}  # totals -> their values at the last look
        self._seen_idle = 0.0

    def add(self, group: tuple[Any, ...], timing: TaskTiming) -> None:
        """A run of a task of ``group`` (span, prefix), measured as ``timing`` (read
        here, not kept)."""
        totals = self.totals_for(group, timing.submitted, timing.start, timing.stop)
        # field by field, in place: no new objects for the garbage collector to count
        totals.cpu += timing.cpu
        totals.noncpu += timing.noncpu
        totals.other += timing.other
        totals.count += 1
        totals.nbytes += timing.nbytes
        totals.deserialize += timing.deserialize

    def totals_for(
        self, group: tuple[Any, ...], submitted: float, start: float, stop: float
    ) -> GroupTotals:
        """Account this thread's time up to a task of ``group`` handed to the pool at
        ``submitted`` that ran from ``start`` to ``stop`` (idle, ``executor``), and
        return the group's totals, for the caller to add the run's own parts to
        (``add``, or the task runner, inline). ``submitted`` 0 means it was handed
        over the moment the thread was free (a continuation).

        The caller adds field by field, in place: no new objects for the garbage
        collector to count."""
        if self.stale is not None:
            self._retire(group)
        mark = self.mark
        if start > mark:
            if submitted > mark:  # handed over after the thread was free: idle till then
                handed = submitted if submitted < start else start
                if self.timeline.busy:
                    self.idle += handed - mark
                mark = handed
            executor = start - mark
            self.mark = stop
        else:  # the loop moved the mark meanwhile (ThreadTimeline.set_busy)
            executor = 0.0
            if stop > mark:
                self.mark = stop
        totals = self.sums.get(group)
        if totals is None:
            totals = self.sums[group] = GroupTotals()
        totals.executor += executor
        self.last_group = group
        self.last_totals = totals
        return totals

    def add_extra(self, group: tuple[Any, ...], digests: list[tuple[Any, ...]]) -> None:
        """What ``context_meter`` recorded in a task of ``group``: (label, value, unit)."""
        extra = self.extra
        for label, value, unit in digests:
            key = (*group, label, unit)
            total = extra.get(key)
            if total is None:
                total = extra[key] = _Total()
            total.value += value

    def _retire(self, keep: tuple[Any, ...]) -> None:
        """On the thread: let go of the groups the loop found stale, but ``keep``."""
        stale, self.stale = self.stale, None
        assert stale is not None
        sums, extra, retired = self.sums, self.extra, self.retired
        for group in stale:
            if group != keep:
                totals = sums.pop(group, None)
                if totals is not None:
                    retired.append((group, totals))
        if extra:
            for key in [k for k in extra if k[:2] in stale and k[:2] != keep]:
                retired.append((key, extra.pop(key)))
        if self.last_group is not None and self.last_group not in sums:
            self.last_group = self.last_totals = None

    def take(self, into: Callable[[tuple[Any, ...], float], None]) -> None:
        """Pass what was added since the last call to ``into(metric key, value)``
        (call from one thread only: the loop)."""
        seen = self._seen
        unchanged: set[tuple[Any, ...]] = set()
        # list() copies in one step under the GIL, even while the thread adds a group
        for group, totals in list(self.sums.items()):
            if self._take_totals(group, totals, into, seen):
                unchanged.add(group)
        changed_groups = set()
        for key, total in list(self.extra.items()):
            value = total.value
            old = seen.get(total, 0)
            if value != old:
                seen[total] = value
                into(("execute", *key), value - old)
                changed_groups.add(key[:2])
        retired = self.retired
        while retired:  # their last look; then they are gone for good
            group, item = retired.pop()
            if type(item) is _Total:
                value = item.value - seen.pop(item, 0)
                if value:
                    into(("execute", *group), value)
            else:
                self._take_totals(group, item, into, seen)
                seen.pop(item, None)
        unchanged -= changed_groups
        if unchanged:
            self.stale = frozenset(unchanged)
        idle = self.idle
        if idle != self._seen_idle:
            into(("execute", None, None, "idle", "seconds"), idle - self._seen_idle)
            self._seen_idle = idle

    @staticmethod
    def _take_totals(
        group: tuple[Any, ...],
        totals: GroupTotals,
        into: Callable[[tuple[Any, ...], float], None],
        seen: dict[Any, Any],
    ) -> bool:
        """Pass one group's news to ``into``; True if it had none since an earlier look."""
        now = totals.values()
        before = seen.get(totals)
        seen[totals] = now
        if before is None:
            before = _NO_TASKS
        elif before == now:
            return True
        for (activity, unit), value, old in zip(TASK_FIELDS, now, before, strict=True):
            if value != old:
                into(("execute", *group, activity, unit), value - old)
        return False


class ThreadTimeline:
    """A worker's task threads (``accounts``, by thread ident) and whether the cluster
    is busy: idle is only counted while it is. When the cluster goes quiet, free
    threads are accounted up to that moment, and the time until work comes back
    belongs to nobody.
    """

    def __init__(self, busy: bool = False):
        self.accounts: dict[int, ThreadAccount] = {}
        self.busy = busy

    def add_threads(self, threads: list[int], now: float) -> None:
        for t in threads:
            if t not in self.accounts:
                self.accounts[t] = ThreadAccount(self, now)

    def set_busy(
        self, busy: bool, now: float, running: set[int] | frozenset[Any] = frozenset()
    ) -> float:
        """The cluster went busy or quiet at ``now``; returns idle seconds to record.

        ``running`` threads are inside a task: their time is the task's.
        """
        idle = 0.0
        # a list: a thread started for a task that seceded adds itself meanwhile
        accounts = list(self.accounts.items())
        if self.busy and not busy:
            for thread, account in accounts:
                if thread not in running and now > account.mark:
                    idle += now - account.mark
                    account.mark = now
        elif busy and not self.busy:
            for thread, account in accounts:
                if thread not in running and now > account.mark:
                    account.mark = now
        self.busy = busy
        return idle

    def restart(self, now: float, running: set[int] | frozenset[Any] = frozenset()) -> None:
        """Account free threads from ``now`` on (metrics were off until now)."""
        for thread, account in list(self.accounts.items()):
            if thread not in running:
                account.mark = now

    def take(self, into: Callable[[tuple[Any, ...], float], None]) -> None:
        for account in list(self.accounts.values()):
            account.take(into)

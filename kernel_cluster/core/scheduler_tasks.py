"""The scheduler's records: tasks, their groups and prefixes, workers and clients.

Plain slotted classes; only :mod:`.scheduler_state` changes them. Aggregates
(TaskGroup, TaskPrefix) are kept up to date on every transition so the
instruments can read counts and durations without walking tasks.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any, Literal

from .keys import Key
from .lazysets import EMPTY, added, discarded

TaskStateName = Literal[
    "released", "waiting", "queued", "no-worker", "processing", "memory", "erred", "forgotten"
]
ALL_STATES: tuple[TaskStateName, ...] = (
    "released",
    "waiting",
    "queued",
    "no-worker",  # restricted to workers that are not there (core/restrictions.py)
    "processing",
    "memory",
    "erred",
    "forgotten",
)
PENDING_STATES = frozenset({"waiting", "queued", "no-worker", "processing"})


class _Aggregate:
    """State counts, per-action durations, bytes and time range over many tasks."""

    __slots__ = ("all_durations", "n_computed", "name", "nbytes_total", "start", "stop")
    states: dict[str, int]

    def __init__(self, name: str):
        self.name = name
        self.n_computed = 0
        self.all_durations: defaultdict[str, float] = defaultdict(float)
        self.nbytes_total = 0
        self.start = 0.0
        self.stop = 0.0

    def add_startstops(self, startstops: list[tuple[Any, ...]]) -> None:
        durations = self.all_durations
        for ss in startstops:
            action, start, stop = ss[0], ss[1], ss[2]
            durations[action] += stop - start
            if action == "compute":
                self.n_computed += 1
                if not self.start or start < self.start:
                    self.start = start
                if stop > self.stop:
                    self.stop = stop

    @property
    def duration_average(self) -> float | None:
        """Mean compute time of the tasks finished so far; None before the first."""
        if not self.n_computed:
            return None
        return self.all_durations["compute"] / self.n_computed

    @property
    def duration(self) -> float:
        return sum(self.all_durations.values())

    @property
    def done(self) -> bool:
        """Every task is finished one way or another (nothing waiting or running)."""
        s = self.states
        return not (s["waiting"] or s["queued"] or s["no-worker"] or s["processing"])


class TaskPrefix(_Aggregate):
    """All tasks sharing a readable prefix (``inc``), across the whole session.

    Durations and bytes accumulate here; state counts are summed from the live
    groups when read, so a transition updates one counter, not two. ``finished``:
    the counts of its groups that died (every task forgotten) since the cluster's
    last work began, so that progress still shows the last work once its results
    are gone (``SchedulerState`` clears it when new work comes to an idle cluster).
    """

    __slots__ = ("finished", "groups")

    def __init__(self, name: str):
        super().__init__(name)
        self.groups: list[TaskGroup] = []
        self.finished: dict[str, int] = {}

    @property
    def states(self) -> dict[str, int]:  # type: ignore[override]  # read-only: the sum of its groups'
        total: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
        for state, n in self.finished.items():
            total[state] += n
        for group in self.groups:
            for state, n in group.states.items():
                total[state] += n
        return total

    def __repr__(self) -> str:
        return f"<TaskPrefix {self.name!r}>"


class TaskGroup(_Aggregate):
    """Tasks of one collection (or one prefix) submitted under one span."""

    __slots__ = ("n_live", "prefix", "span_id", "states")

    def __init__(self, name: str, prefix: TaskPrefix, span_id: str | None):
        super().__init__(name)
        self.states = dict.fromkeys(ALL_STATES, 0)
        self.prefix = prefix
        self.span_id = span_id
        self.n_live = 0

    def __repr__(self) -> str:
        return f"<TaskGroup {self.name!r} span={self.span_id} {self.states_summary()}>"

    def states_summary(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in self.states.items() if v)


class WorkerRecord:
    """What the scheduler knows of one worker."""

    __slots__ = (
        "address",
        "ahead_blocked",
        "ending",
        "has_what",
        "long_running",
        "memory_limit",
        "n_ending",
        "name",
        "nbytes",
        "nthreads",
        "paused",
        "processing",
        "running_cancelled",
        "saturation_limit",
    )

    def __init__(self, address: str, nthreads: int, memory_limit: int, name: str):
        self.address = address
        self.nthreads = nthreads
        self.memory_limit = memory_limit
        self.name = name or address
        self.processing: set[TaskState] = set()
        self.has_what: set[TaskState] = set()
        self.nbytes = 0
        self.saturation_limit = nthreads
        # tasks processing here whose dependents could not be sent ahead for lack of
        # room (SchedulerState._send_ahead); looked at again, newest first, as tasks
        # finish here. Bounded: forgetting one costs a round trip, not a result.
        self.ahead_blocked: deque[TaskState] = deque(maxlen=32)
        # paused for lack of memory: it gets no new tasks until it says it resumed
        self.paused = False
        # tasks freed while processing here, until the worker says they ended (a
        # cancelled task runs to its end): key -> times freed. Each takes a thread, so
        # the worker counts as that much busier (``n_ending`` in all) when tasks are placed
        self.ending: dict[Key, int] = {}
        self.n_ending = 0
        # of those, the ones the worker said were running on a task thread: with as many
        # as it has threads, nothing processing there can start (it is taken back)
        self.running_cancelled: set[Key] = set()
        # tasks processing here whose thread waits for other tasks (``secede``): they
        # run on, but fill no thread, so other tasks go in their place
        self.long_running: set[TaskState] = set()

    @property
    def free_threads(self) -> int:
        """Threads not taken by a task freed while it ran (it still runs there)."""
        free = self.nthreads - self.n_ending
        return free if free > 0 else 0

    @property
    def occupancy(self) -> int:
        """Tasks processing here that fill a thread or wait for one."""
        return len(self.processing) - len(self.long_running)

    def __repr__(self) -> str:
        paused = " paused" if self.paused else ""
        return f"<WorkerRecord {self.address} processing={len(self.processing)}{paused}>"


class ClientRecord:
    __slots__ = ("id", "wants_what")

    def __init__(self, client_id: str):
        self.id = client_id
        self.wants_what: set[TaskState] = set()


class TaskState:
    """One key on the scheduler.

    ``waiters`` are dependents that still need this task's data;
    ``waiting_on`` are dependencies not yet in memory. A task is *needed* while
    a client wants it or a waiter waits on it.

    Its sets of tasks, workers (``who_has``) and clients (``who_wants``) are read like
    sets, but change only through the ``add_*``/``discard_*`` methods or by assigning
    ``EMPTY``: while empty they are the shared ``EMPTY``, which cannot change in place.
    """

    __slots__ = (
        "__weakref__",
        "alone",
        "annotations",
        "dependencies",
        "dependents",
        "exception",
        "exception_blame",
        "exception_text",
        "group",
        "key",
        "loose_restrictions",
        "nbytes",
        "prefix",
        "priority",
        "processing_on",
        "sent",
        "spec",
        "state",
        "suspicious",
        "traceback",
        "type_name",
        "waiters",
        "waiting_on",
        "who_has",
        "who_wants",
        "worker_restrictions",
    )

    def __init__(self, key: Key, spec: Any, group: TaskGroup, priority: tuple[Any, ...]):
        self.key = key
        self.spec = spec
        self.group = group
        self.prefix = group.prefix
        self.priority = priority
        self.state: TaskStateName = "released"
        self.dependencies: TaskSet = EMPTY
        self.dependents: TaskSet = EMPTY
        self.waiters: TaskSet = EMPTY
        self.waiting_on: TaskSet = EMPTY
        self.who_wants: set[ClientRecord] | frozenset[ClientRecord] = EMPTY
        self.who_has: set[WorkerRecord] | frozenset[WorkerRecord] = EMPTY
        self.processing_on: WorkerRecord | None = None
        self.sent = 0.0  # when it was last sent to a worker (the event's time)
        self.nbytes = 0
        self.type_name = ""
        self.exception: BaseException | None = None
        self.traceback: Any = None
        self.exception_text = ""
        self.exception_blame: TaskState | None = None
        self.suspicious = 0  # worker deaths blamed on it (core/blame.py)
        self.alone = False  # a suspect: the worker runs it with no other task beside it
        self.worker_restrictions: frozenset[str] | None = None
        self.loose_restrictions = False
        self.annotations: dict[str, Any] | None = None

    @property
    def span_id(self) -> str | None:
        return self.group.span_id

    def __repr__(self) -> str:
        return f"<TaskState {self.key!r} {self.state}>"

    def __lt__(self, other: TaskState) -> bool:
        return self.priority < other.priority

    # -- the lazily made sets (see core/lazysets.py) ------------------------------------

    def add_dependency(self, ts: TaskState) -> None:
        self.dependencies = added(self.dependencies, ts)

    def add_dependent(self, ts: TaskState) -> None:
        self.dependents = added(self.dependents, ts)

    def discard_dependent(self, ts: TaskState) -> None:
        self.dependents = discarded(self.dependents, ts)

    def add_waiter(self, ts: TaskState) -> None:
        self.waiters = added(self.waiters, ts)

    def discard_waiter(self, ts: TaskState) -> None:
        self.waiters = discarded(self.waiters, ts)

    def add_waiting_on(self, ts: TaskState) -> None:
        self.waiting_on = added(self.waiting_on, ts)

    def discard_waiting_on(self, ts: TaskState) -> None:
        self.waiting_on = discarded(self.waiting_on, ts)

    def add_who_has(self, ws: WorkerRecord) -> None:
        self.who_has = added(self.who_has, ws)

    def discard_who_has(self, ws: WorkerRecord) -> None:
        self.who_has = discarded(self.who_has, ws)

    def add_who_wants(self, cs: ClientRecord) -> None:
        self.who_wants = added(self.who_wants, cs)

    def discard_who_wants(self, cs: ClientRecord) -> None:
        self.who_wants = discarded(self.who_wants, cs)


# a set of tasks, or EMPTY
TaskSet = set[TaskState] | frozenset[TaskState]

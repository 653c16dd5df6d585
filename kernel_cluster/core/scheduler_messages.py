"""Events the scheduler state machine accepts and the instructions it returns.

Each is a small slotted dataclass under one of two bases: ``SchedulerEvent`` (past
tense: something happened) and ``SchedulerInstruction`` (imperative: do this).
Every one carries a ``stimulus_id`` so a log line can be traced to its cause.
Times are the scheduler's clock, passed in by the shell: core never reads a clock.
The instructions for workers (``ToWorker``) are also the messages that carry them:
``op`` names each on the wire (engine/wire.py), and the worker's state machine takes
them as they are (core/worker_state.py). The shell (engine/scheduler.py) raises on
an instruction it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .keys import Key


class SchedulerEvent:
    """Something the scheduler state machine hears of (``SchedulerState.handle_stimulus``).

    ``stimulus_id`` names the stimulus, for the transition log; ``time`` is the
    scheduler's clock when the shell received it.
    """

    __slots__ = ()
    stimulus_id: str
    time: float


class SchedulerInstruction:
    """Something the scheduler state machine asks its shell to do."""

    __slots__ = ()
    stimulus_id: str


class ToWorker(SchedulerInstruction):
    """An instruction for the worker at ``worker``, sent to it as it is: ``op`` names
    it on the wire, and the worker's state machine takes it as an event."""

    __slots__ = ()
    op: ClassVar[str]
    worker: str


@dataclass(slots=True)
class GraphSubmitted(SchedulerEvent):
    """A client asked for ``wanted`` keys and sent the tasks they need.

    ``specs`` values are opaque to the scheduler (a TaskSpec, or its pickled bytes
    when workers are other processes); ``dependencies`` is what it schedules by.
    ``annotations`` apply to every task of this submission (span, placement).
    """

    client: str
    specs: dict[Key, Any]
    dependencies: dict[Key, frozenset[Key]]
    wanted: list[Key]
    order: dict[Key, int] | None = None
    annotations: dict[str, Any] | None = None
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class TaskFinished(SchedulerEvent):
    key: Key
    worker: str
    nbytes: int
    startstops: list[tuple[Any, ...]] = field(default_factory=list)
    thread: int | None = None
    type_name: str = ""
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class TaskErred(SchedulerEvent):
    key: Key
    worker: str
    exception: BaseException | None
    traceback: Any
    exception_text: str = ""
    startstops: list[tuple[Any, ...]] = field(default_factory=list)
    thread: int | None = None
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class DependencyFetchFailed(SchedulerEvent):
    """A worker could not fetch ``dependency`` from any holder for task ``key``."""

    key: Key
    dependency: Key
    worker: str
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class ResultSerializationFailed(SchedulerEvent):
    """A worker holds ``key`` but cannot send it anywhere: the task fails after all."""

    key: Key
    worker: str
    exception: Any
    exception_text: str = ""
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class ReplicasAdded(SchedulerEvent):
    """A worker now holds copies of these keys (it fetched them for a dependent)."""

    worker: str
    keys: list[Key]
    nbytes: dict[Key, int] = field(default_factory=dict)
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class WorkerPauseChanged(SchedulerEvent):
    """``worker`` stopped starting tasks for lack of memory (``paused``), or started again.

    A paused worker gets no new tasks: they go to other workers or wait here.
    """

    worker: str
    paused: bool
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class CancelledTasksEnded(SchedulerEvent):
    """Tasks freed while processing on ``worker`` (``FreeKeys`` with ``running``) no
    longer take any of its threads: they ended, or had never started."""

    worker: str
    keys: list[Key]
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class CancelledTasksRunning(SchedulerEvent):
    """Of the tasks freed while processing on ``worker``, these were running on its task
    threads, and go on until they end (``CancelledTasksEnded`` then)."""

    worker: str
    keys: list[Key]
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class TaskSeceded(SchedulerEvent):
    """The thread running ``key`` on ``worker`` waits for other tasks and gave its slot
    back (``secede``): the task still runs there, but no longer fills a thread."""

    key: Key
    worker: str
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class ClientReleasedKeys(SchedulerEvent):
    client: str
    keys: list[Key]
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class ClientCancelledKeys(SchedulerEvent):
    client: str
    keys: list[Key]
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class ClientAdded(SchedulerEvent):
    client: str
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class ClientRemoved(SchedulerEvent):
    client: str
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class WorkerAdded(SchedulerEvent):
    address: str
    nthreads: int
    memory_limit: int = 0
    name: str = ""
    stimulus_id: str = ""
    time: float = 0.0


@dataclass(slots=True)
class WorkerRemoved(SchedulerEvent):
    """``expected``: stopped on purpose (scale down, close), so its tasks are not to blame.

    ``running``: the texts of the keys its task threads were running when it died
    (core/blame.py); only those tasks are blamed. None: unknown, all its tasks are.
    ``cause``: why it went, told to the user when known (its nanny ended it for its
    memory, say): a task failing with KilledWorker for this death says so.
    """

    address: str
    reason: str = ""
    expected: bool = False
    stimulus_id: str = ""
    time: float = 0.0
    running: tuple[bytes, ...] | None = None
    cause: str = ""


# -- instructions --------------------------------------------------------------------


@dataclass(slots=True)
class ComputeTask(ToWorker):
    op: ClassVar[str] = "compute-task"  # its name on the wire (engine/wire.py)
    worker: str
    key: Key
    spec: Any
    who_has: dict[Key, tuple[str, ...]]
    nbytes: dict[Key, int]
    priority: tuple[Any, ...]
    prefix: str
    span_id: str | None
    stimulus_id: str = ""
    annotation: dict[Any, Any] | None = None  # the span's names and ids, for get_annotations()


@dataclass(slots=True)
class ComputeTaskAlone(ComputeTask):
    """Compute a task suspected of killing workers: the worker starts nothing beside
    it, so that a death while it runs is blamed on it alone (core/blame.py)."""

    op: ClassVar[str] = "compute-task-alone"


@dataclass(slots=True)
class FreeKeys(ToWorker):
    """Drop these keys' data on a worker, or cancel them if they are still running.

    ``running``: the keys were processing there; the scheduler counts each as taking a
    thread until the worker says it has ended (``CancelledTasksEnded``).
    """

    op: ClassVar[str] = "free-keys"
    worker: str
    keys: list[Key]
    stimulus_id: str = ""
    running: bool = False


@dataclass(slots=True)
class ReportKey(SchedulerInstruction):
    """Tell a client about a key it holds a future for.

    ``status`` is ``finished``, ``error``, ``cancelled`` or ``lost``.
    """

    client: str
    key: Key
    status: str
    exception: BaseException | None = None
    traceback: Any = None
    stimulus_id: str = ""


@dataclass(slots=True)
class SetClusterBusy(SchedulerInstruction):
    """The cluster started or stopped having unfinished tasks (tell every worker).

    Workers count a free thread as idle only while the cluster is busy.
    """

    op: ClassVar[str] = "cluster-busy"
    busy: bool
    stimulus_id: str = ""


@dataclass(slots=True)
class ReportNoWorker(SchedulerInstruction):
    """Instruction: these tasks may only run on ``workers``, none of which is here (warn,
    and send ``NoWorkerTimedOut`` with the same marks after ``no_workers_timeout``)."""

    keys: list[tuple[Key, int]]  # (key, mark)
    workers: frozenset[str]
    stimulus_id: str = ""


@dataclass(slots=True)
class NoWorkerTimedOut(SchedulerEvent):
    """Event: the tasks of a ``ReportNoWorker`` waited ``timeout`` seconds; those still in
    the same spell of ``no-worker`` fail."""

    keys: list[tuple[Key, int]]
    timeout: float
    stimulus_id: str = ""
    time: float = 0.0
